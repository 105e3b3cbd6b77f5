"""Datasets as TRL and verl users have them: chat prompts, any columns, verl's parquet layout."""
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.config import TaskConfig
from rlvr.envs.base import SingleTurn, ToolEnv, row_of
from rlvr.errors import RlvrError
from rlvr.tasks import build_splits
from rlvr.tasks.base import Problem, problem_messages


def verl_rows(n):
    """verl's preprocessed gsm8k layout: chat prompt, data_source, nested reward_model, extra_info."""
    return [{"data_source": "openai/gsm8k",
             "prompt": [{"role": "user", "content": f"What is {i} + {i}? Let's think step by step."}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
             "extra_info": {"split": "train", "index": i, "answer": f"{i}+{i}=#### {2 * i}"}} for i in range(n)]


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def test_verl_parquet_loads_as_it_is(tmp_path):
    s = build_splits(TaskConfig(name=write_parquet(tmp_path / "train.parquet", verl_rows(8)), heldout_size=2,
                                ood_size=0, few_shot=0))
    p = next(p for p in s.train if p.row["extra_info"]["index"] == 3)
    assert p.question == "What is 3 + 3? Let's think step by step." and p.answer == "6"
    assert p.messages == ({"role": "user", "content": "What is 3 + 3? Let's think step by step."},)
    assert p.origin.endswith("train.parquet row 4")
    cols = p.columns()
    assert cols["reward_model"] == {"style": "rule", "ground_truth": "6"} and cols["data_source"] == "openai/gsm8k"
    assert cols["extra_info"]["answer"] == "3+3=#### 6" and cols["ability"] == "math" and "prompt" not in cols


def test_a_dotted_column_names_a_nested_gold_and_its_absence_is_named(tmp_path):
    rows = verl_rows(6)
    for r in rows:
        r["reward_model"] = {"truth": r["reward_model"]["ground_truth"]}
    path = write_parquet(tmp_path / "alt.parquet", rows)
    s = build_splits(TaskConfig(name=path, columns={"answer": "reward_model.truth"}, heldout_size=1, few_shot=0))
    assert sorted(int(p.answer) for p in s.train + s.heldout) == [0, 2, 4, 6, 8, 10]
    del rows[2]["reward_model"]["truth"]
    write_parquet(tmp_path / "alt.parquet", rows)
    with pytest.raises(RlvrError, match=r"alt\.parquet row 3: an empty 'reward_model\.truth' for answer "
                                        r"\(task\.columns\.answer\)"):
        build_splits(TaskConfig(name=path, columns={"answer": "reward_model.truth"}, heldout_size=1, few_shot=0))


def test_conversational_jsonl_keeps_its_system_turn_and_every_column(tmp_path):
    rows = [{"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"Add {i} and 1."}],
             "solution": str(i + 1), "source_id": i} for i in range(5)]
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = build_splits(TaskConfig(name=str(path), heldout_size=1, few_shot=0, prompt_template="{prompt} Show work."))
    p = s.train[0]
    assert p.answer == "" and p.row["solution"] == str(p.row["source_id"] + 1)
    # the template applies to the user turn; the task's system prompt yields to the row's own
    assert problem_messages(p, [("Add 0 and 0.", "0")], "ignored") == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 0 and 0."},
        {"role": "assistant", "content": "0"}, {"role": "user", "content": f"{p.messages[-1]['content']} Show work."}]
    assert SingleTurn([], "sys").reset(p)[0] == {"role": "system", "content": "Be brief."}
    assert row_of(p)["prompt"] == [{"role": "system", "content": "Be brief."},
                                   {"role": "user", "content": f"{p.messages[-1]['content']} Show work."}]


def test_a_prompt_list_that_is_not_chat_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"prompt": ["just", "words"], "answer": "1"}) + "\n")
    with pytest.raises(RlvrError, match=r"bad\.jsonl line 1: the prompt is a list but not of chat messages"):
        build_splits(TaskConfig(name=str(path), heldout_size=0, few_shot=0))
    path.write_text(json.dumps({"prompt": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                               "answer": "1"}) + "\n")
    with pytest.raises(RlvrError, match=r"line 1: a conversational prompt must end with a user message"):
        build_splits(TaskConfig(name=str(path), heldout_size=0, few_shot=0))


def chat_rows(n):
    """A chat dataset as TRL's SFTTrainer takes it: whole conversations under `messages`."""
    return [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": f"What is {i} + {i}?"},
                          {"role": "assistant", "content": f"{i} + {i} = {2 * i}"}], "answer": str(2 * i)}
            for i in range(n)]


