"""Procedural integer arithmetic: `a op b op c ...` with usual precedence, seeded, three disjoint splits.

Every problem carries a worked solution (column addition with carries, column subtraction with
borrows, multiplication by place-value parts) ending in "Answer: N", for SFT and few-shot turns.
"""
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
_PLACES = ("ones", "tens", "hundreds", "thousands", "ten-thousands", "hundred-thousands", "millions",
           "ten-millions", "hundred-millions", "billions")


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


def _place(i: int) -> str:
    return _PLACES[i] if i < len(_PLACES) else f"column {i + 1}"


def _digit(n: int, i: int) -> int | None:
    """Digit i (0 = ones) of n >= 0, None past its leading digit."""
    text = str(n)
    return int(text[-1 - i]) if i < len(text) else None


def column_add(x: int, y: int) -> list[str]:
    """x + y for x, y >= 0, one line per column with its carry."""
    if x < 10 and y < 10:
        return [f"{x} + {y} = {x + y}"]
    lines, carry = [f"{x} + {y}, column by column:"], 0
    width = max(len(str(x)), len(str(y)))
    for i in range(width):
        parts = [d for d in (_digit(x, i), _digit(y, i)) if d is not None] + ([carry] if carry else [])
        total = sum(parts)
        head = f"{' + '.join(map(str, parts))} = {total}, " if len(parts) > 1 else ""
        carry = total // 10
        lines.append(f"{_place(i)}: {head}write {total % 10}" + (f" carry {carry}" if carry else ""))
    if carry:
        lines.append(f"{_place(width)}: write the carry {carry}")
    return lines + [f"{x} + {y} = {x + y}"]


def column_sub(x: int, y: int) -> list[str]:
    """x - y for x >= y >= 0, one line per column with its borrow."""
    if x < 10:
        return [f"{x} - {y} = {x - y}"]
    lines, borrow = [f"{x} - {y}, column by column:"], 0
    for i in range(len(str(x))):
        a, b = _digit(x, i), _digit(y, i) or 0
        value = a - b - borrow
        if i >= len(str(y)) and not borrow:
            lines.append(f"{_place(i)}: write {a}")
            continue
        needs = value < 0
        terms = [a + 10 if needs else a] + ([b] if i < len(str(y)) else []) + ([1] if borrow else [])
        head = f"borrow 1 from the {_place(i + 1)}, " if needs else ""
        lines.append(f"{_place(i)}: {head}{' - '.join(map(str, terms))} = {value % 10}, write {value % 10}")
        borrow = 1 if needs else 0
    return lines + [f"{x} - {y} = {x - y}"]


def _place_parts(n: int) -> list[int]:
    """47 -> [40, 7]; zero digits dropped."""
    text = str(n)
    return [int(c) * 10 ** (len(text) - 1 - i) for i, c in enumerate(text) if c != "0"]


def product(x: int, y: int) -> list[str]:
    """x * y for x, y >= 0: split the factor with fewer non-zero digits (at least two) by place value."""
    px, py = _place_parts(x), _place_parts(y)
    candidates = [p for p in (px, py) if len(p) >= 2]
    if not candidates:
        return [f"{x} * {y} = {x * y}"]
    parts = min(candidates, key=len)
    if parts is py:
        shown = [f"{x} * {p}" for p in parts]
        values = [x * p for p in parts]
    else:
        shown = [f"{p} * {y}" for p in parts]
        values = [p * y for p in parts]
    return [f"{x} * {y} = {' + '.join(shown)} = {' + '.join(map(str, values))} = {x * y}"]


def add_step(acc: int, t: int) -> list[str]:
    """acc + t for t >= 0 (acc may be negative after a subtraction)."""
    if abs(acc) < 10 and t < 10:
        return [f"{acc} + {t} = {acc + t}"]
    if acc >= 0:
        return column_add(acc, t)
    return [f"{acc} + {t} = {t} - {-acc}"] + sub_step(t, -acc)


def sub_step(acc: int, t: int) -> list[str]:
    """acc - t for t >= 0 (acc may be negative)."""
    if abs(acc) < 10 and t < 10:
        return [f"{acc} - {t} = {acc - t}"]
    if acc >= t:
        return column_sub(acc, t)
    if acc >= 0:
        return ([f"{acc} - {t} is negative, so work out {t} - {acc} and negate it:"]
                + column_sub(t, acc) + [f"so {acc} - {t} = {acc - t}"])
    return ([f"{acc} - {t} is negative, so work out {-acc} + {t} and negate it:"]
            + column_add(-acc, t) + [f"so {acc} - {t} = {acc - t}"])


def solution(numbers: list[int], ops: list[str]) -> str:
    """Worked solution: products first (left to right), then sums and differences left to right."""
    lines, terms, signs = [], [numbers[0]], []
    for op, n in zip(ops, numbers[1:]):
        if op == "*":
            lines += product(terms[-1], n)
            terms[-1] *= n
        else:
            terms.append(n)
            signs.append(op)
    if "*" in ops and signs:
        lines.append(f"Now {expression(terms, signs)}")
    acc = terms[0]
    for sign, t in zip(signs, terms[1:]):
        lines += add_step(acc, t) if sign == "+" else sub_step(acc, t)
        acc = acc + t if sign == "+" else acc - t
    return "\n".join(lines + [f"Answer: {acc}"])


