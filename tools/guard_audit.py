#!/usr/bin/env python3
"""Audits the stdlib and the installed packages for the capability families the
guard models, and says which findings the policy covers.

For every module the sandboxed interpreter can import (the same set
tools/guard_reexports.py audits), it parses the module's source and lists the
functions and methods that:

  code        run a string as code: eval, exec, compile, __import__, runpy,
              code.InteractiveInterpreter;
  reflection  turn a string into an attribute or an import: getattr/setattr/
              delattr with a name that is not a constant, import_module,
              attrgetter/methodcaller of a computed name;
  process     start a process: subprocess.*, os.system/popen/exec*/spawn*/
              posix_spawn*/fork, pty.spawn, asyncio subprocess helpers;
  loader      build objects or load code from data: pickle/marshal/shelve loads,
              unsafe YAML loaders, zipimport, SourceFileLoader, load_module,
              exec_module;
  native      load native code or emit machine code: ctypes CDLL/CFUNCTYPE,
              cffi dlopen, llvmlite's JIT.

A finding is covered when its module is blocked, or the policy names it (by
qualified or last name) as a capability, a mode, a reflection getter or a
dangerous attribute, or the generated
re-exports block its name, or policies/audit-reviewed.toml records it, by its
exact qualified name, as read and judged (with the reason): a package or
module named there covers only the finding at that module's top level, never
the functions inside it. A finding judged a capability gadget that the guard
has no rule for yet goes into audit-reviewed.toml's `[[needs_rule]]` groups:
it is printed as NEEDS RULE (with --uncovered too) and never counted as
covered. Everything else is printed for review: most are
internal helpers that user code cannot steer, some are not; those go into
policies/default.toml, the others into policies/audit-reviewed.toml.
A getattr/setattr is not reported as reflection when the name cannot be
chosen freely: a literal prefix or suffix that no dunder and no interpreter
internal has (`f"set_{k}"`, `"_print_" + k`, `f"{n}axis"`), a loop variable
over a display of string literals, or the forwarding inside `__getattr__`
and its kin (the attribute was spelled by the calling code, where the guard
judges it).

    /usr/bin/python3 -I tools/guard_audit.py               # every finding
    /usr/bin/python3 -I tools/guard_audit.py --uncovered   # what the policy misses, and
                                                           # the gadgets still needing a rule
    /usr/bin/python3 -I tools/guard_audit.py --uncovered --pinned .ci/audit-packages

After installing a package, run it with --uncovered to see what of the new
package the policy does not yet judge. With --pinned FILE it reads the stdlib
and exactly the modules of the Debian packages FILE lists, whatever else is
installed: the CI test audits that set, so its outcome does not depend on
what else a machine has.

    /usr/bin/python3 -I tools/guard_audit.py --judged --pinned .ci/audit-packages \
        > policies/judged.toml

With --judged it reads nothing and writes the judged set instead: the
top-level modules of the stdlib and of the pinned packages (with the python3
packages they depend on), the set the audit reads. The guard treats an import
of any other top-level module as unjudged (policies/default.toml, [modules]
unjudged).
"""

import argparse
import ast
import importlib.util
import os
import subprocess
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import guard_reexports  # noqa: E402  (the same module discovery)

