# expect: 0.05 1000 7
import json
from types import SimpleNamespace

cfg = json.loads('{"alpha": 0.05, "n_boot": 1000, "seed": 7}')
opts = SimpleNamespace(**cfg)
print(opts.alpha, opts.n_boot, opts.seed)
