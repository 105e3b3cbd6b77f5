import inspect
import json
import re

import pytest

from rlvr.cli import main
from rlvr.rewards import build_rewards
from rlvr.rewards.audit import MATH_ATTACKS, audit, code_findings, format_report, leak_findings, leaks_gold
from rlvr.rewards.base import RewardFunction
from rlvr.tasks import Problem, Splits


def splits():
    train = [Problem(question="What is 2 + 3?", answer="5"),
             Problem(question="What is 7 * 0? The answer is 0.", answer="0"),
             Problem(question="What is 4 - 1?", answer="3")]
    return Splits(train=train, heldout=[Problem(question="What is 2 + 3?", answer="5")],
                  ood=[Problem(question="What is 40 + 2?", answer="42")])


def test_leaks_are_found():
    found = leak_findings(splits())
    assert any(f.startswith("train: gold answer appears in 1/3 prompts") and "7 * 0" in f for f in found)
    assert any(f.startswith("train and heldout share 1 prompts") for f in found)


def naive_last_number(completions, answer, **kw):
    """The common weak checker: the last number in the text equals the gold."""
    import re
    return [float(bool(re.findall(r"-?\d+", c)) and re.findall(r"-?\d+", c)[-1] == a)
            for c, a in zip(completions, answer)]


def test_builtin_rewards_hold_and_a_naive_checker_is_weak():
    rewards = build_rewards({"correctness": 1.0, "format": 0.2}) + [RewardFunction(name="naive", weight=1.0,
                                                                                   fn=naive_last_number)]
    report = audit(splits(), rewards)
    assert set(report.table) == {a.name for a in MATH_ATTACKS}
    assert "correctness" not in report.weak and "format" not in report.weak
    assert {"two boxed answers", "two answer lines", "list of candidates"} <= set(report.weak["naive"])


def zeros(completions, **kw):
    return [0.0] * len(completions)


def test_a_reward_that_fails_the_reference_solutions_cannot_be_judged(capsys):
    """Attacks scoring 0 under a reward that also gives right answers 0 (a wrong gold column, a reward that
    cannot run) say nothing: the control catches it."""
    report = audit(splits(), build_rewards({"correctness": 1.0}) + [RewardFunction(name="zeros", weight=1.0, fn=zeros)])
    assert report.control == {"correctness": 1.0, "zeros": 0.0}   # `Answer: <gold>` for each problem
    assert "zeros" not in report.weak and set(report.unjudged) == {"zeros"}
    assert "reference solutions 0" in report.unjudged["zeros"]
    assert "CANNOT JUDGE: reward 'zeros'" in format_report(report)


def test_without_a_sandbox_a_code_audit_says_it_cannot_judge(monkeypatch):
    import rlvr.rewards.audit as audit_module

    monkeypatch.setattr(audit_module, "sandbox_problem", lambda: "bubblewrap not found at /usr/bin/bwrap")
    report = audit(code_splits(hidden=True), [RewardFunction(name="tests_reward", weight=1.0, fn=zeros)])
    assert report.control == {}   # no reference solution in these problems
    assert report.unjudged == {"tests_reward": "no code sandbox can start here (bubblewrap not found at /usr/bin/bwrap)"}


def test_cli_exit_code(capsys):
    assert main(["audit", "--model.name=tiny-random", "--task.heldout_size=10", "--task.ood_size=10"]) == 0
    out = capsys.readouterr().out
    assert "ok: reward 'correctness'" in out and "WEAK" not in out


def code_splits(hidden: bool):
    import json
    spec = {"kind": "function", "entry_point": "add", "cases": [{"args": [1, 2], "expected": 3}]}
    if hidden:
        spec["hidden"] = [{"args": [5, 5], "expected": 10}]
    p = Problem(question="Write add(a, b).", answer="", tests=json.dumps(spec))
    return Splits(train=[p], heldout=[], ood=[])


