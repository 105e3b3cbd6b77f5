"""Code datasets' tests columns read as they come (MBPP's test_list, APPS/TACO's input_output, HumanEval's
test + entry_point), each checked by running a right and a wrong program through the code reward, as
`rlvr train --task.name=FILE --task.columns.tests=COLUMN --rewards.weights='{code_tests: 1}'` does."""
import json

import pytest

from rlvr.cli import main
from rlvr.config import build_config
from rlvr.tasks import build_splits
from rlvr.rewards import build_rewards
from rlvr.rewards.preflight import check_rewards, reference
from rlvr.tasks.code_forms import dataset_tests
from tests.conftest import python_block


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def mbpp_rows(fenced: bool):
    """MBPP's columns: text (which names no function), code (the reference, bare), test_list."""
    rows = []
    for i in range(10):
        code = f"def add_{i}(a, b):\n    return a + b + {i}"
        rows.append({"task_id": i, "text": f"Write a function to add two numbers and {i}.",
                     "code": f"```python\n{code}\n```" if fenced else code,
                     "test_list": [f"assert add_{i}(1, 2) == {3 + i}", f"assert add_{i}(5, 5) == {10 + i}",
                                   f"assert add_{i}(-1, 1) == {i}"], "test_setup_code": "", "challenge_test_list": []})
    return rows


def splits_of(path, *more):
    return build_splits(build_config(None, [f"--task.name={path}", "--task.heldout_size=2", *more]).task)


def score(problem, program: str) -> float:
    from rlvr.rewards import code_tests
    return code_tests.verdict(python_block(program), problem.tests).score


def test_mbpp_test_list_is_read_and_the_prompt_shows_one_test_and_the_fence_rule(tmp_path):
    data = write(tmp_path / "mbpp.jsonl", mbpp_rows(fenced=True))
    p = splits_of(data, "--task.columns.prompt=text", "--task.columns.tests=test_list", "--task.columns.solution=code").heldout[0]
    i = int(p.row["task_id"])
    assert p.question == (f"Write a function to add two numbers and {i}.\n\nYour code should pass this test:\n"
                          f"assert add_{i}(1, 2) == {3 + i}\n\nWrite your solution in one ```python code block.")
    assert json.loads(p.tests) == {"kind": "assert", "asserts": [f"assert add_{i}(1, 2) == {3 + i}"],
                                   "hidden": [f"assert add_{i}(5, 5) == {10 + i}", f"assert add_{i}(-1, 1) == {i}"]}
    assert score(p, f"def add_{i}(a, b):\n    return a + b + {i}") == 1.0
    assert score(p, f"def add_{i}(a, b):\n    return {3 + i}") == 0.0   # the shown test hard-coded: hidden ones fail


def test_a_template_that_speaks_of_the_fence_gets_no_second_rule(tmp_path):
    data = write(tmp_path / "mbpp.jsonl", mbpp_rows(fenced=True))
    p = splits_of(data, "--task.columns.prompt=text", "--task.columns.tests=test_list",
                  "--task.prompt_template={prompt} Answer in a ```python block.").heldout[0]
    assert p.question.endswith(" Answer in a ```python block.") and "Write your solution" not in p.question


def apps_rows():
    """APPS's columns: question, input_output (JSON text), solutions (JSON text of a list of programs)."""
    return [{"question": f"Read a and b and print a*b+{i}.\n\nExample\nInput\n2 3\nOutput\n{6 + i}\n",
             "input_output": json.dumps({"inputs": ["2 3\n", "4 5\n", ["7", "1"]],
                                         "outputs": [f"{6 + i}\n", f"{20 + i}\n", [f"{7 + i}"]]}),
             "solutions": json.dumps([f"import sys\na, b = map(int, sys.stdin.read().split())\nprint(a * b + {i})\n",
                                      "print(0)"])}
            for i in range(10)]


