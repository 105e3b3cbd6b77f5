"""File tasks: JSONL, CSV, parquet and save_to_disk directories, written for real in tmp_path."""
import csv
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlvr.config import TaskConfig
from rlvr.errors import RlvrError
from rlvr.tasks import build_splits, normalise
from rlvr.tasks.files import check_gold

ROWS = [{"question": f"What is {i} + {i}?", "final": str(2 * i), "level": f"L{i % 3}"} for i in range(30)]
MAPPING = {"prompt": "question", "answer": "final", "difficulty": "level"}


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def write_parquet(path, rows):
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def write_json_array(path, rows):
    path.write_text(json.dumps(rows, indent=2))  # one key a line: row i starts on line 2 + 5 * i
    return path


def write_gzipped_jsonl(path, rows):
    import gzip
    path.with_suffix(".jsonl.gz").write_bytes(gzip.compress(write_jsonl(path, rows).read_bytes()))
    return path.with_suffix(".jsonl.gz")


def write_saved(path, rows):
    import datasets
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def write_saved_dict(path, rows):
    import datasets
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:25]),
                          "test": datasets.Dataset.from_list(rows[25:])}).save_to_disk(str(path))
    return path


def assert_disjoint(s):
    keys = [{normalise(p.question) for p in part} for part in (s.train, s.heldout, s.ood)]
    assert not keys[0] & keys[1] and not keys[0] & keys[2] and not keys[1] & keys[2]


@pytest.mark.parametrize("write,suffix", [(write_jsonl, ".jsonl"), (write_csv, ".csv"),
                                          (write_parquet, ".parquet"), (write_saved, ""),
                                          (write_json_array, ".json"), (write_jsonl, ".json"),
                                          (write_gzipped_jsonl, "")])
def test_each_format_maps_columns_and_carves_heldout(tmp_path, write, suffix):
    path = write(tmp_path / f"data{suffix}", ROWS)
    ood = write_jsonl(tmp_path / "ood.jsonl", [{"question": "What is 1000 + 1000?", "final": 2000}])
    s = build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_size=5, ood_file=str(ood), few_shot=0))
    assert (len(s.train), len(s.heldout), len(s.ood)) == (25, 5, 1)
    assert s.notes == [f"{ood}: no row has column 'level' (task.columns.difficulty)"]
    assert_disjoint(s)
    by_q = {p.question: p for p in s.train + s.heldout}
    assert by_q["What is 7 + 7?"].answer == "14" and by_q["What is 7 + 7?"].difficulty == "L1"
    assert s.ood[0].answer == "2000"  # a JSON number becomes text
    again = build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_size=5, few_shot=0))
    assert again.heldout == s.heldout
    assert build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_size=5, few_shot=0, seed=9)).heldout \
        != s.heldout


def test_dataset_dict_reads_train_split_and_test_folder_as_heldout(tmp_path):
    path = write_saved_dict(tmp_path / "dd", ROWS)
    s = build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_file=str(path / "test"), few_shot=0,
                                ood_size=0))
    assert len(s.train) == 25 and [p.question for p in s.heldout] == [r["question"] for r in ROWS[25:]]


def test_unmapped_keys_default_to_same_named_columns(tmp_path):
    rows = [{"prompt": f"Q{i}", "answer": str(i), "difficulty": "easy", "solution": f"so\nAnswer: {i}"}
            for i in range(6)]
    s = build_splits(TaskConfig(name=str(write_jsonl(tmp_path / "d.jsonl", rows)), heldout_size=2, few_shot=0))
    p = s.train[0]
    assert p.difficulty == "easy" and p.solution == f"so\nAnswer: {p.answer}"


def test_missing_mapped_column_names_file_and_line(tmp_path):
    rows = [dict(r) for r in ROWS[:5]]
    del rows[2]["final"]
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    with pytest.raises(RlvrError, match=r"d\.jsonl line 3: no column 'final' for answer \(task\.columns\.answer\)"):
        build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_size=1))


