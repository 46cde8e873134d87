# expect: 8 3.875 ('n', 'mean', 'maximum')
from collections import namedtuple

summary = {"n": 8, "mean": 3.875, "maximum": 9}
Summary = namedtuple("Summary", list(summary))
s = Summary(**summary)
print(s.n, s.mean, s._fields)
