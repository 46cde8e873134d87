# expect: 1.4142
import numpy as np


def mahalanobis(x, mu, S):
    d = x - mu
    return float(np.sqrt(d @ np.linalg.inv(S) @ d))


S = np.array([[4.0, 0.0], [0.0, 1.0]])
print(round(mahalanobis(np.array([2.0, 1.0]), np.zeros(2), S), 4))
