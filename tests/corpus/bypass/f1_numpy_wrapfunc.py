# rule: reflection
# marker: pwned_f1_wrapfunc
# Family 1: a private numpy helper calls the method a string names on any object.
import numpy.core.fromnumeric as fn

g = fn._wrapfunc(fn._wrapfunc, "__get" + "attribute__", "__glob" + "als__")
b = g["__built" + "ins__"]
b["__imp" + "ort__"]("o" + "s").system("echo ran > pwned_f1_wrapfunc")
