# rule: blocked_module
# marker: pwned_f3_pipes
# Family 3: a stdlib module that wraps the shell.
import pipes

t = pipes.Template()
t.append("echo ran > pwned_f3_pipes; cat", "--")
f = t.open("out.txt", "w")
f.write("x")
f.close()
