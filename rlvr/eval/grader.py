"""Which check evaluation counts as correct: the built-in checker, or a correctness reward of the user's.

A run that trains on its own `compute_score` or TRL function (a prompt asking for `#### N`, say) is
graded by that function in every evaluation: held-out and OOD accuracy, flips, the skill rules and
`rlvr eval`'s pass@k and maj@k. eval.grader names it (a rewards.weights key, or `builtin`); left empty
it is chosen (choose_grader) and the choice is said on the console with the reason.

A user grader's score counts as correct at eval.grader_threshold or above (1.0: the full score of a
0/1 reward; verl's gsm8k scorer gives a well-formed wrong answer its format_score, below 1).
"""
from __future__ import annotations

from dataclasses import dataclass

from rlvr.errors import RlvrError
from rlvr.rewards.base import RewardFunction, score_batch, short_name
from rlvr.rewards.call import TrainerState, as_chat, dataset_columns
from rlvr.tasks import Problem

BUILTIN = "builtin"
BUILTIN_CHECKS = ("correctness", "code_tests")  # rewards.weights names that are the built-in checker itself
NOT_GRADERS = ("format", "length", "env")  # built-ins that do not check the answer


@dataclass(kw_only=True, frozen=True)
class Grader:
    """The check evaluation counts as correct. `reward` is None for the built-in checker."""

    name: str = BUILTIN
    reward: RewardFunction | None = None
    threshold: float = 1.0
    why: str = "the default"

    @property
    def user(self) -> bool:
        return self.reward is not None

    def line(self) -> str:
        """The console line saying which grader evaluation uses and why."""
        if not self.user:
            return f"evaluation graded by the built-in answer checker ({self.why})"
        return (f"evaluation graded by your reward '{self.name}' ({self.why}): a completion is correct when it "
                f"scores {self.threshold:g} or more (eval.grader_threshold); the built-in format-free grade "
                "stays beside it. Choose another with eval.grader=NAME or eval.grader=builtin")


def _is_user(rf: RewardFunction) -> bool:
    return rf.name not in BUILTIN_CHECKS + NOT_GRADERS


def choose_grader(rewards: list[RewardFunction], name: str = "", threshold: float = 1.0) -> Grader:
    """The grader eval.grader names, or the automatic choice: the built-in checker when the rewards
    include it (correctness, code_tests); else the user's reward that says it checks correctness
    (verl scorers, or a function with `checks_correctness = True`), else the user's reward of the
    highest weight (the first of equals); else the built-in checker."""
    names = [rf.name for rf in rewards]
    if name == BUILTIN or name in BUILTIN_CHECKS:
        return Grader(why=f"eval.grader={name}")
    if name:
        # a reward's name leaves out a .py file's folders: the key as written in rewards.weights names it too
        chosen = next((rf for rf in rewards if rf.name in (name, short_name(name))), None)
        if chosen is None:
            raise RlvrError(f"eval.grader={name!r} is not a key of rewards.weights (keys: {', '.join(names)}); "
                            f"name one of them or '{BUILTIN}'")
        if name in NOT_GRADERS:
            raise RlvrError(f"eval.grader={name!r}: the built-in '{name}' reward does not check answers; name a "
                            f"correctness reward of rewards.weights or '{BUILTIN}'")
        return Grader(name=chosen.name, reward=chosen, threshold=threshold, why="eval.grader")
    builtin = [n for n in names if n in BUILTIN_CHECKS]
    if builtin:
        return Grader(why=f"rewards.weights has the built-in '{builtin[0]}'")
    users = [rf for rf in rewards if _is_user(rf)]
    marked = [rf for rf in users if rf.checks_correctness]
    if marked:
        kind = "a verl compute_score" if marked[0].name.startswith("verl:") else "marked checks_correctness"
        return Grader(name=marked[0].name, reward=marked[0], threshold=threshold,
                      why=f"{kind}, the first such reward of rewards.weights")
    if users:
        best = max(users, key=lambda rf: rf.weight)  # max keeps the first of equal weights
        why = "your only reward" if len(users) == 1 else "your reward of the highest weight"
        return Grader(name=best.name, reward=best, threshold=threshold, why=why)
    return Grader(why="no reward of yours checks answers")


def user_grades(grader: Grader, problems: list[Problem], texts: list[str],
                inputs: tuple[list, dict[str, list]] | None = None) -> list[tuple[float, float, str]]:
    """(correct 0/1, score, reason) of each completion under the user's grader, called as training calls
    it: `inputs` (the episodes' completions and columns, environments' included), else each text in the
    dataset's form with its row's columns; trainer_state. A grader that raises on every completion stops
    with the row and traceback (rlvr.rewards.base.score_batch)."""
    if inputs is None:
        inputs = [as_chat(p, t) for p, t in zip(problems, texts)], dataset_columns(problems, 1)
    completions, columns = inputs
    origins = [p.origin or repr(p.question[:80]) for p in problems]
    scores = score_batch([grader.reward], completions, columns, shared={"trainer_state": TrainerState()},
                         origins=origins, stop_if_all_fail=True)
    name = grader.reward.name
    return [(float(s >= grader.threshold), s, r) for s, r in zip(scores.per_function[name], scores.reasons[name])]
