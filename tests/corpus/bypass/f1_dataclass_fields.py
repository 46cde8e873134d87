# rule: reflection
# marker: pwned_f1_dataclass
# Family 1: @dataclass pastes field names into the source it generates (here
# __eq__); the names come from an __annotations__ dict the code writes.
import dataclasses

name = "x,__import__('os').system('echo ran > pwned_f1_dataclass')"
ns = {"__annotations__": {name: int}}
C = dataclasses.dataclass(type("C", (), ns), init=False, repr=False)
a, b = C(), C()
a.x = b.x = 1
a == b
