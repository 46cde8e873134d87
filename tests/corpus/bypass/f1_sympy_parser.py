# rule: code_string
# marker: pwned_f1_sympy
# Family 1: a symbolic-math parser evaluates a string built at run time.
import sympy

code = "__imp" + "ort__('o' 's').system('echo ran > pwned_f1_sympy')"
sympy.sympify(code)
