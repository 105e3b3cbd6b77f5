"""Task sources. `build_splits(task_config)` returns train / held-out / OOD problems.

Sources: `arithmetic`, `reasoning_gym:<dataset>`, `humaneval`, `pyfunc`, a file (.jsonl, .json, .csv, gzipped or not, .parquet,
or a directory written by datasets' save_to_disk), or a Hugging Face Hub dataset (org/name: rlvr/hub.py). Whatever the source, the splits leave here disjoint by normalised
prompt, with task.prompt_template applied, and with `Splits.notes` saying what was removed or cut.
"""
from __future__ import annotations

import dataclasses
import string
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.tasks.arithmetic import arithmetic_splits
from rlvr.tasks.code_forms import FENCE
from rlvr.tasks.arithmetic import settings as arithmetic_settings
from rlvr.tasks.base import HELDOUT_SIZE, Epochs, Problem, Splits, chat_messages, encode_prompt, normalise
from rlvr.hub import data_files, dataset_files, is_hub_name, split_files
from rlvr.tasks.files import file_splits
from rlvr.tasks.readers import SUFFIXES, is_file_source, read_files, read_rows
from rlvr.tasks.gym import PREFIX, SUFFIX, gym_splits
from rlvr.tasks.humaneval import humaneval_splits
from rlvr.tasks.pyfunc import pyfunc_splits

TASKS = ("arithmetic", f"{PREFIX}<dataset>", *(f"a {s} file" for s in SUFFIXES),
         "a directory written by datasets' save_to_disk or laid out as a Hub dataset", "humaneval", "pyfunc",
         "a Hugging Face Hub dataset (org/name, with task.config and task.split)")


def check_template(template: str) -> None:
    try:
        fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as e:
        raise RlvrError(f"task.prompt_template {template!r}: {e}; write literal braces as {{{{ }}}}") from None
    if fields != {"prompt"}:
        raise RlvrError(f"task.prompt_template {template!r} must use {{prompt}} (the problem text) and no other "
                        f"field; found {sorted(fields) or 'none'}; write literal braces as {{{{ }}}}")


def code_fence(task) -> str:
    """What a file task's code rows are told of the answer's form (the reward runs the last fenced block),
    unless the user's template already says it."""
    return "" if "```" in task.prompt_template else FENCE


def heldout_size(task) -> int:
    return HELDOUT_SIZE if task.heldout_size is None else task.heldout_size


def source_splits(task) -> Splits:
    """The splits of one source as it gives them: no template, no cross-split clean-up."""
    name = task.name
    if name == "arithmetic":
        return arithmetic_splits(heldout_size=heldout_size(task), ood_size=task.ood_size, train_size=task.train_size,
                                 few_shot=task.few_shot, seed=task.seed,
                                 **arithmetic_settings(task.params, task.ood_params))
    if name.startswith(PREFIX):
        # the answer-line instruction is added unless the user's template already asks for one
        suffix = "" if "answer:" in task.prompt_template.lower() else SUFFIX
        return gym_splits(name[len(PREFIX):], dict(task.params), dict(task.ood_params), heldout_size(task),
                          task.ood_size, task.train_size, task.few_shot, task.seed, suffix)
    if name == "humaneval":
        return humaneval_splits(heldout_size(task), task.ood_size, task.train_size, task.few_shot, task.seed)
    if name == "pyfunc":
        return pyfunc_splits(dict(task.params), dict(task.ood_params), heldout_size(task), task.ood_size,
                             task.train_size, task.few_shot, task.seed)
    if is_hub_folder(name):
        return hub_splits(task, root=Path(name).expanduser())
    if is_file_source(name):
        return file_splits(name, dict(task.columns), task.heldout_file, task.ood_file, task.heldout_size,
                           task.ood_size, task.train_size, task.few_shot, task.seed, fence=code_fence(task))
    if is_hub_name(name):
        return hub_splits(task)
    raise RlvrError(f"unknown task '{name}': task.name takes {', '.join(TASKS)}")


def is_hub_folder(name: str) -> bool:
    """A local folder in a Hub dataset's layout (`hf download --local-dir`, a git clone of the dataset's
    repository): data files and no save_to_disk record."""
    path = Path(name).expanduser()
    return (path.is_dir() and not (path / "state.json").exists() and not (path / "dataset_dict.json").exists()
            and bool(data_files(path)))