def problem(numbers: list[int], ops: list[str], difficulty: str) -> Problem:
    return Problem(question=INSTRUCTION.format(expr=expression(numbers, ops)), answer=str(evaluate(numbers, ops)),
                   difficulty=difficulty, solution=solution(numbers, ops))


def space_size(digits: int, operands: int, operators: str) -> int:
    return (10 ** digits) ** operands * len(operators) ** (operands - 1)


def draw(digits: int, operands: int, operators: str, n: int, rng: random.Random,
         exclude: set[str]) -> list[Problem]:
    """Up to n distinct problems of one difficulty, none whose normalised question is in `exclude`."""
    if digits < 1 or operands < 2:
        raise RlvrError(f"arithmetic needs digits >= 1 and operands >= 2, got digits={digits}, operands={operands}")
    if not operators or set(operators) - set("+-*"):
        raise RlvrError(f"task.params.operators must be made of + - *, got '{operators}'")
    if n <= 0:
        return []
    difficulty = f"d{digits}-n{operands}"
    top = 10 ** digits - 1
    if space_size(digits, operands, operators) <= _ENUMERATE_LIMIT:
        every = [(ns, os_) for ns in itertools.product(range(top + 1), repeat=operands)
                 for os_ in itertools.product(operators, repeat=operands - 1)]
        rng.shuffle(every)
        chosen = []
        for ns, os_ in every:
            if len(chosen) == n:
                break
            if normalise(INSTRUCTION.format(expr=expression(list(ns), list(os_)))) not in exclude:
                chosen.append(problem(list(ns), list(os_), difficulty))
        return chosen
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


def _even(total: int, parts: int) -> list[int]:
    """total split into `parts` near-equal counts, the remainder going to the harder (later) parts."""
    base, extra = divmod(total, parts)
    return [base + (1 if i >= parts - extra else 0) for i in range(parts)]


PARAMS = {"digits": 1, "operands": 2, "operators": "+-*", "min_digits": 0}   # task.params and defaults
OOD_PARAMS = {"digits": 2, "operands": 2}   # task.ood_params: the OOD split draws with task.params' operators


def settings(params: dict, ood_params: dict) -> dict:
    """arithmetic_splits' difficulty arguments from task.params and task.ood_params, defaults filled in;
    an unknown setting is an error naming the valid ones."""
    for where, given, known in (("task.params", params, PARAMS), ("task.ood_params", ood_params, OOD_PARAMS)):
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise RlvrError(f"{where}: the arithmetic task has no setting {', '.join(unknown)}; its settings are "
                            f"{', '.join(f'{k} (default {v!r})' for k, v in known.items())}")
    p, o = {**PARAMS, **params}, {**OOD_PARAMS, **ood_params}
    return {"digits": p["digits"], "operands": p["operands"], "operators": str(p["operators"]),
            "min_digits": p["min_digits"], "ood_digits": o["digits"], "ood_operands": o["operands"]}


def arithmetic_splits(digits: int, operands: int, operators: str, ood_digits: int, ood_operands: int,
                      heldout_size: int, ood_size: int, train_size: int, few_shot: int, seed: int,
                      min_digits: int = 0) -> Splits:
    """Train and held-out span digit levels min_digits..digits (one level when min_digits is 0),
    balanced where each level's space allows; OOD is harder; all three are disjoint by question."""
    if few_shot > len(EXAMPLES):
        raise RlvrError(f"task.few_shot is {few_shot}; the arithmetic task has {len(EXAMPLES)} worked examples")
    low = min_digits or digits
    if not 1 <= low <= digits:
        raise RlvrError(f"task.params.min_digits must be between 1 and task.params.digits ({digits}), or 0; "
                        f"got {min_digits}")
    rng = random.Random(seed)
    exclude = {normalise(INSTRUCTION.format(expr=q)) for q, _ in EXAMPLES}
    levels = list(range(low, digits + 1))
    heldout, train = [], []
    for k, n_held, n_train in zip(levels, _even(heldout_size, len(levels)),
                                  _even(train_size or _DEFAULT_TRAIN_CAP, len(levels))):
        pool = draw(k, operands, operators, min(n_held + n_train, space_size(k, operands, operators)),
                    rng, exclude)
        if len(pool) < n_held + 1:
            raise RlvrError(f"only {len(pool)} distinct problems at digits={k}, operands={operands}: "
                            f"lower task.heldout_size ({heldout_size})")
        heldout += pool[:n_held]
        train += pool[n_held:n_held + n_train]
        exclude |= {normalise(p.question) for p in pool}
    if len(levels) > 1:
        rng.shuffle(heldout)
        rng.shuffle(train)
    ood = draw(ood_digits, ood_operands, operators, ood_size, rng, exclude)
    return Splits(train=train, heldout=heldout, ood=ood,
                  few_shot=[(INSTRUCTION.format(expr=q), a) for q, a in EXAMPLES[:few_shot]])
