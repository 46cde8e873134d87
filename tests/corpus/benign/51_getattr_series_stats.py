# expect: {'mean': 3.875, 'median': 3.5, 'std': 2.748}
import pandas as pd

s = pd.Series([3, 1, 4, 1, 5, 9, 2, 6])
print({stat: round(float(getattr(s, stat)()), 3) for stat in ("mean", "median", "std")})
