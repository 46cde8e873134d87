# rule: blocked_module
# marker: pwned_f3_mailcap
# Family 3: mailcap.findmatch runs an entry's `test` command with os.system.
import mailcap

caps = {"text/plain": [{"view": "true", "test": "echo ran > pwned_f3_mailcap"}]}
mailcap.findmatch(caps, "text/plain")
