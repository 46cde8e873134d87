# warden selftest probes: run inside a real sandboxed worker, exactly like user code.
# Each probe ATTEMPTS a forbidden operation and prints one JSON line:
#   {"probe": id, "ok": <the attempt succeeded>, "errno": n | "timeout" | null,
#    "detail": text, "data": what the attempt returned (for the server's oracles)}
# The server decides blocked / allowed / inconclusive, using host-side evidence where it
# has some (the canary's content, the listener's accept queue, the file it checks for).
import ctypes
import json
import os
import socket


def _emit(probe, ok, err=None, detail="", data=None):
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    if data is not None and not isinstance(data, str):
        data = repr(data)
    print(json.dumps({"probe": probe, "ok": ok, "errno": err, "detail": detail,
                      "data": data}), flush=True)


def _attempt(probe, fn):
    try:
        data = fn()
        _emit(probe, True, None, "the operation succeeded", data)
    except TimeoutError as exc:
        _emit(probe, False, "timeout", "timed out: %s" % exc)
    except OSError as exc:
        _emit(probe, False, exc.errno, "%s: %s" % (type(exc).__name__, exc))
    except Exception as exc:  # a probe that cannot even try is judged inconclusive
        _emit(probe, False, None, "%s: %s" % (type(exc).__name__, exc))


def _connect(family, address, timeout):
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(address)
        return "connected"
    finally:
        sock.close()


def _symlink_escape(target):
    if os.path.lexists("selftest_link"):
        os.unlink("selftest_link")
    os.symlink(target, "selftest_link")
    with open("selftest_link") as fh:
        return fh.read()


def _fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return "forked child %d" % pid


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _privileges():
    libc = ctypes.CDLL(None, use_errno=True)
    nnp = libc.prctl(39, 0, 0, 0, 0)  # PR_GET_NO_NEW_PRIVS
    _emit("priv.no_new_privs", nnp != 1, None, "PR_GET_NO_NEW_PRIVS = %d" % nnp)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        _emit("priv.capabilities", False, ctypes.get_errno(), "capget failed")
    else:
        eff = data[0].effective | (data[1].effective << 32)
        perm = data[0].permitted | (data[1].permitted << 32)
        _emit("priv.capabilities", eff != 0 or perm != 0, None,
              "effective=%#x permitted=%#x" % (eff, perm))
    uid, euid = os.getuid(), os.geteuid()
    _emit("priv.not_root", uid == 0 or euid == 0, None, "uid=%d euid=%d" % (uid, euid))


def _stat_outside(path):
    st = os.stat(path)
    return "size=%d uid=%d mtime=%d" % (st.st_size, st.st_uid, st.st_mtime)


def _inotify(directory):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(0o2000000)  # IN_CLOEXEC
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    try:
        wd = libc.inotify_add_watch(fd, os.fsencode(directory), 0x100 | 0x200)  # create|delete
        if wd < 0:
            err = ctypes.get_errno()
            raise OSError(err, "inotify_init1 worked, the watch failed: %s" % os.strerror(err))
        return "watching %s" % directory
    finally:
        os.close(fd)


def _proc_pids():
    return " ".join(sorted((e for e in os.listdir("/proc") if e.isdigit()), key=int))


def _other_rlimit(pid):
    import resource
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft - 1, hard))
    return "lowered RLIMIT_NOFILE of pid %d to %d" % (pid, soft - 1)


def _other_priority(pid):
    now = os.getpriority(os.PRIO_PROCESS, pid)
    os.setpriority(os.PRIO_PROCESS, pid, min(now + 1, 19))
    return "reniced pid %d" % pid


def _rwx():
    import mmap
    m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    m.close()
    return "an RWX mapping was created"


def main(p):
    _attempt("fs.canary_read", lambda: open(p["canary"]).read())
    _attempt("fs.write_outside", lambda: open(p["write_target"], "w").write("selftest"))
    _attempt("fs.etc_shadow", lambda: open("/etc/shadow").read(64))
    _attempt("fs.ssh_dir", lambda: os.listdir(p["ssh_dir"]))
    _attempt("fs.symlink_escape", lambda: _symlink_escape(p["canary"]))
    _attempt("net.af_inet_socket",
             lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
    _attempt("net.test_net_connect",
             lambda: _connect(socket.AF_INET, (p["probe_addr"], 80), p["connect_timeout"]))
    _attempt("net.loopback_listener",
             lambda: _connect(socket.AF_INET, ("127.0.0.1", p["loopback_port"]), 3))
    _attempt("net.unix_listener", lambda: _connect(socket.AF_UNIX, p["unix_socket"], 3))
    _attempt("proc.fork", _fork)
    _attempt("proc.signal_server", lambda: os.kill(p["server_pid"], 0))
    _attempt("fs.stat_outside", lambda: _stat_outside(p["canary"]))
    _attempt("fs.inotify", lambda: _inotify(os.path.dirname(p["canary"])))
    _attempt("proc.enumerate", _proc_pids)
    _attempt("proc.other_rlimit", lambda: _other_rlimit(p["server_pid"]))
    _attempt("proc.other_priority", lambda: _other_priority(p["server_pid"]))
    _attempt("mem.rwx", _rwx)
    _privileges()
    _emit("info.cpu_count", False, None, "", str(os.cpu_count()))


def memfd_exec(marker):
    """Copies the interpreter into a memfd and runs it (Landlock's execute right covers
    paths, not memfds): a plain memfd first, then a sealed one. If either runs, the copy
    writes `marker` into the workspace, which the server looks for."""
    libc = ctypes.CDLL(None, use_errno=True)
    import sys
    elf = open(sys.executable, "rb").read()
    for label, flags in (("plain", 1), ("sealed", 1 | 8)):
        fd = libc.memfd_create(label.encode(), flags)
        if fd < 0:
            _emit("proc.memfd_exec." + label, False, ctypes.get_errno(), "memfd_create refused")
            continue
        os.write(fd, elf)
        try:
            os.fchmod(fd, 0o755)
        except OSError:
            pass
        try:
            os.execv("/proc/self/fd/%d" % fd,
                     ["python3", "-c", "open(%r, 'w').write('ran')" % marker])
        except OSError as exc:
            _emit("proc.memfd_exec." + label, False, exc.errno, "exec refused: %s" % exc)
        finally:
            os.close(fd)
