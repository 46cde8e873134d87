# rule: code_string
# marker: pwned_f1_measure
# Family 1: a numpy testing helper execs its argument.
import numpy as np

np.testing.measure("__import__('os').system('echo ran > pwned_f1_measure')", 1)
