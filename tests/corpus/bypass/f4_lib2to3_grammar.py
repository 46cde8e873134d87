# rule: blocked_module
# marker: pwned_f4_lib2to3
# Family 4: lib2to3's Grammar.loads unpickles the bytes it is given.
from lib2to3.pgen2.grammar import Grammar

Grammar().loads(b"cos\nsystem\n(S'echo ran > pwned_f4_lib2to3'\ntR.")
