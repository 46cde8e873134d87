# expect: Ana scored 91.2 on algebra
import string

fmt = string.Formatter()
print(fmt.format("{0} scored {1:.1f} on {test}", "Ana", 91.25, test="algebra"))
