"""Greedy evaluation during a run: held-out and OOD accuracy (strict), format and format-free accuracy,
and per-problem flips against the evaluation before training; logged to evals.jsonl (every completion
to eval_before/after.jsonl). Under torchrun it runs on rank 0. `rlvr sft` uses the same functions, on
the same Models, Data and EvalSettings."""
from __future__ import annotations

import json
from pathlib import Path

from rlvr.config.paths import changed_keys
from rlvr.device import sampling_autocast
from rlvr.eval import evaluate
from rlvr.eval.grader import Grader
from rlvr.eval.flips import decompose, describe, flips
from rlvr.io import atomic_write_text, json_safe
from rlvr.report.console import say
from rlvr.report.sinks import JsonlWriter, jsonl_records
from rlvr.tasks import Splits
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
    """eval_{tag}.jsonl, whole or not at all (atomic): what a resume reads back as its baseline is never
    cut short, and an evaluation that took long is on disk as soon as it is done."""
    atomic_write_text(out / f"eval_{tag}.jsonl", "".join(json.dumps(json_safe({"split": split, **rec})) + "\n"
                                                          for split, recs in records.items() for rec in recs))


def read_records(path: Path) -> dict[str, list[dict]]:
    """eval_before.jsonl back into records per split (a resumed run's baseline); {} if absent, cut short
    (written by a version that appended it line by line), or written by a version without format-free
    grades."""
    if not path.is_file():
        return {}
    out: dict[str, list[dict]] = {}
    for _, _, rec in jsonl_records(path):
        if rec is None or "lenient" not in rec:
            return {}
        out.setdefault(rec.pop("split"), []).append(rec)
    return out


def kept_before(out: Path, before: bool, config: dict, dist: Dist) -> tuple[dict, dict[str, list[dict]]] | None:
    """The evaluation before training that the run directory's last start made before it stopped short of
    its first checkpoint (a reward that raised on every completion, a full disk, a second Ctrl-C): its
    evals.jsonl row and its records per split, for a restart (`--resume` finding no checkpoint) to keep
    instead of evaluating again. Only when that start had this very config (`config`, this start's as plain
    values, is its config.yaml; train.steps aside) and evaluates before training (`before`: eval.before), and
    in a single process (under torchrun every rank would have to agree to skip it). Read before the restart
    clears the directory `out`; `keep_before` checks it against the problems."""
    out = Path(out)
    if dist.enabled or not before or not (out / "config.yaml").is_file() or changed_keys(out / "config.yaml", config):
        return None
    rows = [rec for _, _, rec in jsonl_records(out / "evals.jsonl")][:1] if (out / "evals.jsonl").is_file() else []
    records = read_records(out / "eval_before.jsonl")
    if not records or not rows or rows[0] is None or rows[0].get("step") != 0:
        return None
    return rows[0], records


def keep_before(kept: tuple[dict, dict[str, list[dict]]], splits: Splits, grader: Grader, out: Path) -> dict | None:
    """`kept_before`'s evaluation written back into the cleared run directory (eval_before.jsonl, the row of
    evals.jsonl) when its records are of this start's held-out and OOD problems, in order, and graded by
    the built-in checker (a user's grader may be the very code that was fixed); returns its result
    ({split}_{metric}_before, as `evaluate_models` returns it), or None (evaluate again)."""
    row, records = kept
    same = all([r["question"] for r in records.get(s, [])] == [p.question for p in getattr(splits, s)] for s in SPLITS)
    if grader.user or not same or not set(records) <= set(SPLITS):
        return None
    write_records(out, "before", records)
    with JsonlWriter(out / "evals.jsonl") as sink:
        sink.write(row)
    result = {f"{k}_before": v for k, v in row.items() if k not in ("step", "train_seconds")}  # log_eval's row, back
    say(f"eval at step 0: {eval_line(result, 'before')} (kept from the last start, which stopped before its first "
        "checkpoint: delete eval_before.jsonl to evaluate again)")
    return result


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


def evaluate_models(models: Models, data: Data, s: EvalSettings, tag: str, baseline: dict | None = None,
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
        return evaluate_models(models, data, s, tag, baseline, splits) if dist.is_main else ({}, {})
