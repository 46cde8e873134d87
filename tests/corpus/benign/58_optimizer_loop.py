# expect: adam 0.2
losses = {"sgd": [0.9, 0.5, 0.4], "adam": [0.8, 0.3, 0.2], "rmsprop": [0.85, 0.4, 0.25]}
best = {}
for optimizer, curve in losses.items():
    best[optimizer] = min(curve)
compiler = min(best, key=best.get)
print(compiler, best[compiler])
