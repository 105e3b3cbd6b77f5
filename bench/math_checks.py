"""Maths checks per second: simple answers (the exact path), answer forms (tuples, sets, intervals,
equations: exact pieces), symbolic ones (the worker); then the worst time of one check on adversarial
80 kB completions (answer lines, boxes, tags: each scan must stay linear).

    python bench/math_checks.py

Target: at least 500 checks/s on simple answers on a 2-core CPU.
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

from rlvr.rewards import format_reward, make_format_reward, math_accuracy
from rlvr.rewards.workers import current


def rate(completions: list[str], golds: list[str], repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        math_accuracy(completions, answer=golds)
        times.append(time.perf_counter() - t)
    return len(completions) / statistics.median(times)


def main() -> None:
    rng = random.Random(0)
    n = 2000
    simple = []
    for _ in range(n):
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        simple.append((f"{a} + {b} = {a + b}\nAnswer: {a + b + rng.choice([0, 0, 1])}", str(a + b)))
    fractions = [(f"The result is \\boxed{{\\frac{{{k}}}{{{2 * k}}}}}", "0.5") for k in range(1, 401)]
    symbolic = [(f"\\boxed{{\\sqrt{{{k * k * 2}}}}}", f"{k}\\sqrt{{2}}") for k in range(1, 61)]
    forms = [(f"\\boxed{{({k}, {k + 1}, -1)}}", f"({k},{k + 1},-1)") for k in range(100)]
    forms += [(f"Final Answer: \\boxed{{\\{{{k + 1}, {k}\\}}}}", f"\\{{{k}, {k + 1}\\}}") for k in range(100)]
    forms += [(f"**Answer:** $(-\\infty, {k}] \\cup ({k + 1}, \\infty)$", f"(-\\infty,{k}]\\cup({k + 1},\\infty)")
              for k in range(100)]
    forms += [(f"\\boxed{{x = {k}}}", f"{k}") for k in range(100)]
    current().maths.compare("1", "1")  # start the worker outside the timing
    for name, items in (("simple integers", simple), ("LaTeX fractions", fractions), ("answer forms", forms),
                        ("symbolic (sympy)", symbolic)):
        completions, golds = [c for c, _ in items], [g for _, g in items]
        print(f"{name:18} {rate(completions, golds):10.0f} checks/s   ({len(items)} answers)")
    tower = time.perf_counter()
    math_accuracy(["\\boxed{5^{5^{5^{5^5}}}}"], answer=["3"])
    print(f"{'power tower':18} {time.perf_counter() - tower:10.2f} s (wall-clock limit 2 s, then the worker restarts)")
    print(f"{'adversarial 80 kB':18} {adversarial():10.3f} s, the slowest check of {len(ADVERSARIAL)} completions")


ADVERSARIAL = ["Answer: 1" + " " * 80_000 + ",x", "\\boxed{42}\nAnswer: 42" + " \t" * 40_000 + ".",
               ("Answer: 7" + " " * 40 + "8\n") * 1600, ("\\boxed{42}" + "x" * 10) * 4000,
               "<answer>42</answer>x" * 4000, "\\boxed{" * 11_000, "<think>" * 11_000 + "Answer: 1"]


def adversarial() -> float:
    """Seconds of the slowest maths or format check on one adversarial completion."""
    checks = [lambda texts: math_accuracy(texts, answer=["42"]), format_reward,
              make_format_reward("boxed"), make_format_reward("tag")]
    worst = 0.0
    for text in ADVERSARIAL:
        for check in checks:
            t = time.perf_counter()
            check([text])
            worst = max(worst, time.perf_counter() - t)
    return worst


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()  # no flags: --help says what it measures
    main()
