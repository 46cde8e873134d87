# expect: 2 -1
rows = [("north", 120), ("south", 95), ("east", 143), ("west", 88)]


def locate(region):
    for i, (name, _) in enumerate(rows):
        if name == region:
            return i
    return -1


print(locate("east"), locate("nowhere"))
