# expect: 2/3
from sympy import S, symbols, integrate

x = symbols("x")
expr = x**2 + S(1) / 3
print(integrate(expr, (x, 0, 1)))