FAMILIES = {
    "code": {
        "names": {"eval", "exec", "compile", "__import__", "execfile"},
        "attrs": {"run_path", "run_module", "InteractiveInterpreter", "InteractiveConsole"},
    },
    "reflection": {
        "names": {"import_module", "attrgetter", "methodcaller"},
        "attrs": {"import_module", "_gcd_import", "resolve_name", "locate"},
    },
    "process": {
        "names": {"Popen", "check_output", "check_call", "getoutput", "getstatusoutput",
                  "create_subprocess_exec", "create_subprocess_shell", "fork_exec"},
        "attrs": {"Popen", "system", "popen", "execv", "execve", "execvp", "execvpe", "execl",
                  "execle", "execlp", "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe",
                  "spawnl", "spawnle", "spawnlp", "spawnlpe", "posix_spawn", "posix_spawnp",
                  "fork", "forkpty", "check_output", "check_call", "getoutput",
                  "getstatusoutput", "create_subprocess_exec", "create_subprocess_shell",
                  "fork_exec", "subprocess_exec", "subprocess_shell"},
        "receivers": {"os", "subprocess", "_posixsubprocess", "pty", "asyncio", "posix", "loop"},
    },
    "loader": {
        "names": {"Unpickler", "zipimporter", "SourceFileLoader", "SourcelessFileLoader",
                  "spec_from_file_location"},
        "attrs": {"loads", "load", "Unpickler", "unsafe_load", "full_load", "zipimporter",
                  "load_module", "exec_module", "SourceFileLoader", "spec_from_file_location"},
        "receivers": {"pickle", "_pickle", "cPickle", "marshal", "shelve", "yaml", "dill",
                      "cloudpickle", "zipimport", "machinery", "util", "loader", "importlib"},
    },
    "native": {
        "names": {"CDLL", "PyDLL", "CFUNCTYPE", "PYFUNCTYPE", "dlopen", "LoadLibrary"},
        "attrs": {"CDLL", "PyDLL", "CFUNCTYPE", "dlopen", "LoadLibrary", "create_mcjit_compiler",
                  "get_function_address", "cast", "string_at", "memmove"},
        "receivers": {"ctypes", "cdll", "ffi", "llvm", "binding", "_ctypes"},
    },
}


def receiver_name(node):
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def families_of(call, scope=(), loops=None, internals=frozenset()):
    """The families a call belongs to (empty when none)."""
    out = set()
    f = call.func
    if literal_reflection(call, internals):
        return out
    for family, spec in FAMILIES.items():
        if isinstance(f, ast.Name) and f.id in spec["names"]:
            out.add(family)
        elif isinstance(f, ast.Attribute) and f.attr in spec["attrs"]:
            receivers = spec.get("receivers")
            if receivers is None or receiver_name(f.value) in receivers:
                out.add(family)
    if isinstance(f, ast.Name) and f.id in ("getattr", "setattr", "delattr") and len(call.args) >= 2:
        name = call.args[1]
        if not (isinstance(name, ast.Constant) or forwarder(scope)
                or constrained(name, internals) or literal_loop(name, loops or {})):
            out.add("reflection")
    return out


# Calls that name their module or attribute with string literals only
# (`import_module("numpy")`, `attrgetter("zorder")`): nothing chosen at run
# time reaches them, and the guard allows the same literal spelling in user
# code. A literal dunder or interpreter internal stays a finding.
LITERAL_REFLECTION = {"import_module", "attrgetter", "methodcaller"}


def literal_reflection(call, internals):
    f = call.func
    name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    if name not in LITERAL_REFLECTION or not call.args:
        return False
    # methodcaller's later arguments are the call's arguments, not names.
    names = call.args[:1] if name != "attrgetter" else call.args
    for a in names:
        if not (isinstance(a, ast.Constant) and isinstance(a.value, str)):
            return False
        if any(p.startswith("__") or p in internals or not p.isidentifier()
               for p in a.value.split(".")):
            return False
    return all(k.arg is not None and (k.arg == "catch" or is_literal(k.value))
               for k in call.keywords)


def is_literal(node):
    """A literal display (`{"fromlist": ["pyplot"]}`, `"1.1.0"`, `()`)."""
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


# A getattr in these methods forwards an attribute the calling code spelled
# (`module.name`, `obj.name`), which the guard judges where it is written;
# code cannot call them with a name of its choosing (dunders are refused).
FORWARDERS = {"__getattr__", "__getattribute__", "__setattr__", "__delattr__", "__dir__"}


def forwarder(scope):
    return bool(scope) and scope[-1] in FORWARDERS


def affixes(name):
    """The literal prefix and suffix of a name built from parts."""
    if isinstance(name, ast.JoinedStr) and name.values:
        parts = name.values
    elif isinstance(name, ast.BinOp) and isinstance(name.op, ast.Add):
        parts = [name.left, name.right]
    elif (isinstance(name, ast.BinOp) and isinstance(name.op, ast.Mod)
          and isinstance(name.left, ast.Constant) and isinstance(name.left.value, str)):
        head, _, tail = name.left.value.partition("%")
        return head, tail[1:] if tail else ""
    else:
        return "", ""
    text = lambda p: p.value if isinstance(p, ast.Constant) and isinstance(p.value, str) else ""
    return text(parts[0]), text(parts[-1]) if len(parts) > 1 else ""


