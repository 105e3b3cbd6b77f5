"""rlvr.fit's pieces that need no run: naming callables, keywords as config keys, rows in memory."""
import json

import pytest

import rlvr
from rlvr.api import _override, as_rows, is_verl_scorer, name_rewards
from rlvr.errors import RlvrError


def exact(completions, answer, **kwargs):
    return [float(c.strip() == a) for c, a in zip(completions, answer)]


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(solution_str.strip() == ground_truth)


def test_name_rewards_names_callables_readably_and_recognises_verl_scorers():
    weights, given = name_rewards({exact: 1.0, compute_score: 0.5, "format": 0.2})
    assert weights == {"python:exact": 1.0, "verl:python:compute_score": 0.5, "format": 0.2}
    assert given["python:exact"] is exact
    assert given["verl:python:compute_score"](["12", "13"], answer=["12", "12"]) == [1.0, 0.0]  # verl's form
    assert is_verl_scorer(compute_score) and not is_verl_scorer(exact) and not is_verl_scorer(len)


def test_name_rewards_takes_a_list_as_trl_does_and_tells_same_names_apart():
    first = lambda completions, **kw: [1.0] * len(completions)  # noqa: E731
    second = lambda completions, **kw: [0.0] * len(completions)  # noqa: E731
    weights, given = name_rewards([first, second])
    assert weights == {"python:<lambda>": 1.0, "python:<lambda>_2": 1.0}
    assert given["python:<lambda>"] is first and given["python:<lambda>_2"] is second
    assert name_rewards(exact)[0] == {"python:exact": 1.0}
    with pytest.raises(RlvrError, match="rewards: 3 is neither a callable nor a reward name"):
        name_rewards({3: 1.0})


def test_keywords_become_config_overrides():
    assert _override("train__steps", 40) == "--train.steps=40"
    assert _override("rewards.weights", {"python:exact": 1.0}) == '--rewards.weights={"python:exact": 1.0}'
    assert _override("model.name", "Qwen/Qwen2.5-0.5B-Instruct") == '--model.name="Qwen/Qwen2.5-0.5B-Instruct"'
    with pytest.raises(RlvrError, match="unknown keyword 'steps'; config keys are written section__key=value"):
        _override("steps", 40)
    with pytest.raises(RlvrError, match=r"unknown keyword 'num_generations': TRL's 'num_generations' is rlvr's "
                                        r"'rollout.group_size', rlvr.fit\(..., rollout__group_size=...\);"):
        _override("num_generations", 8)   # GRPOConfig(num_generations=8), as TRL users write it
    # GRPOTrainer(reward_funcs=..., args=GRPOConfig(...)): what rlvr.fit takes instead
    with pytest.raises(RlvrError, match=r"^rlvr.fit: unknown keyword 'reward_funcs' \(TRL's GRPOTrainer argument\): "
                                        r"rlvr.fit takes rewards=\[...\]"):
        _override("reward_funcs", [])
    with pytest.raises(RlvrError, match=r"unknown keyword 'args' .*: rlvr.fit takes config keys as keywords"):
        _override("args", None)


def test_as_rows_takes_lists_and_datasets():
    from datasets import Dataset

    rows = [{"prompt": "What is 1 + 1?", "answer": "2"}]
    assert as_rows(rows, "train_dataset") == rows
    assert as_rows(Dataset.from_list(rows), "train_dataset") == rows
    with pytest.raises(RlvrError, match="train_dataset: give a list of dicts .* got dict"):
        as_rows({"prompt": ["x"]}, "train_dataset")
    assert json.dumps(as_rows(iter(rows), "x")) == json.dumps(rows)


def test_a_dataset_dict_is_told_to_pass_one_split():
    """`rlvr.fit(train_dataset=load_dataset("openai/gsm8k", "main"))` passes a DatasetDict (no split=): the
    error names its splits and the one to pass, where it said 'give a list of dicts ... got DatasetDict'."""
    from datasets import Dataset, DatasetDict

    splits = DatasetDict({"train": Dataset.from_list([{"prompt": "q", "answer": "1"}]),
                          "test": Dataset.from_list([{"prompt": "r", "answer": "2"}])})
    with pytest.raises(RlvrError, match=r"^train_dataset: a DatasetDict of splits \(train, test\); pass one split, "
                                        r"e\.g\. train_dataset=dataset\['train'\]$"):
        as_rows(splits, "train_dataset")


def test_a_bad_config_keyword_is_named_as_rlvr_fit_s_not_a_command_line_s():
    """A misspelt or mistyped config keyword of rlvr.fit is an error of rlvr.fit's, not of a command line the
    user never wrote; nothing loads first."""
    with pytest.raises(RlvrError, match=r"^rlvr.fit: unknown config key 'train.stepz'; did you mean 'train.steps'\?"):
        rlvr.fit(model="tiny-random", rewards=["correctness"], train__stepz=2)
    with pytest.raises(RlvrError, match=r"^rlvr.fit: 'train.steps' must be int, got 'many'"):
        rlvr.fit(model="tiny-random", rewards=["correctness"], train__steps="many")
