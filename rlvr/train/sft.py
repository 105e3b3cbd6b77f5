"""Supervised fine-tuning on worked solutions: the baseline a GRPO run is measured against, and a warm
start for one (`rlvr train configs/arithmetic.yaml --model.name=runs/sft/final`).

Each train problem with a non-empty `solution` becomes one example: the chat prompt GRPO would see
(same few-shot turns and system prompt), then the solution and the end-of-turn token as the target.
Cross-entropy is taken on the target tokens only. The keys it reads (READS):

    sft.batch_size              examples per optimizer step (the batch)
    optimizer.lr, weight_decay, warmup_steps, max_grad_norm   AdamW and its linear warm-up, as in rlvr train
    optimizer.micro_batch_prompts    examples per forward/backward pass (gradients accumulate)
    train.steps, train.seed, train.out, train.threads                    as in rlvr train
    train.device, train.mixed_precision                                  as in rlvr train
    model.*, task.*, eval.*                                              as in rlvr train (not model.lora)

Writes RUN_DIR/config.yaml, metrics.jsonl, eval_before.jsonl, eval_after.jsonl, summary.json
("kind": "sft") and final/ (model and tokenizer).
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from rlvr.config import Config, to_yaml
from rlvr.device import autocast, of_model, resolve_device, resolve_precision
from rlvr.errors import RlvrError
from rlvr.models.loading import load_model, stop_token_ids
from rlvr.report.console import before_after_table, progress, say
from rlvr.io import atomic_save_model, atomic_write_json
from rlvr.saved_model import TrainedFrom
from rlvr.report.sinks import JsonlWriter
from rlvr.envs.episodes import make_spec
from rlvr.eval.grader import choose_grader
from rlvr.rewards import rewards_of
from rlvr.tasks import Epochs, Problem, build_splits
from rlvr.tasks.base import encode_messages, problem_messages
from rlvr.tasks.files import gold_candidates
from rlvr.config.paths import anchored
from rlvr.train.rundir import check_run_dir, prepare_run_dir
from rlvr.train.distributed import Dist
from rlvr.train.evaluation import eval_line, eval_on_main, flip_summary
from rlvr.train.settings import eval_settings
from rlvr.train.state import Data, Models
from rlvr.train.optim import adamw, current_lr, warmup_scheduler
from rlvr.train.rundir import RunLock

READS = ("model.", "task.", "eval.", "optimizer.", "sft.", "train.steps", "train.seed", "train.out", "train.threads",
         "train.device", "train.mixed_precision")   # a trailing dot: the whole section


def reads(key: str) -> bool:
    """Does sft read this config key? `rlvr sft --help` lists the keys that it does (LoRA: not supported)."""
    return key.startswith(READS) and not key.startswith(("model.lora.", "model.quantize"))


@dataclass
class Example:
    prompt: list[int]  # chat prompt ending with the assistant turn's opening
    target: list[int]  # solution tokens, then the end-of-turn token


def end_of_turn_id(tok, stop_ids: list[int]) -> int:
    """The token that closes an assistant turn: ChatML's <|im_end|> when it stops generation, else eos."""
    im_end = tok.get_vocab().get("<|im_end|>")
    if im_end is not None and im_end in stop_ids:
        return im_end
    if tok.eos_token_id is None:
        raise RlvrError("the tokenizer has no eos token to end a solution with")
    return tok.eos_token_id


def with_solutions(problems: list[Problem], task_name: str) -> list[Problem]:
    found = [p for p in problems if p.solution.strip()]
    if not found:
        held = gold_candidates(problems[0].row) if problems else []  # GSM8K's answer, MATH's solution
        hint = (f"; column '{held[0]}' holds worked solutions (a final '#### N' or \\boxed{{...}}): "
                f"--task.columns.solution={held[0]}" if held else "")
        if any("completion" in p.row for p in problems):  # TRL's prompt-completion datasets
            hint += ("; the rows' 'completion' column (TRL's prompt-completion form) is used with "
                     "--task.columns.solution=completion")
        raise RlvrError(f"no train problem of task '{task_name}' has a worked solution to fine-tune on: "
                        "file tasks need a 'solution' column (or task.columns: {solution: <column>})" + hint)
    return found


def make_example(tok, problem: Problem, few_shot: list[tuple[str, str]], system_prompt: str,
                 end_id: int) -> Example:
    prompt = encode_messages(tok, problem_messages(problem, few_shot, system_prompt))  # a chat prompt keeps its turns
    # Tokenised apart from the prompt: generation, too, continues the prompt's ids token by token.
    target = tok(problem.solution, add_special_tokens=False)["input_ids"] + [end_id]
    return Example(prompt, target)


