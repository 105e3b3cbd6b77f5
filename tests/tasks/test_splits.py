"""Cross-source rules in build_splits: disjoint splits, duplicate reports, OOD from another task, templates."""
import json

import pytest

from rlvr.config import TaskConfig
from rlvr.errors import RlvrError
from rlvr.tasks import build_splits, normalise


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def rows(lo, hi, answer=lambda i: str(2 * i)):
    return [{"prompt": f"What is {i} + {i}?", "answer": answer(i)} for i in range(lo, hi)]


def test_duplicates_across_splits_are_reported_and_leave_train(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", rows(0, 20))
    held = jsonl(tmp_path / "held.jsonl", rows(15, 18))  # 3 exact duplicates of train rows
    ood = jsonl(tmp_path / "ood.jsonl", rows(17, 19, answer=lambda i: "wrong") + rows(40, 42))
    s = build_splits(TaskConfig(name=train, heldout_file=held, ood_file=ood, few_shot=0))
    assert [p.question for p in s.heldout] == ["What is 15 + 15?", "What is 16 + 16?", "What is 17 + 17?"]
    # OOD gives way to held-out (17), train gives way to both (15, 16, 17, 18)
    assert [p.question for p in s.ood] == ["What is 18 + 18?", "What is 40 + 40?", "What is 41 + 41?"]
    assert len(s.train) == 16 and not {p.question for p in s.train} & {p.question for p in s.heldout + s.ood}
    assert s.notes == [
        "1 OOD problems share a prompt with the few-shot examples or held-out, 1 of them with a different answer; "
        "removed from OOD (e.g. 'What is 17 + 17?')",
        "4 train problems share a prompt with the few-shot examples, held-out or OOD, 1 of them with a different "
        "answer; removed from train (e.g. 'What is 15 + 15?')"]


def test_duplicates_found_by_normalised_prompt(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", rows(0, 10) + [{"prompt": "what IS  3 +   3?", "answer": "6"}])
    held = jsonl(tmp_path / "held.jsonl", rows(3, 4))
    s = build_splits(TaskConfig(name=train, heldout_file=held, few_shot=0))
    assert len(s.train) == 9 and all(normalise(p.question) != "what is 3 + 3?" for p in s.train)


def test_ood_from_another_task(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", rows(0, 30))
    s = build_splits(TaskConfig(name=train, heldout_size=5, ood_name="arithmetic", ood_size=12, few_shot=0))
    assert len(s.ood) == 12 and all(p.question.startswith("What is ") and p.solution for p in s.ood)
    assert {p.difficulty for p in s.ood} == {"d1-n2"}  # arithmetic at task.params digits / operands
    gym = build_splits(TaskConfig(params={"digits": 2}, heldout_size=10, ood_size=8, train_size=40,
                                  ood_name="reasoning_gym:leg_counting", ood_params={"max_animals": 4}))
    assert len(gym.ood) == 8 and all("legs" in p.question for p in gym.ood)
    assert all(int(p.difficulty.removeprefix("num_animals=")) <= 4 for p in gym.ood)
    assert {p.difficulty for p in gym.train} == {"d2-n2"}
    back = build_splits(TaskConfig(name="reasoning_gym:chain_sum", heldout_size=5, ood_size=6, train_size=20,
                                   ood_name=train))
    assert len(back.ood) == 6 and {p.question for p in back.ood} <= {r["prompt"] for r in rows(0, 30)}
    with pytest.raises(RlvrError, match="set task.ood_name or task.ood_file, not both"):
        build_splits(TaskConfig(name=train, ood_name="arithmetic", ood_file=train))


def test_prompt_template_applies_to_every_split_and_turn():
    s = build_splits(TaskConfig(heldout_size=5, ood_size=5, train_size=10, few_shot=2,
                                prompt_template="Question: {prompt}\n{{no field}}"))
    for p in s.train + s.heldout + s.ood:
        assert p.question.startswith("Question: What is ") and p.question.endswith("\n{no field}")
    assert s.few_shot[0] == ("Question: What is 3 + 4? End with a line 'Answer: <number>'.\n{no field}",
                             "3 + 4 = 7\nAnswer: 7")
    with pytest.raises(RlvrError, match=r"must use \{prompt\} .* found \['question'\]"):
        build_splits(TaskConfig(prompt_template="{question}"))
    with pytest.raises(RlvrError, match="found none"):
        build_splits(TaskConfig(prompt_template="no field"))


def test_unknown_task_lists_the_sources():
    with pytest.raises(RlvrError, match="unknown task 'gsm8k': task.name takes arithmetic, reasoning_gym:<dataset>, "
                                        "a .jsonl file, a .json file, a .csv file, a .parquet file, a directory written by"):
        build_splits(TaskConfig(name="gsm8k"))


def test_no_train_left_is_an_error(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", rows(0, 3))
    with pytest.raises(RlvrError, match="no training problems are left"):
        build_splits(TaskConfig(name=train, heldout_file=train, few_shot=0))


def test_problem_columns_leave_out_a_difficulty_the_data_does_not_have():
    from rlvr.tasks import Problem

    assert Problem(question="q", answer="1", row={"question": "q"}).columns() == {"question": "q", "answer": "1"}
    assert Problem(question="q", answer="1", difficulty="d2").columns() == {"answer": "1", "difficulty": "d2"}
