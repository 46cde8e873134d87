# rule: code_string
# marker: pwned_f1_identify
# Family 1: mpmath.identify evaluates the strings of its `constants` list.
import mpmath

expr = "__import__('os').system('echo ran > pwned_f1_identify') or pi"
mpmath.identify(0.5, [expr])