def collate(examples: list[Example], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (input_ids, attention_mask, loss_mask), each [B, T]. loss_mask is 1 exactly at the
    target positions; it is built from lengths, since pad and end-of-turn may share an id."""
    width = max(len(e.prompt) + len(e.target) for e in examples)
    ids = torch.full((len(examples), width), pad_id, dtype=torch.long)  # [B, T]
    attention = torch.zeros(len(examples), width, dtype=torch.long)  # [B, T]
    loss_mask = torch.zeros(len(examples), width)  # [B, T]
    for b, e in enumerate(examples):
        n_p, n = len(e.prompt), len(e.prompt) + len(e.target)
        ids[b, :n] = torch.tensor(e.prompt + e.target)
        attention[b, :n] = 1
        loss_mask[b, n_p:n] = 1
    return ids, attention, loss_mask


def target_nll(logits: torch.Tensor, ids: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    """Summed negative log-likelihood of the masked tokens; position t is predicted from logits t - 1.
    logits [B, T, V], ids [B, T], loss_mask [B, T] of 0 / 1 -> scalar. Only the n target positions are
    cast to float32 and normalised ([n, V]), not every position of the batch (the prompts and padding)."""
    real = loss_mask[:, 1:].bool()  # [B, T-1]
    logp = torch.log_softmax(logits[:, :-1][real].float(), dim=-1)  # [n, V]
    return -logp.gather(-1, ids[:, 1:][real][:, None]).sum()


def sft_step(policy, optimizer, batch: list[Example], pad_id: int, micro: int, max_grad_norm: float,
             precision: str = "no") -> dict:
    """One optimizer step on the token-mean loss over the whole batch, accumulated over micro-batches
    (each collated on the host and moved to the policy's device; `precision` "bf16" autocasts the forward)."""
    tokens = sum(len(e.target) for e in batch)
    device = of_model(policy)
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=device)
    for start in range(0, len(batch), micro):
        ids, attention, loss_mask = (x.to(device) for x in collate(batch[start:start + micro], pad_id))
        with autocast(device, precision):
            logits = policy(input_ids=ids, attention_mask=attention).logits  # [b, T, V]
        loss = target_nll(logits, ids, loss_mask) / tokens
        loss.backward()
        total += loss.detach()
    params = [p for p in policy.parameters() if p.requires_grad]
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm if max_grad_norm > 0 else float("inf"))
    optimizer.step()
    return {"loss": float(total), "examples": len(batch), "tokens": tokens, "grad_norm": float(norm)}


def sft(cfg: Config, then: str = "") -> dict:
    """Fine-tune cfg.model on the task's worked solutions; write the run directory; return the summary.
    `then`: the rlvr train command that starts GRPO from the result, said at the end."""
    wall_start = time.perf_counter()
    if cfg.model.lora.r > 0:
        raise RlvrError("rlvr sft trains every weight: set model.lora.r=0")
    if cfg.model.quantize != "none":
        raise RlvrError("rlvr sft trains every weight, which a 4-bit base cannot: set model.quantize=none")
    cfg = anchored(cfg)
    out = Path(cfg.train.out)
    with RunLock(out):  # one process writes a run directory, as rlvr train's (rlvr/train/rundir.py)
        check_run_dir(out, cfg.train.overwrite, "rlvr sft")  # before anything loads: a refusal costs nothing
        return _locked(cfg, out, then, wall_start)