def test_empty_value_in_csv_names_the_line_after_a_multiline_field(tmp_path):
    rows = [dict(r) for r in ROWS[:5]]
    rows[1]["question"] = "two\nlines"
    rows[3]["final"] = ""
    path = write_csv(tmp_path / "d.csv", rows)
    # header line 1, rows from line 2; row 2 spans lines 3-4, so row 4 starts on line 6
    with pytest.raises(RlvrError, match=r"d\.csv line 6: an empty 'final' for answer"):
        build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_size=1))


def test_null_in_parquet_names_the_row(tmp_path):
    rows = [dict(r) for r in ROWS[:5]]
    rows[3]["question"] = None
    path = write_parquet(tmp_path / "d.parquet", rows)
    with pytest.raises(RlvrError, match=r"d\.parquet row 4: an empty 'question' for prompt"):
        build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_size=1))


def test_malformed_jsonl_line(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "a", "answer": "1"}\n\n{"prompt": "b", "answer": \n')
    with pytest.raises(RlvrError, match=r"d\.jsonl line 3: not valid JSON"):
        build_splits(TaskConfig(name=str(path), heldout_size=1))
    path.write_text('{"prompt": "a", "answer": "1"}\n[1, 2]\n')
    with pytest.raises(RlvrError, match=r"d\.jsonl line 2: expected a JSON object, got list"):
        build_splits(TaskConfig(name=str(path), heldout_size=1))


def test_json_files_name_the_line_of_a_bad_row(tmp_path):
    """A .json array's rows are named by the line each starts on (indent=2 puts ROWS[i] on line 2 + 5 * i); a
    broken array, an element that is no object, JSON lines with a bad line, and one object wrapping the rows
    are errors naming the file and line."""
    rows = [dict(r) for r in ROWS[:5]]
    del rows[3]["final"]
    path = write_json_array(tmp_path / "d.json", rows)
    with pytest.raises(RlvrError, match=r"d\.json line 17: no column 'final' for answer \(task\.columns\.answer\)"):
        build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_size=1))
    path.write_text('[\n {"prompt": "a", "answer": "1"},\n {"prompt": "b" "answer": "2"}\n]')
    with pytest.raises(RlvrError, match=r"d\.json line 3: not valid JSON \(Expecting ',' delimiter at column 17\)"):
        build_splits(TaskConfig(name=str(path), heldout_size=1))
    path.write_text('[{"prompt": "a", "answer": "1"},\n\n  "b"]')
    with pytest.raises(RlvrError, match=r"d\.json line 3: element 2 of the array: expected a JSON object, got str"):
        build_splits(TaskConfig(name=str(path), heldout_size=1))
    path.write_text('{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": }\n')
    with pytest.raises(RlvrError, match=r"d\.json line 2: not valid JSON"):
        build_splits(TaskConfig(name=str(path), heldout_size=1))
    path.write_text(json.dumps({"version": 1, "data": ROWS[:4]}, indent=2))
    with pytest.raises(RlvrError, match=r"d\.json: one JSON object; its 'data' holds a list of 4 objects, not rows"):
        build_splits(TaskConfig(name=str(path), heldout_size=1))
    (tmp_path / "d.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(RlvrError, match=r"d\.jsonl\.gz: not a readable gzip file"):
        build_splits(TaskConfig(name=str(tmp_path / "d.jsonl.gz"), heldout_size=1))
    (tmp_path / "d.parquet.gz").write_bytes(b"")
    with pytest.raises(RlvrError, match=r"unknown task"):
        build_splits(TaskConfig(name=str(tmp_path / "d.parquet.gz"), heldout_size=1))


def test_code_rows_need_tests_not_answer(tmp_path):
    spec = {"kind": "function", "entry_point": "f", "tests": [{"input": [1], "output": 2}]}
    rows = [{"prompt": f"Write f #{i}", "tests": spec} for i in range(4)]
    s = build_splits(TaskConfig(name=str(write_jsonl(tmp_path / "code.jsonl", rows)), heldout_size=1, few_shot=0))
    assert s.train[0].answer == "" and json.loads(s.train[0].tests) == spec
    # a row with neither gold nor tests loads (a user's own reward may need neither); a built-in reward
    # that compares with the gold answer names the file, the row and the column (check_gold)
    path = write_jsonl(tmp_path / "bare.jsonl", [{"prompt": "Write f"}, {"prompt": "Write g"}])
    bare = build_splits(TaskConfig(name=str(path), heldout_size=1, few_shot=0))
    with pytest.raises(RlvrError, match=r"bare\.jsonl line 1: no gold answer in column 'answer', which the "
                                        r"'correctness' reward compares with"):
        check_gold(bare.train, "correctness", "answer")


def test_few_shot_rows_with_solutions_leave_every_split(tmp_path):
    rows = [dict(r) for r in ROWS]
    rows[10]["worked"] = "10 + 10 = 20\nAnswer: 20"
    rows[20]["worked"] = "20 + 20 = 40\nAnswer: 40"
    path = write_jsonl(tmp_path / "d.jsonl", rows)
    held = write_jsonl(tmp_path / "held.jsonl", [ROWS[20], ROWS[29]])  # row 20 is also a few-shot row
    s = build_splits(TaskConfig(name=str(path), columns={**MAPPING, "solution": "worked"},
                                heldout_file=str(held), few_shot=2, prompt_template="Q: {prompt}"))
    assert s.few_shot == [("Q: What is 10 + 10?", "10 + 10 = 20\nAnswer: 20"),
                          ("Q: What is 20 + 20?", "20 + 20 = 40\nAnswer: 40")]
    shown = {q for q, _ in s.few_shot}
    assert not shown & {p.question for p in s.train + s.heldout + s.ood}
    assert [p.question for p in s.heldout] == ["Q: What is 29 + 29?"]
    assert len(s.train) == 27  # 30 rows - 2 few-shot - row 29 shared with held-out
    assert any("held-out problems share a prompt with the few-shot" in n for n in s.notes)
    assert any("1 train problems share a prompt with" in n for n in s.notes)


def test_too_few_solutions_for_few_shot_is_a_note(tmp_path):
    s = build_splits(TaskConfig(name=str(write_jsonl(tmp_path / "d.jsonl", ROWS)), columns=MAPPING, heldout_size=3,
                                few_shot=1))
    assert s.few_shot == [] and any("only 0 train rows have a solution" in n for n in s.notes)


def test_bad_columns_types_and_names(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(RlvrError, match="task.columns has unknown key question; keys are prompt, answer"):
        build_splits(TaskConfig(name=str(path), columns={"question": "prompt"}))
    with pytest.raises(RlvrError, match=r"unknown task '.*d\.txt': task\.name takes arithmetic, .*a \.jsonl file, a \.json file"):
        (tmp_path / "d.txt").write_text("[]")
        build_splits(TaskConfig(name=str(tmp_path / "d.txt")))
    with pytest.raises(RlvrError, match=r"d\.json: no rows"):
        (tmp_path / "d.json").write_text("[]")
        build_splits(TaskConfig(name=str(tmp_path / "d.json")))
    with pytest.raises(RlvrError, match="^no such dataset file or directory: .*missing.jsonl$"):
        build_splits(TaskConfig(name=str(tmp_path / "missing.jsonl")))
    with pytest.raises(RlvrError, match=r"^no such dataset file or directory: missing.jsonl \(in the working "
                                        f"directory, {re.escape(str(Path.cwd()))}\)$"):
        build_splits(TaskConfig(name="missing.jsonl"))  # a config's relative path: read from here, said so
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.txt").write_text("no data here")
    with pytest.raises(RlvrError, match="not one written by datasets' save_to_disk"):
        build_splits(TaskConfig(name=str(tmp_path / "notes")))
    with pytest.raises(RlvrError, match="too few to carve task.heldout_size=30"):
        build_splits(TaskConfig(name=str(path), columns=MAPPING, heldout_size=30))
    with pytest.raises(RlvrError, match="too few to carve task.heldout_size=1 held-out rows"):
        build_splits(TaskConfig(name=str(write_jsonl(tmp_path / "one.jsonl", ROWS[:1])), columns=MAPPING))


@pytest.mark.parametrize("rows, heldout_size, held", [(30, None, 6), (4, None, 1), (499, None, 99), (500, None, 100),
                                                      (2000, None, 100), (30, 25, 25), (30, 0, 0)])
def test_file_splits_hold_out_a_fifth_of_a_small_file(tmp_path, rows, heldout_size, held):
    """task.heldout_size null (the default): 100, or a fifth (at least one) of a file under 500 rows, with a
    note saying so; a number is taken as it is."""
    data = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(rows)]
    path = write_jsonl(tmp_path / "d.jsonl", data)
    s = build_splits(TaskConfig(name=str(path), heldout_size=heldout_size))
    assert (len(s.heldout), len(s.train)) == (held, rows - held)
    noted = [n for n in s.notes if "(a fifth)" in n]
    assert noted == ([f"{path}: {rows} rows: holding out {held} (a fifth) and training on the rest; set "
                      "task.heldout_size or task.heldout_file to choose"] if heldout_size is None and rows < 500 else [])


def test_a_solution_column_is_no_worked_example_unless_asked(tmp_path):
    """TRL's docs name the gold `solution`: by default it stays a column, never a turn in every prompt."""
    data = [{"prompt": f"Q{i}", "solution": str(i)} for i in range(10)]
    path = str(write_jsonl(tmp_path / "d.jsonl", data))
    s = build_splits(TaskConfig(name=path, heldout_size=2))
    assert s.few_shot == [] and len(s.train) + len(s.heldout) == 10
    assert s.train[0].columns()["solution"] == s.train[0].solution
    asked = build_splits(TaskConfig(name=path, heldout_size=2, few_shot=1))
    assert len(asked.few_shot) == 1 and len(asked.train) + len(asked.heldout) == 9


def test_a_prompt_read_from_another_column_reaches_rewards_under_that_name_too():
    from rlvr.rewards.call import dataset_columns
    from rlvr.tasks.files import to_problem

    p = to_problem({"question": "What is 2 + 2?", "answer": "#### 4"}, {"prompt": "question"}, "f.jsonl:1")
    cols = dataset_columns([p], 2)
    assert cols["question"] == ["What is 2 + 2?"] * 2 and cols["prompts"] == ["What is 2 + 2?"] * 2
    chat = to_problem({"prompt": [{"role": "user", "content": "Hi?"}], "answer": "1"}, {}, "f.jsonl:2")
    assert "prompt" not in dataset_columns([chat], 1)   # TRL passes a `prompt` column as `prompts` only


def test_a_path_under_the_home_directory_reads_in_every_command(tmp_path, monkeypatch, capsys):
    """`task.name: ~/data/gsm8k/train.parquet`, as verl's configs write it: rlvr train expanded the ~ (its
    config is made absolute first) but rlvr eval and rlvr audit said 'no such dataset file'. Files, held-out
    files and Hub-layout folders under ~ read alike."""
    from rlvr.cli import main

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "data" / "gsm8k").mkdir(parents=True)
    write_parquet(tmp_path / "data" / "gsm8k" / "train.parquet", ROWS[:20])
    write_jsonl(tmp_path / "data" / "gsm8k" / "test.jsonl", ROWS[20:])
    s = build_splits(TaskConfig(name="~/data/gsm8k/train.parquet", heldout_file="~/data/gsm8k/test.jsonl",
                                columns=MAPPING, few_shot=0, ood_size=0))
    assert (len(s.train), len(s.heldout)) == (20, 10)
    s = build_splits(TaskConfig(name="~/data/gsm8k", heldout_split="test", columns=MAPPING, few_shot=0, ood_size=0))
    assert (len(s.train), len(s.heldout)) == (20, 10)
    config = tmp_path / "mine.yaml"
    config.write_text("task:\n  name: ~/data/gsm8k/train.parquet\n  heldout_size: 4\n"
                      "  columns: {prompt: question, answer: final}\n")
    assert main(["audit", str(config), "--n=3"]) == 0
    assert "control (mean score of the reference solutions): correctness 1" in capsys.readouterr().out


