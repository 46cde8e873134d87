# expect: 65 165
events = [("deposit", 50), ("withdraw", 20), ("deposit", 35)]


def replay(log, start=0):
    balance = start
    for kind, amount in log:
        balance += amount if kind == "deposit" else -amount
    return balance


print(replay(events), replay(events, start=100))
