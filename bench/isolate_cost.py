"""The per-call cost of rewards.isolate (a user reward in a worker process) against the default (a thread in
the trainer), on one trivial TRL-style reward scoring a step's 64 completions: prints each mode's time per
score_batch call and their ratio, measured in this one process (timings here are relative, the machine
shared). Usage: python bench/isolate_cost.py [CALLS]"""
import sys
import tempfile
import time
from pathlib import Path

from rlvr.rewards import build_rewards, score_batch
from rlvr.rewards.workers import owned_by_run

CALLS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
N = 64  # completions a step scores: 8 prompts x 8


def per_call(isolate: bool, module: str) -> float:
    functions = build_rewards({f"{module}:exact": 1.0}, timeout_s=300.0, isolate=isolate)
    completions = [f"the answer is {i}" for i in range(N)]
    columns = {"answer": [str(i) for i in range(N)]}
    score_batch(functions, completions, columns)  # the worker's start is a run's, not a call's
    t0 = time.perf_counter()
    for _ in range(CALLS):
        score_batch(functions, completions, columns)
    return (time.perf_counter() - t0) / CALLS


with tempfile.TemporaryDirectory() as d, owned_by_run():
    (Path(d) / "bench_reward.py").write_text(
        "def exact(completions, answer, **kw):\n    return [float(c.endswith(a)) for c, a in zip(completions, answer)]\n")
    sys.path.insert(0, d)
    thread = per_call(False, "bench_reward")
    isolated = per_call(True, "bench_reward")
    thread_again = per_call(False, "bench_reward")  # the same again: how much the machine moved meanwhile
print(f"thread: {thread * 1e3:.3f} ms a call ({thread_again * 1e3:.3f} ms again), isolated: {isolated * 1e3:.3f} ms "
      f"a call; ratio isolated/thread {isolated / min(thread, thread_again):.1f}x, "
      f"+{(isolated - min(thread, thread_again)) * 1e3:.3f} ms a call")
