# rule: reflection
# marker: pwned_f1_iter_fields
# Family 1: ast.iter_fields reads the attributes an object's `_fields` names,
# and `_fields` is a plain attribute code can set on a function.
import ast, glob
glob.glob._fields = ("__glo" + "bals__",)
g = dict(ast.iter_fields(glob.glob))["__glo" + "bals__"]
g["os"].system("echo ran > pwned_f1_iter_fields")
