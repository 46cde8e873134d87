# expect: mean=2.0 max=3 min=1 median=2.0
import pandas as pd

frame = pd.DataFrame({"a": [1, 2, 3]})


def summarise(df, how="mean"):
    return df["a"].agg(how)


parts = [f"mean={summarise(frame)}"]
for how in ("max", "min"):
    parts.append(f"{how}={summarise(frame, how)}")
parts.append(f"median={summarise(frame, how='median')}")
print(" ".join(parts))
