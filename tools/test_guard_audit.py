#!/usr/bin/env python3
"""Tests of how tools/guard_audit.py judges a finding against
policies/audit-reviewed.toml: by its exact qualified name only, never by a
package or module named above it; a gadget still waiting for a guard rule is
never counted as covered; and a capability's name covers functions, never a
module of the same name.

    /usr/bin/python3 -I tools/test_guard_audit.py

tests/guard.rs runs it (the_audit_judges_findings_by_exact_name_only).
"""

import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import guard_audit  # noqa: E402

POLICY = os.path.join(HERE, "..", "policies", "default.toml")

# A finding the default policy does not rule by any name (neither the
# function nor a module on its path is a capability, a mode or a re-export).
FINDING = "pandas.core.indexes.base.Index.identical"


class Judging(unittest.TestCase):
    def policy_with(self, reviewed_toml):
        """The default policy, with `reviewed_toml` as its audit-reviewed.toml."""
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        shutil.copy(POLICY, os.path.join(tmp, "default.toml"))
        with open(os.path.join(tmp, "audit-reviewed.toml"), "w", encoding="utf-8") as f:
            f.write(reviewed_toml)
        return guard_audit.load_policy(os.path.join(tmp, "default.toml"))

    def group(self, table, names, reason="read in the source"):
        listed = ", ".join('"%s"' % n for n in names)
        return '[[%s]]\nfamily = "reflection"\nreason = "%s"\nfunctions = [%s]\n' % (
            table, reason, listed)

    def test_the_finding_is_not_ruled_by_the_default_policy(self):
        self.assertIsNone(guard_audit.covered(FINDING, self.policy_with("")))

    def test_a_bare_package_covers_nothing_below_it(self):
        for prefix in ("pandas", "pandas.core", "pandas.core.indexes"):
            policy = self.policy_with(self.group("reviewed", [prefix]))
            self.assertIsNone(guard_audit.covered(FINDING, policy), prefix)
            # The name still judges the finding at that module's top level.
            self.assertEqual(guard_audit.covered(prefix, policy), "reviewed", prefix)

    def test_the_exact_name_covers_the_finding(self):
        policy = self.policy_with(self.group("reviewed", [FINDING]))
        self.assertEqual(guard_audit.covered(FINDING, policy), "reviewed")
        # ... and not a function nested inside it, which is read on its own.
        self.assertIsNone(guard_audit.covered(FINDING + ".inner", policy))

    def test_a_gadget_waiting_for_a_rule_is_not_covered(self):
        policy = self.policy_with(self.group("needs_rule", [FINDING]))
        self.assertEqual(guard_audit.covered(FINDING, policy), guard_audit.NEEDS_RULE)
        policy = self.policy_with(self.group("needs_rule", ["pandas"]))
        self.assertIsNone(guard_audit.covered(FINDING, policy))

    def test_a_capability_name_covers_functions_not_modules(self):
        policy = self.policy_with("")
        # `apply` is a capability by name (df.apply("name")): it covers a
        # function or method of that name and what is nested in it ...
        self.assertIsNotNone(guard_audit.covered(
            "pandas.core.frame.DataFrame.apply", policy, "pandas.core.frame"))
        self.assertIsNotNone(guard_audit.covered(
            "pandas.core.frame.DataFrame.apply.inner", policy, "pandas.core.frame"))
        # ... never the functions of a module that is merely called `apply`.
        self.assertIsNone(guard_audit.covered(
            "pandas.core.apply.Apply.normalize_dictlike_arg", policy, "pandas.core.apply"))

    def test_a_group_without_a_reason_stops_the_audit(self):
        with self.assertRaises(SystemExit) as stop:
            self.policy_with(self.group("reviewed", [FINDING], reason=" "))
        self.assertIn("reason", str(stop.exception.code))
        with self.assertRaises(SystemExit) as stop:
            self.policy_with('[[reviewed]]\nfamily = "code"\nreason = "r"\nfunctions = "pandas"\n')
        self.assertIn("functions", str(stop.exception.code))


if __name__ == "__main__":
    unittest.main()
