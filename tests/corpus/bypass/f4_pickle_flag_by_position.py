# rule: unsafe_loader
# marker: pwned_f4_npload
# Family 4: numpy's pickle flag passed by position (third argument), not by keyword.
import numpy as np

payload = b"cposix\nsystem\n(Vecho ran > pwned_f4_npload\ntR."
header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,), }"
header = header + " " * (63 - len(header)) + "\n"
with open("x.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + payload)
np.load("x.npy", None, True)
