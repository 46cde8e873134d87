#!/usr/bin/env python3
"""Computes, from the running interpreter, every attribute path by which an
allowed module hands out something the guard's policy blocks, and writes it as
data for the guard (policies/reexports.toml).

What counts as blocked comes from the policy itself:
  * a module in [modules].blocked (or a submodule of one): `platform.os`,
    `tarfile.pwd`, `jinja2.loaders.zipimport`;
  * a builtin in [builtins].blocked, by identity: `six.exec_` is `exec`;
  * an object a blocked module defines (`__module__` is blocked):
    `sympy.printing.preview.check_output` is `subprocess.check_output`;
  * an API listed in [[capabilities]] (evaluators, shell wrappers, loaders,
    JIT entry points), by identity wherever it is re-exported.

The guard blocks `X.name` when X resolves (through this code's imports) to one
of the modules listed for `name`, and `from M import name` likewise. A name
that nothing harmless in the audited runtime is ever called (`distinctive`)
is blocked on any receiver, which also covers a module bound by an earlier
call that the guard cannot see.

Run it with the interpreter the sandbox runs, after installing the packages
a deployment offers, and commit the output:

    /usr/bin/python3 -I tools/guard_reexports.py -o policies/reexports.toml

It imports every stdlib module and every installed top-level package with
its submodules (each in a child process with a time limit, so a package that
hangs or crashes on import is skipped and reported), never the blocked ones.
"""

import argparse
import builtins
import importlib
import json
import os
import pkgutil
import subprocess
import sys
import sysconfig
import tomllib
import types

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_POLICY = os.path.join(HERE, "..", "policies", "default.toml")

# Importing these has effects beyond defining names (opens a browser, prints,
# starts an interpreter or a GUI); they are never imported.
NEVER_IMPORT = {"antigravity", "this", "__hello__", "__phello__", "idlelib", "turtledemo"}

# This script's own namespace (and multiprocessing's alias of it) is not
# part of the runtime being audited.
SELF = {"__main__", "__mp_main__"}


def load_policy(path):
    with open(path, "rb") as f:
        policy = tomllib.load(f)
    blocked = set(policy["modules"]["blocked"])
    blocked |= {"*." + part for part in policy["modules"].get("blocked_parts", [])}
    builtins_blocked = set(policy["builtins"]["blocked"])
    apis = {}
    for cap in policy.get("capabilities", []):
        # Only APIs refused outright: a literal-checked one (sympify) stays
        # allowed under any name, its calls are checked by last name.
        if cap.get("literal", "never") != "never":
            continue
        for qualified in cap.get("functions", []):
            if "." in qualified:
                apis[qualified] = cap["rule"]
    return blocked, builtins_blocked, apis


def is_blocked(name, blocked):
    parts = name.split(".")
    if any("*." + p in blocked for p in parts):
        return True
    return any(".".join(parts[:i]) in blocked for i in range(1, len(parts) + 1))


def top_level_packages():
    """Every importable top-level name: the stdlib and site-packages."""
    names = set(sys.stdlib_module_names)
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    for info in pkgutil.iter_modules(paths):
        names.add(info.name)
    return sorted(n for n in names if not n.startswith("_") or n in sys.stdlib_module_names)


