import json

import pytest

from rlvr.cli import main


def test_eval_cli_writes_eval_json_and_table(tmp_path, capsys):
    out = tmp_path / "ev"
    rc = main(["eval", "--model", "tiny-random", "--task", "arithmetic", "--n", "4", "--k", "2",
               "--max-new-tokens", "6", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "eval.json").read_text())
    metrics = {"pass@1", "format-free@1", "pass@2", "maj@2", "n", "per_difficulty", "grader"}
    assert metrics <= set(doc) and doc["grader"] == "builtin"
    assert (doc["task"], doc["n"], doc["k"], doc["samples"], doc["split"]) == ("arithmetic", 4, 2, 2, "heldout")
    assert doc["tasks"]["arithmetic"] == {m: doc[m] for m in metrics}
    for m in ("pass@1", "format-free@1", "pass@2", "maj@2"):
        assert 0.0 <= doc[m] <= 1.0
    assert list(doc["per_difficulty"]) == ["d1-n2"] and doc["per_difficulty"]["d1-n2"]["n"] == 4
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(len(r["sampled"]) == 2 for r in rows)
    assert doc["pass@1"] == sum(r["greedy_correct"] for r in rows) / 4
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["task", "n", "pass@1", "format-free@1", "pass@2", "maj@2"]
    assert printed[2].split()[:2] == ["arithmetic", "4"]