def test_trls_conversational_completion_is_a_solution(tmp_path):
    """TRL's prompt-completion SFT rows: the completion a list holding one assistant message. Refused before
    as 'holds a list, expected text'."""
    data = [{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
             "completion": [{"role": "assistant", "content": f"{i} + {i} = {2 * i}\nAnswer: {2 * i}"}],
             "answer": str(2 * i)} for i in range(10)]
    path = str(write_jsonl(tmp_path / "d.jsonl", data))
    s = build_splits(TaskConfig(name=path, heldout_size=2, columns={"solution": "completion"}))
    assert sorted(p.solution for p in s.train + s.heldout) == sorted(f"{i} + {i} = {2 * i}\nAnswer: {2 * i}"
                                                                     for i in range(10))
    data[3]["completion"].append({"role": "user", "content": "and?"})  # a conversation is no one solution
    path = str(write_jsonl(tmp_path / "e.jsonl", data))
    with pytest.raises(RlvrError, match=r"e.jsonl line 4: column for solution holds a list; a solution is text, or "
                                        r"one assistant message"):
        build_splits(TaskConfig(name=path, heldout_size=2, columns={"solution": "completion"}))


def test_a_json_array_saved_as_jsonl_is_told_so(tmp_path):
    """json.dump(rows, open("d.jsonl", "w")): the line-1 error says the file is one array and how to read it
    (a .json name), pretty-printed or on one line."""
    path = tmp_path / "d.jsonl"
    for text, said in ((json.dumps(ROWS[:3], indent=2), "not valid JSON"), (json.dumps(ROWS[:3]), "expected a JSON object, got list")):
        path.write_text(text)
        with pytest.raises(RlvrError, match=rf"d\.jsonl line 1: {said}.*; the file is one JSON array, not JSON lines: "
                                            r"name it \.json, or write one object per line$"):
            build_splits(TaskConfig(name=str(path), heldout_size=1))
    path.with_suffix(".json").write_text(json.dumps(ROWS[:3], indent=2))
    assert len(build_splits(TaskConfig(name=str(path.with_suffix(".json")), columns=MAPPING, heldout_size=1,
                                       few_shot=0, ood_size=0)).train) == 2


