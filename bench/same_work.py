"""The work bench/vs_trl.py (CPU) and bench/gpu.py (GPU) give both rlvr and TRL's GRPOTrainer, in one place.

The prompts (a JSONL task file of {"prompt", "answer"} rows), the reward (bench/last_number.py), rlvr's
overrides for them and TRL's GRPOConfig for the same settings: temperature 1 (top-p 1, no top-k), lr constant,
beta 0 (no reference model), loss_type grpo with group-scaled rewards, one update per batch, gradient norm
clipped at 1. Both frameworks render a prompt with rlvr.tasks.chat_messages and the tokenizer's chat template
(no few-shot turns, no system message), so the prompt token ids are the same.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import random
import sys
import tempfile
import time
from pathlib import Path

N_PROMPTS = 256
TRL_PRECISION = {"fp32": {"bf16": False, "gradient_checkpointing": False},
                 "bf16": {"bf16": True, "gradient_checkpointing": False},
                 "defaults": {}}  # GRPOConfig's own: bf16 and gradient checkpointing on


def write_prompts(path: Path, prompts_set: str, seed: int) -> None:
    """sums: 256 "What is {a} + {b}? Reply with only the number." with two-digit a, b; long: 256 of
    bench/length.py's prompts (around 4-digit, 3-operand +/- questions)."""
    if prompts_set == "sums":
        rng, rows = random.Random(seed), []
        for _ in range(N_PROMPTS):
            a, b = rng.randint(10, 99), rng.randint(10, 99)
            rows.append({"prompt": f"What is {a} + {b}? Reply with only the number.", "answer": str(a + b)})
    else:
        from length import task_config  # bench/length.py: TEMPLATE around 4-digit, 3-operand +/- questions

        from rlvr.tasks import build_splits

        with contextlib.redirect_stdout(io.StringIO()):
            splits = build_splits(task_config([f"--task.train_size={N_PROMPTS}", f"--task.seed={seed}"]).task)
        rows = [{"prompt": p.question, "answer": p.answer} for p in splits.train]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def task_overrides(task_file: Path) -> list[str]:
    return [f"--task.name={task_file}", "--task.few_shot=0", "--task.heldout_size=0", "--task.ood_size=0"]


def rlvr_overrides(task_file: Path, model: str, prompts: int, group_size: int, max_new_tokens: int, lr: float,
                   steps: int, seed: int, out: Path) -> list[str]:
    """`rlvr train` overrides (on configs/demo.yaml) for the shared work; no evaluation, no printed samples."""
    return [f"--model.name={model}", *task_overrides(task_file), f"--rollout.prompts_per_step={prompts}",
            f"--rollout.group_size={group_size}", f"--rollout.max_new_tokens={max_new_tokens}",
            "--rollout.temperature=1.0", f"--optimizer.lr={lr}", "--algo.beta=0.0", "--optimizer.warmup_steps=0",
            "--rewards.weights={last_number:last_number: 1.0}", "--eval.before=false", "--eval.after=false",
            "--train.eval_every=0", "--train.samples_every=0", f"--train.steps={steps}", f"--train.seed={seed}",
            f"--train.out={out}"]


def trl_dataset(task_file: Path):
    """The task file's train problems as rlvr train builds them, as chat messages the way rlvr renders them."""
    from datasets import Dataset

    from rlvr.cli import DEMO_CONFIG
    from rlvr.config import build_config
    from rlvr.tasks import build_splits, chat_messages

    cfg = build_config(DEMO_CONFIG if DEMO_CONFIG.is_file() else None, task_overrides(task_file))
    splits = build_splits(cfg.task)
    return Dataset.from_list([{"prompt": chat_messages(p.question, splits.few_shot, cfg.task.system_prompt),
                               "answer": p.answer} for p in splits.train])


def _sync() -> None:
    """Wait for queued GPU work, so a wall-clock interval covers it (a no-op on the CPU)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _peak_gib() -> float | None:
    """The CUDA allocator's peak since the last reset, in GiB, then reset; None on the CPU."""
    import torch

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return None
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.reset_peak_memory_stats()
    return peak


