"""Greedy evaluation during a run: held-out and OOD accuracy (strict), format and format-free accuracy,
and per-problem flips against the evaluation before training; logged to evals.jsonl (every completion
to eval_before/after.jsonl). Under torchrun it runs on rank 0. `rlvr sft` uses the same functions, on
the same Models, Data and EvalSettings."""
from __future__ import annotations

import json
from pathlib import Path

from rlvr.device import sampling_autocast
from rlvr.eval import evaluate
from rlvr.eval.grader import Grader
from rlvr.eval.flips import decompose, describe, flips
from rlvr.report.console import say
from rlvr.report.sinks import JsonlWriter
from rlvr.train.distributed import Dist, gathered
from rlvr.train.settings import EvalSettings
from rlvr.train.state import Data, Models

METRICS = (("accuracy", "accuracy"), ("format", "format_rate"), ("lenient", "lenient"))
SPLITS = ("heldout", "ood")


def evaluate_splits(policy, tok, problems: dict, spec, s: EvalSettings, tag: str,
                    baseline: dict[str, list[dict]] | None = None, grader: Grader | None = None
                    ) -> tuple[dict, dict[str, list[dict]]]:
    """Greedy evaluation of each split that has problems, graded by `grader`. Returns the flat result
    ({split}_{accuracy,format,lenient}_{tag}, and {split}_{fixed,broken,kept,never}_{tag} for a split
    the baseline holds) and the per-problem records of each split."""
    result, records = {}, {}
    for split, probs in problems.items():
        if not probs:  # e.g. a file task with no OOD file
            continue
        r = evaluate(policy, tok, probs, spec, max_new_tokens=s.sampling.max_new_tokens, batch_size=s.batch_size,
                     stop_ids=list(s.sampling.stop_ids), grader=grader)
        records[split] = r.records
        for name, attr in METRICS:
            result[f"{split}_{name}_{tag}"] = getattr(r, attr)
        if baseline and baseline.get(split):
            f = flips(baseline[split], r.records, examples=0)
            result.update({f"{split}_{kind}_{tag}": f[kind] for kind in ("fixed", "broken", "kept", "never")})
    return result, records


def write_records(out: Path, tag: str, records: dict[str, list[dict]]) -> None:
    with JsonlWriter(out / f"eval_{tag}.jsonl") as sink:
        for split, recs in records.items():
            for rec in recs:
                sink.write({"split": split, **rec})


def read_records(path: Path) -> dict[str, list[dict]]:
    """eval_before.jsonl back into records per split (a resumed run's baseline); {} if absent or if
    written by a version without format-free grades."""
    if not path.is_file():
        return {}
    out: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            if "lenient" not in rec:
                return {}
            out.setdefault(rec.pop("split"), []).append(rec)
    return out


def flip_summary(baseline: dict[str, list[dict]], records: dict[str, list[dict]]) -> dict:
    """summary.json's `flips` (counts and examples per split) and `decomposition` (the strict change
    split into form and answers, with its plain-words `text`) against the baseline evaluation."""
    shared = [s for s in records if baseline.get(s)]
    out = {"flips": {s: flips(baseline[s], records[s]) for s in shared}, "decomposition": {}}
    for s in shared:
        d = decompose(baseline[s], records[s])
        out["decomposition"][s] = {**d, "text": describe(d)}
    return out


def eval_line(result: dict, tag: str) -> str:
    """'held-out 65.0% (format-free 70.0%, 3 fixed, 2 broken), OOD ...' for the console."""
    parts = []
    for split, label in (("heldout", "held-out"), ("ood", "OOD")):
        acc = result.get(f"{split}_accuracy_{tag}")
        if acc is None:
            continue
        extra = [f"format-free {100 * result[f'{split}_lenient_{tag}']:.1f}%"]
        if f"{split}_broken_{tag}" in result:
            extra.append(f"{result[f'{split}_fixed_{tag}']} fixed, {result[f'{split}_broken_{tag}']} broken")
        parts.append(f"{label} {100 * acc:.1f}% ({', '.join(extra)})")
    return "; ".join(parts)


def run_eval(models: Models, data: Data, s: EvalSettings, tag: str, baseline: dict | None = None,
             splits: tuple[str, ...] = SPLITS) -> tuple[dict, dict[str, list[dict]]]:
    """Greedy evaluation of the policy on `splits` of data (flips against `baseline` unless tag is before);
    the before and after evaluations' records go to the run directory."""
    problems = {split: getattr(data.splits, split) for split in splits}
    result, records = evaluate_splits(models.policy, models.tok, problems, data.env, s, tag,
                                      None if tag == "before" else baseline, data.grader)
    if tag in ("before", "after"):
        write_records(s.out, tag, records)
    return result, records


def log_eval(sink: JsonlWriter, step: int, result: dict, tag: str, train_seconds: float) -> dict:
    row = {"step": step, "train_seconds": train_seconds}
    row.update({k.removesuffix(f"_{tag}"): v for k, v in result.items()})
    sink.write(row)
    say(f"eval at step {step}: {eval_line(result, tag)}")
    return row


def eval_on_main(models: Models, data: Data, s: EvalSettings, dist: Dist, tag: str, baseline: dict | None = None,
                 splits: tuple[str, ...] = SPLITS) -> tuple[dict, dict[str, list[dict]]]:
    """Greedy evaluation on rank 0 (the others get {}, {}); under FSDP every rank helps gather the weights."""
    with gathered(models.policy), sampling_autocast(dist.device, s.precision):
        return run_eval(models, data, s, tag, baseline, splits) if dist.is_main else ({}, {})
