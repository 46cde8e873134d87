# rule: reflection
# marker: pwned_f1_override
# Family 1: matplotlib returns the attribute named by a function's __name__,
# which code can set to anything.
import warnings

from matplotlib._api.deprecation import deprecate_method_override
import numpy as np


def probe():
    pass


probe.__name__ = "__glob" + "als__"
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    g = deprecate_method_override(probe, np.mean, since="3.0")
g["o" + "s"].system("echo ran > pwned_f1_override")
