"""What one hostile program costs the batch it is scored in: a batch of honest programs alone, then the same
batch with one hostile program among them, through the real code reward (bubblewrap, the judge workers).
The honest programs must all still pass, and the batch should take about the hostile program's time limit
longer at most, whatever the attack.

    python bench/code_attacks.py [--limit-s 1.0]

The spinning attacks are the ones the load-free clock (rlvr.sandbox.clock) once let run to its wall
backstop, 10 x the limit, with every core busy: their run-queue delay was counted as the machine's load.
"""
from __future__ import annotations

import argparse
import os
import textwrap
import time

from rlvr.rewards.code import make_code_tests
from rlvr.rewards.workers import owned_by_run

SPEC = {"kind": "assert", "asserts": ["assert f(1, 2) == 3"], "hidden": ["assert f(10, 20) == 30"]}
HONEST = "def f(a, b):\n    return a + b"
HOSTILE = {
    "busy loop": "def f(a, b):\n    while True: pass",
    "sleep": "import time\ndef f(a, b):\n    time.sleep(100)",
    "8 spinning processes": """
        import os
        def f(a, b):
            for _ in range(8):
                if os.fork() == 0:
                    break
            while True: pass""",
    "short-lived spinners": """
        import os, time
        def f(a, b):
            for _ in range(2):
                if os.fork() == 0:
                    while True: pass
            while True:
                try:
                    if os.fork() == 0:
                        t = time.monotonic()
                        while time.monotonic() - t < 0.01: pass
                        os._exit(0)
                    os.wait()
                except OSError:
                    pass""",
    "fork bomb": """
        import os
        def f(a, b):
            while True:
                try: os.fork()
                except OSError: pass""",
    "memory bomb": "def f(a, b):\n    x = bytearray(8 << 30)\n    return a + b",
    "4 MiB reply": "def f(a, b):\n    return 'x' * (4 << 20)",
}
BATCH = 8


def block(src: str) -> str:
    return "```python\n" + textwrap.dedent(src).strip() + "\n```"


def timed(reward, programs: list[str]) -> tuple[list, float]:
    t = time.perf_counter()
    verdicts = reward.verdicts([block(p) for p in programs], tests=[SPEC] * len(programs))
    return verdicts, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit-s", type=float, default=1.0, help="each program's time limit (rewards.timeout_s)")
    limit = ap.parse_args().limit_s
    reward = make_code_tests(timeout_s=limit)
    print(f"limit {limit:.1f} s per program, batch of {BATCH}, cpus {len(os.sched_getaffinity(0))}, "
          f"load average {os.getloadavg()[0]:.1f} at the start")
    with owned_by_run():
        timed(reward, [HONEST] * BATCH)   # start the judge workers outside the timing
        _, alone = timed(reward, [HONEST] * BATCH)
        print(f"{'honest batch alone':24} {alone:6.2f} s")
        for name, src in HOSTILE.items():
            verdicts, took = timed(reward, [src] + [HONEST] * (BATCH - 1))
            honest = sum(v.score == 1.0 for v in verdicts[1:])
            print(f"{name:24} {took:6.2f} s   (+{took - alone:5.2f} s; hostile: {verdicts[0].score:.0f}, "
                  f"{verdicts[0].reason!r}; honest passed {honest}/{BATCH - 1})")


if __name__ == "__main__":
    main()
