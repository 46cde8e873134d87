# rule: reflection
# marker: pwned_f1_setattr
# Family 1: setattr under a name built at run time writes __annotations__,
# whose keys @dataclass pastes into the source it generates.
import dataclasses


class C:
    pass


name = "__annota" + "tions__"
setattr(C, name, {"x,__import__('os').system('echo ran > pwned_f1_setattr')": int})
D = dataclasses.dataclass(C, init=False, repr=False)
a, b = D(), D()
a.x = b.x = 1
a == b
