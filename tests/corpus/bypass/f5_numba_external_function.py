# rule: native_code
# marker: pwned_f5_numba_external_function
# Family 5: numba calls any C symbol of the process that a type names
# (types.ExternalFunction); libc's system() takes an array's address.
import numpy as np
import numba
from numba import types

system = types.ExternalFunction("sys" + "tem", types.int32(types.intp))


@numba.njit
def run(address):
    return system(address)


cmd = np.frombuffer(b"echo ran > pwned_f5_numba_external_function\0", dtype=np.uint8)
run(np.byte_bounds(cmd)[0])