def test_apps_input_output_stdio_pairs(tmp_path):
    p = splits_of(write(tmp_path / "apps.jsonl", apps_rows()), "--task.columns.prompt=question",
                  "--task.columns.tests=input_output").heldout[0]
    i = int(p.question.split("+")[1].split(".")[0])
    spec = json.loads(p.tests)
    assert spec == {"kind": "stdio", "cases": [{"stdin": "2 3\n", "stdout": f"{6 + i}\n"}],   # the example shown
                    "hidden": [{"stdin": "4 5\n", "stdout": f"{20 + i}\n"}, {"stdin": "7\n1", "stdout": f"{7 + i}"}]}
    assert p.question.endswith(f"Output\n{6 + i}\n\nWrite your solution in one ```python code block.")
    assert score(p, f"import sys\na, b = map(int, sys.stdin.read().split())\nprint(a * b + {i})") == 1.0
    assert score(p, f"print({6 + i})") == 0.0


def test_apps_call_based_input_output():
    """APPS/TACO with fn_name: each input is the argument list; a one-element output list wraps the value."""
    spec, shown = dataset_tests({"fn_name": "f", "inputs": [[1, 2], [[1, 2], 3]], "outputs": [[3], [[1, 2, 3]]]},
                                {}, "Write f.")
    assert json.loads(spec) == {"kind": "function", "entry_point": "f", "cases": [],
                                "hidden": [{"args": [1, 2], "expected": 3}, {"args": [[1, 2], 3], "expected": [1, 2, 3]}]}
    assert shown == ""


def humaneval_rows():
    """HumanEval's columns: prompt (imports, a helper, the signature and docstring), canonical_solution (the
    body alone), test (`def check(candidate)`), entry_point."""
    return [{"task_id": f"H/{i}", "entry_point": f"double_plus_{i}", "canonical_solution": f"    return helper(x) + {i}\n",
             "prompt": f"import math\n\ndef helper(x):\n    return x * 2\n\ndef double_plus_{i}(x):\n    \"\"\"helper(x) + {i}\"\"\"\n",
             "test": f"def check(candidate):\n    assert candidate(1) == {2 + i}\n    assert candidate(5) == {10 + i}\n"}
            for i in range(10)]


def test_humaneval_test_and_entry_point(tmp_path):
    p = splits_of(write(tmp_path / "he.jsonl", humaneval_rows()), "--task.columns.tests=test").heldout[0]
    i = int(p.row["entry_point"].rsplit("_", 1)[1])
    spec = json.loads(p.tests)
    assert spec["kind"] == "assert" and spec["entry_point"] == f"double_plus_{i}" and spec["asserts"] == []
    assert spec["prelude"] == "import math\n\ndef helper(x):\n    return x * 2\n"
    assert score(p, f"def double_plus_{i}(x):\n    return helper(x) + {i}") == 1.0   # the prompt's helper, from the prelude
    assert score(p, f"def double_plus_{i}(x):\n    return 2 * x") == (1.0 if i == 0 else 0.0)


def test_asserts_as_python_text_are_one_case_each():
    spec, shown = dataset_tests("assert f(1) == 2\nassert f(2) == 3\n", {}, "Write f. assert f(1) == 2")
    assert json.loads(spec) == {"kind": "assert", "asserts": ["assert f(1) == 2"], "hidden": ["assert f(2) == 3"]}
    assert shown == ""   # the prompt shows a test already


