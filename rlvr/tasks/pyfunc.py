"""Procedural function-writing problems (`task.name=pyfunc`), seeded, in levels pyfunc-1 .. pyfunc-4.

Each problem asks for one Python function, states its signature, and shows VISIBLE examples
(`call -> result`); its tests spec (rlvr.rewards.code, kind "function") holds those examples as
visible cases and HIDDEN more (edge cases first) as hidden ones, which decide the reward. The
expected values come from each template's oracle, written apart from the reference solution, which
is the problem's `solution` (one ```python block, for rlvr sft and few-shot turns).

A problem is identified by its template, function name, parameter names and constants: splits and
few-shot turns never share one, so held-out never asks for a function that train asked for. The
templates and levels are in rlvr.tasks.pyfunc_problems. Settings (task.params, task.ood_params):
`levels`, a list of levels (1..4 or 'pyfunc-<n>'); train and held-out default to [1, 2, 3], OOD to [4].
"""
from __future__ import annotations

import itertools
import json
import math
import random
import textwrap
from types import SimpleNamespace

from rlvr.errors import RlvrError
from rlvr.tasks.arithmetic import _even
from rlvr.tasks.base import Problem, Splits
from rlvr.tasks.pyfunc_problems import LEVELS, Template

NAME = "pyfunc"
VISIBLE, HIDDEN, MIN_HIDDEN = 3, 6, 5
DEFAULT_LEVELS, DEFAULT_OOD_LEVELS = (1, 2, 3), (4,)
DEFAULT_TRAIN = 3_000  # train problems when task.train_size is 0
SETTINGS = ("levels",)
INSTRUCTION = "Reply with the complete function in one ```python code block."
_TRIES = 40  # random draws per wanted case before a set of cases is given up
_ATTEMPTS = 10  # sets of cases drawn before a problem is given up


def label(level: int) -> str:
    return f"{NAME}-{level}"


def signature(t: Template, name: str, args: tuple[str, ...]) -> str:
    params = ", ".join(f"{a}: {ann}" for a, (ann, _) in zip(args, t.params))
    return f"{name}({params}) -> {t.returns}"


def fields(t: Template, args: tuple[str, ...], consts: tuple, quote: str = "") -> dict:
    """str.format fields of a template's doc (quote="`") or body: the parameters, then the constants."""
    named = {k: v for (k, _), v in zip(t.consts, consts)}
    return {**named, **{p: f"{quote}{a}{quote}" for p, a in zip("ab", args)}}


def reference(t: Template, name: str, args: tuple[str, ...], consts: tuple) -> str:
    body = t.body.format(**fields(t, args, consts))
    return f"def {signature(t, name, args)}:\n{textwrap.indent(body, '    ')}\n"


def show(name: str, args: tuple, value) -> str:
    return f"{name}({', '.join(map(repr, args))}) -> {value!r}"


def question(t: Template, name: str, args: tuple[str, ...], consts: tuple, visible: list[tuple]) -> str:
    doc = t.doc.format(**fields(t, args, consts, quote="`"))
    examples = "\n".join(show(name, a, v) for a, v in visible)
    return f"Write a Python function `{signature(t, name, args)}` that {doc}.\n\nExamples:\n{examples}\n\n{INSTRUCTION}"


def shows_case(text: str, args: tuple, value) -> bool:
    """Whether `text` gives a case away, by the rule of rlvr audit's leak check (rewards.audit): its
    arguments or its result written out, when at least 4 characters long, appear in the text."""
    return any(len(s) >= 4 and s in text for s in (repr(list(args))[1:-1], repr(value)))


def draw_cases(t: Template, c: SimpleNamespace, rng: random.Random) -> tuple[list, list] | None:
    """VISIBLE random cases, then up to HIDDEN others (edge cases first); None when too few distinct
    ones turn up. Cases are (args, expected) with distinct args."""
    seen, visible = set(), []
    for _ in range(_TRIES * VISIBLE):
        if len(visible) == VISIBLE:
            break
        args = tuple(t.gen(rng, c))
        if repr(args) not in seen:
            seen.add(repr(args))
            visible.append((args, t.fn(c, *args)))
    candidates = itertools.chain(t.edges(c), (tuple(t.gen(rng, c)) for _ in range(_TRIES * HIDDEN)))
    hidden = []
    for args in candidates:
        if len(hidden) == HIDDEN:
            break
        if repr(args) not in seen:
            seen.add(repr(args))
            hidden.append((args, t.fn(c, *args)))
    if len(visible) < VISIBLE or len(hidden) < MIN_HIDDEN:
        return None
    return visible, hidden