def test_eval_cli_baseline_compares_problem_by_problem(tmp_path, capsys):
    out = tmp_path / "ev"
    rc = main(["eval", "--model", "tiny-random", "--baseline", "tiny-random", "--task", "arithmetic", "--n", "3",
               "--k", "1", "--max-new-tokens", "4", "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "eval.json").read_text())
    base = doc["tasks"]["arithmetic"]["baseline"]
    # the same model on the same problems: nothing fixed or broken, the same figures, no change
    assert base["model"] == "tiny-random" and base["pass@1"] == doc["pass@1"]
    assert base["change"] == {"pass@1": 0.0, "format-free@1": 0.0, "maj@1": 0.0}
    f = base["flips"]
    assert (f["fixed"], f["broken"], f["n"], f["kept"] + f["never"]) == (0, 0, 3, 3)
    assert base["decomposition"]["strict"] == 0.0
    printed = capsys.readouterr().out
    assert "arithmetic: baseline tiny-random -> this model" in printed and "0 fixed, 0 broken" in printed


def test_eval_cli_equals_forms_config_file_and_task_overrides(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("task:\n  ood_operands: 3\n")
    out = tmp_path / "ev"
    rc = main(["eval", str(config), "--model=tiny-random", "--task=arithmetic", "--task.digits=2", "--n=2",
               "--k=2", "--samples=3", "--max-new-tokens=4", f"--out={out}", "--split", "ood",
               "--task.ood_digits=3"])
    assert rc == 0
    doc = json.loads((out / "eval.json").read_text())
    assert (doc["split"], doc["samples"], doc["n"]) == ("ood", 3, 2)
    assert list(doc["per_difficulty"]) == ["d3-n3"]  # digits from the command line, operands from the file
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert all(len(r["sampled"]) == 3 for r in rows)


@pytest.mark.parametrize("args, message", [
    (["--k", "3", "--samples", "2"], "must be at least k"),
    (["--task", "arithmetic", "--task", "arithmetic"], "given twice"),
    (["--task", "no_such_task"], "unknown task"),
    (["--task.digts=2"], "did you mean 'task.params.digits'"),
    (["--n", "0"], "--n must be at least 1"),
])
def test_eval_cli_errors_are_one_line(tmp_path, capsys, args, message):
    rc = main(["eval", "--model", "tiny-random", "--out", str(tmp_path / "ev"), *args])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr: error:") and message in err
    assert not (tmp_path / "ev").exists()


def test_eval_cli_transfer_table_over_two_tasks(tmp_path, capsys):
    rows = [("What is 2 + 2?", "4", "easy"), ("What is 3 + 5?", "8", "easy"), ("What is 12 * 3?", "36", "hard"),
            ("What is 7 - 9?", "-2", "hard"), ("What is 6 * 7?", "42", "hard"), ("What is 9 + 9?", "18", "easy")]
    data = tmp_path / "problems.jsonl"
    data.write_text("".join(json.dumps({"prompt": q, "answer": a, "difficulty": d}) + "\n" for q, a, d in rows))
    out = tmp_path / "ev"
    rc = main(["eval", "--model", "tiny-random", "--task", "arithmetic", "--task", str(data),
               "--task.heldout_size=4", "--task.few_shot=0", "--k", "2", "--max-new-tokens", "4",
               "--out", str(out)])
    assert rc == 0
    doc = json.loads((out / "eval.json").read_text())
    assert list(doc["tasks"]) == ["arithmetic", str(data)] and doc["task"] == "arithmetic"
    file_task = doc["tasks"][str(data)]
    assert file_task["n"] == 4 and doc["tasks"]["arithmetic"]["n"] == 4
    assert sum(d["n"] for d in file_task["per_difficulty"].values()) == 4
    assert set(file_task["per_difficulty"]) <= {"easy", "hard"}
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [r["task"] for r in samples] == ["arithmetic"] * 4 + [str(data)] * 4
    table = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in table[2:-1] if not line.startswith("  ")] == ["arithmetic", str(data)]
    assert table[-1] == f"wrote {out / 'eval.json'}"


def test_eval_cli_without_a_config_takes_a_small_file(tmp_path, capsys):
    """No config: task.heldout_size is null, so a 6-row file holds out a fifth (one row) and says so."""
    data = tmp_path / "mine.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(6)))
    assert main(["eval", "--model", "tiny-random", "--task", str(data), "--k", "2", "--max-new-tokens", "4",
                 "--out", str(tmp_path / "ev")]) == 0
    assert json.loads((tmp_path / "ev" / "eval.json").read_text())["tasks"][str(data)]["n"] == 1
    err = capsys.readouterr().err  # the note names the file once (it is the task: no second prefix)
    assert err.startswith(f"{data}: 6 rows: holding out 1 (a fifth) and training on the rest"), err


def test_eval_of_a_model_directory_with_a_truncated_weights_file_names_the_file(tmp_path, capsys):
    from rlvr.models import tiny_random

    model, tok = tiny_random(seed=0)
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    args = ["eval", "--model", str(tmp_path / "m"), "--task", "arithmetic", "--n", "2", "--k", "1",
            "--max-new-tokens", "2", "--out", str(tmp_path / "ev")]
    assert main(args) == 0  # whole, it loads
    weights = tmp_path / "m" / "model.safetensors"
    with open(weights, "r+b") as f:  # a copy cut short
        f.truncate(weights.stat().st_size // 2)
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlvr: error: model directory {tmp_path / 'm'} cannot be loaded: {weights} is damaged "
                          "or cut short (Error while deserializing header: incomplete metadata")
    assert "Traceback" not in err


@pytest.mark.slow
def test_eval_baseline_gets_pass_at_k_and_maj_at_k_with_the_change(tmp_path, capsys):
    """`rlvr eval --model runs/seven/final --baseline tiny-random --task seven.jsonl --k 2 --samples 4`: the
    baseline is evaluated as the model is, so its pass@k and maj@k are those `rlvr eval --model tiny-random`
    gives on its own (same problems, samples and seed), and `change` is the model's figure minus them. The
    model is tiny-random fine-tuned (rlvr sft) to answer 'Answer: 7', which every problem's gold is."""
    rows = [{"prompt": f"Q{i}: what is seven?", "answer": "7", "solution": "Answer: 7"} for i in range(30)]
    data = tmp_path / "seven.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sft = tmp_path / "seven"
    assert main(["sft", f"--task.name={data}", "--model.name=tiny-random", "--train.steps=30", "--optimizer.lr=1e-2",
                 "--optimizer.warmup_steps=0", "--sft.batch_size=8", "--eval.before=false", "--eval.after=false",
                 f"--train.out={sft}"]) == 0
    common = ["--task", str(data), "--k", "2", "--samples", "4", "--max-new-tokens", "12", "--seed", "3"]
    assert main(["eval", f"--task.name={data}", "--model", str(sft / "final"), "--baseline", "tiny-random", *common,
                 "--out", str(tmp_path / "ev")]) == 0
    assert main(["eval", f"--task.name={data}", "--model", "tiny-random", *common, "--out", str(tmp_path / "alone")]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((tmp_path / "ev" / "eval.json").read_text())
    alone = json.loads((tmp_path / "alone" / "eval.json").read_text())
    base = doc["baseline"] if "baseline" in doc else doc["tasks"][str(data)]["baseline"]
    metrics = ("pass@1", "format-free@1", "pass@2", "maj@2")
    assert {m: base[m] for m in metrics} == {m: alone[m] for m in metrics}
    assert base["per_difficulty"] == alone["per_difficulty"] and base["n"] == alone["n"] == 6
    assert doc["pass@1"] == 1.0 and base["pass@1"] == 0.0     # greedy: the fine-tuned model always says 7
    assert base["change"] == {m: doc[m] - alone[m] for m in metrics}
    assert base["flips"]["fixed"] == 6
    base_rows = [json.loads(line) for line in (tmp_path / "ev" / "baseline_samples.jsonl").read_text().splitlines()]
    alone_rows = [json.loads(line) for line in (tmp_path / "alone" / "samples.jsonl").read_text().splitlines()]
    assert [r["sampled"] for r in base_rows] == [r["sampled"] for r in alone_rows]
    table = printed.split("baseline tiny-random -> this model\n")[1].splitlines()
    assert table[0].split() == ["baseline", "model", "change"]
    assert table[1].split() == ["pass@1", "0.0%", "100.0%", "+100.0"]
    assert [r.split()[0] for r in table[2:5]] == ["format-free@1", "pass@2", "maj@2"]


def test_a_baseline_that_cannot_load_keeps_the_models_results(tmp_path, capsys):
    """`rlvr eval --model M --baseline B` with a B that does not load (a typo, a failing download): M's
    figures were evaluated (minutes on a real model) and then lost with nothing written; they are written
    before B starts, and the error says so."""
    out = tmp_path / "ev"
    (out).mkdir()
    (out / "baseline_samples.jsonl").write_text('{"task": "from an earlier eval"}\n')
    # a Hub name passes the check of names made before anything runs; offline and uncached, it fails to load
    rc = main(["eval", "--model", "tiny-random", "--baseline", "no-such-org/no-such-model", "--task", "arithmetic",
               "--n", "3", "--k", "1", "--max-new-tokens", "4", "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert err.startswith("rlvr: error: baseline no-such-org/no-such-model: "), err
    assert err.rstrip().endswith(f"(this model's results are written: {out / 'eval.json'})")
    doc = json.loads((out / "eval.json").read_text())
    assert (doc["model"], doc["n"]) == ("tiny-random", 3) and "baseline" not in doc["tasks"]["arithmetic"]
    assert len((out / "samples.jsonl").read_text().splitlines()) == 3
    assert not (out / "baseline_samples.jsonl").exists()  # it belonged to another eval.json


def test_every_tasks_data_is_read_before_a_model_loads(tmp_path, capsys):
    """`rlvr eval --task arithmetic --task bad.jsonl`: the bad line of the second task stops the command before
    any model loads (here: before the uncached Hub name 'no-such-org/no-such-model' is looked up), not after the
    first task was evaluated."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "What is 1 + 1?", "answer": "2"}\n{"prompt": "What is 2 + 2?", "answer": }\n')
    rc = main(["eval", "--model", "no-such-org/no-such-model", "--task", "arithmetic", "--task", str(bad), "--n", "2",
               "--out", str(tmp_path / "ev")])
    assert rc == 2
    assert f"{bad} line 2: not valid JSON" in capsys.readouterr().err
    assert not (tmp_path / "ev").exists()


def test_eval_of_an_ood_that_is_another_task_says_which(tmp_path, capsys):
    """docs/verifiers.md's `rlvr eval configs/code.yaml --split ood` evaluates HumanEval under the label
    pyfunc (the task's name): the start says the OOD split is task.ood_name's."""
    assert main(["eval", "--model", "tiny-random", "--task.name=arithmetic", "--task.ood_name=reasoning_gym:chain_sum",
                 "--split", "ood", "--n", "2", "--k", "1", "--max-new-tokens", "4", "--out", str(tmp_path / "ev")]) == 0
    err = capsys.readouterr().err
    assert "arithmetic: --split ood is task.ood_name=reasoning_gym:chain_sum" in err
    samples = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    assert [r["task"] for r in samples] == ["arithmetic"] * 2 and "terms" in samples[0]["difficulty"]
