"""task.name=pyfunc: seeded function-writing problems. Every reference passes its visible and hidden
cases through the sandboxed code reward; wrong and special-casing programs fail; seeds reproduce;
levels sort for the curriculum; splits share no problem and show no hidden case."""
import json
import random

import pytest

from rlvr.config import TaskConfig
from rlvr.errors import RlvrError
from rlvr.rewards.audit import CODE_ATTACKS, code_findings, leak_findings
from rlvr.rewards.code import last_code_block, make_code_tests, parse_spec
from rlvr.tasks import build_splits
from rlvr.tasks.curriculum import resolve_levels
from rlvr.tasks.pyfunc import (INSTRUCTION, draw, identity, make_problem, parse_levels, pyfunc_splits,
                               reference, space_size)
from rlvr.tasks.pyfunc_problems import LEVEL_1, LEVEL_3, LEVELS
from tests.conftest import python_block

reward = make_code_tests()


def splits(seed=0, **kw):
    base = dict(name="pyfunc", heldout_size=30, ood_size=12, train_size=90, few_shot=2, seed=seed)
    return build_splits(TaskConfig(**{**base, **kw}))


def per_template(n: int, seed: int = 0) -> list:
    """n problems of every template (a fresh identity each), so no template escapes the checks."""
    rng, problems = random.Random(seed), []
    for level, templates in LEVELS.items():
        for t in templates:
            seen = set()
            while len(seen) < n:
                picked = identity(t, rng)
                if picked is not None and picked not in seen:
                    seen.add(picked)
                    problems.append(make_problem(t, level, *picked, rng))
    return problems


def test_hand_checked_problem():
    p = make_problem(LEVEL_1[0], 1, "count_letter", ("text",), ("e",), random.Random(7))
    assert p.question == (
        "Write a Python function `count_letter(text: str) -> int` that returns how many times the letter 'e' "
        "appears in `text`.\n\nExamples:\ncount_letter('ee') -> 2\ncount_letter('meebbemebe') -> 5\n"
        "count_letter('ie') -> 1\n\n" + INSTRUCTION)
    assert p.solution == "```python\ndef count_letter(text: str) -> int:\n    return text.count('e')\n```"
    assert (p.answer, p.difficulty) == ("", "pyfunc-1")
    spec = json.loads(p.tests)
    assert spec == {"kind": "function", "entry_point": "count_letter",
                    "cases": [{"args": ["ee"], "expected": 2}, {"args": ["meebbemebe"], "expected": 5},
                              {"args": ["ie"], "expected": 1}],
                    # edge cases first: empty, the letter four times, an uppercase E (not counted)
                    "hidden": [{"args": [""], "expected": 0}, {"args": ["eeee"], "expected": 4},
                               {"args": ["Eb"], "expected": 0}, {"args": ["bsie"], "expected": 1},
                               {"args": ["etke"], "expected": 2}, {"args": ["sc"], "expected": 0}]}
    parsed = parse_spec(p.tests)
    assert [c.hidden for c in parsed.cases] == [False] * 3 + [True] * 6


def test_oracles_by_hand():
    fizz = make_problem(LEVEL_3[0], 3, "fizz_buzz", ("n",), (2, 3, "fizz", "buzz"), random.Random(7))
    cases = {c["args"][0]: c["expected"] for c in json.loads(fizz.tests)["hidden"]}
    assert cases[0] == [] and cases[6] == ["1", "fizz", "buzz", "fizz", "5", "fizzbuzz"]
    by_key = {t.key: t for ts in LEVELS.values() for t in ts}
    ns = lambda **kw: type("C", (), kw)
    assert by_key["run_length"].fn(ns(order=("", "ch + str(count)"), sep="-"), "aaabcc") == "a3-b1-c2"
    assert by_key["run_length"].fn(ns(order=("", "str(count) + ch"), sep=""), "aaabcc") == "3a1b2c"
    assert by_key["caesar"].fn(ns(k=3), "xyz Ab!") == "abc Ae!"
    assert by_key["rotate"].fn(ns(k=4, side=("right", "")), [1, 2, 3]) == [3, 1, 2]
    assert by_key["bracket_depth"].fn(ns(pair="()"), "(a(b))()") == 2
    assert by_key["bracket_depth"].fn(ns(pair="()"), "())(") == -1
    assert by_key["to_base"].fn(ns(base=2), 10) == "1010"
    assert by_key["primes"].fn(ns(what=("", "i", " + 1")), 7) == 2 + 3 + 5 + 7
    assert by_key["char_by_count"].fn(ns(which=("least", "min"), tie=("last", "max")), "aabcc") == "b"
    assert by_key["repeat_digit_sum"].fn(ns(k=10), 9875) == 2  # 29, then 11, then 2
    assert by_key["kth_largest"].fn(ns(k=(2, "second"), default=-1), [5, 5, 3, 1]) == 3


def test_distinct_problems_per_level():
    # level 4 by hand: primes 4 variants, brackets 4, rotate 18, chunks 4, bases 8, char pick 4, substrings 3,
    # word sorts 6 -> 51 x 3 names x 3 parameter names = 459, plus interleave 3 x 3 x 3 = 27
    assert [space_size(level) for level in LEVELS] == [8046, 24030, 7785, 486]
    got = draw(4, 1000, random.Random(0), set())
    assert len(got) == 486 == len({p.question for p in got})


