"""How rlvr's step time grows with the group size and with the completion length.

    python bench/scaling.py [--steps 3] [--warmup 1] [--prompts 2] [--group-sizes 4 8 16] [--lengths 32 64 128]
                            [--threads 1]

Each setting is one short run of rlvr.train.grpo.train on SmolLM2-135M-Instruct (rlvr's default
arithmetic task, temperature 1, correctness reward, no evaluation); the medians of the steps after
the warm-up are reported. Group sizes are run at the first length, lengths at G=8 (or the middle group
size). The model may stop before max_new_tokens, so the table gives the tokens actually generated and
the time per generated token beside the step time; ratios are to the first row of each table.
--threads (train.threads) defaults to 1: on a 2-core machine shared with other jobs two OpenMP threads
ran every op about 15x slower than one; 0 keeps torch's default, for a quiet machine.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import tempfile
from pathlib import Path

from rlvr.config import build_config
from rlvr.train.grpo import train

MODEL = "smollm2-135m-instruct"


def measure(args, group_size: int, max_new_tokens: int) -> dict[str, float]:
    """Median step, rollout and update seconds and mean generated tokens of one short run."""
    with tempfile.TemporaryDirectory() as out:
        cfg = build_config(None, [
            f"--model.name={MODEL}", f"--rollout.prompts_per_step={args.prompts}",
            f"--rollout.group_size={group_size}", f"--rollout.max_new_tokens={max_new_tokens}",
            "--rollout.temperature=1.0", "--rewards.weights={correctness: 1.0}", "--eval.before=false",
            "--eval.after=false", f"--train.steps={args.warmup + args.steps}", "--train.samples_every=0",
            f"--train.seed={args.seed}", f"--train.threads={args.threads}", f"--train.out={out}"])
        with contextlib.redirect_stdout(io.StringIO()):  # the run's own console summary
            train(cfg)
        rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    rows = rows[args.warmup:]
    med = lambda key: statistics.median(r[key] for r in rows)
    tokens = statistics.fmean(r["tokens/generated"] for r in rows)
    return {"step_s": med("time/step_s"), "rollout_s": med("time/rollout_s"), "train_s": med("time/train_s"),
            "tokens": tokens, "truncated": statistics.fmean(r["completion/truncated_frac"] for r in rows)}


def print_table(title: str, label: str, settings: list[tuple[int, int]], key: int, results: dict) -> None:
    print(f"\n{title}")
    print(f"  {label:>5}{'step s':>9}{'rollout s':>11}{'update s':>10}{'tokens':>8}{'trunc':>7}"
          f"{'ms/token':>10}{'step x':>8}{'ms/token x':>12}")
    first = results[settings[0]]
    first_per_token = first["step_s"] / first["tokens"]
    for s in settings:
        r = results[s]
        per_token = r["step_s"] / r["tokens"]
        print(f"  {s[key]:>5}{r['step_s']:>9.2f}{r['rollout_s']:>11.2f}{r['train_s']:>10.2f}{r['tokens']:>8.0f}"
              f"{100 * r['truncated']:>6.0f}%{1000 * per_token:>10.1f}{r['step_s'] / first['step_s']:>8.2f}"
              f"{per_token / first_per_token:>12.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3, help="timed steps per setting")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--prompts", type=int, default=2, help="prompts per step")
    p.add_argument("--group-sizes", type=int, nargs="+", default=[4, 8, 16])
    p.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128], help="max new tokens settings")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="train.threads; 0 keeps torch's default")
    args = p.parse_args()
    g_fixed = 8 if 8 in args.group_sizes else args.group_sizes[len(args.group_sizes) // 2]
    by_group = [(g, args.lengths[0]) for g in args.group_sizes]
    by_length = [(g_fixed, n) for n in args.lengths]
    results = {}
    for setting in dict.fromkeys(by_group + by_length):  # each distinct setting once, in order
        results[setting] = measure(args, *setting)
        print(f"measured G={setting[0]}, max {setting[1]} new tokens", flush=True)
    print(f"\nrlvr step time, {MODEL}, {args.prompts} prompts per step, {args.threads or 'default'} torch threads, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, {args.warmup} warm-up + {args.steps} "
          "timed steps (medians; tokens = generated tokens per step, mean; trunc = completions cut at the limit)")
    print_table(f"by group size (max {args.lengths[0]} new tokens):", "G", by_group, 0, results)
    print_table(f"by max new tokens (G={g_fixed}):", "max", by_length, 1, results)


if __name__ == "__main__":
    main()
