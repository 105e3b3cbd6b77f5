"""rlvr against TRL's GRPOTrainer: step time, generated tokens/s and peak memory on the same work.

    python bench/vs_trl.py [--steps 4] [--warmup 1] [--prompts 2] [--group-size 8] [--max-new-tokens 32]
                           [--threads 1] [--trl-defaults] [--trl-first]

Both frameworks train SmolLM2-135M-Instruct on the same arithmetic prompts (rlvr's default task,
rendered with the same chat template), 2 prompts x 8 completions per step, at most 32 new tokens at
temperature 1, the same learning rate, beta 0 (no reference model), one update per batch, the same
correctness reward (rlvr.rewards.math_accuracy, which has TRL's signature) and fp32 weights without
gradient checkpointing; TRL's loss_type is "grpo", the aggregation of rlvr's grpo preset. With
--trl-defaults TRL keeps its own defaults for bf16 autocast and gradient checkpointing instead.

Each framework runs in its own child process, one after the other, so each one's peak resident memory
(VmHWM) is its own; the first `warmup` steps are not timed. rlvr's step time is read from
metrics.jsonl (time/step_s), TRL's from a TrainerCallback (on_step_begin to on_step_end).
Both use --threads torch threads (default 1: on a 2-core machine shared with other jobs two OpenMP
threads ran every op about 15x slower than one; 0 keeps torch's default, for a quiet machine).
Targets: rlvr step time <= 0.25 x TRL's; rlvr peak memory no higher than TRL's.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODEL = "smollm2-135m-instruct"
STEP_TARGET = 0.25


def memory() -> dict[str, float]:
    """VmHWM (peak resident) and VmRSS of this process, MiB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def rlvr_child(args) -> dict:
    from rlvr.config import build_config
    from rlvr.train.grpo import train

    base = memory()["VmRSS"]
    with tempfile.TemporaryDirectory() as out:
        cfg = build_config(None, [
            f"--model.name={MODEL}", f"--rollout.prompts_per_step={args.prompts}",
            f"--rollout.group_size={args.group_size}", f"--rollout.max_new_tokens={args.max_new_tokens}",
            "--rollout.temperature=1.0", f"--algo.lr={args.lr}", "--algo.beta=0.0", "--algo.warmup_steps=0",
            "--rewards.weights={correctness: 1.0}", "--eval.before=false", "--eval.after=false",
            f"--train.steps={args.warmup + args.steps}", "--train.samples_every=0", f"--train.seed={args.seed}",
            f"--train.threads={args.threads}", f"--train.out={out}"])
        train(cfg)
        rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    rows = rows[args.warmup:]
    return {"step_s": [r["time/step_s"] for r in rows], "rollout_s": [r["time/rollout_s"] for r in rows],
            "train_s": [r["time/train_s"] for r in rows], "tokens": [r["tokens/generated"] for r in rows],
            "base_rss_mib": base, **memory()}


def trl_dataset(args):
    from datasets import Dataset

    from rlvr.config import build_config
    from rlvr.tasks import build_splits, chat_messages

    cfg = build_config(None, [])
    splits = build_splits(cfg.task)
    return Dataset.from_list([{"prompt": chat_messages(p.question, splits.few_shot, cfg.task.system_prompt),
                               "answer": p.answer} for p in splits.train])


def trl_child(args) -> dict:
    import torch
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.models import load_model
    from rlvr.rewards import math_accuracy

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    base = memory()["VmRSS"]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.started, self.step_s, self.tokens = 0.0, [], []

        def on_step_begin(self, a, state, control, **kw):
            self.started = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            self.step_s.append(time.perf_counter() - self.started)

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.tokens.append(round(logs["completions/mean_length"] * args.prompts * args.group_size))

    model, tok = load_model(MODEL)
    generate_s = []
    plain_generate = model.generate

    def timed_generate(*a, **kw):  # TRL calls the unwrapped model's generate once per step here
        t = time.perf_counter()
        out = plain_generate(*a, **kw)
        generate_s.append(time.perf_counter() - t)
        return out

    model.generate = timed_generate
    precision = {} if args.trl_defaults else {"bf16": False, "gradient_checkpointing": False}
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, per_device_train_batch_size=args.prompts * args.group_size,
            num_generations=args.group_size, gradient_accumulation_steps=1, max_completion_length=args.max_new_tokens,
            temperature=1.0, top_p=1.0, top_k=0, learning_rate=args.lr, lr_scheduler_type="constant",
            beta=0.0, loss_type="grpo", scale_rewards="group", num_iterations=1, max_grad_norm=1.0,
            max_steps=args.warmup + args.steps, logging_steps=1, save_strategy="no", report_to="none",
            use_cpu=True, seed=args.seed, disable_tqdm=True, dataloader_num_workers=0, **precision)
        timer = StepTimer()
        trainer = GRPOTrainer(model=model, reward_funcs=[math_accuracy], args=config, train_dataset=trl_dataset(args),
                              processing_class=tok, callbacks=[timer])
        trainer.train()
    w = args.warmup
    return {"step_s": timer.step_s[w:], "rollout_s": generate_s[w:], "tokens": timer.tokens[w:],
            "base_rss_mib": base, **memory()}