def test_levels_are_labelled_and_sorted_for_the_curriculum():
    s = splits(heldout_size=31)
    assert resolve_levels(s.train, []) == ["pyfunc-1", "pyfunc-2", "pyfunc-3"]
    counts = [sum(p.difficulty == f"pyfunc-{k}" for p in s.heldout) for k in (1, 2, 3)]
    assert counts == [10, 10, 11] and len(s.train) == 90  # the remainder goes to the harder level
    assert {p.difficulty for p in s.ood} == {"pyfunc-4"} and len(s.ood) == 12
    two = splits(params={"levels": ["pyfunc-2", 1]}, ood_params={"levels": [3]})
    assert {p.difficulty for p in two.train} == {"pyfunc-1", "pyfunc-2"}
    assert {p.difficulty for p in two.ood} == {"pyfunc-3"}


def test_seeds_reproduce():
    a, b, c = splits(seed=3), splits(seed=3), splits(seed=4)
    rows = lambda s: [(p.question, p.tests, p.solution) for p in s.train + s.heldout + s.ood] + s.few_shot
    assert rows(a) == rows(b) and len(rows(a)) == 90 + 30 + 12 + 2
    assert {r[0] for r in rows(a)} & {r[0] for r in rows(c)} == set()


def test_splits_share_nothing_and_show_no_hidden_case():
    s = splits(train_size=600, heldout_size=60, ood_size=60)
    assert s.notes == []
    everything = [p.question for p in s.train + s.heldout + s.ood] + [q for q, _ in s.few_shot]
    assert len(everything) == len(set(everything)) == 600 + 60 + 60 + 2
    # a problem is its function: no (name, constants, doc) asked twice across splits
    heads = [q.split("\n")[0] for q in everything]
    assert len(heads) == len(set(heads))
    assert leak_findings(s) == [] and code_findings(s) == []
    # few-shot turns: level-1 problems answered by their reference
    level_1 = {name for t in LEVEL_1 for name in t.names}
    assert [(q.split("`")[1].split("(")[0] in level_1, a.startswith("```python\ndef ")) for q, a in s.few_shot] \
        == [(True, True)] * 2


@pytest.mark.slow
def test_every_reference_passes_its_visible_and_hidden_cases():
    problems = per_template(8) + splits(train_size=120, heldout_size=0, ood_size=40, few_shot=0).train
    assert len(problems) == 8 * sum(len(ts) for ts in LEVELS.values()) + 120
    for p in problems:
        spec = json.loads(p.tests)
        assert len(spec["cases"]) == 3 and 5 <= len(spec["hidden"]) <= 6, p.question
        assert p.question.endswith(INSTRUCTION) and last_code_block(p.solution) is not None
    verdicts = reward.verdicts([p.solution for p in problems], tests=[p.tests for p in problems])
    failed = [(p.question, v.reason) for p, v in zip(problems, verdicts) if v.score != 1.0]
    assert failed == []
    n = [len(parse_spec(p.tests).cases) for p in problems]
    assert [v.reason for v in verdicts] == [f"passed {k}/{k}" for k in n]


@pytest.mark.slow
def test_wrong_and_special_casing_programs_fail():
    """Each problem against the reference of its template with other constants (same name and
    parameters; a template without constants: a function returning its first argument), and against
    a program that answers the visible examples from a table."""
    rng, problems, wrong = random.Random(1), [], []
    for level, templates in LEVELS.items():
        for t in templates:
            for _ in range(2):
                name, args, consts = next(filter(None, iter(lambda: identity(t, rng), 0)))
                problems.append(make_problem(t, level, name, args, consts, rng))
                if t.consts:
                    other = next(o[2] for o in iter(lambda: identity(t, rng), 0) if o and o[2] != consts)
                    wrong.append(python_block(reference(t, name, args, other)))
                else:
                    wrong.append(python_block(f"def {name}(*args):\n    return args[0]"))
    special = next(a for a in CODE_ATTACKS if a.name == "special-case the visible tests")
    texts = wrong + [special.make(p) for p in problems]
    verdicts = reward.verdicts(texts, tests=[p.tests for p in problems] * 2)
    passed = [(t, v.reason) for t, v in zip(texts, verdicts) if v.score != 0.0]
    assert passed == []
    assert {v.outcome for v in verdicts[len(problems):]} == {"visible_only"}


def test_settings_errors_name_the_key():
    with pytest.raises(RlvrError, match="task.params: the pyfunc task has no setting level; its settings are levels"):
        splits(params={"level": 2})
    with pytest.raises(RlvrError, match=r"task.ood_params.levels: pyfunc has levels 1, 2, 3, 4 .*got \[5\]"):
        splits(ood_params={"levels": [5]})
    with pytest.raises(RlvrError, match="only 486 distinct problems at pyfunc-4"):
        pyfunc_splits({"levels": [4]}, {}, 500, 0, 10, 0, 0)
    assert parse_levels({"levels": "pyfunc-2"}, "task.params", (1,)) == [2]
    assert parse_levels({}, "task.params", (1, 3)) == [1, 3]
