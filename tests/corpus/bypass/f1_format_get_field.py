# rule: reflection
# marker: pwned_f1_format
# Family 1: a str.format field path built at run time walks attributes
# (string.Formatter.get_field), reaching os.system through a function's globals.
import string
import shutil as _unused  # noqa: F401  (not needed: the path reaches os from any stdlib function)
import glob

field = "0." + "_".join(["", "", "globals", ""])[1:].join(["_", "_"])
# field is built at run time: "0.__globals__"
field = "0." + "__" + "glob" + "als__"
globs, _ = string.Formatter().get_field(field, (glob.glob,), {})
globs["os"].system("echo ran > pwned_f1_format")
