"""Rollout speed: the built-in engine against plain Hugging Face generate (rollout.engine=hf) on the
demo's batch, bf16 against fp32 for the built-in engine (speed and agreement), and torch.compile.

    python bench/rollout.py [--repeats 2] [--lengths 24 64] [--threads 1] [--no-bf16] [--compile-timeout 180]

The batch is the demo's: 8 arithmetic prompts x G=8 at temperature 1 (configs/arithmetic.yaml). Each
engine is warmed up once, then the engines alternate `repeats` times so that machine noise falls on
both alike; tokens/s counts generated tokens (stop token included, padding not). The engines sample
different completions, so their token counts differ; tokens/s is the comparable figure.
torch.compile runs in a child process under a time limit, since on a CPU its warm-up can take minutes.
--threads defaults to 1: on a 2-core machine shared with other jobs, two OpenMP threads that wait on
each other ran every op about 15x slower than one thread; 0 keeps torch's default (on a quiet machine).

Target: built-in >= 4x generate's tokens/s.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

from common import ROOT, task_prompts  # bench/common.py
from rlvr.config import build_config
from rlvr.models import load_model, stop_token_ids
from rlvr.rollout import builtin, hf_engine
from rlvr.train.forward import completion_logprobs

TARGET = 4.0


def demo_batch(tok, n_prompts: int) -> tuple[list[list[int]], int, float]:
    """The demo's first `n_prompts` training prompts, its group size and temperature."""
    cfg = build_config(ROOT / "configs" / "arithmetic.yaml")
    return task_prompts(tok, cfg, n_prompts), cfg.rollout.group_size, cfg.rollout.temperature


def timed(fn, model, prompts, gen: torch.Generator, **kw) -> tuple[float, int]:
    t = time.perf_counter()
    r = fn(model, prompts, generator=gen, **kw)
    return time.perf_counter() - t, int(r.completion_mask.sum())


def race(runners: dict[str, tuple], prompts, repeats: int, seed: int, **kw) -> dict[str, tuple[float, int]]:
    """runners: name -> (generate function, model). One warm-up each, then `repeats` interleaved
    rounds; returns name -> (seconds, generated tokens) summed over the rounds."""
    gens = {name: torch.Generator().manual_seed(seed) for name in runners}
    for name, (fn, model) in runners.items():
        timed(fn, model, prompts, gens[name], **kw)
    totals = {name: [0.0, 0] for name in runners}
    for _ in range(repeats):
        for name, (fn, model) in runners.items():
            s, n = timed(fn, model, prompts, gens[name], **kw)
            totals[name][0] += s
            totals[name][1] += n
    return {name: (s, n) for name, (s, n) in totals.items()}


def print_race(title: str, result: dict[str, tuple[float, int]], num: str, den: str, target: float | None):
    print(title)
    print(f"  {'engine':<14}{'tokens':>8}{'seconds':>10}{'tokens/s':>11}")
    for name, (s, n) in result.items():
        print(f"  {name:<14}{n:>8}{s:>10.2f}{n / s:>11.1f}")
    ratio = (result[num][1] / result[num][0]) / (result[den][1] / result[den][0])
    verdict = "" if target is None else f" (target >= {target:g}x: {'met' if ratio >= target else 'NOT met'})"
    print(f"  {num} / {den} tokens/s: {ratio:.2f}x{verdict}")
    return ratio


def bf16_agreement(fp32, bf16, prompts, max_new_tokens: int, stop_ids, pad_id) -> dict:
    """Greedy completions of each prompt in both dtypes: the fraction of fp32 token positions where
    bf16 chose the same token, the fraction of rows identical, and |log p| differences of the fp32
    completions scored (teacher-forced) by both models."""
    kw = dict(group_size=1, max_new_tokens=max_new_tokens, temperature=0.0, stop_ids=stop_ids, pad_id=pad_id)
    a, b = builtin.generate(fp32, prompts, **kw), builtin.generate(bf16, prompts, **kw)
    rows_a, rows_b = a.completion_token_lists(), b.completion_token_lists()
    same = sum(x == y for ra, rb in zip(rows_a, rows_b) for x, y in zip(ra, rb))
    with torch.no_grad():
        lp32 = completion_logprobs(fp32, a.prompt_ids, a.completion_ids, a.completion_mask, 1, pad_id)
        lp16 = completion_logprobs(bf16, a.prompt_ids, a.completion_ids, a.completion_mask, 1, pad_id)
    diff = (lp32 - lp16).abs()[a.completion_mask.bool()]
    return {"tokens": sum(map(len, rows_a)), "same_token_frac": same / sum(map(len, rows_a)),
            "same_row_frac": sum(ra == rb for ra, rb in zip(rows_a, rows_b)) / len(rows_a),
            "max_abs_logp_diff": float(diff.max()), "mean_abs_logp_diff": float(diff.mean())}


