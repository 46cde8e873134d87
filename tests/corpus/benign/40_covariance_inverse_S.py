# expect: 1.4052
import numpy as np

X = np.array([[2.0, 0.5], [1.0, 1.5], [3.0, 1.0], [2.5, 2.0]])
S = np.cov(X, rowvar=False)
S_inv = np.linalg.inv(S)
d = X[0] - X.mean(axis=0)
print(round(float(d @ S_inv @ d), 4))
