# expect: 1/2 True 2*sqrt(2)
from sympy import S, Rational, sqrt

half = S(1) / 2
print(half, half == Rational(1, 2), sqrt(S(8)))
