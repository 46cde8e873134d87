# rule: reflection
# marker: pwned_f1_fonttools_custom_table
# Family 1: fontTools imports the module a custom table registration names
# and hands back the attribute it names.
from fontTools import ttLib

ttLib.registerCustomTableClass("ABCD", "o" + "s", "sys" + "tem")
run = ttLib.getTableClass("ABCD")
run("echo ran > pwned_f1_fonttools_custom_table")
