"""Procedural integer arithmetic: `a op b op c ...` with usual precedence, seeded, three disjoint splits."""
from __future__ import annotations

import itertools
import random

from rlvr.errors import RlvrError
from rlvr.tasks.base import Problem, Splits, normalise

INSTRUCTION = "What is {expr}? End with a line 'Answer: <number>'."
# Worked examples shown as earlier chat turns; their expressions never appear in a split.
EXAMPLES = [("3 + 4", "3 + 4 = 7\nAnswer: 7"), ("6 * 2", "6 * 2 = 12\nAnswer: 12"),
            ("5 - 9", "5 - 9 = -4\nAnswer: -4")]
_ENUMERATE_LIMIT = 200_000
_DEFAULT_TRAIN_CAP = 10_000  # train problems when task.train_size is 0 and the space is larger


def evaluate(numbers: list[int], ops: list[str]) -> int:
    """Value of numbers[0] ops[0] numbers[1] ... with * before + and -."""
    terms, signs = [numbers[0]], []
    for op, n in zip(ops, numbers[1:]):
        if op == "*":
            terms[-1] *= n
        else:
            terms.append(n)
            signs.append(1 if op == "+" else -1)
    return terms[0] + sum(s * t for s, t in zip(signs, terms[1:]))


def expression(numbers: list[int], ops: list[str]) -> str:
    return " ".join([str(numbers[0])] + [f"{o} {n}" for o, n in zip(ops, numbers[1:])])


def problem(numbers: list[int], ops: list[str], difficulty: str) -> Problem:
    return Problem(INSTRUCTION.format(expr=expression(numbers, ops)), str(evaluate(numbers, ops)), difficulty)


def space_size(digits: int, operands: int, operators: str) -> int:
    return (10 ** digits) ** operands * len(operators) ** (operands - 1)


def draw(digits: int, operands: int, operators: str, n: int, rng: random.Random,
         exclude: set[str]) -> list[Problem]:
    """Up to n distinct problems of one difficulty, none whose normalised question is in `exclude`."""
    if digits < 1 or operands < 2:
        raise RlvrError(f"arithmetic needs digits >= 1 and operands >= 2, got digits={digits}, operands={operands}")
    if not operators or set(operators) - set("+-*"):
        raise RlvrError(f"task.operators must be made of + - *, got '{operators}'")
    difficulty = f"d{digits}-n{operands}"
    top = 10 ** digits - 1
    if space_size(digits, operands, operators) <= _ENUMERATE_LIMIT:
        every = [problem(list(ns), list(os_), difficulty)
                 for ns in itertools.product(range(top + 1), repeat=operands)
                 for os_ in itertools.product(operators, repeat=operands - 1)]
        rng.shuffle(every)
        chosen = [p for p in every if normalise(p.question) not in exclude]
        return chosen[:n]
    chosen, seen = [], set(exclude)
    for _ in range(50 * n):
        if len(chosen) == n:
            break
        p = problem([rng.randint(0, top) for _ in range(operands)],
                    [rng.choice(operators) for _ in range(operands - 1)], difficulty)
        if normalise(p.question) not in seen:
            seen.add(normalise(p.question))
            chosen.append(p)
    return chosen


def arithmetic_splits(digits: int, operands: int, operators: str, ood_digits: int, ood_operands: int,
                      heldout_size: int, ood_size: int, train_size: int, few_shot: int, seed: int) -> Splits:
    """Train and held-out share a difficulty; OOD is harder; all three are disjoint by question."""
    if few_shot > len(EXAMPLES):
        raise RlvrError(f"task.few_shot is {few_shot}; the arithmetic task has {len(EXAMPLES)} worked examples")
    rng = random.Random(seed)
    shots = EXAMPLES[:few_shot]
    exclude = {normalise(INSTRUCTION.format(expr=q)) for q, _ in EXAMPLES}
    want = heldout_size + (train_size or _DEFAULT_TRAIN_CAP)
    pool = draw(digits, operands, operators, min(want, space_size(digits, operands, operators)), rng, exclude)
    if len(pool) < heldout_size + 1:
        raise RlvrError(f"only {len(pool)} distinct problems at digits={digits}, operands={operands}: "
                        f"lower task.heldout_size ({heldout_size})")
    heldout, train = pool[:heldout_size], pool[heldout_size:]
    if train_size:
        train = train[:train_size]
    exclude |= {normalise(p.question) for p in pool}
    ood = draw(ood_digits, ood_operands, operators, ood_size, rng, exclude)
    return Splits(train=train, heldout=heldout, ood=ood,
                  few_shot=[(INSTRUCTION.format(expr=q), a) for q, a in shots])