def run_trl(model, tok, task_file: Path, *, prompts: int, group_size: int, max_new_tokens: int, lr: float,
            steps: int, seed: int, use_cpu: bool, precision: str, micro_prompts: int | None = None,
            lora_r: int = 0) -> dict:
    """`steps` GRPOTrainer steps on the shared work; returns per-step lists: step_s (on_step_begin to
    on_step_end: one optimizer step), rollout_s (time inside model.generate), reward_s (inside the reward
    function), tokens (from completions/mean_length) and, on CUDA, the allocator's peak up to the end of
    generation (rollout_peak_gib) and from there to the step's end (update_peak_gib).

    micro_prompts None: every row of the step in one forward and backward (per-device batch P x G). A
    number m: as rlvr updates, in micro-batches of m prompts (per-device batch m x G, gradient accumulation
    P / m) after one generation batch of all P x G rows."""
    import functools

    from transformers import TrainerCallback

    peers = Path(sys.prefix) / "peers"  # `make peers` installs TRL there, beside the venv, not into it
    if importlib.util.find_spec("trl") is None and (peers / "trl").is_dir():
        sys.path.append(str(peers))
    from trl import GRPOConfig, GRPOTrainer

    from last_number import last_number

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.started, self.step_s, self.tokens, self.update_peak = 0.0, [], [], []

        def on_step_begin(self, a, state, control, **kw):
            _sync()
            _peak_gib()
            self.started = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            _sync()
            self.step_s.append(time.perf_counter() - self.started)
            self.update_peak.append(_peak_gib())

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.tokens.append(round(logs["completions/mean_length"] * prompts * group_size))

    generate_s, reward_s, rollout_peak = [], [], []
    plain_generate = model.generate

    def timed_generate(*a, **kw):  # TRL calls the unwrapped model's generate once per generation batch here
        _sync()
        t = time.perf_counter()
        out = plain_generate(*a, **kw)
        _sync()
        generate_s.append(time.perf_counter() - t)
        rollout_peak.append(_peak_gib())
        return out

    @functools.wraps(last_number)  # TRL logs a reward under its function's name
    def timed_reward(*a, **kw):
        t = time.perf_counter()
        out = last_number(*a, **kw)
        reward_s.append(time.perf_counter() - t)
        return out

    micro = micro_prompts or prompts
    if prompts % micro:
        raise SystemExit(f"{prompts} prompts do not split into micro-batches of {micro}")
    model.generate = timed_generate
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, per_device_train_batch_size=micro * group_size, num_generations=group_size,
            gradient_accumulation_steps=prompts // micro, generation_batch_size=prompts * group_size,
            max_completion_length=max_new_tokens, temperature=1.0, top_p=1.0,
            top_k=0, learning_rate=lr, lr_scheduler_type="constant", beta=0.0, loss_type="grpo",
            scale_rewards="group", num_iterations=1, max_grad_norm=1.0, max_steps=steps, logging_steps=1,
            save_strategy="no", report_to="none", use_cpu=use_cpu, seed=seed, disable_tqdm=True,
            dataloader_num_workers=0, **TRL_PRECISION[precision])
        timer = StepTimer()
        peft = None
        if lora_r:  # rlvr's LoRA defaults: alpha 16, attention projections
            from peft import LoraConfig

            peft = LoraConfig(r=lora_r, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                              task_type="CAUSAL_LM")
        trainer = GRPOTrainer(model=model, reward_funcs=[timed_reward], args=config, peft_config=peft,
                              train_dataset=trl_dataset(task_file), processing_class=tok, callbacks=[timer])
        trainer.train()
    return {"step_s": timer.step_s, "rollout_s": generate_s, "reward_s": reward_s, "tokens": timer.tokens,
            "rollout_peak_gib": rollout_peak, "update_peak_gib": timer.update_peak}
