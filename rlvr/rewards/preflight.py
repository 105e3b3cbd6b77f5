"""Every reward called on a few real rows before anything else runs, so that a reward that cannot run
on this data stops the run within seconds, naming the parameter, the row's columns and the likely fix,
instead of after the first evaluation with "raised on every completion".

Each row's completion is its reference answer (the worked solution, else the gold: as it is when it is
itself a worked solution with a `####` or `\\boxed{}` answer, else 'Answer: <gold>'), in the
dataset's form, with the columns training passes. `diagnose` reads a reward's exception: a parameter
no column feeds, a verl compute_score named without 'verl:', 'verl:' on a TRL function, a return that
is not one number per completion. `rlvr audit` uses it too.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

from rlvr.errors import RlvrError
from rlvr.rewards.base import RewardFunction, Scores, score_batch
from rlvr.text import clean_reason, traceback_text
from rlvr.rewards.call import NOT_APPLICABLE, RESERVED, CallTimedOut, TrainerState, as_chat, dataset_columns
from rlvr.rewards.verl import VERL_PREFIX
from rlvr.rewards.maths.accuracy import math_accuracy, math_accuracy_verdict
from rlvr.rewards.maths.answer import gold_answer
from rlvr.tasks import Problem
from rlvr.tasks.files import check_gold

ROWS = 3  # rows each reward is called on
VERL_NAMES = ("data_source", "solution_str", "ground_truth", "extra_info", "solution_strs", "ground_truths")
NEEDS_EPISODES = ("env",)  # built-ins fed by the environment's columns, which only an episode makes
_MISSING = re.compile(r"missing \d+ required (?:positional|keyword-only) arguments?: (.*)")


def gold_completion(gold: str) -> str:
    """A gold answer written as a right completion: a gold that is itself a worked solution (GSM8K's
    answer ending in `#### 72`, MATH's solution with its `\\boxed{}`) as it is, since an answer line put
    before it would make a second final answer; any other gold on an answer line."""
    return gold if "####" in gold or "\\boxed" in gold else f"Answer: {gold}"


def reference(p: Problem) -> str | None:
    """What a right answer to p looks like: its worked solution, else its gold as a completion."""
    return p.solution or (gold_completion(p.answer) if p.answer else None)


def _names(fn) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def missing_names(error: BaseException) -> list[str]:
    """The parameters a call could not fill: a TypeError's 'missing ... argument(s)', or the key of a
    KeyError that could name a column (a **kwargs lookup such as kwargs['solution']; not TABLE['12'], a
    lookup of the reward's own data by a value)."""
    if isinstance(error, KeyError) and error.args and isinstance(error.args[0], str):
        return [error.args[0]] if error.args[0].isidentifier() else []
    m = _MISSING.search(str(error)) if isinstance(error, TypeError) else None
    return re.findall(r"'(\w+)'", m.group(1)) if m else []


def diagnose(rf: RewardFunction, error: BaseException, columns: list[str], chat: bool | None = None) -> str:
    """The likely fix for `error`, raised by reward `rf` on rows that have `columns`; `chat`: whether its
    completions were chat message lists (a conversational dataset) or text, when known."""
    if isinstance(error, CallTimedOut):  # rewards.isolate: the worker was killed at the limit, no bug to show
        return (f"'{rf.name}' took longer than rewards.timeout_s={rf.timeout_s:g}s on one completion; make it "
                "faster or raise rewards.timeout_s (it is called on a batch of completions per step)")
    original = rf.reward.user_fn if rf.reward is not None else None  # a verl scorer's own function
    params = _names(original or rf.fn)
    have = ", ".join(columns)
    if original is not None and "completions" in params:
        return (f"'{rf.name}' is a TRL-style function (it takes completions), not a verl compute_score: remove "
                f"the prefix, rewards.weights key '{rf.spec.removeprefix(VERL_PREFIX)}'")
    if original is None and "completions" not in params and any(n in params for n in VERL_NAMES):
        return (f"'{rf.name}' looks like a verl compute_score (it takes {', '.join(n for n in params if n in VERL_NAMES)}): "
                f"name it with the prefix, rewards.weights key '{VERL_PREFIX}{rf.spec}'")
    missing = [n for n in missing_names(error) if n not in columns]
    if missing:
        return (f"parameter {', '.join(repr(n) for n in missing)} of '{rf.name}' has no column: the row has "
                f"columns {have}. Rename the parameter to the column that holds it, or add the column to the data; "
                "rlvr passes the gold answer as 'answer' (its column is set with task.columns.answer=COLUMN)")
    if isinstance(error, ValueError) and "expected a list of" in str(error):
        return "a TRL reward returns one number (or None) per completion, in a list as long as `completions`"
    said = str(error)
    if chat is False and isinstance(error, TypeError) and "string indices must be integers" in said:
        return ("the completions are text, as TRL passes them for a dataset of text prompts; c[0]['content'] reads "
                "a conversational dataset's ([{'role': 'assistant', 'content': ...}]): read each completion as "
                "text, or give the prompts as lists of chat messages")
    if chat and isinstance(error, AttributeError) and "'list' object has no attribute" in said:
        return ("the completions are lists of chat messages, as TRL passes them for a dataset of conversational "
                "prompts: read each one's text as c[-1]['content']")
    return f"the row has columns {have}; {GENERIC}"


@dataclass(kw_only=True)
class Preflight:
    """What the preflight found: per reward, the rows it failed on and the first error with its diagnosis,
    and the correctness rewards that gave every reference answer nothing: 0, or None/NaN ("does not apply")
    for every one of them (not_applicable)."""

    rows: int = 0
    failed: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (rows failed, message)
    zero: list[str] = field(default_factory=list)
    not_applicable: list[str] = field(default_factory=list)


GENERIC = "fix the reward so it runs on them"


def _first_line(error: BaseException) -> str:
    return clean_reason(f"{type(error).__name__}: {error}", 400)


def preflight(rewards: list[RewardFunction], problems: list[Problem], strict: tuple[str, ...] = ()) -> Preflight:
    """Call each reward (those an episode feeds excepted) on up to ROWS problems with a reference
    answer, one reward at a time. `strict`: rewards that check correctness, which must pay for some
    reference answer (else listed in `zero`)."""
    rows = [(p, r) for p in problems if (r := reference(p)) is not None][:ROWS]
    out = Preflight(rows=len(rows))
    if not rows:
        return out
    columns = dataset_columns([p for p, _ in rows], 1)
    visible = [k for k in columns if k not in RESERVED]
    for rf in rewards:
        if rf.name in NEEDS_EPISODES:
            continue
        errors: list[BaseException] = []
        scores = _call(rf, rows, columns, errors.append)
        bad = sum(scores.failed[rf.name])
        if bad:
            fix = diagnose(rf, errors[0], visible, chat=bool(rows[0][0].messages))
            # a bug inside it, or a KeyError that may be one (a dict of its own, not a column): where
            trace = f"\n{traceback_text(errors[0])}" if fix.endswith(GENERIC) or isinstance(errors[0], KeyError) else ""
            out.failed[rf.name] = (bad, f"{_first_line(errors[0])}. Likely fix: {fix}{trace}")
        elif rf.name in strict and all(r == NOT_APPLICABLE for r in scores.reasons[rf.name]):
            out.not_applicable.append(rf.name)
        elif rf.name in strict and max(scores.per_function[rf.name]) <= 0 and not _pays_another_form(rf, rows, columns):
            out.zero.append(rf.name)
    return out


def _call(rf: RewardFunction, rows: list[tuple[Problem, str]], columns: dict[str, list], on_error) -> Scores:
    completions = [as_chat(p, r) for p, r in rows]
    cols = {**columns, "completion_ids": [list(range(max(1, len(r) // 4))) for _, r in rows]}  # no tokenizer yet
    origins = [p.origin or repr(p.question[:80]) for p, _ in rows]  # a reward that overruns names its file and line
    return score_batch([rf], completions, cols, lambda name, e, row: on_error(e), shared={"trainer_state": TrainerState()},
                       origins=origins)


def _pays_another_form(rf: RewardFunction, rows: list[tuple[Problem, str]], columns: dict[str, list]) -> bool:
    """Whether the gold in another common final-answer form scores above 0 (a verl gsm8k scorer reads
    only '#### N'): a correctness check that reads its own form is not a wrong set-up."""
    for form in ("Answer: {}", "#### {}", "\\boxed{{{}}}", "<answer>{}</answer>", "{}"):
        shaped = [(p, form.format(gold_answer(p.answer))) for p, _ in rows]  # the value, not a worked solution
        if max(_call(rf, shaped, columns, lambda e: None).per_function[rf.name]) > 0:
            return True
    return False


def zero_cause(problems: list[Problem]) -> str:
    """What a correctness reward that pays no reference answer most likely says: for code rows whose
    reference solution has no fence, that (the code reward runs a completion's last fenced block, so a bare
    program scores 0, as would a model taught by those solutions); else that the gold may be read wrongly."""
    bare = [p for p in problems if p.tests and p.solution and "```" not in p.solution]
    if bare:
        return (f"{len(bare)} of their reference solutions (task.columns.solution) have no ```python fence, and "
                "the code reward runs only a completion's last fenced block; fence them in the data (few-shot turns "
                "and rlvr sft teach the model the solutions' form)")
    return "it may read the gold or the answer in another form than your data gives it (check its gold column)"


def check_rewards(rewards: list[RewardFunction], problems: list[Problem], strict: tuple[str, ...] = (),
                  env_columns: bool = False) -> list[str]:
    """Run the preflight; raise RlvrError when a reward fails on every row tried (naming each such
    reward, its error and the likely fix); return warnings for the rest. `env_columns`: an environment
    adds columns of its own, so a parameter no dataset column feeds is a warning, not an error."""
    found = preflight(rewards, problems, strict)
    stops, warnings = [], []
    for name, (bad, message) in found.failed.items():
        line = f"reward '{name}' raised on {bad} of {found.rows} rows tried (each given its reference answer): {message}"
        every = bad == found.rows and not (env_columns and "has no column" in message)
        (stops if every else warnings).append(line)
    for name in found.not_applicable:
        warnings.append(f"reward '{name}' returned None or NaN (does not apply) for the reference answers of all "
                        f"{found.rows} rows tried, so it would score no completion of this data: check that it "
                        "recognises these rows (their data_source, columns or answer form)")
    for name in found.zero:
        warnings.append(f"reward '{name}' gave the reference answers of all {found.rows} rows tried 0: "
                        + zero_cause([p for p in problems if reference(p) is not None][:ROWS]))
    if stops:
        raise RlvrError("the rewards were tried on the first rows of the data before training, and failed:\n  "
                        + "\n  ".join(stops))
    return warnings


def check_gold_answers(rewards: list[RewardFunction], splits, columns: dict[str, str]) -> list[str]:
    """Every problem has the gold answer a built-in reward compares with (rlvr.tasks.files.check_gold) and
    test code that can run here (check_test_modules); raises RlvrError naming the first row that has not.
    Returns warnings: held-out/OOD rows without a gold, which evaluation grades wrong."""
    problems = splits.train + splits.heldout + splits.ood
    for rf in rewards:
        if rf.reward is not None and "answer" in rf.reward.columns:
            check_gold(problems, rf.name, columns.get("answer", "answer"))
    if any(rf.reward is not None and "tests" in rf.reward.columns for rf in rewards):
        check_test_modules(problems)
    warnings = maths_gold_note(problems) if any(rf.fn is math_accuracy for rf in rewards) else []
    bare = sum(1 for p in splits.heldout + splits.ood if not p.answer and not p.tests)
    if bare:  # the user's own rewards may not need a gold answer, but evaluation grades against it
        warnings.append(f"{bare} held-out/OOD problems have no gold answer (column "
                        f"'{columns.get('answer', 'answer')}'): evaluation grades them wrong; name it with "
                        "task.columns.answer")
    return warnings


GOLD_CHECKS = 20  # gold answers scored by the maths checker before a run


def maths_gold_note(problems: list[Problem]) -> list[str]:
    """A note when gold answers written 'Answer: <gold>' do not score 1 with the maths checker (the built-in
    correctness reward): a task whose golds it cannot read (some reasoning-gym datasets) needs its own."""
    golds = [p for p in problems if p.answer and not p.tests][:GOLD_CHECKS]
    failed = [p for p in golds if math_accuracy_verdict(gold_completion(p.answer), p.answer).score != 1.0]
    if not failed:
        return []
    return [f"{len(failed)} of {len(golds)} gold answers checked do not score 1 with the maths checker (the "
            f"correctness reward) even when written 'Answer: <gold>' (e.g. {failed[0].answer!r}); give this task "
            f"its own reward function"]


def check_test_modules(problems: list[Problem]) -> None:
    """Test code that imports a module this interpreter lacks can judge no program: refused before
    training (naming the module and the install line) instead of scoring every program on it 0. A spec
    that does not parse is an error naming its row."""
    from rlvr.rewards.code.checks import MissingModule
    from rlvr.rewards.code.spec import parse_spec

    missing = []
    for p in problems:
        try:
            parse_spec(p.tests) if p.tests else None
        except MissingModule as e:
            missing.append(str(e))
        except ValueError as e:   # a malformed spec judges nothing: named with its row, before training
            raise RlvrError(f"{p.origin or repr(p.question[:60])}: the tests cannot be read: {e}") from None
    if missing:
        raise RlvrError(f"{len(missing)} problems' test code cannot run here; the first: {missing[0]}")
