# rule: blocked_module
# marker: pwned_f1_argparse
# Family 1: argparse.Namespace's __init__ sets any keyword as an attribute of
# whatever it is called on: here a class's __annotations__, whose keys
# @dataclass pastes into the source it generates.
import argparse
import dataclasses

class C:
    pass

name = "x,__import__('os').system('echo ran > pwned_f1_argparse')"
argparse.Namespace.__init__(C, **{"__annota" + "tions__": {name: int}})
D = dataclasses.dataclass(C, init=False, repr=False)
a, b = D(), D()
a.x = b.x = 1
a == b
