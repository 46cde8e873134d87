# rule: reflection
# marker: pwned_f5_set_name
# Family 5: an explicit __set_name__ renames functools.cached_property, which
# then stores its value in the instance __dict__ under that name;
# `__array_interface__` makes numpy read the raw memory address it names.
import functools
from pathlib import Path

import numpy as np

secret = b"secret!!"

def face(self):
    return {"shape": (8,), "typestr": "|u1", "data": (id(secret) + 32, False), "version": 3}

class C:
    pass

cp = functools.cached_property(face)
C.x = cp
cp.__set_name__(C, "__array_" + "interface__")
c = C()
c.x
if bytes(np.asarray(c)) == secret:
    Path("pwned_f5_set_name").write_text("ran")
