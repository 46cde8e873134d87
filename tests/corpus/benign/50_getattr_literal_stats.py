# expect: {'mean': 3.875, 'median': 3.5, 'pstdev': 2.571}
import statistics

s = [3, 1, 4, 1, 5, 9, 2, 6]
results = {}
for stat in ("mean", "median", "pstdev"):
    results[stat] = round(getattr(statistics, stat)(s), 3)
print(results)
