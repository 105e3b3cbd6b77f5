"""`rlvr eval` wall time on a 6-problem file, with torch's OpenMP threads waiting actively (spinning,
ACTIVE, without bound) and passively (PASSIVE: what rlvr sets on a busy machine unless OMP_WAIT_POLICY
is given; rlvr/__init__.py).

    python bench/eval_threads.py [--model smollm2-135m-instruct] [--repeats 1] [--policies ACTIVE PASSIVE]

Each run is a fresh `python -m rlvr eval` process (greedy pass@1 and 4 samples per problem, 24 new tokens)
on six GSM8K-style problems; the figure is its wall time, model load included. The machine's load average
is printed beside it: spinning hurts when other processes hold the cores, so figures from a busy machine
and an idle one differ, and only runs on the same machine at the same time compare.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HELDOUT = [("Tom has 3 apples and buys 5 more. How many apples?", 8), ("A box holds 4 rows of 6 eggs. How many eggs?", 24),
           ("Sam reads 10 pages a day for 3 days. How many pages?", 30), ("3 friends each eat 2 slices. How many slices?", 6),
           ("Lia had 20 dollars and spent 7. How much is left?", 13), ("A car goes 60 km an hour for 2 hours. How far?", 120)]


def write_files(folder: Path) -> tuple[Path, Path]:
    train, heldout = folder / "train.jsonl", folder / "heldout.jsonl"
    train.write_text("".join(json.dumps({"question": f"Ann has {i + 2} pens and gets {i + 3} more. How many pens?",
                                         "answer": f"#### {2 * i + 5}"}) + "\n" for i in range(6)))
    heldout.write_text("".join(json.dumps({"question": q, "answer": f"#### {a}"}) + "\n" for q, a in HELDOUT))
    return train, heldout


def one_run(model: str, policy: str, train: Path, heldout: Path, out: Path) -> float:
    env = {**os.environ, "OMP_WAIT_POLICY": policy, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "rlvr", "eval", "--model", model, f"--task.name={train}",
           f"--task.heldout_file={heldout}", "--task.columns.prompt=question", "--task.few_shot=0", "--out", str(out)]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--policies", nargs="+", default=["ACTIVE", "PASSIVE"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        train, heldout = write_files(Path(tmp))
        print(f"rlvr eval, 6 problems, model {args.model}, {os.cpu_count()} CPUs")
        for r in range(args.repeats):
            for policy in args.policies:
                load = os.getloadavg()[0]
                seconds = one_run(args.model, policy, train, heldout, Path(tmp) / "out")
                print(f"  OMP_WAIT_POLICY={policy:8} {seconds:7.1f} s   (load average {load:.1f} at start)", flush=True)


if __name__ == "__main__":
    main()