def _locked(cfg: Config, out: Path, then: str, wall_start: float) -> dict:
    if cfg.train.threads > 0:
        torch.set_num_threads(cfg.train.threads)
    random.seed(cfg.train.seed)
    torch.manual_seed(cfg.train.seed)
    device = resolve_device(cfg.train.device)
    precision = resolve_precision(cfg.train.mixed_precision, device)
    splits = build_splits(cfg.task)  # the data first, as rlvr train: a bad row or no solution stops in seconds
    for note in splits.notes:  # as rlvr train says them: held-out carved, rows dropped, sizes cut
        say(f"task: {note}")
    solved = with_solutions(splits.train, cfg.task.name)
    policy, tok = load_model(cfg.model.name, cfg.model.dtype, device)
    stop_ids = stop_token_ids(policy, tok)
    end_id = end_of_turn_id(tok, stop_ids)
    examples = [make_example(tok, p, splits.few_shot, cfg.task.system_prompt, end_id) for p in solved]
    grader = choose_grader(rewards_of(cfg.rewards, cfg.rollout.max_new_tokens), cfg.eval.grader, cfg.eval.grader_threshold)  # as a GRPO run of cfg grades
    if grader.user:
        say(grader.line())
    prepare_run_dir(out, to_yaml(cfg), fresh=True)  # only once the config, data, rewards and model have loaded
    # the evaluation of a GRPO run of cfg: the same builders, settings and functions
    models = Models(policy=policy, tok=tok)
    context = getattr(getattr(policy, "config", None), "max_position_embeddings", None)
    data = Data(splits=splits, env=make_spec(cfg.env, tok, splits.few_shot, cfg.task.system_prompt, context),
                grader=grader)
    evals, dist = eval_settings(cfg, stop_ids=stop_ids, pad_id=tok.pad_token_id, precision=precision), Dist(device=device)
    baseline = {}
    summary: dict = {"kind": "sft", "model": cfg.model.name, "examples": len(examples), "steps": 0,
                     "grader": grader.name}
    if evals.before:
        before, baseline = eval_on_main(models, data, evals, dist, "before")
        say(f"eval before: {eval_line(before, 'before')}")
        summary.update(before)
    a = cfg.optimizer
    optimizer = adamw([{"params": [p for p in policy.parameters() if p.requires_grad], "lr": a.lr}],
                      a.weight_decay, a.state)
    scheduler = warmup_scheduler(optimizer, a.warmup_steps)
    sampler = Epochs(range(len(examples)), cfg.train.seed)
    bar = progress(cfg.train.steps)
    train_start = time.perf_counter()
    policy.train()
    with JsonlWriter(out / "metrics.jsonl") as sink:
        for step in range(1, cfg.train.steps + 1):
            t0 = time.perf_counter()
            lr = current_lr(scheduler)
            batch = [examples[i] for i in sampler.take(cfg.sft.batch_size)]
            m = sft_step(policy, optimizer, batch, tok.pad_token_id, a.micro_batch_prompts, a.max_grad_norm, precision)
            scheduler.step()
            sink.write({"step": step, **m, "lr": lr, "time/step_s": time.perf_counter() - t0})
            summary.update(steps=step, final_loss=m["loss"])
            bar.set_postfix(loss=f"{m['loss']:.3f}")
            bar.update(1)
    bar.close()
    summary["train_seconds"] = time.perf_counter() - train_start
    if evals.after:
        after, records = eval_on_main(models, data, evals, dist, "after", baseline)
        say(f"eval after: {eval_line(after, 'after')}")
        summary.update(after)
        if baseline:
            summary.update(flip_summary(baseline, records))
    atomic_save_model(policy, tok, out / "final", TrainedFrom(name=cfg.model.name, dtype=cfg.model.dtype))
    summary["wall_seconds"] = time.perf_counter() - wall_start
    atomic_write_json(out / "summary.json", summary)
    say(before_after_table(summary))
    say(f"model: {out / 'final'}" + (f"  (start GRPO from it: {then})" if then else ""))
    return summary


PROMPT_KEYS = ("name", "few_shot", "system_prompt", "prompt_template")  # task keys that shape what is evaluated


def prompt_differences(run_dir: str | Path, task) -> list[tuple[str, object, object]]:
    """How the prompts an SFT run (its config.yaml) was evaluated with differ from `task`'s (an
    rlvr.config.TaskConfig): (key, its value there, here) per task key of PROMPT_KEYS that differs."""
    try:
        there = yaml.safe_load((Path(run_dir) / "config.yaml").read_text()).get("task", {})
    except (OSError, yaml.YAMLError, AttributeError):
        return []
    return [(f"task.{k}", there[k], getattr(task, k)) for k in PROMPT_KEYS if k in there and there[k] != getattr(task, k)]


def baseline_of(model_name: str) -> dict | None:
    """If `model_name` is the final/ directory of an `rlvr sft` run, that run's after-training accuracy
    ({"run", "heldout_accuracy", "heldout_format", "heldout_lenient", "ood_...": the same}) and the base model's
    before it (the same keys prefixed base_); otherwise None."""
    path = Path(model_name).expanduser()
    summary_path = path.parent / "summary.json"
    if path.name != "final" or not summary_path.is_file():
        return None
    try:
        summary = json.loads(summary_path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(summary, dict) or summary.get("kind") != "sft":
        return None
    keys = ("heldout_accuracy", "heldout_format", "heldout_lenient", "ood_accuracy", "ood_format", "ood_lenient")
    return {"run": str(path.parent), **{k: summary.get(f"{k}_after") for k in keys},
            **{f"base_{k}": summary.get(f"{k}_before") for k in keys}}
