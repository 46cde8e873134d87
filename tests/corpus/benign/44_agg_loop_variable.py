# expect: [9.0, 3.0, 6.0]
import pandas as pd

df = pd.DataFrame({"g": ["a", "a", "b"], "v": [1, 2, 6]})
out = []
for agg in ["sum", "mean", "max"]:
    out.append(float(df["v"].agg(agg)))
print(out)