def constrained(name, internals):
    """A name with a literal prefix or suffix that no dunder and no
    interpreter internal has (`f"set_{k}"`, `"_print_" + k`, `f"{n}axis"`):
    it can only name the ordinary attributes that share it."""
    prefix, suffix = affixes(name)
    if prefix.strip("_") and not any(i.startswith(prefix) for i in internals):
        return True
    if suffix and not suffix.endswith("_") and not any(i.endswith(suffix) for i in internals):
        return True
    return False


def literal_loop(name, loops):
    """A loop variable over a display of string literals (`for a in ("x", "y")`)."""
    return isinstance(name, ast.Name) and name.id in loops


def literal_strings(node):
    return (isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts
            and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts))


class Finder(ast.NodeVisitor):
    def __init__(self, module, internals=frozenset()):
        self.module = module
        self.internals = internals
        self.scope = []
        # Per function: loop variables bound to displays of string literals.
        self.loops = [{}]
        self.found = {}  # qualified -> set of families

    def visit_ClassDef(self, node):
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node):
        self.scope.append(node.name)
        self.loops.append({})
        self.generic_visit(node)
        self.loops.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_For(self, node):
        if isinstance(node.target, ast.Name) and literal_strings(node.iter):
            self.loops[-1][node.target.id] = True
        self.generic_visit(node)

    def visit_Call(self, node):
        fams = families_of(node, self.scope, self.loops[-1], self.internals)
        if fams:
            where = ".".join([self.module] + self.scope)
            self.found.setdefault(where, set()).update(fams)
        self.generic_visit(node)


def source_of(module):
    try:
        spec = importlib.util.find_spec(module)
    except BaseException:
        return None
    origin = getattr(spec, "origin", None) if spec else None
    if not origin or not origin.endswith(".py") or not os.path.exists(origin):
        return None
    with open(origin, "rb") as f:
        return f.read()


NEEDS_RULE = "NEEDS RULE"


def covered(qualified, policy, module=None):
    """Why the policy covers a finding: a reason, NEEDS_RULE for a gadget
    judged but not yet ruled, or None when nobody judged it. `module` is the
    module the finding sits in: a capability's last name covers the
    functions and classes of that name (and what is nested in them), never a
    module that happens to share it (pandas.core.apply is not `apply`)."""
    blocked, caps, modes, reexports, (reviewed, needs_rule), _ = policy
    parts = qualified.split(".")
    if guard_reexports.is_blocked(qualified, blocked):
        return "blocked module"
    # A reviewed finding is judged by its exact qualified name: a module or
    # package named in the reviewed file covers the finding at that module's
    # top level, never the functions below it (each is read on its own).
    if qualified in reviewed:
        return "reviewed"
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        if name in caps or name in modes:
            return "capability"
    inner = parts[len(module.split(".")):] if module else parts[1:]
    for part in inner:
        if part in caps or part in modes:
            return "capability (by name)"
        if reexports.get(part):
            return "re-export"
    if qualified in needs_rule:
        return NEEDS_RULE
    return None


def load_policy(path):
    with open(path, "rb") as f:
        p = tomllib.load(f)
    blocked = set(p["modules"]["blocked"]) | {"*." + x for x in p["modules"].get("blocked_parts", [])}
    caps = {n for c in p.get("capabilities", []) for n in c["functions"]}
    caps |= {n.rsplit(".", 1)[-1] for c in p.get("capabilities", []) for n in c["functions"]
             if c.get("by_name", True)}
    # The reflection getters (operator.attrgetter) and the dangerous
    # attribute names (ForwardRef, _evaluate) are refused wherever code
    # names them, so a finding inside one is covered by that name.
    getters = p.get("reflection", {}).get("attribute_getters", [])
    caps |= set(getters) | {g.rsplit(".", 1)[-1] for g in getters}
    for group in p.get("attributes", {}).get("dangerous", []):
        caps |= set(group["names"])
    modes = {n for m in p.get("modes", []) for n in m["functions"]}
    modes |= {n.rsplit(".", 1)[-1] for m in p.get("modes", []) for n in m["functions"]}
    reexports = {}
    rpath = os.path.join(os.path.dirname(path), "reexports.toml")
    if os.path.exists(rpath):
        with open(rpath, "rb") as f:
            for r in tomllib.load(f).get("reexport", []):
                reexports[r["name"]] = r["distinctive"]
    # Findings read and judged harmless (or left to the OS layer), with why.
    reviewed = (set(), set())
    vpath = os.path.join(os.path.dirname(path), "audit-reviewed.toml")
    if os.path.exists(vpath):
        reviewed = load_reviewed(vpath)
    attrs = p.get("attributes", {})
    internals = set(attrs.get("internals", [])) | set(attrs.get("module_reexports", []))
    for group in attrs.get("dangerous", []):
        internals |= set(group["names"])
    return blocked, caps, modes, reexports, reviewed, frozenset(internals)


