# rule: reflection
# marker: pwned_f4_optional
# Family 4: an optional-dependency importer imports the module a string names
# and hands it back.
from pandas.compat._optional import import_optional_dependency

m = import_optional_dependency("o" + "s")
m.system("echo ran > pwned_f4_optional")
