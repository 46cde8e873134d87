# rule: reflection
# marker: pwned_f1_update_wrapper
# Family 1: functools.update_wrapper copies the attributes its `assigned`
# names from one object to another; a name built at run time hands a
# module's globals to a __setattr__ the code wrote.
import functools
import glob

caught = []

class Catch:
    def __setattr__(self, name, value):
        caught.append(value)

functools.update_wrapper(Catch(), glob.glob, assigned=("__glo" + "bals__",), updated=())
caught[0]["os"].system("echo ran > pwned_f1_update_wrapper")