def run_child(name: str, argv: list[str]) -> dict:
    t = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", name, *argv], capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the {name} child failed (exit {done.returncode})")
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["wall_s"] = time.perf_counter() - t
    return result


def report(results: dict[str, dict], args) -> None:
    med = statistics.median
    rows = {}
    for name, r in results.items():
        step, tokens = med(r["step_s"]), statistics.fmean(r["tokens"])
        rows[name] = {
            "step time, median s": f"{step:.2f}",
            "  rollout (generate), median s": f"{med(r['rollout_s']):.2f}",
            "  rest of the step, median s": f"{med(s - g for s, g in zip(r['step_s'], r['rollout_s'])):.2f}",
            "generated tokens per step": f"{tokens:.0f}",
            "generated tokens / step second": f"{tokens / step:.1f}",
            "generated tokens / rollout second": f"{tokens / med(r['rollout_s']):.1f}",
            "peak RSS (VmHWM), MiB": f"{r['VmHWM']:.0f}",
            "peak above RSS after imports, MiB": f"{r['VmHWM'] - r['base_rss_mib']:.0f}",
            "child wall time, s": f"{r['wall_s']:.0f}",
        }
    names = list(results)
    print(f"{args.prompts} prompts x G={args.group_size} per step, max {args.max_new_tokens} new tokens, "
          f"{args.threads or 'default'} torch threads, load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} cores, {args.warmup} warm-up + {args.steps} timed steps each; TRL "
          f"{'with its bf16 / gradient-checkpointing defaults' if args.trl_defaults else 'fp32, no checkpointing'}")
    print(f"{'':<36}" + "".join(f"{n:>12}" for n in names))
    for key in rows[names[0]]:
        print(f"{key:<36}" + "".join(f"{rows[n][key]:>12}" for n in names))
    for name, r in results.items():
        print(f"{name} step times: " + ", ".join(f"{s:.2f}" for s in r["step_s"]))
    ratio = med(results["rlvr"]["step_s"]) / med(results["trl"]["step_s"])
    mem = results["rlvr"]["VmHWM"] / results["trl"]["VmHWM"]
    print(f"rlvr / TRL median step time: {ratio:.3f} (target <= {STEP_TARGET}: "
          f"{'met' if ratio <= STEP_TARGET else 'NOT met'}); TRL / rlvr: {1 / ratio:.1f}x")
    print(f"rlvr / TRL peak RSS: {mem:.2f} (target <= 1: {'met' if mem <= 1 else 'NOT met'})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=4, help="timed steps per framework")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--prompts", type=int, default=2, help="prompts per step")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads in both children; 0 keeps torch's default")
    p.add_argument("--trl-defaults", action="store_true", help="TRL keeps its bf16 and gradient checkpointing defaults")
    p.add_argument("--trl-first", action="store_true", help="run the TRL child first")
    p.add_argument("--child", choices=("rlvr", "trl"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        result = (rlvr_child if args.child == "rlvr" else trl_child)(args)
        print("RESULT " + json.dumps(result), flush=True)
        return
    argv = [a for a in sys.argv[1:] if a != "--trl-first"]
    order = ("trl", "rlvr") if args.trl_first else ("rlvr", "trl")
    results = {name: run_child(name, argv) for name in order}
    report({"rlvr": results["rlvr"], "trl": results["trl"]}, args)


if __name__ == "__main__":
    main()
