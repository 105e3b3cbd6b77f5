"""File tasks: a data source's rows (rlvr.tasks.readers) as Problems, and its splits.

Rows become Problems through a column mapping (task.columns; dotted names reach nested fields, as
verl's reward_model.ground_truth); the prompt may be text or chat messages (TRL's conversational form);
every column is kept for the reward functions. A bad row is an error naming the file and the row.
"""
from __future__ import annotations

import random

from rlvr.errors import RlvrError
from rlvr.tasks.base import HELDOUT_SIZE, Problem, Splits, as_text
from rlvr.tasks.code_forms import dataset_tests, reference_reply
from rlvr.tasks.readers import read_rows, source_label

KEYS = ("prompt", "answer", "tests", "difficulty", "solution")
GOLD_DEFAULTS = ("answer", "reward_model.ground_truth")  # rlvr's name, then verl's parquet layout
PROMPT_NAMES = ("problem", "question", "instruction", "query", "text", "messages")  # where common datasets keep it
OPTIONAL = ("difficulty", "solution")  # a row may lack these even when mapped (few rows have a solution)


def _text(value, key: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if key in ("tests", "answer") and isinstance(value, (dict, list)):
        return as_text(value)  # a verl ground truth may be a list of accepted answers
    if key in ("answer", "difficulty") and isinstance(value, (int, float)) and not isinstance(value, bool):
        return as_text(value)
    if key == "solution" and isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict) \
            and value[0].get("role") == "assistant" and isinstance(value[0].get("content"), str):
        return value[0]["content"]  # TRL's conversational completion: [{"role": "assistant", "content": ...}]
    if key == "solution" and isinstance(value, list):
        raise RlvrError(f"{where}: column for solution holds a list; a solution is text, or one assistant "
                        "message [{'role': 'assistant', 'content': <text>}] (TRL's conversational completion)")
    raise RlvrError(f"{where}: column for {key} holds a {type(value).__name__}, expected text")


def lookup(row: dict, column: str):
    """A column's value; a dotted name reaches into nested fields (verl's reward_model.ground_truth).
    Raises KeyError when absent."""
    if column in row:
        return row[column]
    value = row
    for part in column.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(column)
        value = value[part]
    return value


def gold_column(row: dict, columns: dict[str, str]) -> str:
    """The column holding the gold answer: task.columns.answer, else `answer`, else verl's layout."""
    if "answer" in columns:
        return columns["answer"]
    for name in GOLD_DEFAULTS:
        try:
            lookup(row, name)
            return name
        except KeyError:
            pass
    return "answer"


def is_chat(value) -> bool:
    return isinstance(value, list) and bool(value) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str) for m in value)


def chat_prompt(value: list, where: str, reply_ok: bool = False) -> tuple[tuple[dict, ...], str, str]:
    """A conversational prompt (TRL): its messages, its last (user) turn's text, and with `reply_ok` the
    assistant turn that ends a whole conversation (a chat dataset's `messages`, TRL's SFT form: the prompt is
    the turns before it, the reply its reference solution), else ''."""
    if not is_chat(value):
        raise RlvrError(f"{where}: the prompt is a list but not of chat messages "
                        "({'role': ..., 'content': <text>}); give text or a list of messages")
    reply = ""
    if reply_ok and len(value) > 1 and value[-1]["role"] == "assistant":
        reply, value = value[-1]["content"], value[:-1]
    if value[-1]["role"] != "user":
        raise RlvrError(f"{where}: a conversational prompt must end with a user message, this one ends "
                        f"with {value[-1]['role']!r}")
    return tuple(dict(m) for m in value), value[-1]["content"], reply


def _value(row: dict, key: str, col: str, columns: dict[str, str], where: str):
    """A mapped key's value, "" when absent and allowed to be; required keys raise naming the column."""
    try:
        value, present = lookup(row, col), True
    except KeyError:
        value, present = None, False
    missing = value is None or (isinstance(value, str) and not value.strip())
    if missing and key not in OPTIONAL and (key in columns or key == "prompt"):
        what = f"an empty '{col}'" if present else f"no column '{col}'"
        mapped = f" (task.columns.{key})" if key in columns else ""
        likely = [c for c in PROMPT_NAMES if c in row] if key == "prompt" and present is False else []
        hint = f"; name it with --task.columns.prompt={likely[0]}" if likely else ""
        raise RlvrError(f"{where}: {what} for {key}{mapped}; the row has columns {', '.join(map(str, row))}{hint}")
    return None if missing else value


