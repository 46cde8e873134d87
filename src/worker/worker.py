# warden's Python worker: runs inside the sandbox, one per session, for the session's
# whole life. It reads JSON requests from fd 3 and writes JSON responses to fd 4; fds 1
# and 2 belong to the user's code (the server captures them), so nothing the code prints,
# from Python or from C, can corrupt the protocol. Around each run it writes a start and
# an end marker carrying the request's nonce to fds 1 and 2, so the server knows where
# this call's output begins and ends.
#
# Between calls the server freezes the whole worker. Threads a call leaves running are
# still its threads: what they write through sys.stdout/sys.stderr during a later call is
# set apart and reported as late output, never mixed into that call's output.
#
# Start-up cost matters (a worker starts for every new session the warm pool cannot
# serve), so only what every call needs is imported here; the rest is imported on first
# use.
import _ast
import _thread
import builtins
import io
import json
import linecache
import os
import sys
import types



def _seal_exec():
    # Where Landlock's execute right is missing (gVisor's Sentry does not implement
    # Landlock; an older kernel), the helper asks the worker to seal exec itself before
    # any code runs: a seccomp filter of its own (no_new_privs is already set), which no
    # later code can lift, refuses execve and execveat, so the worker can never become
    # another program. Failing that, the worker does not start.
    import ctypes
    import struct
    arch = {"x86_64": (0xC000003E, 59, 322),
            "aarch64": (0xC00000B7, 221, 281)}.get(os.uname().machine)
    if arch is None:
        os.write(2, b"warden: cannot seal exec on this architecture\n")
        os._exit(70)
    audit, execve, execveat = arch

    def op(code, jt, jf, k):
        return struct.pack("HBBI", code, jt, jf, k)

    program = b"".join([
        op(0x20, 0, 0, 4),           # load the architecture
        op(0x15, 0, 4, audit),       # a foreign one: refuse
        op(0x20, 0, 0, 0),           # load the system call number
        op(0x15, 2, 0, execve),
        op(0x15, 1, 0, execveat),
        op(0x06, 0, 0, 0x7FFF0000),  # allow
        op(0x06, 0, 0, 0x00050001),  # fail with EPERM
    ])

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _Program(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        os.write(2, ("warden: cannot seal exec: errno %d\n" % ctypes.get_errno()).encode())
        os._exit(70)


if os.environ.get("WARDEN_SEAL_EXEC") == "1":
    _seal_exec()
del _seal_exec

_REQUESTS = os.fdopen(3, "rb", buffering=1 << 16)
# The session's installed packages (a read-only layer the server switches to a new
# generation after each install): on sys.path ahead of site-packages, so the set pip
# resolved together is the one imported, but never ahead of the standard library.
_PACKAGES = os.environ.get("WARDEN_PACKAGES")
if _PACKAGES:
    _at = next((i for i, p in enumerate(sys.path)
                if p.endswith(("site-packages", "dist-packages"))), len(sys.path))
    sys.path.insert(_at, _PACKAGES)
    del _at
_RESPONSE_FD = 4
_WORKSPACE = os.getcwd()
_MAX_REQUEST = 64 << 20
_MAIN_THREAD = _thread.get_ident()
_LATE_EXCERPT = 512

# The call running now (its counter), or None between calls; the threads that were
# alive when it began (started by earlier calls).
_current = None
_earlier_threads = frozenset()
_late = {"bytes": 0, "excerpt": b""}
# Per output fd, what the running call wrote through sys.stdout/sys.stderr and what it
# wrote past the server's cap on that stream (the request's "stream_cap"). The server
# keeps only the first stream_cap bytes of each stream and counts the rest; bytes the
# call writes past the cap through these streams are counted here instead of being sent
# through the pipe only to be counted there, and the response says how many, so the
# server still reports the stream as cut. What reaches fd 1 or 2 any other way (os.write,
# C code) is not counted here, so this count never runs ahead of the stream: a byte
# dropped here lies past the cap in the stream the server reads too.
_written = {1: 0, 2: 0}
_dropped = {1: 0, 2: 0}
_stream_cap = None


def _send(message):
    data = (json.dumps(message, ensure_ascii=True) + "\n").encode("ascii")
    view = memoryview(data)
    while view:
        written = os.write(_RESPONSE_FD, view)
        view = view[written:]


def _is_late():
    if _current is None:
        return True
    ident = _thread.get_ident()
    return ident != _MAIN_THREAD and ident in _earlier_threads


class _CallOutput(io.RawIOBase):
    """fd 1 or 2 under sys.stdout/sys.stderr: writes belong to the running call, except
    those of threads an earlier call started (or any made between calls), which are
    counted and set apart."""

    def __init__(self, fd):
        super().__init__()
        self._fd = fd

    def writable(self):
        return True

    def fileno(self):
        return self._fd

    def isatty(self):
        return False

    def write(self, data):
        view = memoryview(data).cast("B")
        size = len(view)
        if _is_late():
            _late["bytes"] += size
            room = _LATE_EXCERPT - len(_late["excerpt"])
            if room > 0:
                _late["excerpt"] += bytes(view[:room])
            return size
        if _stream_cap is not None:
            room = max(_stream_cap - _written[self._fd], 0)
            if size > room:
                _dropped[self._fd] += size - room
                view = view[:room]
        _written[self._fd] += len(view)
        while view:
            view = view[os.write(self._fd, view):]
        return size


def _install_streams():
    for name, fd in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        stream = io.TextIOWrapper(
            _CallOutput(fd), encoding=old.encoding, errors=old.errors, write_through=True
        )
        setattr(sys, name, stream)
        setattr(sys, "__%s__" % name, stream)


def _take_late():
    late = {"bytes": _late["bytes"], "excerpt": _late["excerpt"].decode("utf-8", "replace")}
    _late["bytes"] = 0
    _late["excerpt"] = b""
    return late


def _write_inputs(inputs):
    if not inputs:
        return
    import base64

    for item in inputs:
        name = item["name"]
        parts = name.split("/")
        if (
            not name
            or name.startswith("/")
            or "\x00" in name
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise ValueError("input name %r must be a relative path inside the workspace" % name)
        data = base64.b64decode(item["b64"], validate=True)
        directory = _WORKSPACE
        for part in parts[:-1]:
            directory = os.path.join(directory, part)
            os.makedirs(directory, mode=0o700, exist_ok=True)
        target = os.path.join(_WORKSPACE, *parts)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


def _safe_str(value):
    try:
        return str(value)
    except BaseException:  # a hostile __str__ must not break the worker
        return "<unprintable %s>" % type(value).__name__


# Longest exception type name sent (the server cuts at 200 and says so).
_TYPE_CAP = 200


def _error(kind, message, tb_text, cap):
    # One character past each cap is sent, so the server, which cuts every field at its
    # own limit, sees the excess and says `truncated`; and the response line stays within
    # what the server accepts whatever the code raised.
    return {
        "type": kind[: _TYPE_CAP + 1],
        "message": message[: cap + 1],
        "traceback": tb_text[: cap + 1],
    }


def _describe(exc, cap):
    import traceback

    tb = exc.__traceback__
    # Drop the worker's own frames: the traceback starts at the user's first frame.
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell"):
        tb = tb.tb_next
    try:
        text = "".join(traceback.TracebackException(type(exc), exc, tb, compact=True).format())
    except BaseException:
        text = "%s: %s\n" % (type(exc).__name__, _safe_str(exc))
    return _error(type(exc).__name__, _safe_str(exc), text, cap)


def _syntax_error(exc, cap):
    import traceback

    return _error(
        type(exc).__name__,
        _safe_str(exc),
        "".join(traceback.format_exception_only(type(exc), exc)),
        cap,
    )


def _compile(code, filename):
    """The cell's module body (code objects run in order) and its last expression, or
    the exception compiling raised. Runs no code of the cell."""
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    split = _compile_split(code, filename)
    if split is not None:
        return split
    try:
        tree = compile(code, filename, "exec", _ast.PyCF_ONLY_AST)
        last = _pop_last_expression(tree)
        body = compile(tree, filename, "exec")
        tail = compile(last, filename, "eval") if last is not None else None
    except BaseException as exc:  # SyntaxError, ValueError (NUL bytes), RecursionError
        return (), None, exc
    return (body,), tail, None


def _pop_last_expression(tree):
    if tree.body and isinstance(tree.body[-1], _ast.Expr):
        return _ast.Expression(tree.body.pop().value)
    return None


def _compile_split(code, filename):
    # Turning a long cell into Python's AST objects and back costs twice what compiling
    # its source does, and only the last statement's shape matters (an expression's
    # value is the result). So the source before the last line that starts at column 0
    # is compiled as it is, and only the rest goes through the AST. The split is used
    # only when both parts compile on their own: the part before then ends on a complete
    # statement (an open bracket, string or backslash would not compile), and the rest
    # begins a statement (a clause like else: would not), so the two run exactly the
    # statements the whole cell holds, with the same line numbers (the rest is padded
    # with newlines). Not when a statement ties the parts together at compile time
    # (__future__ imports, global declarations), nor with \r line ends, which
    # this search for line starts does not follow. None: compile the cell whole.
    if "\r" in code or "__future__" in code or "global" in code:
        return None
    end = len(code)
    start = -1
    while end > 0:
        start = code.rfind("\n", 0, end - 1) + 1
        if start > 0 and code[start] not in " \t\f\n#":
            break
        end = start
        start = -1
    if start <= 0:
        return None
    import warnings

    with warnings.catch_warnings(record=True) as shown:
        try:
            rest = compile("\n" * code.count("\n", 0, start) + code[start:], filename,
                           "exec", _ast.PyCF_ONLY_AST)
            last = _pop_last_expression(rest)
            first = rest.body[0] if rest.body else None
            if (isinstance(first, _ast.Expr) and isinstance(first.value, _ast.Constant)
                    and type(first.value.value) is str):
                return None  # it would be compiled as the module's docstring
            head = compile(code[:start], filename, "exec")
            bodies = (head, compile(rest, filename, "exec")) if rest.body else (head,)
            tail = compile(last, filename, "eval") if last is not None else None
        except BaseException:
            return None  # the whole cell is compiled, and its error reported, instead
    _replay_warnings(shown)
    return bodies, tail, None


def _hold(request, counter):
    # The server sent this request before its static guard had judged the code, so that
    # compiling here overlaps the guard there ("hold"). Nothing of the cell runs and
    # nothing is written until the server's next line says "go"; on "drop" (the guard
    # refused the code) what was compiled is forgotten. Warnings the compiler raises are
    # recorded now and shown during the call, on its stderr, where they belong.
    import warnings

    filename = "<cell %d>" % counter
    with warnings.catch_warnings(record=True) as shown:
        compiled = _compile(request["code"], filename)
    line = _REQUESTS.readline(_MAX_REQUEST)
    try:
        verdict = json.loads(line)
    except ValueError:
        os._exit(3)
    if type(verdict) is not dict or verdict.get("id") != request["id"]:
        os._exit(3)
    if verdict.get("type") == "drop":
        linecache.cache.pop(filename, None)
        return None
    if verdict.get("type") != "go":
        os._exit(3)
    return compiled, shown


def _replay_warnings(shown):
    import warnings

    for w in shown:
        try:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno, w.file, w.line)
        except BaseException:
            pass


def _run(request, namespace, counter, held=None):
    cap = int(request.get("result_cap", 65536))
    response = {
        "type": "result",
        "id": request["id"],
        "status": "ok",
        "result": None,
        "result_truncated": False,
        "error": None,
    }
    try:
        _write_inputs(request.get("inputs"))
    except Exception as exc:
        response["status"] = "error"
        response["error"] = _error("InputError", _safe_str(exc), "", cap)
        return response

    if _PACKAGES:
        # An install since the last call switched the layer: find its modules afresh.
        sys.path_importer_cache.pop(_PACKAGES, None)
    if held is None:
        bodies, tail, exc = _compile(request["code"], "<cell %d>" % counter)
    else:
        (bodies, tail, exc), shown = held
        _replay_warnings(shown)
    if exc is not None:
        response["status"] = "error"
        response["error"] = _syntax_error(exc, cap)
        return response

    try:
        for body in bodies:
            exec(body, namespace)
        if tail is not None:
            value = eval(tail, namespace)
            if value is not None:
                text = repr(value)
                if len(text) > cap:
                    response["result_truncated"] = True
                    text = text[:cap]
                response["result"] = text
    except BaseException as exc:  # SystemExit and KeyboardInterrupt are results too
        response["status"] = "error"
        response["error"] = _describe(exc, cap)
    return response


def _marker(kind, nonce):
    marker = b"\x00WARDEN-" + kind + b":" + nonce.encode("ascii") + b"\x00"
    for fd in (1, 2):
        view = memoryview(marker)
        try:
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            pass


def _flush_streams():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            pass


def _call(request, namespace, counter, held=None):
    global _current, _earlier_threads, _stream_cap
    _earlier_threads = frozenset(sys._current_frames()) - {_MAIN_THREAD}
    cap = request.get("stream_cap")
    _stream_cap = cap if type(cap) is int and cap >= 0 else None
    for fd in (1, 2):
        _written[fd] = 0
        _dropped[fd] = 0
    _marker(b"START", request["nonce"])
    _current = counter
    try:
        response = _run(request, namespace, counter, held)
    finally:
        _flush_streams()
        _current = None
    _marker(b"END", request["nonce"])
    response["dropped"] = _take_dropped()
    return response


def _take_dropped():
    return {"stdout": _dropped[1], "stderr": _dropped[2]}


def _warm_up():
    # A call's first run through the worker's own code (decoding the request, the
    # markers, compiling, running and printing, encoding the response) costs a few
    # hundred microseconds more than later runs: first uses of the JSON codec, the
    # compiler and the AST types, and CPython specialising the code as it runs. Paid
    # here, before "ready", so that a worker the warm pool hands to a new session answers
    # its first call as fast as a warm one: whole calls are rehearsed with fds 1 and 2
    # pointed at a scratch pipe (nothing reaches the server's streams and no response is
    # sent), in a namespace of their own, and what they leave behind is reset.
    saved = {}
    try:
        scratch_read, scratch_write = os.pipe()
    except OSError:
        return
    try:
        os.set_blocking(scratch_read, False)
        for fd in (1, 2):
            saved[fd] = os.dup(fd)
            os.dup2(scratch_write, fd)
        request = {"type": "exec", "id": 0, "code": "x = 1 + 1\nprint(x)\nx",
                   "nonce": "0" * 32, "inputs": [], "result_cap": 1 << 16,
                   "stream_cap": 1 << 16}
        line = (json.dumps(request) + "\n").encode("ascii")
        for _ in range(3):
            response = _call(json.loads(line), {"__builtins__": builtins}, 0)
            response["late"] = _take_late()
            json.dumps(response, ensure_ascii=True).encode("ascii")
            try:
                while os.read(scratch_read, 1 << 16):
                    pass
            except BlockingIOError:
                pass
    except Exception:
        pass
    finally:
        for fd, old in saved.items():
            os.dup2(old, fd)
            os.close(old)
        os.close(scratch_read)
        os.close(scratch_write)
        linecache.cache.pop("<cell 0>", None)
        _take_late()


def _main():
    # The user's code gets a real __main__ module of its own, so that pickle, dataclasses
    # and typing find its classes; the worker's own names stay out of its reach by name.
    main_module = types.ModuleType("__main__")
    main_module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main_module
    namespace = main_module.__dict__
    _install_streams()
    _warm_up()
    counter = 0
    _send({"type": "ready", "python": sys.version.split()[0]})
    while True:
        line = _REQUESTS.readline(_MAX_REQUEST)
        if not line:
            os._exit(0)
        try:
            request = json.loads(line)
        except ValueError:
            os._exit(3)
        if request.get("type") != "exec":
            os._exit(3)
        counter += 1
        held = None
        if request.get("hold") is True:
            held = _hold(request, counter)
            if held is None:
                continue
        response = _call(request, namespace, counter, held)
        response["late"] = _take_late()
        try:
            _send(response)
        except (TypeError, ValueError):
            _send({"type": "result", "id": request["id"], "status": "error", "result": None,
                   "result_truncated": False, "late": _take_late(),
                   "dropped": response.get("dropped", _take_dropped()),
                   "error": {"type": "WorkerError", "message": "result not serialisable",
                             "traceback": ""}})


_main()
