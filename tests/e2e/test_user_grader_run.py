"""A user's own GSM8K-style data, TRL reward and verl scorer: training, the held-out table and `rlvr eval`
grade with the user's function, checked against that function called directly on the same completions."""
import importlib.util
import json
import random

import pytest

from rlvr.cli import main
from tests.conftest import read_jsonl

REWARDS = '''
import re

def final(text):
    m = re.search(r"####\\s*(-?[\\d,]+)", str(text))
    return None if m is None else m.group(1).replace(",", "")

def my_reward(completions, answer, **kwargs):
    """TRL style: 1 when the completion's '#### N' is the gold's."""
    return [1.0 if final(c) is not None and final(c) == final(a) else 0.0 for c, a in zip(completions, answer)]

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's gsm8k convention: 1 for the right '#### N', 0.1 for a wrong one, 0 without one."""
    got = final(solution_str)
    return 0.0 if got is None else 1.0 if got == final(ground_truth) else 0.1
'''


def gsm8k_rows(n=30):
    rng = random.Random(0)
    rows = []
    for i in range(n):
        a, b, c = rng.randint(2, 9), rng.randint(2, 9), rng.randint(1, 5)
        rows.append({"question": f"Sam has {a} bags of {b} marbles and gives away {c}. How many marbles are left? "
                                 f"End with '#### <number>'. (problem {i})",
                     "answer": f"Sam has {a}*{b}=<<{a}*{b}={a * b}>>{a * b} marbles.\n"
                               f"{a * b}-{c}=<<{a * b}-{c}={a * b - c}>>{a * b - c} are left.\n#### {a * b - c}"})
    return rows


@pytest.fixture
def user(tmp_path):
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in gsm8k_rows()))
    module = tmp_path / "user_rewards.py"
    module.write_text(REWARDS)
    spec = importlib.util.spec_from_file_location("user_rewards_direct", module)
    fns = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fns)
    return data, module, fns


def test_training_and_rlvr_eval_grade_with_the_users_own_reward(tmp_path, user, capsys):
    data, module, fns = user
    trl, verl = f"{module}:my_reward", f"verl:{module}:compute_score"
    # the run names a reward by its spec less the file's folders (config.yaml holds the absolute path)
    trl_name, verl_name = "user_rewards.py:my_reward", "verl:user_rewards.py:compute_score"
    out = tmp_path / "run"
    assert main(["train", f"--task.name={data}", "--task.columns.prompt=question", "--task.heldout_size=6",
                 "--task.few_shot=0", "--model.name=tiny-random", f"--rewards.weights={{{trl}: 1.0, {verl}: 1.0}}",
                 "--rollout.prompts_per_step=2", "--rollout.group_size=2", "--rollout.max_new_tokens=8",
                 "--eval.max_new_tokens=8", "--train.steps=2", "--train.eval_every=1", f"--train.out={out}"]) == 0
    err = capsys.readouterr().err
    assert f"evaluation graded by your reward '{verl_name}' (a verl compute_score" in err
    assert f"accuracy = graded by your reward '{verl_name}'" in err  # the before/after table says so

    summary = json.loads((out / "summary.json").read_text())
    assert summary["grader"] == verl_name
    for tag in ("before", "after"):  # every held-out record is the user's verdict on its completion
        recs = read_jsonl(out / f"eval_{tag}.jsonl")
        assert len(recs) == 6
        direct = [fns.compute_score(None, r["completion"], r["answer"]) for r in recs]
        assert [r["score"] for r in recs] == direct
        assert [r["correct"] for r in recs] == [float(s >= 1.0) for s in direct]
        assert all(r["lenient"] >= r["correct"] for r in recs)
        assert summary[f"heldout_accuracy_{tag}"] == pytest.approx(sum(s >= 1.0 for s in direct) / 6, abs=1e-12)
    evals = read_jsonl(out / "evals.jsonl")
    assert [e["step"] for e in evals] == [0, 1, 2] and all("heldout_accuracy" in e for e in evals)

    # rlvr eval with the run's config: the grader eval.grader names (here the TRL function)
    ev = tmp_path / "ev"
    assert main(["eval", str(out / "config.yaml"), "--model", str(out / "final"), "--k", "2", "--n", "4",
                 f"--eval.grader={trl}", "--out", str(ev)]) == 0
    assert f"evaluation graded by your reward '{trl_name}' (eval.grader)" in capsys.readouterr().err
    doc = json.loads((ev / "eval.json").read_text())
    rows = read_jsonl(ev / "samples.jsonl")
    assert doc["grader"] == trl_name and len(rows) == 4
    assert [r["greedy_correct"] for r in rows] == [fns.my_reward([r["greedy"]], [r["answer"]])[0] for r in rows]
    for r in rows:
        assert r["sampled_correct"] == fns.my_reward(r["sampled"], [r["answer"]] * len(r["sampled"]))
    assert doc["pass@1"] == pytest.approx(sum(r["greedy_correct"] for r in rows) / 4, abs=1e-12)

    # a threshold every score meets: the user's grader, not the built-in checker, decides pass@1 and pass@k
    ev0 = tmp_path / "ev0"
    assert main(["eval", str(out / "config.yaml"), "--model", str(out / "final"), "--k", "2", "--n", "4",
                 f"--eval.grader={verl}", "--eval.grader_threshold=0", "--out", str(ev0)]) == 0
    doc0 = json.loads((ev0 / "eval.json").read_text())
    assert (doc0["grader"], doc0["pass@1"], doc0["pass@2"], doc0["format-free@1"]) == (verl_name, 1.0, 1.0, 1.0)
