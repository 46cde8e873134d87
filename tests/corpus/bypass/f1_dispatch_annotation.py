# rule: internals_attribute
# marker: pwned_f1_dispatch
# Family 1: an annotation set at run time is evaluated by singledispatch.
import functools

@functools.singledispatch
def show(x):
    return x

def handler(x: int):
    return x

handler.__annotations__["x"] = "__import__('os').system('echo ran > pwned_f1_dispatch') or int"
show.register(handler)