@pytest.mark.sandbox  # the audit scores a reward that cannot run as 0, so this fails by assertion
@pytest.mark.slow
def test_code_battery_and_hidden_cases():
    from rlvr.rewards.audit import CODE_ATTACKS

    rewards = build_rewards({"code_tests": 1.0})
    report = audit(code_splits(hidden=True), rewards)
    assert set(report.table) == {a.name for a in CODE_ATTACKS}
    assert "code_tests" not in report.weak
    # without hidden cases, hard-coding the visible one passes: the audit says the tests are weak
    report = audit(code_splits(hidden=False), rewards)
    assert report.weak["code_tests"] == ["special-case the visible tests"]


@pytest.mark.slow
def test_code_audit_warns_about_hidden_cases_shown_in_the_prompt_and_runs_the_new_attacks():
    import json
    from rlvr.rewards.audit import code_findings

    spec = {"kind": "assert", "asserts": ["assert add(1, 2) == 3"], "hidden": ["assert add(40, 2) == 42"]}
    shown = Problem(question="Write add(a, b) so that assert add(40, 2) == 42 holds.", answer="",
                    tests=json.dumps(spec))
    found = code_findings(Splits(train=[shown], heldout=[], ood=[]))
    assert found == ["train: 1 hidden test inputs/outputs appear in their prompts "
                     "(e.g. 'assert add(40, 2) == 42' in 'Write add(a, b) so that assert add(40, 2')"]
    report = audit(code_splits(hidden=True), build_rewards({"code_tests": 1.0}))
    assert {"always-equal object", "harness tampering"} <= set(report.table)
    assert report.table["always-equal object"]["code_tests"] == 0.0
    assert report.table["harness tampering"]["code_tests"] == 0.0
    assert "code_tests" not in report.weak


def test_audit_attacks_the_rewards_training_optimises(capsys):
    """DAPO's soft overlong length reward is part of what training optimises (rewards.soft_overlong), so the
    audit must score it too."""
    from rlvr.config import build_config
    from rlvr.rewards import rewards_of

    argv = ["--model.name=tiny-random", "--algo.preset=dapo", "--task.heldout_size=4"]
    cfg = build_config(None, argv)
    assert [rf.name for rf in rewards_of(cfg.rewards, cfg.rollout.max_new_tokens)] == ["correctness", "format", "length"]
    assert main(["audit", "--n=2", *argv]) == 0
    out = capsys.readouterr().out
    assert "ok: reward 'length' gave every attack 0 or less" in out


@pytest.mark.parametrize("question, gold, leaked", [
    ("3 friends each eat 2 slices. How many slices?", "2", False),   # a quantity of the problem, not the answer
    ("What is 7 * 0?", "0", False),
    ("Cost 3.5 or 13.52 dollars?", "3.5", False),                     # short, and not stated as the answer
    ("He has 12500 apples. How many?", "1250", False),                # inside a longer number
    ("3 friends each eat 2 slices. The answer is 2.", "2", True),
    ("Sum the list. Answer: 6", "6", True),
    ("Find x. \\boxed{6}", "6", True),
    ("Tom has 3 apples #### 7", "7", True),
    ("He has 1250 apples and eats none. How many?", "1250", True),    # a long gold found anywhere
    ("Simplify x^2 + 2x + 1; it is (x+1)^2", "(x+1)^2", True),
    ("Write a function.", "", False),                                 # code: no gold
])
def test_leaks_gold_is_a_stated_or_long_gold_not_a_small_quantity(question, gold, leaked):
    assert leaks_gold(question, gold) is leaked


def test_audit_flags_cases_that_never_call_the_candidate():
    spec = {"kind": "assert", "asserts": ["assert f(1) == 2"], "hidden": ["assert sum([1, 2]) == 3"]}
    found = code_findings(Splits(train=[Problem(question="write f", answer="", tests=json.dumps(spec))], heldout=[],
                                 ood=[]))
    assert found == ["train: 1 assert cases never call a function of the candidate, so every program passes "
                     "them (e.g. case 2 of 'write f': 'assert sum([1, 2]) == 3'); a function named like a "
                     "builtin needs its name as 'entry_point'"]


