"""A run directory is never lost to a start that fails, nor silently reused: rlvr train refuses a
directory that holds anything (train.overwrite replaces it, but only once the new run has loaded), and
config.yaml holds absolute paths, so --resume works from any working directory."""
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from rlvr.cli import main

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
FAST = ["--train.steps=1", "--train.samples_every=0", "--eval.after=false", "--task.heldout_size=2",
        "--task.ood_size=0", "--rollout.max_new_tokens=4", "--eval.max_new_tokens=4"]


def tree(root: Path) -> dict[str, str]:
    """Every file under root by its relative path, with the sha256 of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """A finished run in x/, with checkpoints, records, final/ and report.html."""
    out = tmp_path_factory.mktemp("runs") / "x"
    assert main(["train", SMOKE, *FAST, "--eval.after=true", f"--train.out={out}"]) == 0
    return out


@pytest.mark.parametrize("overwrite", [[], ["--train.overwrite=true"]])
def test_a_failed_start_leaves_the_earlier_run_byte_for_byte(earlier, tmp_path, capsys, overwrite):
    before = tree(earlier)
    assert {"config.yaml", "metrics.jsonl", "samples.jsonl", "summary.json", "report.html",
            "final/config.json", "checkpoints/step_000001.pt"} <= set(before)
    assert main(["train", SMOKE, *FAST, f"--task.name={tmp_path / 'missing.jsonl'}", *overwrite,
                 f"--train.out={earlier}"]) == 2
    err = capsys.readouterr().err
    assert tree(earlier) == before
    if overwrite:
        assert f"no such dataset file or directory: {tmp_path / 'missing.jsonl'}" in err
    else:  # refused before anything loads, with the three ways on
        assert (f"{earlier} already holds files (checkpoints, config.yaml, eval_after.jsonl, eval_before.jsonl, "
                f"evals.jsonl, final, ...) and nothing in it was changed: continue it with `rlvr train --resume {earlier}`, "
                "choose another directory with --train.out=DIR or replace it with --train.overwrite=true") in err


@pytest.mark.parametrize("broken, message", [
    (["--env.name=no_such_module:Env"], "env.name 'no_such_module:Env': cannot import"),
    (["--model.lora.r=4", "--model.lora.target_modules=[no_such_layer]"],
     "model.lora.target_modules ['no_such_layer'] are not modules of this model"),
])
def test_an_overwrite_that_fails_after_the_model_loads_loses_nothing(earlier, capsys, broken, message):
    """The environment and LoRA come after the model: still before the directory is touched."""
    before = tree(earlier)
    assert main(["train", SMOKE, *FAST, *broken, "--train.overwrite=true", f"--train.out={earlier}"]) == 2
    assert message in capsys.readouterr().err
    assert tree(earlier) == before


def test_overwrite_replaces_every_record_of_the_earlier_run(earlier, tmp_path):
    out = tmp_path / "x"
    shutil.copytree(earlier, out)  # a finished run: records, checkpoints, final/
    (out / "final" / "marker").write_text("the earlier run's final/")
    assert main(["train", SMOKE, *FAST, "--train.save_every=0", "--train.steps=0", "--train.overwrite=true",
                 f"--train.out={out}"]) == 0
    assert not (out / "final" / "marker").exists() and (out / "final" / "config.json").is_file()  # the new run's
    assert not (out / "checkpoints").exists() and not (out / "eval_after.jsonl").exists()
    assert yaml.safe_load((out / "config.yaml").read_text())["train"]["steps"] == 0
    assert "heldout_accuracy_after" not in json.loads((out / "summary.json").read_text())


def test_config_yaml_holds_absolute_paths_and_resumes_from_another_directory(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(12)]
    (work / "data" / "sums.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (work / "my_rewards.py").write_text(
        "def exact(completions, answer, **kwargs):\n"
        "    return [float(c.strip() == a) for c, a in zip(completions, answer)]\n")
    monkeypatch.chdir(work)
    assert main(["train", SMOKE, *FAST, "--train.steps=2", "--train.save_every=1", "--task.name=data/sums.jsonl",
                 "--rewards.weights={my_rewards.py:exact: 1.0}", "--train.out=run"]) == 0
    saved = yaml.safe_load((work / "run" / "config.yaml").read_text())
    assert saved["task"]["name"] == str(work / "data" / "sums.jsonl")
    assert saved["rewards"]["weights"] == {f"{work / 'my_rewards.py'}:exact": 1.0}
    metrics = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "reward/my_rewards.py:exact/mean" in metrics[0], sorted(metrics[0])  # the name as written, folders left out
    (work / "run" / "checkpoints" / "step_000002.pt").unlink()  # as if stopped after step 1
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["train", "--resume", str(work / "run")]) == 0
    metrics = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and "reward/my_rewards.py:exact/mean" in metrics[1]
    assert os.listdir(elsewhere) == []


def test_make_demo_twice_replaces_its_own_run(tmp_path):
    """`make demo` runs its recipe's `rlvr train` line; typed twice it must not stop on its own runs/demo."""
    recipe = (ROOT / "Makefile").read_text().split("\ndemo: setup\n", 1)[1].splitlines()[0]
    argv = recipe.split("-m rlvr ", 1)[1].split()
    assert argv[:2] == ["train", "configs/demo.yaml"]
    small = ["--model.name=tiny-random", "--task.heldout_size=2", "--task.ood_size=1", "--train.steps=1",
             "--train.eval_every=0", "--rollout.prompts_per_step=2", "--rollout.group_size=2", f"--train.out={tmp_path}"]
    argv[1] = str(ROOT / argv[1])
    assert main([*argv, *small]) == 0
    assert main([*argv, *small]) == 0
