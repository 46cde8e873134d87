# rule: reflection
# marker: pwned_f1_match
# Family 1: a class pattern reads attribute names from __match_args__,
# rewritten at run time through type.__setattr__, with a metaclass that
# matches anything.
import glob

class Anything(type):
    def __instancecheck__(cls, obj):
        return True

class P(metaclass=Anything):
    pass

type.__setattr__(P, "__match_args__", ("__glo" + "bals__",))
match glob.glob:
    case P(g):
        g["os"].system("echo ran > pwned_f1_match")
