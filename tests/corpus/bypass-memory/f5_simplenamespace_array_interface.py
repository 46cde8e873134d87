# rule: reflection
# marker: pwned_f5_array_interface
# Family 5: types.SimpleNamespace stores any keyword as an attribute; a
# computed `__array_interface__` makes numpy read (and write) the raw memory
# address it names. The program proves the read: it reads a bytes object's
# buffer through the address and writes the marker when the bytes match.
import types
from pathlib import Path

import numpy as np

secret = b"secret!!"
face = {"shape": (8,), "typestr": "|u1", "data": (id(secret) + 32, False), "version": 3}
o = types.SimpleNamespace(**{"__array_" + "interface__": face})
if bytes(np.asarray(o)) == secret:
    Path("pwned_f5_array_interface").write_text("ran")
