# rule: dunder_name
# marker: pwned_f5_copy_getstate
# Family 5: copy.copy writes what __getstate__ returns into the new object's
# __dict__; a computed `__array_interface__` key makes numpy read the raw
# memory address it names (the program checks the bytes it read).
import copy
from pathlib import Path

import numpy as np

secret = b"secret!!"

class R:
    def __getstate__(self):
        face = {"shape": (8,), "typestr": "|u1", "data": (id(secret) + 32, False), "version": 3}
        return {"__array_" + "interface__": face}

if bytes(np.asarray(copy.copy(R()))) == secret:
    Path("pwned_f5_copy_getstate").write_text("ran")
