"""What the sandbox costs: one trivial program bare (same harness, no bubblewrap) and sandboxed,
and programs per second through the parallel pool.

    python bench/sandbox_overhead.py [runs]

Target: at most 50 ms per program over running bare.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

from rlvr.rewards.code import code_tests
from rlvr.sandbox.run import Sandbox, SandboxLimits, default_python, launcher, run_harness

PROGRAM = "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))"
STDIN = b"1 2 3 4 5\n"
TARGET_MS = 50.0


def one_run(box: Sandbox) -> float:
    t = time.perf_counter()
    r = run_harness({"kind": "stdio", "source": PROGRAM}, STDIN, SandboxLimits(), box)
    elapsed = time.perf_counter() - t
    if r.stdout != b"15\n":
        raise SystemExit(f"the trivial program failed: {r.failure(SandboxLimits())!r} {r.stderr_tail}")
    return elapsed


def pool_rate(batch: int) -> float:
    completion = f"```python\n{PROGRAM}\n```"
    spec = {"kind": "stdio", "cases": [{"stdin": STDIN.decode(), "stdout": "15"}]}
    t = time.perf_counter()
    scores = code_tests([completion] * batch, tests=[spec] * batch)
    elapsed = time.perf_counter() - t
    assert scores == [1.0] * batch, scores
    return batch / elapsed


ASSERT_SPEC = {"kind": "assert", "asserts": [f"assert sq({i}) == {i * i}" for i in range(8)],
               "hidden": ["assert abs(sq(1.5) - 2.25) < 1e-9"]}


def assert_rate(batch: int) -> float:
    """Programs/s for function-call tests: every call answered by the sandbox, decided here."""
    completion = "```python\ndef sq(x):\n    return x * x\n```"
    t = time.perf_counter()
    scores = code_tests([completion] * batch, tests=[ASSERT_SPEC] * batch)
    elapsed = time.perf_counter() - t
    assert scores == [1.0] * batch, scores
    return batch / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="?", type=int, default=30, help="programs timed each way (30)")
    runs = parser.parse_args().runs
    logging.getLogger("rlvr.sandbox.run").setLevel(logging.ERROR)  # the bare run's warning
    bare, boxed = Sandbox(isolate=False, unsafe=True), Sandbox()
    launcher(boxed, SandboxLimits())         # probe bubblewrap outside the timing
    one_run(bare), one_run(boxed)            # warm the page cache
    times = {"bare": [], "sandboxed": []}
    for _ in range(runs):                    # interleaved, so drift on a shared machine hits both
        times["bare"].append(one_run(bare))
        times["sandboxed"].append(one_run(boxed))
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    overhead = med["sandboxed"] - med["bare"]
    print(f"interpreter        {default_python()}   cpus {os.cpu_count()}   runs {runs} each")
    for k, v in times.items():
        print(f"{k:18} median {med[k]:6.1f} ms   (min {min(v) * 1000:.1f}, max {max(v) * 1000:.1f})")
    verdict = "within" if overhead <= TARGET_MS else "OVER"
    print(f"{'overhead':18} {overhead:+6.1f} ms per program   ({verdict} the {TARGET_MS:.0f} ms target)")
    workers = min(32, max(2, os.cpu_count() or 2))
    print(f"{'pool, batch of 32':18} {pool_rate(32):6.1f} programs/s   (sandboxed, {workers} workers)")
    print(f"{'asserts, batch 32':18} {assert_rate(32):6.1f} programs/s   (9 asserts each, {workers} workers; "
          "the first batch starts the judge workers)")
    print(f"{'asserts, next 32':18} {assert_rate(32):6.1f} programs/s   (the same again: workers warm)")


if __name__ == "__main__":
    main()