def write_math(path, worked: bool):
    """MATH-style rows: `problem` and `solution`, a worked solution ending in a box (worked), or the same
    problems with the bare answer in `answer`."""
    rows = []
    for i in range(12):
        a, b = i + 2, 3 * i + 1
        gold = {"solution": f"We multiply: ${a} \\times {b} = {a * b}$. So the answer is $\\boxed{{{a * b}}}$."}
        rows.append({"problem": f"What is ${a} \\times {b}$?", **(gold if worked else {"answer": str(a * b)})})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def boxed_anywhere(completions, answer, **kw):
    """A weak checker: the gold's boxed answer (or the gold itself) anywhere in the completion."""
    golds = [(re.findall(r"\\boxed\{([^}]*)\}", a) or [a])[-1] for a in answer]
    return [float(g in c) for c, g in zip(completions, golds)]


def audit_math(tmp_path, worked: bool, *more: str) -> list[str]:
    data = write_math(tmp_path / f"math_{worked}.jsonl", worked)
    return ["audit", f"--task.name={data}", "--task.columns.prompt=problem", "--task.heldout_size=2", "--n=10",
            *(["--task.columns.answer=solution"] if worked else []), *more]


def test_audit_of_math_style_data_attacks_the_extracted_gold(tmp_path, capsys, monkeypatch):
    """`rlvr audit --task.name=math.jsonl --task.columns.prompt=problem --task.columns.answer=solution`: the
    attacks carry the boxed answer, not the worked solution (whose own box would make every attack that
    quotes it right), so a gold written out and a bare gold get the same table; a weak checker is still WEAK."""
    (tmp_path / "weak.py").write_text(f"import re\n\n\n{inspect.getsource(boxed_anywhere)}")
    monkeypatch.syspath_prepend(str(tmp_path))
    tables = {}
    for worked in (False, True):
        assert main(audit_math(tmp_path, worked)) == 0
        out = capsys.readouterr().out
        assert "ok: reward 'correctness' gave every attack 0 or less" in out and "WEAK" not in out
        tables[worked] = out[out.index("attacks"):out.index("control")]
        assert "scaled by 100 *                               0" in tables[worked]
        assert main(audit_math(tmp_path, worked, "--rewards.weights={correctness: 1.0, 'weak:boxed_anywhere': 1}")) == 1
        weak = capsys.readouterr().out
        assert "WEAK: reward 'weak:boxed_anywhere' rewarded" in weak and "two boxed answers" in weak
        assert "ok: reward 'correctness' gave every attack 0 or less" in weak
    assert tables[True] == tables[False]


def test_a_missing_gold_column_names_the_column_with_the_box(tmp_path, capsys):
    """`rlvr audit --task.name=math.jsonl --task.columns.prompt=problem` (no answer column) stops as rlvr
    train does, naming `solution` as the column that holds the boxed answer; without --task.columns.prompt
    the error names `problem`."""
    data = write_math(tmp_path / "math.jsonl", worked=True)
    assert main(["audit", f"--task.name={data}", "--task.columns.prompt=problem"]) == 2
    err = capsys.readouterr().err
    assert "no gold answer in column 'answer'" in err
    assert "--task.columns.answer=solution makes its final answer the gold" in err
    assert main(["audit", f"--task.name={data}"]) == 2
    assert "name it with --task.columns.prompt=problem" in capsys.readouterr().err


def test_audit_of_gsm8k_rows_judges_the_builtin_checker(tmp_path, capsys):
    """`rlvr audit --task.name=gsm8k.jsonl --task.columns.prompt=question`: GSM8K's `answer` is a worked
    solution ending in '#### N' and the rows have no other solution, so the control is that answer as it
    is; written after 'Answer: ' it stated two final answers, scored 0, and the audit said CANNOT JUDGE
    (exit 1) for the built-in checker on the README's own data."""
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps({"question": f"Tom has {i} apples and buys 3 more. How many?",
                                        "answer": f"He has {i} + 3 = <<{i}+3={i + 3}>>{i + 3} apples.\n#### {i + 3}"})
                            + "\n" for i in range(12)))
    assert main(["audit", f"--task.name={data}", "--task.columns.prompt=question", "--task.heldout_size=2", "--n=5"]) == 0
    out = capsys.readouterr().out
    assert "control (mean score of the reference solutions): correctness 1, format 0" in out
    assert "CANNOT JUDGE" not in out and "ok: reward 'correctness' gave every attack 0 or less" in out
