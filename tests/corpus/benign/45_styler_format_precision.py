# expect: True True False
import pandas as pd

df = pd.DataFrame({"x": [1.23456, 2.5], "y": [3.14159, 0.5]})
styled = df.style.format(precision=2)
html = styled.to_html()
print("1.23" in html, "3.14" in html, "1.2346" in html)