def test_a_chat_dataset_of_whole_conversations_prompts_up_to_the_last_user_turn(tmp_path):
    """`--task.columns.prompt=messages` on a chat dataset: the prompt is the conversation up to its last user
    turn and the closing assistant turn is the row's solution (what rlvr sft trains on; a solution column
    wins); it was refused as 'must end with a user message'. Without the mapping the error names the column."""
    from rlvr.train.sft import with_solutions

    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in chat_rows(10)))
    s = build_splits(TaskConfig(name=str(path), columns={"prompt": "messages"}, heldout_size=2, few_shot=0, ood_size=0))
    p = next(p for p in s.train if p.answer == "6")
    assert p.question == "What is 3 + 3?" and p.solution == "3 + 3 = 6"
    assert p.messages == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 3 + 3?"})
    assert with_solutions(s.train, "chat.jsonl") == s.train
    with pytest.raises(RlvrError, match=r"line 1: no column 'prompt' for prompt; the row has columns messages, answer; "
                                        r"name it with --task.columns.prompt=messages"):
        build_splits(TaskConfig(name=str(path), heldout_size=2))
    rows = [{**r, "reference": f"so it is {r['answer']}"} for r in chat_rows(5)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = build_splits(TaskConfig(name=str(path), columns={"prompt": "messages", "solution": "reference"}, heldout_size=1,
                                few_shot=0, ood_size=0))
    assert sorted(p.solution for p in s.train + s.heldout) == [f"so it is {2 * i}" for i in range(5)]


def test_trl_conversational_prompt_completion_rows_give_their_completion_as_the_solution(tmp_path):
    """TRL's conversational prompt-completion form: `completion` is a list of one assistant message; as
    task.columns.solution it is that message's text (it was refused as 'holds a list, expected text')."""
    path = tmp_path / "pc.jsonl"
    path.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"What is {i} + 1?"}],
                                        "completion": [{"role": "assistant", "content": f"It is {i + 1}."}],
                                        "answer": str(i + 1)}) + "\n" for i in range(5)))
    s = build_splits(TaskConfig(name=str(path), columns={"solution": "completion"}, heldout_size=1, few_shot=0,
                                ood_size=0))
    assert sorted(p.solution for p in s.train + s.heldout) == [f"It is {i + 1}." for i in range(5)]


def test_a_trl_reset_gets_every_column_and_adds_to_the_user_turn():
    class Env:
        def reset(self, target, prompt, **kwargs):
            self.target, self.seen = target, prompt
            return f"Reach {target}."

    env = ToolEnv([], Env())
    p = Problem(question="Play.", answer="", row={"target": 24}, messages=({"role": "user", "content": "Play."},))
    messages = env.reset(p)
    assert env.obj.target == 24 and env.obj.seen == [{"role": "user", "content": "Play."}]
    assert messages[-1] == {"role": "user", "content": "Play.\n\nReach 24."}
    assert env.prompt == [{"role": "user", "content": "Play.\n\nReach 24."}]


def test_a_reset_naming_a_missing_column_is_one_clear_error():
    class Env:
        def reset(self, target):
            return None

    with pytest.raises(RlvrError, match=r"Env\.reset: .*missing 1 required positional argument: 'target'; it gets "
                                        r"the row's columns \(question, answer, prompt\) by name"):
        ToolEnv([], Env()).reset(Problem(question="Play.", answer="1"))


def test_a_chat_prompts_system_turn_joins_the_tools_description():
    from rlvr.envs.calculator import calculator
    from rlvr.envs.tools import Tool

    p = Problem(question="Add.", answer="",
                messages=({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add."}))
    messages = ToolEnv([Tool.from_function(calculator)], system_prompt="ignored").reset(p)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"].startswith("Be brief.\n\nYou may call one or more tools")  # the row's own wins


def test_a_numeric_answer_reaches_trl_functions_as_it_is_and_builtins_as_text(tmp_path):
    from rlvr.rewards import build_rewards, score_batch

    path = tmp_path / "ints.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i} + {i}?", "answer": 2 * i}) + "\n" for i in range(4)))
    p = build_splits(TaskConfig(name=str(path), heldout_size=1, few_shot=0)).train[0]
    assert p.answer == str(2 * int(p.question.split()[0])) and p.columns()["answer"] == int(p.answer)
    s = score_batch(build_rewards({"correctness": 1.0}), [f"Answer: {p.answer}"], {"answer": [p.columns()["answer"]]})
    assert s.total == [1.0]
