"""reasoning_gym:<dataset> tasks: real reasoning-gym generators, scored by our own answer checker."""
import sys

import pytest
import reasoning_gym

from rlvr.config import TaskConfig
from rlvr.errors import RlvrError
from rlvr.rewards.maths.accuracy import math_accuracy
from rlvr.tasks import build_splits, normalise
from rlvr.tasks.gym import SUFFIX, difficulty_label


def chain_sum(**kw) -> TaskConfig:
    base = dict(name="reasoning_gym:chain_sum", params={"min_digits": 1, "max_digits": 2, "max_terms": 3},
                ood_params={"min_digits": 3, "max_digits": 3}, heldout_size=20, ood_size=15, train_size=60,
                few_shot=1)
    return TaskConfig(**{**base, **kw})


def keys(problems):
    return {normalise(p.question) for p in problems}


def test_splits_disjoint_labelled_and_seeded():
    s = build_splits(chain_sum())
    assert (len(s.train), len(s.heldout), len(s.ood)) == (60, 20, 15)
    shots = keys([type(s.train[0])(question=q, answer="") for q, _ in s.few_shot])
    assert len(s.few_shot) == 1 and s.few_shot[0][1].startswith("Answer: ")
    parts = [keys(s.train), keys(s.heldout), keys(s.ood), shots]
    for i in range(4):
        for j in range(i + 1, 4):
            assert not parts[i] & parts[j]
    assert all(p.question.endswith("\n\n" + SUFFIX) for p in s.train + s.heldout + s.ood)
    assert {p.difficulty.split(",")[0] for p in s.train} <= {"num_digits=1", "num_digits=2"}
    assert {p.difficulty.split(",")[0] for p in s.ood} == {"num_digits=3"}
    assert build_splits(chain_sum()).heldout == s.heldout
    assert build_splits(chain_sum(seed=5)).heldout != s.heldout


@pytest.mark.parametrize("dataset", ["chain_sum", "basic_arithmetic", "leg_counting"])
def test_gold_written_as_answer_line_scores_one(dataset):
    s = build_splits(TaskConfig(name=f"reasoning_gym:{dataset}", heldout_size=10, ood_size=0, train_size=40))
    problems = s.train + s.heldout
    assert math_accuracy([f"Some working.\nAnswer: {p.answer}" for p in problems],
                         answer=[p.answer for p in problems]) == [1.0] * len(problems)
    assert math_accuracy(["Answer: 1" + problems[0].answer], answer=[problems[0].answer]) == [0.0]
    assert not any("do not score 1" in n for n in s.notes)


def test_no_partial_credit_unlike_reasoning_gym():
    ds = reasoning_gym.create_dataset("chain_sum", size=50, seed=0)
    entry = next(e for e in ds if e["answer"] == "6")
    assert ds.score_answer("16", entry) == 0.5  # reasoning-gym's own scorer: partial credit
    assert math_accuracy(["Answer: 16"], answer=["6"]) == [0.0]


def test_note_when_gold_answers_do_not_fit_the_maths_checker():
    # a matrix over several lines does not fit on one answer line: the run's preflight notes it when the
    # maths checker is a reward (rlvr.rewards.preflight.maths_gold_note; tasks import no reward)
    from rlvr.config import build_config
    from rlvr.rewards import rewards_of
    from rlvr.rewards.preflight import check_gold_answers

    s = build_splits(TaskConfig(name="reasoning_gym:rotate_matrix", heldout_size=5, ood_size=0, train_size=10))
    cfg = build_config(None)
    assert any("do not score 1 with the maths checker" in n
               for n in check_gold_answers(rewards_of(cfg.rewards, cfg.rollout.max_new_tokens), s, {}))


def test_template_asking_for_the_answer_line_replaces_the_suffix():
    s = build_splits(chain_sum(prompt_template="Solve.\n{prompt}\nFinish with 'Answer: N'."))
    assert all(p.question.startswith("Solve.\n") and SUFFIX not in p.question for p in s.train)
    assert s.few_shot[0][0].startswith("Solve.\n")


def test_difficulty_label_from_entry_or_ranges():
    meta = {"num_terms": 3, "num_digits": 1, "difficulty": {"num_terms": (2, 6), "num_digits": (1, 4)}}
    assert difficulty_label(meta) == "num_digits=1,num_terms=3"
    assert difficulty_label({"difficulty": {"num_instances": (1, 15)}}) == "num_instances=1-15"
    assert difficulty_label({}) == ""


def test_no_ood_params_leaves_ood_empty_with_a_note():
    s = build_splits(chain_sum(ood_params={}))
    assert s.ood == [] and any("OOD split is empty" in n for n in s.notes)


def test_bad_names_and_settings():
    with pytest.raises(RlvrError, match="no dataset 'chain_summ'; did you mean chain_sum"):
        build_splits(chain_sum(name="reasoning_gym:chain_summ"))
    with pytest.raises(RlvrError, match="has no setting digits; its settings are .*min_digits"):
        build_splits(chain_sum(params={"digits": 2}))
    with pytest.raises(RlvrError, match="task.seed"):
        build_splits(chain_sum(params={"seed": 2}))
    with pytest.raises(RlvrError, match="rejected the settings .*max_digits must be >= min_digits"):
        build_splits(chain_sum(params={"min_digits": 3, "max_digits": 2}))


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)  # `import reasoning_gym` now raises ImportError
    with pytest.raises(RlvrError, match=r"rlvr\[gym\]"):
        build_splits(chain_sum())


def test_rlvr_tasks_lists_the_reasoning_gym_datasets_with_their_settings(capsys):
    """`rlvr tasks chain`: the datasets whose name holds 'chain', each with its task.params and defaults;
    `rlvr tasks`: every source task.name takes, then all of reasoning-gym's datasets."""
    from rlvr.cli import main

    assert main(["tasks", "chain"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "reasoning-gym datasets (2), as task.name=reasoning_gym:<name> with task.params:",
        "  chain_sum          min_terms=2 max_terms=6 min_digits=1 max_digits=4 allow_negation=False",
        "  decimal_chain_sum  min_terms=2 max_terms=6 min_digits=1 max_digits=4 min_decimal_places=1 "
        "max_decimal_places=4 allow_negation=False"]
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("task.name takes: arithmetic, reasoning_gym:<dataset>, a .jsonl file")
    assert out[1] == f"reasoning-gym datasets ({len(reasoning_gym.factory.DATASETS)}), as task.name=reasoning_gym:<name> with task.params:"
    assert len(out) == 2 + len(reasoning_gym.factory.DATASETS)
