"""Builds a PEP 503 package index for warden's install_packages tests, and serves it.

    wheel_index.py build OUT [--large-mb N]   wheels, the index pages, a test CA and a
                                              certificate for index.test
    wheel_index.py serve OUT ADDR PORT [--tls] serves OUT; /fail/... answers 500 and
                                              /hang/... never answers

The wheels are made here: two pure-Python ones (one depends on the other), one with a C
extension compiled for this interpreter, one whose index link carries a wrong hash, one
too big for a small package limit, and a distribution published only as source.
"""
import base64
import hashlib
import http.server
import os
import shutil
import ssl
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

C_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) return NULL;
    return PyLong_FromLong(a + b);
}
static PyMethodDef methods[] = {{"add", add, METH_VARARGS, "a + b, in C"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "wfast", NULL, -1, methods};
PyMODINIT_FUNC PyInit_wfast(void) { return PyModule_Create(&module); }
"""


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (name, digest, len(data))


def wheel(out, name, version, files, tag="py3-none-any", requires=()):
    """Writes {name}-{version}-{tag}.whl with `files` ({path: bytes}) and returns its path."""
    dist = "%s-%s.dist-info" % (name, version)
    meta = "Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (name, version)
    meta += "".join("Requires-Dist: %s\n" % r for r in requires)
    entries = dict(files)
    entries[dist + "/METADATA"] = meta.encode()
    entries[dist + "/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: warden-tests\nRoot-Is-Purelib: %s\nTag: %s\n"
        % ("true" if tag == "py3-none-any" else "false", tag)
    ).encode()
    record = [record_line(p, d) for p, d in entries.items()] + [dist + "/RECORD,,"]
    entries[dist + "/RECORD"] = ("\n".join(record) + "\n").encode()
    path = os.path.join(out, "%s-%s-%s.whl" % (name, version, tag))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in entries.items():
            z.writestr(p, d)
    return path


def c_extension(out):
    build = tempfile.mkdtemp()
    src = os.path.join(build, "wfast.c")
    with open(src, "w") as f:
        f.write(C_SOURCE)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    so = os.path.join(build, "wfast" + suffix)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-I" + sysconfig.get_paths()["include"],
                    src, "-o", so], check=True)
    with open(so, "rb") as f:
        data = f.read()
    shutil.rmtree(build)
    py = "cp%d%d" % sys.version_info[:2]
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return wheel(out, "wfast", "1.0", {"wfast" + suffix: data}, tag="%s-%s-%s" % (py, py, plat))


def certificates(out):
    def openssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=out)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "3",
            "-subj", "/CN=warden test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=index.test")
    with open(os.path.join(out, "server.ext"), "w") as f:
        f.write("subjectAltName=DNS:index.test\nbasicConstraints=CA:FALSE\n"
                "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "3", "-extfile", "server.ext")


def page(links):
    body = "".join('<a href="%s">%s</a><br/>\n' % (href, text) for href, text in links)
    return "<!DOCTYPE html><html><body>\n%s</body></html>\n" % body


def index(out, files, wrong_hash=()):
    """simple/<name>/index.html for every file in out/files, hashes in the links."""
    by_name = {}
    for f in sorted(files):
        name = os.path.basename(f).split("-")[0].lower()
        by_name.setdefault(name, []).append(f)
    for name, paths in by_name.items():
        links = []
        for p in paths:
            with open(p, "rb") as fh:
                digest = hashlib.sha256(fh.read()).hexdigest()
            if name in wrong_hash:
                digest = "0" * 64
            base = os.path.basename(p)
            links.append(("../../files/%s#sha256=%s" % (base, digest), base))
        os.makedirs(os.path.join(out, "simple", name), exist_ok=True)
        with open(os.path.join(out, "simple", name, "index.html"), "w") as f:
            f.write(page(links))
    with open(os.path.join(out, "simple", "index.html"), "w") as f:
        f.write(page([(n + "/", n) for n in by_name]))


def build(out, large_mb):
    files_dir = os.path.join(out, "files")
    os.makedirs(files_dir)
    files = [
        wheel(files_dir, "wdep", "1.0", {"wdep/__init__.py": b"BASE = 41\n"}),
        wheel(files_dir, "wtiny", "1.0",
              {"wtiny/__init__.py": b"from wdep import BASE\nVALUE = BASE + 1\n"},
              requires=["wdep>=1"]),
        c_extension(files_dir),
        wheel(files_dir, "wbadhash", "1.0", {"wbadhash.py": b"X = 1\n"}),
        wheel(files_dir, "wbig", "1.0", {"wbig/blob.bin": os.urandom(4 << 20),
                                         "wbig/__init__.py": b""}),
        wheel(files_dir, "wsock", "1.0", {"psutil/__init__.py": b"VERSION = 0\n"}),
    ]
    if large_mb:
        files.append(wheel(files_dir, "wlarge", "1.0",
                           {"wlarge/__init__.py": b"",
                            "wlarge/data.bin": os.urandom(large_mb << 20)}))
    sdist = os.path.join(files_dir, "wsdist-1.0.tar.gz")
    with tarfile.open(sdist, "w:gz") as t:
        info = tarfile.TarInfo("wsdist-1.0/setup.py")
        data = b"raise SystemExit('an sdist must never be built')\n"
        info.size = len(data)
        import io
        t.addfile(info, io.BytesIO(data))
    files.append(sdist)
    index(out, files, wrong_hash={"wbadhash"})
    certificates(out)
    for root, dirs, names in os.walk(out):
        os.chmod(root, 0o755)
        for n in names:
            os.chmod(os.path.join(root, n), 0o644)


class Handler(http.server.SimpleHTTPRequestHandler):
    def do_GET(self):
        if self.path.startswith("/fail/"):
            self.send_error(500, "the test index fails on purpose")
            return
        if self.path.startswith("/hang/"):
            time.sleep(3600)
            return
        super().do_GET()


def serve(out, addr, port, tls):
    handler = lambda *a, **k: Handler(*a, directory=out, **k)
    server = http.server.ThreadingHTTPServer((addr, int(port)), handler)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(os.path.join(out, "server.pem"), os.path.join(out, "server.key"))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.serve_forever()


if __name__ == "__main__":
    if sys.argv[1] == "build":
        large = int(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[3] == "--large-mb" else 0
        build(sys.argv[2], large)
    else:
        serve(sys.argv[2], sys.argv[3], sys.argv[4], "--tls" in sys.argv[5:])
