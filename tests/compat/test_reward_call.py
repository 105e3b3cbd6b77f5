"""Reward functions called as TRL's GRPOTrainer calls them, and verl's compute_score used by name."""
import asyncio

import pytest

from rlvr.errors import RlvrError
from rlvr.rewards import build_rewards, score_batch
from rlvr.rewards.base import RewardFunction, RewardFunctionError
from rlvr.rewards.call import TrainerState

CONV = "tests.compat.conventions"


def chat(text):
    return [{"role": "assistant", "content": text}]


def test_trl_functions_get_keywords_columns_and_trainer_state():
    seen = {}

    def spy(prompts, completions, completion_ids, solution, trainer_state, **kwargs):
        seen.update(prompts=prompts, completions=completions, ids=completion_ids, solution=solution,
                    step=trainer_state.global_step, rest=sorted(kwargs))
        return [1.0, 0.0]

    completions = [chat("<think>a</think> 12"), chat("13")]
    columns = {"prompts": [[{"role": "user", "content": "q"}]] * 2, "completion_ids": [[1, 2], [3]],
               "solution": ["12", "12"], "answer": ["12", "12"], "data_source": ["toy", "toy"]}
    fns = [RewardFunction(name="spy", weight=1.0, fn=spy), *build_rewards({f"{CONV}:accuracy_reward": 1.0,
                                                             f"{CONV}:think_format_reward": 0.5,
                                                             f"{CONV}:length_penalty": 1.0})]
    s = score_batch(fns, completions, columns, shared={"trainer_state": TrainerState(3, 10)})
    assert seen == {"prompts": columns["prompts"], "completions": completions, "ids": [[1, 2], [3]],
                    "solution": ["12", "12"], "step": 3, "rest": ["answer", "data_source", "log_extra", "log_metric"]}
    assert s.per_function[f"{CONV}:accuracy_reward"] == [1.0, 0.0]
    assert s.per_function[f"{CONV}:think_format_reward"] == [1.0, 0.0]
    # numpy float32 return: -2/(100*4), -1/(100*4)
    assert s.per_function[f"{CONV}:length_penalty"] == pytest.approx([-0.005, -0.0025], abs=1e-7)
    assert s.total == pytest.approx([1.0 + 1.0 + 0.5 - 0.005, 0.0 - 0.0025], abs=1e-6)
    assert s.errors == {name: 0 for name in s.per_function}


def test_builtins_read_conversational_completions_as_before():
    fns = build_rewards({"correctness": 1.0, "format": 0.5})
    plain = score_batch(fns, ["Answer: 3", "3"], {"answer": ["3", "3"]})
    conv = score_batch(fns, [chat("Answer: 3"), chat("3")], {"answer": ["3", "3"]})
    assert plain.total == conv.total == [1.5, 0.0]


def test_tensor_none_and_nan_returns():
    fns = build_rewards({f"{CONV}:tensor_reward": 2.0, f"{CONV}:only_with_solution": 1.0})
    fns.append(RewardFunction(name="nan", weight=1.0, fn=lambda completions, **kw: [float("nan"), 3.0]))
    s = score_batch(fns, ["a", "b"], {"solution": ["", "x"]})
    # None and NaN add nothing to the weighted total (TRL: NaN, then nansum over the functions)
    assert s.total == pytest.approx([1.0, 1.0 + 1.0 + 3.0])
    assert s.reasons[f"{CONV}:only_with_solution"][0] == "not applicable"
    assert s.reasons["nan"][0] == "not applicable"


def test_async_functions_are_awaited_concurrently():
    # each waits for the other to have started: run one after the other, both would time out
    a_started, b_started = asyncio.Event(), asyncio.Event()

    async def a(completions, **kw):
        a_started.set()
        await asyncio.wait_for(b_started.wait(), 5)
        return [1.0] * len(completions)

    async def b(completions, **kw):
        b_started.set()
        await asyncio.wait_for(a_started.wait(), 5)
        return [2.0] * len(completions)

    fns = [RewardFunction(name="a", weight=1.0, fn=a), RewardFunction(name="b", weight=1.0, fn=b),
           *build_rewards({f"{CONV}:async_judge": 1.0})]
    s = score_batch(fns, ["xy", "xyz"], {})
    assert s.errors == {"a": 0, "b": 0, f"{CONV}:async_judge": 0}
    assert s.total == [3.0 + 0.0, 3.0 + 1.0]


def test_a_failing_batch_is_retried_row_by_row():
    def picky(completions, **kw):
        if any("bad" in c for c in completions):
            raise ValueError("cannot read 'bad'")
        return [1.0] * len(completions)

    seen = []
    s = score_batch([RewardFunction(name="picky", weight=1.0, fn=picky)], ["ok", "bad", "fine"], {},
                    on_error=lambda name, e, row: seen.append(str(e)), stop_if_all_fail=True)
    assert s.per_function["picky"] == [1.0, 0.0, 1.0]
    assert s.failed["picky"] == [False, True, False]
    assert seen == ["cannot read 'bad'"]


def test_a_reward_failing_on_every_completion_stops_with_traceback_and_row():
    def needs_missing_column(completions, reference, **kw):
        return [float(r in c) for c, r in zip(completions, reference)]

    fns = [RewardFunction(name="broken", weight=1.0, fn=needs_missing_column)]
    with pytest.raises(RewardFunctionError) as got:
        score_batch(fns, ["a", "b"], {"answer": ["1", "2"]}, origins=["data.jsonl line 7", "data.jsonl line 7"],
                    stop_if_all_fail=True)
    message = str(got.value)
    assert "reward function 'broken' raised on every completion" in message
    assert "First row: data.jsonl line 7; completion 'a'" in message
    assert "Traceback (most recent call last)" in message and "missing 1 required positional argument: 'reference'" in message
    # without stop_if_all_fail (rlvr audit) it is counted, as before
    assert score_batch(fns, ["a", "b"], {}).errors == {"broken": 2}


