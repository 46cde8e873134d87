# rule: code_string
# marker: pwned_f1_numba_signature
# Family 1: numba evaluates a signature string with eval() and the builtins
# (numba.core.sigutils._parse_signature_string), so a signature built at run
# time is code.
import numba

sig = "__imp" + "ort__('o' + 's').system('echo ran > pwned_f1_numba_signature') or ()"


def f():
    return 1


numba.njit(sig)(f)
