# rule: reflection
# marker: pwned_f1_dist_kw
# Family 1: scipy looks up a distribution by name on a module and returns it;
# every module holds its builtins.
from scipy.stats import _morestats

b = _morestats._parse_dist_kw("__built" + "ins__")
b["__imp" + "ort__"]("o" + "s").system("echo ran > pwned_f1_dist_kw")
