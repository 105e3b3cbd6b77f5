"""rlvr's maths checker against Math-Verify's own test suite: which right answers it accepts, which wrong ones
it refuses, and why it refuses the rest.

    pip download --no-deps --no-binary :all: math-verify==0.9.0 && tar xzf math_verify-0.9.0.tar.gz
    python bench/math_verify_suite.py math_verify-0.9.0/tests [--list]

Reads every parametrized (gold, pred, expected) case of the suite's test files (274 in 0.9.0: 231 equal,
43 not) without importing them. Each prediction is scored by `math_accuracy_verdict` as a completion, put in
`\\boxed{}` unless it has a box already or reads as prose. Prints agreement, false accepts (must be 0), and
the right answers refused, split into: refused by rlvr's stated policy (no final-answer marker, several
different answers, chains of equations, `\\approx`, over 300 characters, a rounded decimal for an exact
gold), accepted once the test file's
doubled backslashes (`\\\\left` in a non-raw string) are undone, and the rest, which --list prints one per
line for a person to judge.
"""
from __future__ import annotations

import argparse
import ast
import re
from pathlib import Path

from rlvr.rewards.maths.accuracy import math_accuracy_verdict

POLICY = ("no final answer", "several different final answers", "a chain of equations", "final answer longer")
EXACT = "a rounded decimal for an exact gold"   # anywhere in the reason: an entry of a tuple or matrix too
_PROSE_WORD = re.compile(r"(?<![\\\w])[A-Za-z]{2,}\b")
_DOUBLED = re.compile(r"\\\\(?=[A-Za-z])")


def cases(tests: Path) -> list[dict]:
    """(gold, pred, expected, where) of every parametrize whose names include gold and pred."""
    out = []
    for path in sorted(tests.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for dec in node.decorator_list:
                if not (isinstance(dec, ast.Call) and getattr(dec.func, "attr", "") == "parametrize"):
                    continue
                names = [n.strip() for n in ast.literal_eval(dec.args[0]).split(",")]
                if "gold" not in names or "pred" not in names:
                    continue
                verdict = names.index("expected" if "expected" in names else "result")
                for elt in dec.args[1].elts:
                    try:
                        v = ast.literal_eval(elt)
                    except ValueError:
                        continue
                    out.append({"gold": v[names.index("gold")], "pred": v[names.index("pred")],
                                "expected": bool(v[verdict]), "where": f"{path.name}:{elt.lineno}"})
    return out


def as_completion(pred: str) -> str:
    prose = "answer" in pred.lower() or len(_PROSE_WORD.findall(pred)) >= 5
    return pred if "\\boxed" in pred or prose else f"\\boxed{{{pred}}}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tests", type=Path, help="the tests/ folder of Math-Verify's sdist")
    p.add_argument("--list", action="store_true", help="print each refusal outside the policy")
    args = p.parse_args()
    rows = cases(args.tests)
    for r in rows:
        v = math_accuracy_verdict(as_completion(r["pred"]), r["gold"])
        r["got"], r["reason"] = v.score == 1.0, v.reason
    right = [r for r in rows if r["expected"]]
    false_accepts = [r for r in rows if r["got"] and not r["expected"]]
    policy, undoubled, other = [], [], []
    for r in right:
        if r["got"]:
            continue
        completion = as_completion(r["pred"])
        if _DOUBLED.search(r["gold"] + completion) and math_accuracy_verdict(
                _DOUBLED.sub(r"\\", completion), _DOUBLED.sub(r"\\", r["gold"])).score == 1.0:
            undoubled.append(r)
        elif r["reason"].startswith(POLICY) or "\\approx" in completion or EXACT in r["reason"]:
            policy.append(r)
        else:
            other.append(r)
    accepted = sum(r["got"] for r in right)
    print(f"cases {len(rows)} ({len(right)} equal, {len(rows) - len(right)} not); "
          f"agree {sum(r['got'] == r['expected'] for r in rows)}; false accepts {len(false_accepts)}")
    print(f"right answers: accepted {accepted}, accepted once doubled backslashes are undone {len(undoubled)}, "
          f"refused by policy {len(policy)}, other refusals {len(other)}")
    print(f"accepted of those the policy does not refuse: {accepted + len(undoubled)}/"
          f"{accepted + len(undoubled) + len(other)} (every other refusal counted as a gap)")
    outside = len(rows) - len(policy)
    agree_outside = sum(r["got"] == r["expected"] for r in rows) + len(undoubled)
    print(f"agreement outside policy (every case, equal or not, not refused by policy): {agree_outside}/{outside} "
          f"({100 * agree_outside / outside:.1f}%)")
    for r in false_accepts:
        print(f"FALSE ACCEPT {r['where']}: gold {r['gold'][:60]!r} pred {r['pred'][:60]!r}")
    if args.list:
        for r in other:
            print(f"  {r['where']:26} gold {r['gold'][:40]!r:44} pred {r['pred'][:50]!r:54} {r['reason'][:60]}")


if __name__ == "__main__":
    main()
