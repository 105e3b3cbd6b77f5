"""rlvr plan against the measured peak of each phase, on the CPU at small shapes.

    python bench/plan_check.py [--only NAME] [--steps 2] [--shape 4x8x48]

Each configuration runs in a fresh interpreter: a random-weight model of SmolLM2-135M's shape (rlvr/shapes/
smollm2-135m.json, with SmolLM2's tokenizer: random weights almost never draw the stop token, so every
completion is full length, as the plan assumes) is trained `--steps` GRPO steps through rlvr's own loop on
bench/same_work.py's prompts. What is measured is the process's resident set (the memory/rollout_peak_gib
and memory/update_peak_gib metrics: VmHWM, reset at each phase's start) less what it held before the model
was loaded (Python and the libraries a run imports, peft and torchao included: VmRSS then), read at the last
step, when the optimizer state exists. glibc's mmap threshold is fixed (MALLOC_MMAP_THRESHOLD_), so every tensor of 128 KiB or more
is its own mapping, handed back when freed: without it glibc raises the threshold after the first large free
and keeps later tensors' memory in its heap, so a phase's peak would include the phase before it.
--shape PxGxT sets the work (default 4x8x48); tests/test_plan.py runs each configuration at a smaller one.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
# name: rlvr overrides (on top of the shared work's), chosen so tensors dominate the process's own memory
CONFIGS = {
    "full-fp32": [],
    "full-ckpt": ["--train.gradient_checkpointing=true"],
    "lora16": ["--model.lora.r=16"],
    "nf4-lora16": ["--model.lora.r=16", "--model.quantize=nf4"],
}
SHAPE = (4, 8, 48)  # prompts x group x new tokens
MMAP_THRESHOLD = 131072


def parse_shape(text: str) -> tuple[int, int, int]:
    """'4x8x48' -> (4, 8, 48)."""
    p, g, t = map(int, text.lower().split("x"))
    return p, g, t


def resident_gib(field: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":")) / 2**20


def random_model(work: Path) -> Path:
    """SmolLM2-135M's shape with random weights (seed 0), saved in fp32 with SmolLM2's tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

    from rlvr.models import prepare_smollm2
    from rlvr.plan import SHAPES

    target = work / "model"
    if (target / "config.json").is_file():
        return target
    config = LlamaConfig(**json.loads((SHAPES / "smollm2-135m.json").read_text()))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(target)
    AutoTokenizer.from_pretrained(prepare_smollm2()).save_pretrained(target)
    return target


def measure(name: str, steps: int, work: Path, shape: tuple[int, int, int] = SHAPE) -> dict:
    """One configuration in this (fresh) process: the plan and the measured peaks of the last step."""
    from rlvr.config import build_config
    from rlvr.plan import GIB, PlanSettings, estimate, shape_of
    from rlvr.train.step import collect, train_step
    from rlvr.train.assemble import setup
    from rlvr.train.overlap import Rollouts
    from same_work import rlvr_overrides, write_prompts

    model = random_model(work)
    write_prompts(work / "sums.jsonl", "sums", 0)
    p, g, t = shape
    cfg = build_config(None, [*rlvr_overrides(work / "sums.jsonl", str(model), p, g, t, 1e-5, steps, 0,
                                              work / f"run-{name}"), "--train.device=cpu", "--train.threads=1",
                              "--train.save_every=0", "--train.overwrite=true", *CONFIGS[name]])
    import peft  # noqa: F401 (the libraries a run imports belong to the baseline, LoRA's and torchao's too)
    import torchao  # noqa: F401

    before = resident_gib("VmRSS")
    run = setup(cfg)
    run.models.policy.train()  # as the loop does (gradient checkpointing acts in training mode only)
    with Rollouts(lambda step: collect(run, step), run.engine, run.models.policy, one_step_off=False) as rollouts:
        for step in range(1, steps + 1):
            m, collected = train_step(run, step, rollouts)
    prompt_tokens = max(len(q) for q in collected.rollout.prompt_ids)
    plan = estimate(shape_of(str(model)), PlanSettings.of(cfg, "cpu", "float32", prompt_tokens))
    return {"name": name, "baseline_gib": before, "prompt_tokens": prompt_tokens,
            "completion_tokens": m["completion/length_mean"],
            "measured": {"rollout": m["memory/rollout_peak_gib"] - before, "update": m["memory/update_peak_gib"] - before},
            "plan": {"rollout": sum(plan.rollout.values()) / GIB, "update": sum(plan.update.values()) / GIB},
            "components": {"rollout": {k: v / GIB for k, v in plan.rollout.items()},
                           "update": {k: v / GIB for k, v in plan.update.items()}}}


def run_fresh(name: str, steps: int, work: Path, shape: tuple[int, int, int] = SHAPE) -> dict:
    """measure() in a fresh interpreter with the fixed mmap threshold."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD),
           "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, __file__, "--one", name, "--steps", str(steps), "--work", str(work),
                           "--shape", "x".join(map(str, shape))],
                          env=env, capture_output=True, text=True, cwd=ROOT)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(lines[-1].removeprefix("RESULT "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=list(CONFIGS), help="one configuration")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--shape", type=parse_shape, default=SHAPE, help="prompts x group x new tokens (default 4x8x48)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure(args.one, args.steps, args.work, args.shape)), flush=True)
        return
    with tempfile.TemporaryDirectory(prefix="plancheck-") as work:  # a random model and runs: ~0.5 GiB
        report(args, Path(work))


def report(args, work: Path) -> None:
    p, g, t = args.shape
    print(f"SmolLM2-135M shape, random weights, fp32 on the CPU, {p}x{g}x{t}, {args.steps} steps (the last read); "
          f"GiB over the process before its model loaded")
    print(f"{'config':<12}{'phase':<9}{'plan':>8}{'measured':>10}{'plan/measured':>15}   plan by component")
    for name in [args.only] if args.only else CONFIGS:
        r = run_fresh(name, args.steps, work, args.shape)
        for phase in ("rollout", "update"):
            plan, measured = r["plan"][phase], r["measured"][phase]
            parts = ", ".join(f"{k} {v:.3f}" for k, v in r["components"][phase].items() if v > 0.0005)
            print(f"{name:<12}{phase:<9}{plan:>8.3f}{measured:>10.3f}{plan / measured:>15.2f}   {parts}")
        print(f"{'':<12}(prompts {r['prompt_tokens']} tokens, completions {r['completion_tokens']:.1f} tokens on "
              f"average, baseline {r['baseline_gib']:.2f} GiB)")


if __name__ == "__main__":
    main()