def _tests(value, row: dict, prompt: str, column: str, where: str, fence: str) -> tuple[str, str]:
    """A row's tests in any form rlvr reads (rlvr.tasks.code_forms) as a spec's JSON text, and the prompt
    with what it must show: a visible test, and `fence` (the rule that the answer is a fenced block)
    unless the prompt already speaks of one."""
    try:
        spec, shown = dataset_tests(value, row, prompt)
    except ValueError as e:
        raise RlvrError(f"{where}: column '{column}' (tests): {e}") from None
    prompt = prompt.rstrip() + shown if shown else prompt
    return spec, prompt.rstrip() + fence if fence and "```" not in prompt else prompt


def to_problem(row: dict, columns: dict[str, str], where: str, fence: str = "") -> Problem:
    """One row through the column mapping; mapped columns other than difficulty and solution are
    required in every row, and every row needs a prompt (text, or chat messages: TRL's conversational
    form). The gold answer may be absent: a reward that needs it says so (check_gold). Every column stays
    on the problem for the reward functions and an environment's reset, but one named `prompt`: rewards get
    the prompt as `prompts`, as TRL passes it; a prompt read from another column (task.columns.prompt=
    question) is also passed under that column's own name, since a reward written for the data asks for it.
    A row with tests (any form of rlvr.tasks.code_forms) gets `fence` added to its prompt (_tests), and its
    solution is made the fenced answer that prompt asks for (rlvr.tasks.code_forms.reference_reply). A whole
    conversation read from a column other than `prompt` (a chat dataset's `messages`) is prompted up to its
    last user turn, and its closing assistant turn is the row's solution unless a solution column gives one."""
    values, messages, reply, asked = {}, (), "", ""
    for key in KEYS:
        col = gold_column(row, columns) if key == "answer" else columns.get(key, key)
        value = _value(row, key, col, columns, where)
        if key == "prompt" and isinstance(value, list):
            # TRL's `prompt` ending with an assistant turn asks to continue it, which rlvr does not; a
            # conversation under another name (`messages`) ends with its reference reply
            messages, value, reply = chat_prompt(value, where, reply_ok=col != "prompt")
        if key == "tests" and value is not None:
            asked = values["prompt"]  # the prompt's own text (HumanEval's code), before what _tests adds
            values[key], values["prompt"] = _tests(value, row, values["prompt"], col, where, fence)
            continue
        values[key] = "" if value is None else _text(value, key, where)
    values["solution"] = values["solution"] or reply
    if values["tests"] and values["solution"]:  # graded, shown and taught as the answer the prompt asks for
        values["solution"] = reference_reply(values["solution"], asked, values["tests"])
    rest = {k: v for k, v in row.items() if k != "prompt"}
    return Problem(question=values["prompt"], answer=values["answer"], difficulty=values["difficulty"],
                   tests=values["tests"], solution=values["solution"],
                   messages=messages, row=rest, origin=where)


def gold_candidates(row: dict) -> list[str]:
    """The columns of a row that hold a final answer rlvr's checker reads out of a worked solution (a
    `\\boxed{...}`, as MATH's `solution`, or GSM8K's `#### N`): where the gold is when `answer` is absent."""
    return [k for k, v in row.items() if isinstance(v, str) and ("\\boxed" in v or "####" in v)]


def check_gold(problems: list[Problem], reward: str, column: str) -> None:
    """A built-in reward that compares with the gold answer needs one in every row: the first row
    without it is an error naming the file, the row and the column, and the column that holds a boxed
    or `####` answer when the row has one."""
    for p in problems:
        if not p.answer and not p.tests:
            held = gold_candidates(p.row)
            where = (f"column '{held[0]}' holds a worked solution with a final answer (a \\boxed{{...}} or "
                     f"'#### N'): --task.columns.answer={held[0]} makes its final answer the gold"
                     if held else "name the gold column with task.columns.answer (a dotted name reaches nested "
                     "fields, e.g. reward_model.ground_truth)")
            raise RlvrError(f"{p.origin or repr(p.question[:60])}: no gold answer in column '{column}', which "
                            f"the '{reward}' reward compares with; {where}, or drop '{reward}' from "
                            f"rewards.weights (the row has columns {', '.join(map(str, p.row))})")

