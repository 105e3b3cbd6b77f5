"""The test suite's time, by tier and by file: where `make test` and `make test-fast` spend theirs.

    python bench/suite.py                      # runs the fast tier (pytest -m "not slow"), then prints
    python bench/suite.py --tier all           # the whole suite in this venv (the vLLM tests skip here)
    python bench/suite.py --log LOG            # reads a pytest log made with --durations=0 instead
    python bench/suite.py --log LOG --write-slow   # and rewrites tests/slow_tests.txt from it

The tier runs on two workers (pytest-xdist), as make test-fast runs it, so its wall clock is about half its
test time on two idle cores. A test's time is its setup, call and teardown together, as pytest's --durations=0
prints them (a module or session fixture's cost falls on the first test that asks for it). The tiers are the
markers' (pyproject.toml): the fast tier is every test not marked `slow`; `slow` is whatever measured over
--slow-above seconds (tests/slow_tests.txt, written by --write-slow from a log of the whole suite, plus the
tests that carry @pytest.mark.slow themselves). The figures are this machine's at its load when measured:
compare only runs made at the same time.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW_LIST = ROOT / "tests" / "slow_tests.txt"
# "12.34s call     tests/e2e/test_resume.py::test_x[1]" (pytest's --durations lines)
DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S.*?)\s*$")
TIERS = {"fast": ["-m", "not slow"], "slow": ["-m", "slow"], "all": []}
WORKERS = ["-n", "2", "--dist", "loadfile"]  # as make test-fast runs them (tests/conftest.py: longest_files_first)


def read_durations(text: str) -> dict[str, float]:
    """Seconds per test node id (setup + call + teardown) from a pytest log made with --durations=0."""
    seconds: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if m := DURATION.match(line.strip()):
            seconds[m.group(3)] += float(m.group(1))
    return dict(seconds)


def function_of(node: str) -> str:
    """tests/x.py::test_y[a-b] -> tests/x.py::test_y (a parametrized test is marked as a whole)."""
    return node.split("[", 1)[0]


def collected(tier: str) -> set[str]:
    """The node ids a tier selects, from pytest's own collection (no test runs)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           *TIERS[tier]], capture_output=True, text=True, cwd=ROOT)
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def run_tier(tier: str, basetemp: str) -> tuple[str, float]:
    """Run one tier with --durations=0; its output and its wall seconds."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
           f"--basetemp={basetemp}", *WORKERS, *TIERS[tier]]
    print("running:", " ".join(cmd), flush=True)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - start
    lines = done.stdout.splitlines()
    summary = [line for line in lines if " passed" in line or " failed" in line]
    for line in [line for line in lines if line.startswith(("FAILED ", "ERROR "))] + summary[-1:]:
        print(line, flush=True)
    if not summary:
        print(done.stdout[-2000:], flush=True)
    return done.stdout, wall


def report(seconds: dict[str, float], fast: set[str] | None, top: int) -> None:
    by_file: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for node, s in seconds.items():
        by_file[node.split("::", 1)[0]] += s
        counts[node.split("::", 1)[0]] += 1
    total = sum(seconds.values())
    print(f"\n{len(seconds)} tests, {total:.0f} s of test time (setup + call + teardown)")
    if fast is not None:
        in_fast = sum(s for n, s in seconds.items() if n in fast)
        print(f"  fast tier (not slow): {in_fast:7.0f} s   {sum(n in fast for n in seconds)} tests")
        print(f"  slow tier:            {total - in_fast:7.0f} s   {sum(n not in fast for n in seconds)} tests")
    print(f"\nfiles, slowest first (top {top}):")
    for name, s in sorted(by_file.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {s:7.1f} s  {counts[name]:4d} tests  {name}")
    print(f"\ntests, slowest first (top {top}):")
    for node, s in sorted(seconds.items(), key=lambda kv: -kv[1])[:top]:
        tier = "" if fast is None else ("fast" if node in fast else "slow")
        print(f"  {s:7.1f} s  {tier:4}  {node}")


def write_slow(seconds: dict[str, float], above: float) -> None:
    """tests/slow_tests.txt: each test function with a case over `above` seconds, its slowest case's time; its
    comments and its "fixture NAME" lines (set by hand) are kept."""
    worst: dict[str, float] = defaultdict(float)
    for node, s in seconds.items():
        worst[function_of(node)] = max(worst[function_of(node)], s)
    slow = sorted(f for f, s in worst.items() if s > above)
    kept = [line for line in SLOW_LIST.read_text().splitlines() if line.startswith(("#", "fixture "))]
    SLOW_LIST.write_text("\n".join(kept) + "\n\n" + "".join(f"{f}  {worst[f]:.1f}\n" for f in slow))
    print(f"\nwrote {len(slow)} test functions over {above} s to {SLOW_LIST.relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="suite.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", choices=sorted(TIERS), default="fast", help="the tier to run (default fast)")
    parser.add_argument("--log", type=Path, help="read this pytest --durations=0 log instead of running a tier")
    parser.add_argument("--top", type=int, default=30, help="how many files and tests to list (default 30)")
    parser.add_argument("--write-slow", action="store_true",
                        help="rewrite tests/slow_tests.txt from the figures (a log of the whole suite)")
    parser.add_argument("--slow-above", type=float, default=1.5,
                        help="seconds over which a test is slow (default 1.5)")
    parser.add_argument("--basetemp", default="/tmp/rlvr-bench-suite", help="pytest's --basetemp for a run")
    args = parser.parse_args()
    if args.log:
        text, wall = args.log.read_text(), None
    else:
        text, wall = run_tier(args.tier, args.basetemp)
    seconds = read_durations(text)
    if not seconds:
        print("no --durations lines found: run pytest with --durations=0", file=sys.stderr)
        return 2
    report(seconds, collected("fast"), args.top)
    if wall is not None:
        print(f"\ntier {args.tier}: {wall:.0f} s wall clock ({wall / 60:.1f} min)")
    if args.write_slow:
        write_slow(seconds, args.slow_above)
    return 0


if __name__ == "__main__":
    sys.exit(main())
