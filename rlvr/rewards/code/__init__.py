"""The code-test reward: a test spec (spec.py), test code the parent runs against the candidate's
functions (checks.py), the reward and its verdicts (reward.py: `code_tests`, `make_code_tests`), and
the judge worker that gives test code a wall clock (judge.py). Programs run in rlvr.sandbox."""
from rlvr.rewards.code.reward import (CODE_OUTCOMES, CodeTestsConfig, code_tests, last_code_block,
                                      make_code_tests, parse_spec, same)

__all__ = ["CODE_OUTCOMES", "CodeTestsConfig", "code_tests", "last_code_block", "make_code_tests",
           "parse_spec", "same"]
