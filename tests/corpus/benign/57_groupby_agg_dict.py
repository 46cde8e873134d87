# expect: 3 2.0
import pandas as pd

df = pd.DataFrame({"g": ["a", "a", "b"], "v": [1, 2, 6], "w": [0.5, 1.5, 2.0]})
agg = {"v": "sum", "w": "mean"}
out = df.groupby("g").agg(agg)
print(out.loc["a", "v"], out.loc["b", "w"])
