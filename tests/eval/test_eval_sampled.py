import pytest

from rlvr.config import EnvConfig, TaskConfig
from rlvr.envs.episodes import make_spec
from rlvr.errors import RlvrError
from rlvr.eval.grading import grade
from rlvr.eval.estimators import pass_at_k
from rlvr.eval.sampled import SampleSettings, evaluate_sampled, problem_record
from rlvr.eval.suite import evaluate_tasks, format_table, task_configs, task_problems
from rlvr.models import stop_token_ids
from rlvr.tasks import Problem

PROBLEM = Problem(question="What is 1 + 1?", answer="2", difficulty="d1-n2")
SAMPLED = ["1 + 1 = 2\nAnswer: 2", "Answer: 3", "Answer: 3.0", "no idea"]


def record(greedy, sampled, k):
    scores = [g["correct"] for g in grade([PROBLEM] * len(sampled), sampled)]
    return problem_record(PROBLEM, greedy, sampled, scores, k)


def test_problem_record_counts_votes_and_checks_the_winner():
    rec = record({"completion": "Answer: 2", "correct": 1.0, "lenient": 1.0}, SAMPLED, k=4)
    assert (rec["samples"], rec["correct"], rec["sampled_correct"]) == (4, 1, [1.0, 0.0, 0.0, 0.0])
    assert (rec["voted"], rec["maj_correct"]) == ("3", 0.0)  # "3" and "3.0" outvote "2"
    assert (rec["greedy_correct"], rec["difficulty"]) == (1.0, "d1-n2")


def test_problem_record_votes_with_the_first_k_samples_only():
    rec = record({"completion": "", "correct": 0.0, "lenient": 0.0}, SAMPLED, k=2)
    assert rec["samples"] == 4 and rec["correct"] == 1  # pass@k still uses all samples
    assert (rec["voted"], rec["maj_correct"]) == ("2", 1.0)  # 1-1 tie of "2" and "3": first seen


def test_problem_record_without_any_answer_is_wrong_by_majority():
    rec = record({"completion": "", "correct": 0.0, "lenient": 0.0}, ["?", "Answer: 2\nAnswer: 5"], k=2)
    assert (rec["correct"], rec["voted"], rec["maj_correct"]) == (0, None, 0.0)


@pytest.mark.parametrize("kwargs", [dict(k=0), dict(k=3, samples=2), dict(temperature=0.0), dict(batch_size=0)])
def test_sample_settings_reject_bad_values(kwargs):
    with pytest.raises(RlvrError):
        SampleSettings(**kwargs).check()


def test_evaluate_sampled_on_tiny_model_is_seeded_and_consistent(tiny):
    model, tok = tiny
    problems, few_shot = task_problems(TaskConfig(), "heldout", 3)
    prompts = make_spec(EnvConfig(), tok, few_shot)
    s = SampleSettings(k=2, samples=3, max_new_tokens=6, batch_size=2, seed=1)
    a = evaluate_sampled(model, tok, problems, prompts, s, stop_token_ids(model, tok))
    b = evaluate_sampled(model, tok, problems, prompts, s, stop_token_ids(model, tok))
    assert [r["sampled"] for r in a] == [r["sampled"] for r in b]
    assert [r["question"] for r in a] == [p.question for p in problems]
    for r in a:
        assert r["samples"] == 3 and len(r["sampled"]) == 3
        assert len(set(r["sampled"])) > 1  # temperature 1 on a random model: the samples differ
        assert r["correct"] == sum(r["sampled_correct"])
    other = evaluate_sampled(model, tok, problems, prompts, SampleSettings(k=2, samples=3, max_new_tokens=6,
                                                                           seed=2), stop_token_ids(model, tok))
    assert [r["sampled"] for r in other] != [r["sampled"] for r in a]
    assert model.training is False


def test_transfer_over_two_task_settings(tiny):
    model, tok = tiny
    tasks = {"one digit": TaskConfig(params={"digits": 1}), "two digits": TaskConfig(params={"digits": 2})}
    s = SampleSettings(k=2, samples=2, max_new_tokens=4)
    results = evaluate_tasks(model, tok, stop_token_ids(model, tok), tasks, "heldout", 2, s)
    assert list(results) == ["one digit", "two digits"]
    assert list(results["two digits"][0]["per_difficulty"]) == ["d2-n2"]
    for summary, records in results.values():
        assert summary["n"] == len(records) == 2
        assert summary["pass@2"] == sum(pass_at_k(r["samples"], r["correct"], 2) for r in records) / 2


def test_task_configs_and_problem_errors():
    base = TaskConfig(params={"digits": 2})
    # the base task keeps its settings; another task does not get them (they are the base task's)
    assert task_configs(base, ["arithmetic", "b"]) == {"arithmetic": base, "b": TaskConfig(name="b")}
    with pytest.raises(RlvrError, match="given twice"):
        task_configs(base, ["arithmetic", "arithmetic"])
    with pytest.raises(RlvrError, match="at least 1"):
        task_problems(base, "heldout", 0)
    with pytest.raises(RlvrError, match="unknown split"):
        task_problems(base, "test", None)


def test_format_table():
    summary = {"pass@1": 0.5, "pass@4": 0.75, "maj@4": 0.625, "n": 8,
               "per_difficulty": {"d1": {"pass@1": 1.0, "pass@4": 1.0, "maj@4": 1.0, "n": 4},
                                  "d2": {"pass@1": 0.0, "pass@4": 0.5, "maj@4": 0.25, "n": 4}}}
    single = dict(summary, per_difficulty={"d1": summary["per_difficulty"]["d1"]})
    assert format_table({"arithmetic": summary, "other": single}, 4).splitlines() == [
        "task        n  pass@1  pass@4   maj@4",
        "----------  -  ------  ------  ------",
        "arithmetic  8   50.0%   75.0%   62.5%",
        "  d1        4  100.0%  100.0%  100.0%",
        "  d2        4    0.0%   50.0%   25.0%",
        "other       8   50.0%   75.0%   62.5%",  # one difficulty: no breakdown rows
    ]
