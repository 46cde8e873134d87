# rule: module_reexport
# marker: pwned_f4_zip
# Family 4: a module loaded from a file that does not end in .py (a zip
# archive), through zipimport re-exported by an allowed module.
import zipfile
import jinja2.loaders

with zipfile.ZipFile("lib.dat", "w") as z:
    z.writestr("m.py", "import os\nos.system('echo ran > pwned_f4_zip')\n")
jinja2.loaders.zipimport.zipimporter("lib.dat").load_module("m")