CHILD = r"""
import contextlib, importlib, io, json, pkgutil, sys, warnings
warnings.simplefilter("ignore")
root, blocked = sys.argv[1], set(json.loads(sys.argv[2]))
# With a set of top-level names to keep to, importing an installed package outside it
# fails as if it were not installed: an optional dependency outside the set changes
# nothing. The interpreter's own modules (stdlib, its private helpers) always load.
only = json.loads(sys.argv[3]) if len(sys.argv) > 3 else None
if only is not None:
    allowed = set(only)
    class KeepToTheSet:
        def find_spec(self, name, path=None, target=None):
            if path is not None or name in allowed:
                return None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = None if finder is self or find is None else find(name, path, target)
                if spec is not None:
                    break
            else:
                return None
            if "-packages/" in (spec.origin or "") or any(
                "-packages/" in p + "/" for p in spec.submodule_search_locations or []
            ):
                raise ModuleNotFoundError("%s is outside the audited set" % name, name=name)
            return spec
    sys.meta_path.insert(0, KeepToTheSet())
def is_blocked(name):
    parts = name.split(".")
    if any("*." + p in blocked for p in parts):
        return True
    return any(".".join(parts[:i]) in blocked for i in range(1, len(parts) + 1))
ok, failed = [], []
def load(name):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            importlib.import_module(name)
        ok.append(name)
    except BaseException as e:
        failed.append([name, type(e).__name__])
load(root)
mod = sys.modules.get(root)
if mod is not None and hasattr(mod, "__path__"):
    def onerror(name):
        failed.append([name, "walk"])
    for info in pkgutil.walk_packages(mod.__path__, root + ".", onerror=onerror):
        if is_blocked(info.name):
            continue
        load(info.name)
print(json.dumps({"ok": ok, "failed": failed}))
"""


def importable_modules(roots, blocked, timeout, only=None):
    """Asks a child process per top-level package which modules import
    cleanly, so that a hanging or crashing import costs only that package.
    With `only` (top-level names), the children import nothing else besides
    the stdlib, so what is read does not depend on what else is installed."""
    ok, skipped = [], []
    extra = [] if only is None else [json.dumps(sorted(only))]
    for root in roots:
        if root in NEVER_IMPORT or is_blocked(root, blocked):
            continue
        try:
            out = subprocess.run(
                [sys.executable, "-I", "-c", CHILD, root, json.dumps(sorted(blocked))] + extra,
                capture_output=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                cwd="/",
            )
            answer = json.loads(out.stdout.decode().strip().splitlines()[-1])
            ok.extend(answer["ok"])
            skipped.extend(answer["failed"])
        except (subprocess.TimeoutExpired, IndexError, ValueError) as e:
            skipped.append([root, type(e).__name__])
    return ok, skipped


def import_quietly(names):
    import contextlib
    import io
    import warnings

    warnings.simplefilter("ignore")
    for name in names:
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                importlib.import_module(name)
        except BaseException:
            pass


def describe(value, blocked, blocked_builtins_ids, api_ids):
    """What a value is, when the policy blocks it; None when it is harmless."""
    if isinstance(value, types.ModuleType):
        name = getattr(value, "__name__", "")
        if value is builtins or is_blocked(name, blocked):
            return "module " + name
        return None
    try:
        if id(value) in blocked_builtins_ids:
            return "builtin " + blocked_builtins_ids[id(value)]
        if id(value) in api_ids:
            return "api " + api_ids[id(value)]
    except TypeError:
        return None
    origin = getattr(value, "__module__", None)
    if origin in SELF:
        return None
    if (
        isinstance(origin, str)
        and origin != "builtins"
        and is_blocked(origin, blocked)
        and (callable(value) or isinstance(value, type))
    ):
        return "api %s.%s" % (origin, getattr(value, "__qualname__", "?"))
    return None


def resolve(qualified):
    """The object a dotted name denotes, or None."""
    parts = qualified.split(".")
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is None:
            continue
        value = mod
        try:
            for attr in parts[i:]:
                value = getattr(value, attr)
        except AttributeError:
            return None
        return value
    return None


