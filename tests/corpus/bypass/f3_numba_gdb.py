# rule: process_spawn
# marker: pwned_f3_numba_gdb
# Family 3: numba.gdb() in jitted code forks and execs numba's gdb binary,
# by default the relative path `gdb`: a script in the working directory.
from pathlib import Path
import numba

script = Path("gdb")
script.write_text("#!/bin/sh\necho ran > pwned_f3_numba_gdb\n")
script.chmod(0o755)


@numba.njit
def attach():
    numba.gdb()
    return 1


attach()
