# rule: reflection
# marker: pwned_f1_bs4_alias
# Family 1: bs4's _alias builds a property whose getter reads the attribute
# a string names, from any object it is called with.
import glob
from bs4.element import _alias
g = _alias("__glo" + "bals__").fget(glob.glob)
g["os"].system("echo ran > pwned_f1_bs4_alias")
