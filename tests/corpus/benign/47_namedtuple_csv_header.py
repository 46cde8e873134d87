# expect: Oslo 1000000
import csv
import io
from collections import namedtuple

text = "city,population,area\nOslo,709000,454\nBergen,291000,465\n"
reader = csv.reader(io.StringIO(text))
header = next(reader)
Row = namedtuple("Row", header)
rows = [Row(*r) for r in reader]
print(rows[0].city, sum(int(r.population) for r in rows))
