"""The LM head + log-prob (+ entropy) forward and backward: the fused, chunked autograd function
(rlvr.train.head.FusedHeadLogprob, train.lm_head=fused) against the chunked path it replaces (chunked),
time and peak memory on the CPU.

    python bench/lm_head.py [--shapes demo large] [--reps 3] [--rounds 2]

Shapes (N tokens scored, hidden H, vocabulary V):
  demo   N=400 (2 prompts x 8 x ~25 tokens), H=576, V=49152: SmolLM2-135M's head at vs_trl's / the demo's work
  large  N=1024, H=2048, V=151936: Qwen3-1.7B's head at 4 x 8 x 32 completion tokens
Random weights and hidden states (fp32, as the CPU trains), entropy as a metric (no entropy bonus), the
gradient of a random weighting of the log-probs. Each (shape, path) runs in a fresh process: the time is the
median of --reps forward + backward passes after one untimed one; the peak is the process's peak resident
set (VmHWM, reset just before the timed passes) minus its resident set at that point, so it counts what the
passes allocate beyond the inputs and weights. Paths alternate round after round; on a shared machine
compare within a round.
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
SHAPES = {"demo": (400, 576, 49152), "large": (1024, 2048, 151936)}


def rss_gib(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field)) / 2**20


def child(shape: str, path: str, reps: int) -> None:
    import torch

    from rlvr.device import reset_peak_memory
    from rlvr.train.head import token_logprobs

    n, h, v = SHAPES[shape]
    torch.manual_seed(0)
    head = torch.nn.Linear(h, v, bias=False)
    hidden = torch.randn(n, h, requires_grad=True)
    tokens = torch.randint(0, v, (n,))
    weight = torch.randn(n)

    def once() -> None:
        head.weight.grad = hidden.grad = None
        logp, _ = token_logprobs(hidden, head, tokens, with_entropy=True, fused=path == "fused")
        (logp * weight).sum().backward()

    once()
    head.weight.grad = hidden.grad = None
    base = rss_gib("VmRSS:")
    reset_peak_memory(torch.device("cpu"))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        once()
        times.append(time.perf_counter() - t0)
    print("RESULT " + json.dumps({"times": times, "peak_gib": rss_gib("VmHWM:") - base}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", nargs=2, metavar=("SHAPE", "PATH"))
    args = ap.parse_args()
    if args.child:
        child(*args.child, args.reps)
        return
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    print(f"LM head + log-prob + entropy, forward + backward, fp32 on the CPU ({os.cpu_count()} cores)")
    for shape in args.shapes:
        seen = {"chunked": [], "fused": []}
        for r in range(args.rounds):
            for path in (("chunked", "fused") if r % 2 == 0 else ("fused", "chunked")):
                load = os.getloadavg()[0]
                out = subprocess.run([sys.executable, __file__, "--child", shape, path, "--reps", str(args.reps)],
                                     env=env, capture_output=True, text=True)
                line = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
                if out.returncode or not line:
                    sys.stderr.write(out.stderr[-3000:])
                    raise SystemExit(f"{shape} {path} failed")
                res = json.loads(line[-1].removeprefix("RESULT "))
                seen[path].append(res)
                print(f"  {shape} (N, H, V = {SHAPES[shape]}) round {r} {path:8}: "
                      + ", ".join(f"{t:.3f}" for t in res["times"])
                      + f" s; peak {res['peak_gib']:.3f} GiB above the inputs (load average {load:.1f})", flush=True)
        med = {p: statistics.median(t for x in seen[p] for t in x["times"]) for p in seen}
        peak = {p: max(x["peak_gib"] for x in seen[p]) for p in seen}
        print(f"{shape}: median s chunked {med['chunked']:.3f}, fused {med['fused']:.3f} "
              f"({med['fused'] / med['chunked']:.3f}x); peak GiB chunked {peak['chunked']:.3f}, fused "
              f"{peak['fused']:.3f} ({peak['fused'] / max(peak['chunked'], 1e-9):.3f}x)")


if __name__ == "__main__":
    main()