def compile_child(args) -> None:
    """Run in a child process: eager against torch.compile'd, built-in engine; prints one JSON line."""
    model, tok = load_model("smollm2-135m-instruct")
    model.eval()
    prompts, g, temp = demo_batch(tok, args.prompts)
    kw = dict(group_size=g, max_new_tokens=args.lengths[0], temperature=temp,
              stop_ids=stop_token_ids(model, tok), pad_id=tok.pad_token_id)
    compiled = torch.compile(model, dynamic=True)
    t = time.perf_counter()
    timed(builtin.generate, compiled, prompts, torch.Generator().manual_seed(0), **kw)
    warmup = time.perf_counter() - t
    result = race({"eager": (builtin.generate, model), "compiled": (builtin.generate, compiled)}, prompts,
                  args.repeats, args.seed, **kw)
    print(json.dumps({"warmup_s": warmup, "race": result}))


def run_compile(args) -> None:
    cmd = [sys.executable, __file__, "--compile-child", "--repeats", str(args.repeats), "--seed", str(args.seed),
           "--threads", str(args.threads), "--prompts", str(args.prompts), "--lengths", str(args.lengths[0])]
    print(f"\ntorch.compile (built-in engine, dynamic=True, {args.lengths[0]} new tokens), "
          f"limit {args.compile_timeout} s:")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.compile_timeout)
    except subprocess.TimeoutExpired:
        print(f"  did not finish within {args.compile_timeout} s (compile warm-up plus the race): too slow "
              "to be worth it for runs of this size on this CPU")
        return
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        print("  failed: " + " | ".join(tail))
        return
    out = json.loads(lines[-1])
    print(f"  first call (compiling): {out['warmup_s']:.1f} s")
    print_race("  after warm-up:", {k: tuple(v) for k, v in out["race"].items()}, "compiled", "eager", None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=2, help="timed rounds per setting after the warm-up")
    p.add_argument("--lengths", type=int, nargs="+", default=[24, 64], help="max new tokens settings")
    p.add_argument("--prompts", type=int, default=8, help="prompts per batch (the demo's 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads; 0 keeps torch's default")
    p.add_argument("--no-bf16", action="store_true", help="skip the bf16 comparison")
    p.add_argument("--compile-timeout", type=int, default=180, help="seconds for the torch.compile child; 0 skips it")
    p.add_argument("--compile-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.compile_child:
        return compile_child(args)

    model, tok = load_model("smollm2-135m-instruct")
    model.eval()
    prompts, g, temp = demo_batch(tok, args.prompts)
    stop_ids, pad_id = stop_token_ids(model, tok), tok.pad_token_id
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores; smollm2-135m-instruct; "
          f"{len(prompts)} demo prompts x G={g}, temperature {temp}; {args.repeats} rounds after a warm-up")
    for n in args.lengths:
        result = race({"builtin": (builtin.generate, model), "hf generate": (hf_engine.hf_generate, model)}, prompts,
                      args.repeats, args.seed, group_size=g, max_new_tokens=n, temperature=temp,
                      stop_ids=stop_ids, pad_id=pad_id)
        print_race(f"\nbuilt-in engine vs HF generate, max {n} new tokens:", result, "builtin", "hf generate", TARGET)

    if not args.no_bf16:
        bf16, _ = load_model("smollm2-135m-instruct", "bfloat16")
        bf16.eval()
        n = args.lengths[0]
        result = race({"fp32": (builtin.generate, model), "bf16": (builtin.generate, bf16)}, prompts, args.repeats,
                      args.seed, group_size=g, max_new_tokens=n, temperature=temp, stop_ids=stop_ids, pad_id=pad_id)
        print_race(f"\nbuilt-in engine, bf16 vs fp32 weights, max {n} new tokens:", result, "bf16", "fp32", None)
        n = max(args.lengths)
        acc = bf16_agreement(model, bf16, prompts, n, stop_ids, pad_id)
        print(f"  greedy agreement, {len(prompts)} prompts x max {n} tokens ({acc['tokens']} fp32 tokens): "
              f"{100 * acc['same_token_frac']:.1f}% of token positions, {100 * acc['same_row_frac']:.0f}% of rows "
              f"identical")
        print(f"  |log p bf16 - log p fp32| on the fp32 greedy tokens: max {acc['max_abs_logp_diff']:.4f}, "
              f"mean {acc['mean_abs_logp_diff']:.4f}")
    if args.compile_timeout > 0:
        run_compile(args)


if __name__ == "__main__":
    main()