def hub_splits(task, root: Path | None = None) -> Splits:
    """A Hugging Face Hub dataset: the files of task.config's task.split, read as a file task's rows;
    held-out from its task.heldout_split when one is named, else carved out of task.split. `root`: a local
    folder in the Hub's layout instead of the Hub's copy."""
    if task.heldout_file and task.heldout_split:
        raise RlvrError("set task.heldout_file or task.heldout_split, not both")
    label = lambda split: f"{task.name} ({', '.join(filter(None, (task.config, split)))})"
    find = (lambda split: split_files(root, task.name, task.config, split)) if root is not None else (
        lambda split: dataset_files(task.name, task.config, split))
    files = {label(s): find(s) for s in filter(None, (task.split, task.heldout_split))}
    read = lambda name: read_files(files[name]) if name in files else read_rows(name)  # a heldout_file: a file
    heldout = label(task.heldout_split) if task.heldout_split else task.heldout_file
    return file_splits(label(task.split), dict(task.columns), heldout, task.ood_file, task.heldout_size, task.ood_size,
                       task.train_size, task.few_shot, task.seed, read=read, fence=code_fence(task))


def ood_from_other(task) -> tuple[list[Problem], list[str]]:
    """task.ood_size problems of the task named task.ood_name (its settings from task.ood_params)."""
    if not task.ood_size:
        return [], []
    other = dataclasses.replace(task, name=task.ood_name, params=dict(task.ood_params), ood_name="",
                                ood_params={}, heldout_file="", ood_file="", heldout_size=0,
                                ood_size=0, train_size=task.ood_size, few_shot=0, seed=task.seed + 1)
    got = source_splits(other)
    return got.train[:task.ood_size], [f"ood ({task.ood_name}): {n}" for n in got.notes]


def _templated(problems: list[Problem], template: str) -> list[Problem]:
    if template == "{prompt}":
        return problems
    return [dataclasses.replace(p, question=template.format(prompt=p.question)) for p in problems]


def _drop_shared(kept: list[Problem], against: list[Problem], kept_name: str, against_name: str,
                 notes: list[str]) -> list[Problem]:
    """`kept` without problems whose normalised prompt is in `against`, with a note when any go."""
    gold = {normalise(p.question): p.answer for p in against}
    shared = [p for p in kept if normalise(p.question) in gold]
    if not shared:
        return kept
    conflicting = sum(1 for p in shared if gold[normalise(p.question)] and p.answer != gold[normalise(p.question)])
    detail = f", {conflicting} of them with a different answer" if conflicting else ""
    notes.append(f"{len(shared)} {kept_name} problems share a prompt with {against_name}{detail}; "
                 f"removed from {kept_name} (e.g. {shared[0].question[:80]!r})")
    return [p for p in kept if normalise(p.question) not in gold]


def finalise(splits: Splits, template: str) -> Splits:
    """Apply the template, then make few-shot turns, held-out, OOD and train disjoint by prompt:
    held-out and OOD are kept clean, train gives way (then OOD to held-out)."""
    train, heldout, ood = (_templated(s, template) for s in (splits.train, splits.heldout, splits.ood))
    few_shot = [(template.format(prompt=q), a) for q, a in splits.few_shot]
    notes = list(splits.notes)
    shots = [Problem(question=q, answer="") for q, _ in few_shot]  # no gold: a worked turn is not compared as an answer
    heldout = _drop_shared(heldout, shots, "held-out", "the few-shot examples", notes)
    ood = _drop_shared(ood, shots + heldout, "OOD", "the few-shot examples or held-out", notes)
    train = _drop_shared(train, shots + heldout + ood, "train", "the few-shot examples, held-out or OOD", notes)
    if not train:
        raise RlvrError("no training problems are left once held-out, OOD and few-shot prompts are removed")
    return Splits(train=train, heldout=heldout, ood=ood, few_shot=few_shot, notes=notes)


def build_splits(task) -> Splits:
    """Train, held-out and OOD problems of task.name (an rlvr.config.TaskConfig); print `.notes`."""
    check_template(task.prompt_template)
    if not task.ood_name:
        return finalise(source_splits(task), task.prompt_template)
    if task.ood_file:
        raise RlvrError("set task.ood_name or task.ood_file, not both")
    # the main source draws no OOD of its own; task.ood_params belong to the other task
    splits = source_splits(dataclasses.replace(task, ood_size=0, ood_params={}))
    splits.ood, notes = ood_from_other(task)
    splits.notes += notes
    return finalise(splits, task.prompt_template)


__all__ = ["Epochs", "Problem", "Splits", "build_splits", "chat_messages", "encode_prompt", "normalise"]
