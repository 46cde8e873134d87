# rule: module_reexport
# marker: pwned_f2_builtins
# Family 2: a blocked builtin reached as an attribute of an allowed module
# (enum keeps the builtins module as `bltns`).
import enum

enum.bltns.exec("import os; os.system('echo ran > pwned_f2_builtins')")
