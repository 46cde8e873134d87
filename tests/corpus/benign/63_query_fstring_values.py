# expect: 1 1 2 1.5
import pandas as pd

df = pd.DataFrame({"a": [1, 2, 3], "year": [2020, 2021, 2022]})
a_limit = 2
a_column = "a"
counts = [len(df.query(f"{a_column} > {a_limit}"))]
for y in (2020, 2021):
    counts.append(len(df.query(f"year <= {y}")))
mean = df.query(f"{a_column} <= {a_limit:.0f}")[a_column].mean()
print(*counts, mean)
