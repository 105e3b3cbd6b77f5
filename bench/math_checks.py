"""Maths checks per second: simple answers (the exact path) and symbolic ones (the worker).

    python bench/math_checks.py

Target (issue 3): at least 500 checks/s on simple answers on a 2-core CPU.
"""
from __future__ import annotations

import random
import statistics
import time

from rlvr.rewards import math_accuracy
from rlvr.rewards.math_worker import shared_worker


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
    shared_worker().compare("1", "1")  # start the worker outside the timing
    for name, items in (("simple integers", simple), ("LaTeX fractions", fractions), ("symbolic (sympy)", symbolic)):
        completions, golds = [c for c, _ in items], [g for _, g in items]
        print(f"{name:18} {rate(completions, golds):10.0f} checks/s   ({len(items)} answers)")
    tower = time.perf_counter()
    math_accuracy(["\\boxed{5^{5^{5^{5^5}}}}"], answer=["3"])
    print(f"{'power tower':18} {time.perf_counter() - tower:10.2f} s (wall-clock limit 2 s, then the worker restarts)")


if __name__ == "__main__":
    main()