def test_trl_log_metric_and_log_extra_are_passed_and_kept():
    fns = build_rewards({f"{CONV}:logs_as_trl_1x": 1.0})
    s = score_batch(fns, ["ab", chat("abcd"), "abcdef"], {})
    assert s.logged == {"mean_chars": 4.0}
    assert s.extra == {"chars": [2, 4, 6]}
    picked = s.select([2, 0])
    assert picked.extra == {"chars": [6, 2]} and picked.logged == {"mean_chars": 4.0}


def test_verl_compute_score_by_name_with_its_row():
    fns = build_rewards({f"verl:{CONV}:compute_score": 1.0, f"verl:{CONV}:gsm8k_like_compute_score": 0.5})
    columns = {"data_source": ["toy", "toy", "toy"],
               "reward_model": [{"style": "rule", "ground_truth": "42"}, {"ground_truth": "7"}, {"ground_truth": "5"}],
               "extra_info": [{"index": 0}, {"index": 1}, {"index": 2}]}
    s = score_batch(fns, ["so #### 42", chat("#### 7, not 8"), "5"], columns)
    assert s.per_function[f"verl:{CONV}:compute_score"] == [1.0, 0.0, 1.0]
    assert s.per_function[f"verl:{CONV}:gsm8k_like_compute_score"] == [1.0, 1.0, 0.0]
    assert s.total == [1.5, 0.5, 1.0]
    assert s.reasons[f"verl:{CONV}:compute_score"][1] == "acc=False, pred=8"
    assert fns[0].fn.checks_correctness


def test_verl_scorers_with_other_parameter_names_are_called_as_verl_calls_them():
    # verl's default_compute_score calls prime_math/math_verify/geo3k as fn(solution_str, ground_truth):
    # by keyword they would miss 'model_output' and raise on every completion
    fns = build_rewards({f"verl:{CONV}:prime_like_compute_score": 1.0, f"verl:{CONV}:verify_like_compute_score": 0.5})
    columns = {"data_source": ["numina_olympiads"] * 3, "reward_model": [{"ground_truth": "12"}] * 3}
    s = score_batch(fns, [chat("Step 2: so \\boxed{12}"), "\\boxed{13} 12", "12"], columns)
    assert s.errors == {f"verl:{CONV}:prime_like_compute_score": 0, f"verl:{CONV}:verify_like_compute_score": 0}
    assert s.per_function[f"verl:{CONV}:prime_like_compute_score"] == [1.0, 0.0, 0.0]  # the tuple's first item
    assert s.per_function[f"verl:{CONV}:verify_like_compute_score"] == [0.0, 1.0, 1.0]
    assert s.total == [1.0, 0.5, 0.5]
    assert s.reasons[f"verl:{CONV}:prime_like_compute_score"] == ["True, 12", "False, 13", "False, "]


def test_verl_gets_data_source_and_extra_info_and_a_flat_ground_truth(tmp_path):
    module = tmp_path / "my_reward.py"
    module.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return float(data_source == 'src' and extra_info['k'] == 2 and solution_str == ground_truth)\n")
    fns = build_rewards({f"verl:{module}:compute_score": 1.0})  # verl's custom_reward_function.path form
    s = score_batch(fns, ["x", "x"], {"data_source": ["src", "other"], "extra_info": [{"k": 2}, {"k": 2}],
                                      "ground_truth": ["x", "x"]})
    assert s.total == [1.0, 0.0]
    with pytest.raises(RlvrError, match=r"cannot load verl compute_score 'nowhere.py:compute_score': no such file "
                                        r"nowhere.py \(in the working directory, /"):  # not beside the config
        build_rewards({"verl:nowhere.py:compute_score": 1.0})


def test_verl_async_and_batch_scorers():
    fns = build_rewards({f"verl:{CONV}:async_compute_score": 1.0, f"verl:{CONV}:batch_compute_score": 2.0})
    s = score_batch(fns, ["4", "so 4", "5"], {"reward_model": [{"ground_truth": 4}] * 3})
    assert s.per_function[f"verl:{CONV}:async_compute_score"] == [1.0, 0.0, 0.0]
    assert s.per_function[f"verl:{CONV}:batch_compute_score"] == [1.0, 1.0, 0.0]
    assert s.total == [3.0, 2.0, 0.0]
    # called directly, as TRL would call any reward function: an awaitable of the scores
    assert asyncio.run(fns[0].fn(completions=["4", "5"], reward_model=[{"ground_truth": 4}] * 2)) == [1.0, 0.0]


def test_a_reward_from_a_file_path_with_a_dataclass(tmp_path):
    module = tmp_path / "trl_rewards.py"
    module.write_text("from __future__ import annotations\nfrom dataclasses import dataclass\n\n"
                      "@dataclass\nclass Rule:\n    word: str\n\n"
                      "def has_word(completions, **kwargs):\n"
                      "    return [float(Rule('yes').word in c) for c in completions]\n")
    fns = build_rewards({f"{module}:has_word": 1.0})
    assert score_batch(fns, ["yes", "no"], {}).total == [1.0, 0.0]