def namespaces():
    """(where, mapping) for every loaded module and the classes it defines."""
    for mname, mod in sorted(sys.modules.items()):
        if mod is None or mname in SELF:
            continue
        try:
            items = dict(vars(mod))
        except TypeError:
            continue
        yield mname, mod, items
        for value in items.values():
            if isinstance(value, type) and getattr(value, "__module__", None) == mname:
                try:
                    yield "%s.%s" % (mname, value.__qualname__), None, dict(vars(value))
                except TypeError:
                    continue


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default=DEFAULT_POLICY)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("-o", "--output", required=True, help="where to write the TOML")
    args = parser.parse_args()
    # Imported packages may replace sys.stdout; the report goes to a file.
    real_stderr = sys.__stderr__

    blocked, blocked_builtins, apis = load_policy(args.policy)
    modules, skipped = importable_modules(top_level_packages(), blocked, args.timeout)
    import_quietly(modules)

    blocked_builtins_ids = {
        id(getattr(builtins, b)): b for b in blocked_builtins if hasattr(builtins, b)
    }
    api_ids = {}
    for qualified in apis:
        value = resolve(qualified)
        if value is not None:
            api_ids[id(value)] = qualified

    hits = {}  # name -> {"targets": set, "where": set}
    harmless = {}  # name -> count of harmless values under that name
    for where, mod, items in namespaces():
        if is_blocked(where, blocked):
            continue
        for attr, value in items.items():
            what = describe(value, blocked, blocked_builtins_ids, api_ids)
            if what is None:
                harmless[attr] = harmless.get(attr, 0) + 1
                continue
            entry = hits.setdefault(attr, {"targets": set(), "where": set()})
            entry["targets"].add(what)
            entry["where"].add(where)
    # Methods and attributes of everyday objects count as harmless uses too.
    for t in (str, bytes, list, dict, set, tuple, int, float, complex, object, type):
        for attr in dir(t):
            harmless[attr] = harmless.get(attr, 0) + 1

    with open(args.output, "w", encoding="utf-8") as out:
        write(out, hits, harmless, skipped, len(modules))
    real_stderr.write(
        "%d modules audited, %d skipped, %d names written to %s\n"
        % (len(modules), len(skipped), len(hits), args.output)
    )
    for name, why in skipped:
        real_stderr.write("  not audited: %s (%s)\n" % (name, why))


def write(out, hits, harmless, skipped, count):
    versions = {}
    for name in ("numpy", "pandas", "matplotlib", "PIL", "sympy", "jinja2", "yaml", "numba", "llvmlite", "scipy"):
        mod = sys.modules.get(name)
        if mod is not None:
            versions[name] = str(getattr(mod, "__version__", "?"))
    out.write("# Generated by tools/guard_reexports.py; do not edit by hand: re-run it.\n")
    out.write("# Every attribute path by which an allowed module hands out a blocked module,\n")
    out.write("# a blocked builtin, an object a blocked module defines, or a listed capability.\n")
    out.write("# `distinctive`: no harmless value in the audited runtime has this name, so the\n")
    out.write("# guard blocks it on any receiver; otherwise only on the modules in `where`.\n")
    out.write("python = %s\n" % json.dumps(sys.version.split()[0]))
    out.write("executable = %s\n" % json.dumps(sys.executable))
    out.write("platform = %s\n" % json.dumps(sysconfig.get_platform()))
    out.write("modules_audited = %d\n" % count)
    out.write("packages = { %s }\n" % ", ".join("%s = %s" % (k, json.dumps(v)) for k, v in sorted(versions.items())))
    out.write("# Modules that could not be imported here (not audited): %d\n" % len(skipped))
    for name in sorted(hits):
        if name.startswith("__") and name.endswith("__"):
            continue  # dunders are blocked by the dunder rule already
        entry = hits[name]
        out.write("\n[[reexport]]\n")
        out.write("name = %s\n" % json.dumps(name))
        out.write("distinctive = %s\n" % ("true" if harmless.get(name, 0) == 0 else "false"))
        out.write("targets = %s\n" % json.dumps(sorted(entry["targets"])))
        out.write("where = [\n")
        for w in sorted(entry["where"]):
            out.write("    %s,\n" % json.dumps(w))
        out.write("]\n")


if __name__ == "__main__":
    main()