def test_an_unreadable_tests_value_names_the_row_and_column(tmp_path, capsys):
    data = write(tmp_path / "bad.jsonl", [{"prompt": "Write f.", "tests": 5}] * 3 + [{"prompt": "g", "tests": "[1]"}])
    assert main(["audit", f"--task.name={data}", "--rewards.weights={code_tests: 1}", "--task.heldout_size=1"]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl line 1: column 'tests' (tests): a int is not a tests form rlvr reads" in err
    assert "a list of asserts (MBPP's test_list)" in err


@pytest.mark.parametrize("fenced", [True, False])
def test_audit_of_mbpp_as_it_comes(tmp_path, capsys, fenced):
    """`rlvr audit --task.name=mbpp.jsonl --task.columns.prompt=text --task.columns.tests=test_list
    --task.columns.solution=code --rewards.weights='{code_tests: 1}'`: the reference solutions pass (control 1),
    bare as MBPP's `code` column gives them or fenced, and every attack scores 0."""
    data = write(tmp_path / "mbpp.jsonl", mbpp_rows(fenced))
    rc = main(["audit", f"--task.name={data}", "--task.columns.prompt=text", "--task.columns.tests=test_list",
               "--task.columns.solution=code", "--rewards.weights={code_tests: 1}", "--task.heldout_size=2", "--n=4"])
    out = capsys.readouterr().out
    assert rc == 0 and "control (mean score of the reference solutions): code_tests 1" in out
    assert "ok: reward 'code_tests' gave every attack 0 or less" in out
    assert "CANNOT JUDGE" not in out and "fence" not in out




# the answer each dataset's reference solution of row i is graded as: one ```python block, as the prompt asks
AS_THEY_COME = {
    "mbpp": (mbpp_rows(fenced=False), ["--task.columns.prompt=text", "--task.columns.tests=test_list",
                                       "--task.columns.solution=code"],
             lambda p: int(p.row["task_id"]), lambda i: f"def add_{i}(a, b):\n    return a + b + {i}"),
    "apps": (apps_rows(), ["--task.columns.prompt=question", "--task.columns.tests=input_output",
                           "--task.columns.solution=solutions"],   # the first of its list of programs
             lambda p: int(p.question.split("+")[1].split(".")[0]),
             lambda i: f"import sys\na, b = map(int, sys.stdin.read().split())\nprint(a * b + {i})"),
    "humaneval": (humaneval_rows(), ["--task.columns.tests=test", "--task.columns.solution=canonical_solution"],
                  lambda p: int(p.row["entry_point"].rsplit("_", 1)[1]),   # the prompt's code, then the body
                  lambda i: f"import math\n\ndef helper(x):\n    return x * 2\n\ndef double_plus_{i}(x):\n"
                            f"    \"\"\"helper(x) + {i}\"\"\"\n    return helper(x) + {i}"),
}


@pytest.mark.parametrize("name", AS_THEY_COME)
def test_a_reference_solution_as_it_comes_is_the_fenced_answer_and_passes_the_preflight(tmp_path, name):
    """MBPP's bare `code`, APPS's `solutions` list, HumanEval's `canonical_solution` body: each row's reference
    is the one ```python block its prompt asks for, so the code reward scores it 1, the rewards' preflight
    (`rlvr train`) warns of nothing, and the few-shot turns show the form the prompt asks for."""
    rows, columns, index, program = AS_THEY_COME[name]
    splits = splits_of(write(tmp_path / f"{name}.jsonl", rows), *columns, "--task.few_shot=1")
    for p in splits.train + splits.heldout:
        assert reference(p) == p.solution == f"```python\n{program(index(p))}\n```"
    from rlvr.rewards import code_tests
    assert [code_tests.verdict(p.solution, p.tests).score for p in splits.heldout] == [1.0, 1.0]
    assert check_rewards(build_rewards({"code_tests": 1.0}), splits.train, ("code_tests",)) == []
    assert splits.few_shot[0][1].startswith("```python\n") and splits.few_shot[0][1].endswith("\n```")


def test_a_fenced_solution_stays_as_it_is(tmp_path):
    rows = mbpp_rows(fenced=True)
    rows[0]["code"] = "Add them.\n```python\ndef add_0(a, b):\n    return a + b\n```\nDone."
    splits = splits_of(write(tmp_path / "mbpp.jsonl", rows), "--task.columns.prompt=text",
                       "--task.columns.tests=test_list", "--task.columns.solution=code", "--task.few_shot=0")
    assert sorted(p.solution for p in splits.train + splits.heldout) == sorted(r["code"] for r in rows)
