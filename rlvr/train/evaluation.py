"""Greedy evaluation during a run: held-out and OOD accuracy and format, logged to evals.jsonl (and
every completion to eval_before/after.jsonl); under torchrun it runs on rank 0."""
from __future__ import annotations

from rlvr.eval import evaluate
from rlvr.report.console import say
from rlvr.report.sinks import JsonlWriter
from rlvr.train.distributed import gathered


def run_eval(run, tag: str, splits: tuple[str, ...] = ("heldout", "ood")) -> dict:
    result = {}
    problems = {"heldout": run.splits.heldout, "ood": run.splits.ood}
    for split in splits:
        if not problems[split]:  # e.g. a file task with no OOD file
            continue
        r = evaluate(run.policy, run.tok, problems[split], run.prompts[split],
                     max_new_tokens=run.cfg.eval.max_new_tokens, batch_size=run.cfg.eval.batch_size,
                     stop_ids=run.stop_ids)
        result[f"{split}_accuracy_{tag}"], result[f"{split}_format_{tag}"] = r.accuracy, r.format_rate
        if tag in ("before", "after"):
            with JsonlWriter(run.out / f"eval_{tag}.jsonl") as sink:
                for rec in r.records:
                    sink.write({"split": split, **rec})
    return result


def log_eval(run, sink: JsonlWriter, step: int, result: dict, tag: str, train_seconds: float) -> dict:
    row = {"step": step, "train_seconds": train_seconds}
    row.update({k.removesuffix(f"_{tag}"): v for k, v in result.items()})
    sink.write(row)
    say(f"eval at step {step}: " + ", ".join(f"{k.removesuffix('_' + tag)} {100 * v:.1f}%"
                                             for k, v in result.items() if "accuracy" in k))
    return row


def eval_on_main(run, tag: str, splits: tuple[str, ...] = ("heldout", "ood")) -> dict:
    """Greedy evaluation on rank 0 (the others get {}); under FSDP every rank helps gather the weights."""
    with gathered(run.policy):
        return run_eval(run, tag, splits) if run.dist.is_main else {}