def load_problems(name: str, columns: dict[str, str], notes: list[str], read=read_rows, fence: str = "") -> list[Problem]:
    """The source's rows (`read(name)`) as Problems; a note when a mapped optional column is in none of them.
    `fence`: what a code row's prompt is told of the answer's form (to_problem)."""
    unknown = sorted(set(columns) - set(KEYS))
    if unknown:
        raise RlvrError(f"task.columns has unknown key {', '.join(unknown)}; keys are {', '.join(KEYS)}")
    rows = read(name)
    for key in OPTIONAL:
        if key in columns and not any(columns[key] in row for _, row in rows):
            notes.append(f"{name}: no row has column '{columns[key]}' (task.columns.{key})")
    return [to_problem(row, columns, f"{source_label(name)} {where}", fence) for where, row in rows]


def _sample(problems: list[Problem], n: int, rng: random.Random) -> list[Problem]:
    """n of them, chosen by rng, in file order."""
    keep = set(rng.sample(range(len(problems)), n))
    return [p for i, p in enumerate(problems) if i in keep]


def scaled_heldout(rows: int, name: str, notes: list[str]) -> int:
    """The held-out rows to carve out of a train file when task.heldout_size is null: HELDOUT_SIZE, but a
    fifth of a file under five times that, so a small file of the user's own still trains (with a note)."""
    if rows >= 5 * HELDOUT_SIZE:
        return HELDOUT_SIZE
    size = max(1, rows // 5)
    notes.append(f"{name}: {rows} rows: holding out {size} (a fifth) and training on the rest; "
                 f"set task.heldout_size or task.heldout_file to choose")
    return size


def file_splits(name: str, columns: dict[str, str], heldout_file: str, ood_file: str, heldout_size: int | None,
                ood_size: int, train_size: int, few_shot: int, seed: int, read=read_rows, fence: str = "") -> Splits:
    """Held-out from heldout_file, or heldout_size rows carved (seeded) out of the train file; few-shot
    turns are the first train rows with a solution; OOD from ood_file (else empty). `read`: how a source's
    rows are read, by name (a Hub dataset's splits: rlvr.tasks.hub_splits); `fence`: added to the prompt of
    each row with tests (rlvr.tasks.code_forms.FENCE, unless the template speaks of the fence)."""
    rng, notes = random.Random(seed), []
    rows = load_problems(name, columns, notes, read, fence)
    if heldout_file:
        held = load_problems(heldout_file, columns, notes, read, fence)
        heldout_size = HELDOUT_SIZE if heldout_size is None else heldout_size
        if heldout_size < len(held):
            notes.append(f"{heldout_file}: {len(held)} rows; using task.heldout_size={heldout_size} of them")
            held = _sample(held, heldout_size, rng)
        train = rows
    else:
        if heldout_size is None:
            heldout_size = scaled_heldout(len(rows), source_label(name), notes)
        if heldout_size >= len(rows):
            raise RlvrError(f"{name} has {len(rows)} rows, too few to carve task.heldout_size={heldout_size} "
                            f"held-out rows and keep some for training: lower it or set task.heldout_file")
        carved = set(rng.sample(range(len(rows)), heldout_size))
        held = [p for i, p in enumerate(rows) if i in carved]
        train = [p for i, p in enumerate(rows) if i not in carved]
    shots = [p for p in train if p.solution][:few_shot]
    if len(shots) < few_shot:
        notes.append(f"{name}: task.few_shot is {few_shot} but only {len(shots)} train rows have a solution; "
                     f"using {len(shots)} worked examples")
    picked = {id(p) for p in shots}
    train = [p for p in train if id(p) not in picked]
    if train_size and len(train) > train_size:
        train = train[:train_size]
    ood = []
    if ood_file:
        ood = load_problems(ood_file, columns, notes, read, fence)
        if ood_size < len(ood):
            notes.append(f"{ood_file}: {len(ood)} rows; using task.ood_size={ood_size} of them")
            ood = _sample(ood, ood_size, rng)
    return Splits(train=train, heldout=held, ood=ood, few_shot=[(p.question, p.solution) for p in shots],
                  notes=notes)
