# rule: template_field
# marker: pwned_f1_jinja
# Family 1: a template engine walks attributes of what it renders, even
# with a literal template (jinja2 without its sandbox).
import jinja2

t = jinja2.Template("{{ f.__globals__['os'].system('echo ran > pwned_f1_jinja') }}")
import glob
t.render(f=glob.glob)
