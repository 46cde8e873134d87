# rule: code_string
# marker: pwned_f1_helper
# Family 1: a string reaches a capability through a helper's parameter. The
# helper's body passes a parameter, not a string, to lambdify, which pastes a
# string expression into the source of the function it builds.
import sympy

x = sympy.Symbol("x")


def make(expression):
    return sympy.lambdify(x, expression)


make("__imp" + "ort__('o' + 's').system('echo ran > pwned_f1_helper')")(1)