def make_problem(t: Template, level: int, name: str, args: tuple[str, ...], consts: tuple,
                 rng: random.Random) -> Problem | None:
    """The problem, or None when no good set of cases turns up: one where the visible examples'
    results differ (they say something, and a constant function fails) and no hidden case shows
    in the prompt."""
    c = SimpleNamespace(**{k: v for (k, _), v in zip(t.consts, consts)})
    for _ in range(_ATTEMPTS):
        cases = draw_cases(t, c, rng)
        if cases is None:
            continue
        visible, hidden = cases
        text = question(t, name, args, consts, visible)
        hidden = [(a, v) for a, v in hidden if not shows_case(text, a, v)]
        if len(hidden) >= MIN_HIDDEN and len({repr(v) for _, v in visible}) > 1:
            spec = {"kind": "function", "entry_point": name,
                    "cases": [{"args": list(a), "expected": v} for a, v in visible],
                    "hidden": [{"args": list(a), "expected": v} for a, v in hidden]}
            solution = f"```python\n{reference(t, name, args, consts)}```"
            return Problem(question=text, answer="", difficulty=label(level), tests=json.dumps(spec), solution=solution)
    return None


def identity(t: Template, rng: random.Random) -> tuple[str, tuple[str, ...], tuple] | None:
    """A random (function name, parameter names, constants) of t; None when the constants break t.ok."""
    name = rng.choice(t.names)
    args = tuple(rng.choice(choices) for _, choices in t.params)
    consts = tuple(rng.choice(choices) for _, choices in t.consts)
    ok = t.ok(SimpleNamespace(**{k: v for (k, _), v in zip(t.consts, consts)}))
    return (name, args, consts) if ok else None


def space_size(level: int) -> int:
    """How many distinct problems (template, names, constants) level `level` has."""
    total = 0
    for t in LEVELS[level]:
        combos = itertools.product(*(choices for _, choices in t.consts))
        valid = sum(1 for cs in combos if t.ok(SimpleNamespace(**{k: v for (k, _), v in zip(t.consts, cs)})))
        total += valid * len(t.names) * math.prod(len(choices) for _, choices in t.params)
    return total


def draw(level: int, n: int, rng: random.Random, seen: set) -> list[Problem]:
    """Up to n problems of one level, templates drawn uniformly, none whose identity is in `seen`
    (which gains the new ones)."""
    templates, chosen = LEVELS[level], []
    for _ in range(50 * n):
        if len(chosen) >= n:
            break
        t = rng.choice(templates)
        picked = identity(t, rng)
        if picked is None or (t.key, *picked) in seen:
            continue
        seen.add((t.key, *picked))
        p = make_problem(t, level, *picked, rng)
        if p is not None:
            chosen.append(p)
    return chosen


def parse_levels(params: dict, key: str, default: tuple[int, ...]) -> list[int]:
    """The `levels` setting of task.params / task.ood_params, as level numbers."""
    unknown = sorted(set(params) - set(SETTINGS))
    if unknown:
        raise RlvrError(f"{key}: the pyfunc task has no setting {', '.join(unknown)}; its settings are "
                        f"{', '.join(SETTINGS)}")
    given = params.get("levels", list(default))
    given = given if isinstance(given, (list, tuple)) else [given]
    known = {**{n: n for n in LEVELS}, **{label(n): n for n in LEVELS}, **{str(n): n for n in LEVELS}}
    bad = [lv for lv in given if isinstance(lv, bool) or not isinstance(lv, (int, str)) or lv not in known]
    if bad or not given:
        raise RlvrError(f"{key}.levels: pyfunc has levels {', '.join(map(str, LEVELS))} "
                        f"(or {label(1)} .. {label(max(LEVELS))}); got {bad or given}")
    return sorted({known[lv] for lv in given})


def pyfunc_splits(params: dict, ood_params: dict, heldout_size: int, ood_size: int, train_size: int,
                  few_shot: int, seed: int) -> Splits:
    """Few-shot turns from the easiest level first; held-out and train balanced over the levels of
    task.params (the remainder to the harder ones); OOD over the levels of task.ood_params. No two
    share a problem identity."""
    levels = parse_levels(params, "task.params", DEFAULT_LEVELS)
    ood_levels = parse_levels(ood_params, "task.ood_params", DEFAULT_OOD_LEVELS)
    rng, seen, notes = random.Random(seed), set(), []
    shots = draw(levels[0], few_shot, rng, seen)
    heldout, train = [], []
    for level, n_held, n_train in zip(levels, _even(heldout_size, len(levels)),
                                      _even(train_size or DEFAULT_TRAIN, len(levels))):
        pool = draw(level, n_held + n_train, rng, seen)
        if len(pool) < n_held + 1:
            raise RlvrError(f"only {len(pool)} distinct problems at {label(level)}: lower task.heldout_size "
                            f"({heldout_size})")
        heldout += pool[:n_held]
        train += pool[n_held:]
    if train_size and len(train) < train_size:
        notes.append(f"pyfunc: task.train_size is {train_size} but only {len(train)} distinct problems were "
                     f"left for train")
    if len(levels) > 1:
        rng.shuffle(heldout)
        rng.shuffle(train)
    ood = [p for level, n in zip(ood_levels, _even(ood_size, len(ood_levels))) for p in draw(level, n, rng, seen)]
    if len(ood) < ood_size:
        notes.append(f"pyfunc: task.ood_size is {ood_size} but levels {ood_levels} gave {len(ood)} distinct problems")
    return Splits(train=train, heldout=heldout, ood=ood, few_shot=[(p.question, p.solution) for p in shots],
                  notes=notes)