def load_reviewed(path):
    """The qualified names policies/audit-reviewed.toml judges: those its
    `[[reviewed]]` groups judge harmless, and those its `[[needs_rule]]`
    groups judge capability gadgets the guard has no rule for yet. Every
    group names its family, says why in `reason` and lists exact qualified
    names in `functions`; a group without them stops the audit (a finding is
    judged only with its reason written down). A name covers that one
    finding: `pandas` judges what pandas/__init__.py runs at its top level
    and nothing inside pandas' modules."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    out = []
    for table in ("reviewed", "needs_rule"):
        names = set()
        for i, r in enumerate(doc.get(table, []), 1):
            functions = r.get("functions")
            problems = [k for k in ("family", "reason") if not str(r.get(k, "")).strip()]
            if (not isinstance(functions, list) or not functions
                    or not all(isinstance(n, str) and n.strip() for n in functions)):
                problems.append("functions")
            if problems:
                sys.exit("%s: [[%s]] group %d lacks %s (each group names its family, its "
                         "reason and the exact qualified names it judges)"
                         % (path, table, i, ", ".join(problems)))
            names.update(functions)
        out.append(names)
    return out[0], out[1]


DIST_PACKAGES = "/usr/lib/python3/dist-packages/"


def providers():
    """Installed packages by the virtual names they provide."""
    run = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Provides}\n"],
                         capture_output=True, text=True)
    out = {}
    for line in run.stdout.splitlines():
        package, _, provides = line.partition("\t")
        for virtual in provides.split(","):
            name = virtual.strip().split(" ")[0]
            if name:
                out.setdefault(name, package)
    return out


def installed_depends(package, provided):
    """The python3-* packages `package` needs (Depends and Pre-Depends, which apt
    always installs, unlike Recommends; a virtual name by its installed provider).
    A clause with alternatives is left out: which of them a machine has varies."""
    run = subprocess.run(["dpkg-query", "-W", "-f=${Pre-Depends}, ${Depends}", package],
                         capture_output=True, text=True)
    out = []
    for clause in run.stdout.split(","):
        if "|" in clause:
            continue
        name = clause.strip().split(" ")[0].split(":")[0]
        if name.startswith("python3-"):
            out.append(provided.get(name, name))
    return out


def modules_of(package):
    """The top-level module names a Debian package installs; None if not installed."""
    run = subprocess.run(["dpkg-query", "-L", package], capture_output=True, text=True)
    if run.returncode != 0:
        return None
    names = set()
    for path in run.stdout.splitlines():
        if not path.startswith(DIST_PACKAGES):
            continue
        top = path[len(DIST_PACKAGES):].split("/")[0]
        name = top.split(".")[0]
        if top.endswith((".dist-info", ".egg-info", ".pth")) or not name.isidentifier():
            continue
        if top == name or top.endswith((".py", ".so")):
            names.add(name)
    return names


def pinned_roots(listing):
    """The top-level modules the Debian packages named in `listing` (one a
    line, `#` comments) install, and those of the python3 packages they depend
    on (which apt always installs with them), with the stdlib's: the roots to
    read and the names imports are kept to, so the audit reads the same set
    whatever else is installed. Exits with a message naming the packages that
    are not installed."""
    with open(listing, encoding="utf-8") as f:
        pending = [l.strip() for l in f if l.strip() and not l.lstrip().startswith("#")]
    roots, missing, seen = set(sys.stdlib_module_names), [], set()
    pinned, provided = set(pending), providers()
    while pending:
        package = pending.pop()
        if package in seen:
            continue
        seen.add(package)
        names = modules_of(package)
        if names is None:
            if package in pinned:
                missing.append(package)
            continue
        roots |= names
        pending.extend(installed_depends(package, provided))
    if missing:
        sys.exit("not installed (apt-get install them, or audit without --pinned): "
                 + " ".join(sorted(missing)))
    keep = sorted(n for n in roots if not n.startswith("_") or n in sys.stdlib_module_names)
    return keep, roots


def write_judged(out, roots, listing):
    """The judged set as policies/judged.toml holds it: the stdlib's top-level
    modules apart from the audited packages', one sorted list each."""
    stdlib = sorted(n for n in roots if n in sys.stdlib_module_names)
    audited = sorted(n for n in roots if n not in sys.stdlib_module_names)
    out.write("# Generated by `tools/guard_audit.py --judged --pinned %s`; do not edit\n"
              % os.path.relpath(listing))
    out.write("# by hand: re-run it. The top-level modules whose code the audit reads and\n")
    out.write("# whose findings the policy judges: the stdlib of the Python below and the\n")
    out.write("# Debian packages the listing pins, with the python3 packages they depend\n")
    out.write("# on. An import of any other top-level module is unjudged ([modules]\n")
    out.write("# unjudged in policies/default.toml decides what that does).\n")
    out.write('python = "%d.%d"\n' % sys.version_info[:2])
    for key, names in (("stdlib", stdlib), ("audited", audited)):
        out.write("%s = [\n" % key)
        for name in names:
            out.write('    "%s",\n' % name)
        out.write("]\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", default=guard_reexports.DEFAULT_POLICY)
    parser.add_argument("--uncovered", action="store_true", help="only findings the policy misses")
    parser.add_argument("--public", action="store_true", help="skip names starting with `_`")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--packages", nargs="*", help="audit only these top-level packages")
    parser.add_argument("--pinned", metavar="FILE",
                        help="audit the stdlib and exactly the Debian packages FILE lists")
    parser.add_argument("--judged", action="store_true",
                        help="with --pinned: write the judged modules as TOML, audit nothing")
    args = parser.parse_args()
    if args.judged:
        if not args.pinned:
            sys.exit("--judged needs --pinned FILE: the judged set is the pinned one")
        write_judged(sys.stdout, pinned_roots(args.pinned)[0], args.pinned)
        return

    policy = load_policy(args.policy)
    blocked = policy[0]
    only = None
    if args.packages:
        roots = args.packages
    elif args.pinned:
        roots, only = pinned_roots(args.pinned)
    else:
        roots = guard_reexports.top_level_packages()
    modules, _ = guard_reexports.importable_modules(roots, blocked, args.timeout, only)
    totals = {}
    rows = []
    for module in sorted(set(modules)):
        src = source_of(module)
        if src is None:
            continue
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError):
            continue
        finder = Finder(module, policy[5])
        finder.visit(tree)
        for where, fams in sorted(finder.found.items()):
            if args.public and any(p.startswith("_") for p in where.split(".")[1:]):
                continue
            why = covered(where, policy, module)
            ruled = why is not None and why != NEEDS_RULE
            for fam in fams:
                t = totals.setdefault(fam, [0, 0, 0])
                t[0] += 1
                t[1] += ruled
                t[2] += why == NEEDS_RULE
            if args.uncovered and ruled:
                continue
            rows.append("%-10s %-22s %s" % (",".join(sorted(fams)), why or "NOT COVERED", where))
    out = sys.__stdout__
    for row in rows:
        out.write(row + "\n")
    out.write("\n%d modules read\n" % len(modules))
    # Which packages were there to read: the audit covers what this machine
    # has installed, so a reader (and the CI test) can see what that was.
    site = sorted({m.split(".")[0] for m in modules} - set(sys.stdlib_module_names))
    out.write("packages read besides the stdlib: %s\n" % " ".join(site))
    for fam, (n, c, g) in sorted(totals.items()):
        out.write("%-10s %5d functions, %5d covered by the policy, %d judged gadgets "
                  "that need a guard rule\n" % (fam, n, c, g))


if __name__ == "__main__":
    main()
