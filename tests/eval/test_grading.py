"""Evaluation grades code problems by running their tests (strict: a closed ```python block; format-free:
the program however it is written), and maths problems by their answer, in one call."""
import json

from rlvr.eval.grading import grade, loose_program
from rlvr.eval.estimators import summarize
from rlvr.eval.sampled import problem_record
from rlvr.eval.suite import format_table
from rlvr.tasks import Problem

SPEC = {"kind": "function", "entry_point": "f", "cases": [{"args": [1, 2], "expected": 3}],
        "hidden": [{"args": [10, 20], "expected": 30}]}
CODE = Problem(question="Write f(a, b) returning a + b.", answer="", difficulty="add", tests=json.dumps(SPEC))
MATHS = Problem(question="What is 1 + 1?", answer="2", difficulty="d1")
RIGHT = "def f(a, b):\n    return a + b"


def test_loose_program_finds_code_however_it_is_written():
    assert loose_program(f"Here:\n```python\n{RIGHT}\n```\nDone.") == RIGHT
    assert loose_program(f"```python\n{RIGHT}") == RIGHT  # never closed (cut off)
    assert loose_program(f"Sure, this works:\n{RIGHT}\n") == RIGHT + "\n"
    assert loose_program("The answer is 3.") is None


def test_grades_for_code_and_maths_in_one_batch():
    texts = [f"```python\n{RIGHT}\n```", f"Sure:\n{RIGHT}", "```python\ndef f(a, b):\n    return a - b\n```",
             "no code", "Answer: 2"]
    g = grade([CODE] * 4 + [MATHS], texts)
    assert [(x["correct"], x["format"], x["lenient"]) for x in g] == [
        (1.0, 1.0, 1.0),  # right, in a closed block
        (0.0, 0.0, 1.0),  # right but bare: format-free only
        (0.0, 1.0, 0.0),  # wrong
        (0.0, 0.0, 0.0),  # no code at all
        (1.0, 1.0, 1.0)]  # maths as before
    assert g[2]["reason"] == "failed case 1: expected 3, got -1" and g[3]["reason"] == "no code block"


def test_code_has_no_majority_vote():
    sampled = [f"```python\n{RIGHT}\n```", "nothing"]
    scores = [x["correct"] for x in grade([CODE] * 2, sampled)]
    rec = problem_record(CODE, {"completion": sampled[0], "correct": 1.0, "lenient": 1.0}, sampled, scores, k=2)
    assert (rec["correct"], rec["voted"], rec["maj_correct"]) == (1, None, None)
    summary = summarize([rec], 2)
    assert summary["pass@2"] == 1.0 and summary["maj@2"] is None
    table = format_table({"code": {**summary, "per_difficulty": {"add": summary}}}, 2)
    assert table.splitlines()[-1].split()[-1] == "-"


def test_another_task_leaves_the_base_task_s_ood_source_out():
    from rlvr.config import TaskConfig
    from rlvr.eval.suite import task_configs

    base = TaskConfig(name="pyfunc", ood_name="humaneval", ood_params={"x": 1})
    tasks = task_configs(base, ["pyfunc", "humaneval"])
    assert tasks["pyfunc"].ood_name == "humaneval" and tasks["pyfunc"].ood_params == {"x": 1}
    assert (tasks["humaneval"].ood_name, tasks["humaneval"].ood_params) == ("", {})
