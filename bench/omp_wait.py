"""The training update's forward + backward + AdamW step on SmolLM2-135M-Instruct under different OpenMP
wait settings, side by side: how long torch's OpenMP threads spin before they sleep between parallel regions.

    python bench/omp_wait.py [--rounds 3] [--reps 3] [--spins 0 300000 ...] [--threads 0]

The work is vs_trl's update at its shape: 2 prompts x 8 completions x 32 tokens (random token ids, prompts of
40 tokens), completion_logprobs with gradient, backward, one fused AdamW step. Each setting runs in a fresh
process (the OpenMP runtime reads its environment once, at load), `--reps` timed repetitions after one
untimed one; the settings take turns round after round, so a shared machine's load falls on each alike.
A spin count is GOMP_SPINCOUNT (libgomp, torch's OpenMP on Linux; libgomp reckons about 100000 spins a
millisecond): 0 is what OMP_WAIT_POLICY=PASSIVE alone gives (sleep at once), 300000 libgomp's default when
no policy is set (about 3 ms: rlvr's on a machine that is not busy, rlvr/__init__.py), 30000 in between.
The load average at each run's start is printed beside its figures: spinning costs only when other work
holds the cores, so only settings measured at the same time compare.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(reps: int, threads: int) -> None:
    import torch

    from rlvr.models import load_model
    from rlvr.train.forward import completion_logprobs

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    model, tok = load_model("smollm2-135m-instruct")
    model.train()
    vocab = model.config.vocab_size
    prompts = [torch.randint(100, vocab, (40,)).tolist() for _ in range(2)]
    ids = torch.randint(100, vocab, (16, 32))
    lengths = torch.randint(8, 33, (16,))
    mask = (torch.arange(32)[None, :] < lengths[:, None]).float()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-7, fused=True)
    times = []
    for k in range(reps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        (completion_logprobs(model, prompts, ids, mask, 8, tok.pad_token_id) * mask).sum().backward()
        opt.step()
        if k:
            times.append(time.perf_counter() - t0)
    print("RESULT " + json.dumps(times), flush=True)


def run(spin: int, reps: int, threads: int) -> list[float]:
    # a spin count wins over the wait policy in libgomp; set either way, so rlvr's own default stays out
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": str(spin)}
    out = subprocess.run([sys.executable, __file__, "--child", "--reps", str(reps), "--threads", str(threads)],
                         env=env, capture_output=True, text=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not line:
        sys.stderr.write(out.stderr[-3000:])
        raise SystemExit(f"the child with spin count {spin} failed")
    return json.loads(line[-1].removeprefix("RESULT "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--spins", type=int, nargs="+", default=[30000, 0, 300000])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args.reps, args.threads)
        return
    print(f"update forward+backward+AdamW, smollm2-135m, 2 x 8 x 32 tokens; {os.cpu_count()} CPUs")
    seen: dict[int, list[float]] = {s: [] for s in args.spins}
    for r in range(args.rounds):
        order = args.spins if r % 2 == 0 else args.spins[::-1]
        for spin in order:
            load = os.getloadavg()[0]
            times = run(spin, args.reps, args.threads)
            seen[spin] += times
            print(f"  round {r} spin {spin:>8}: " + ", ".join(f"{t:.2f}" for t in times)
                  + f" s   (load average {load:.1f} at start)", flush=True)
    first = args.spins[0]
    for spin in args.spins:
        m = statistics.median(seen[spin])
        print(f"spin {spin:>8}: median {m:.2f} s, {m / statistics.median(seen[first]):.3f}x spin {first}'s")


if __name__ == "__main__":
    main()
