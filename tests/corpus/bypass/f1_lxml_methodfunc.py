# rule: reflection
# marker: pwned_f1_methodfunc
# Family 1: lxml.html's _MethodFunc calls the method a string names on any
# object it is given.
import glob
from lxml.html import _MethodFunc

g = _MethodFunc("__getattribute__", copy=False)(glob.glob, "__glo" + "bals__")
g["os"].system("echo ran > pwned_f1_methodfunc")