def test_the_readmes_local_hub_copy_of_gsm8k_loads_as_written(tmp_path, monkeypatch):
    """README: a local copy in the Hub's layout reads with the overrides it shows (GSM8K's rows are
    `question` and `answer`, so the shown overrides must map the prompt)."""
    from rlvr.config import build_config

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    shown = re.search(r"reads the same way: `(task\.name=gsm8k [^`]*)`", readme).group(1)
    rows = [{"question": f"Sam has {i} pens and buys {i} more. How many?", "answer": f"{i}+{i}={2 * i}\n#### {2 * i}"}
            for i in range(30)]
    (tmp_path / "gsm8k" / "main").mkdir(parents=True)
    write_parquet(tmp_path / "gsm8k" / "main" / "train-00000-of-00001.parquet", rows[:25])
    write_parquet(tmp_path / "gsm8k" / "main" / "test-00000-of-00001.parquet", rows[25:])
    monkeypatch.chdir(tmp_path)
    task = build_config(None, [f"--{kv}" for kv in shown.split()] + ["--task.heldout_split=test"]).task
    s = build_splits(task)
    assert len(s.train) == 25 and len(s.heldout) == 5
    assert s.train[0].question.startswith("Sam has 0 pens") and s.heldout[0].answer.endswith("#### 50")
