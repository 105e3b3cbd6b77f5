"""rlvr train --seeds and rlvr compare of seed groups, with real runs: tiny-random on a reward it learns in a few
steps (most of a completion in digits, tests/train/test_learns.py's) which is also what the evaluation grades
(the run's only reward), so the held-out accuracy moves from 0 when it trains and stays there with lr 0."""
import json
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main
from tests.conftest import read_jsonl
from tests.e2e.conftest import copy_run, finished, wait_until

pytestmark = pytest.mark.slow  # every test here trains (each group's seeds in processes of their own)

# the reward, in a file of its own: each seed's process loads it by its path
DIGITS = """from rlvr.rewards import completion_text


def digits(completions, **kwargs):
    # 1 when half the completion or more is digits, else the share: the grader (threshold 1) counts the first
    shares = [sum(ch.isdigit() for ch in t) / max(len(t), 1) for t in map(completion_text, completions)]
    return [1.0 if s >= 0.5 else s for s in shares]
"""

CONFIG = """model: {name: tiny-random}
task: {heldout_size: 16, ood_size: 8}
rewards: {weights: {'DIGITS:digits': 1.0}}
rollout: {prompts_per_step: 4, group_size: 8, max_new_tokens: 8}
eval: {max_new_tokens: 8}
optimizer: {lr: 1.0e-2}
train: {steps: 3, threads: 1, save_every: 0, samples_every: 0}
"""


def untimed(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/")) and k != "train_seconds"}
            for r in rows]


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("config") / "digits.yaml"
    (path.parent / "digits.py").write_text(DIGITS)
    path.write_text(CONFIG.replace("DIGITS", str(path.parent / "digits.py")))
    return path


@pytest.fixture(scope="module")
def groups(tmp_path_factory, config):
    """Groups of two seeds: the config twice (seeds 0, 1 and seeds 2, 3) and with lr 0; and the config cut to 2
    steps twice, where a seed learns the digits or not (measured: seeds 0 and 3 do, 1 and 2 do not)."""
    root = tmp_path_factory.mktemp("groups")
    for name, seeds, extra in (("a", "0,1", []), ("b", "2,3", []), ("still", "0,1", ["--optimizer.lr=0"]),
                               ("a2", "0,1", ["--train.steps=2"]), ("b2", "2,3", ["--train.steps=2"])):
        assert main(["train", str(config), "--seeds", seeds, *extra, f"--train.out={root / name}"]) == 0
    return root


def test_a_group_is_its_seeds_run_alone(groups, config, tmp_path):
    """Each seed runs as the same command alone would (a process of its own): the same records, and with
    --keep-weights the same final weights; without it the weights go and the records stay."""
    group = json.loads((groups / "a" / "group.json").read_text())
    assert group["seeds"] == [0, 1] and group["config"] == str(config) and group["keep_weights"] is False
    for seed in (0, 1):
        run = groups / "a" / f"seed-{seed}"
        assert not (run / "final").exists() and not (run / "checkpoints").exists()
        assert (run / "eval_after.jsonl").is_file() and (run / "summary.json").is_file()
    kept = tmp_path / "kept"
    assert main(["train", str(config), "--seeds", "1", "--keep-weights", f"--train.out={kept}"]) == 0
    alone = tmp_path / "alone"
    # what a user would type for seed 1 alone, in a fresh process
    subprocess.run([sys.executable, "-m", "rlvr", "train", str(config), "--train.seed=1", f"--train.out={alone}"],
                   check=True, capture_output=True)
    for run in (groups / "a" / "seed-1", kept / "seed-1"):
        for name in ("metrics.jsonl", "samples.jsonl", "evals.jsonl", "eval_before.jsonl", "eval_after.jsonl"):
            assert untimed(read_jsonl(run / name)) == untimed(read_jsonl(alone / name)), (run, name)
    ours, theirs = load_file(kept / "seed-1" / "final" / "model.safetensors"), load_file(alone / "final" / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    # the seeds differ from one another: each is its own draw
    s0, s1 = (read_jsonl(groups / "a" / f"seed-{s}" / "samples.jsonl") for s in (0, 1))
    assert [r["completion"] for r in s0] != [r["completion"] for r in s1]


def test_compare_tells_seed_noise_from_a_change(groups, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main(["compare", str(groups / "a"), str(groups / "b"), str(groups / "still"), f"--out={out}"]) == 0
    text = capsys.readouterr().out
    assert "held-out, b against a: within seed noise: " in text, text
    assert "held-out, still against a: beyond seed noise: -" in text, text
    data = json.loads((out / "compare.json").read_text())
    assert data["still"]["accuracy"]["heldout"]["mean"] == 0.0  # lr 0: the model never leaves 0%
    assert data["a"]["accuracy"]["heldout"]["mean"] > 0.5 and data["a"]["accuracy"]["heldout"]["problems"] == 16
    page = (out / "compare.html").read_text()
    assert "b against a: within seed noise" in page and "still against a: beyond seed noise" in page


def test_one_run_each_takes_a_draw_for_a_change_that_seeds_show_is_none(groups, capsys):
    """Two steps: seed 0 learns the digits (100%), seed 2 does not (0%). The two runs alone differ beyond the
    noise of the problems, a change no config made; their groups (seeds 0, 1 against 2, 3) say within seed noise."""
    accuracy = lambda g, s: json.loads((groups / g / f"seed-{s}" / "summary.json").read_text())["heldout_accuracy_after"]
    assert [accuracy("a2", 0), accuracy("a2", 1), accuracy("b2", 2), accuracy("b2", 3)] == [1.0, 0.0, 0.0, 1.0]
    assert main(["compare", str(groups / "a2" / "seed-0"), str(groups / "b2" / "seed-2"),
                 f"--out={groups / 'single'}"]) == 0
    text = capsys.readouterr().out
    assert ("held-out, seed-2 against seed-0: beyond problem noise: -100.0 points, 95% interval [-100.0, -100.0] "
            "(paired bootstrap over 16 problems and 1 + 1 seeds; no seed spread: one run on a side") in text, text
    assert main(["compare", str(groups / "a2"), str(groups / "b2"), f"--out={groups / 'pair'}"]) == 0
    assert ("held-out, b2 against a2: within seed noise: +0.0 points, 95% interval [-100.0, +100.0]"
            in capsys.readouterr().out)


def test_a_stopped_group_resumes_its_unfinished_seeds(groups, tmp_path, capsys):
    """A group whose second seed did not finish: `rlvr train --resume GROUP` skips the first and runs the
    second again from step 0 (train.save_every=0 left it nothing to continue from), as it would have run.
    The group is a copy of group a (the same command), resumed where it lies now."""
    out = copy_run(groups / "a", tmp_path / "g")
    before = untimed(read_jsonl(out / "seed-1" / "metrics.jsonl"))
    (out / "seed-1" / "summary.json").unlink()  # as a seed stopped part way leaves it: no summary of its end
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 0
    assert f"== seed 0 (1 of 2): {out / 'seed-0'} finished already" in capsys.readouterr().err
    assert untimed(read_jsonl(out / "seed-1" / "metrics.jsonl")) == before
    assert (out / "seed-1" / "summary.json").is_file()


def test_sigterm_to_a_group_stops_its_seed_with_a_checkpoint_and_the_group_resumes(config, tmp_path):
    """SIGTERM to the group's process reaches the seed running, which stops after its step with its checkpoint
    (train.save_every=1 here); the group stops there (exit 130), and `rlvr train --resume GROUP` continues that
    seed from its checkpoint and runs the next: the resumed seed's steps are those of the seed run whole."""
    import os
    import signal

    out, whole = tmp_path / "g", tmp_path / "whole"
    args = [str(config), "--train.steps=12", "--train.save_every=1", "--eval.before=false"]
    proc = subprocess.Popen([sys.executable, "-m", "rlvr", "train", *args, "--seeds", "0,1", f"--train.out={out}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = out / "seed-0" / "metrics.jsonl"
    wait_until(lambda: metrics.exists() and metrics.read_text().count("\n") >= 2, proc,
               "seed 0's metrics.jsonl held 2 steps")
    os.kill(proc.pid, signal.SIGTERM)  # the group's process alone, as a scheduler's kill sends it
    code, err = finished(proc, 300, "a group sent SIGTERM")
    assert code == 130, err[-3000:]
    assert "seed 0 was stopped; seed(s) 0, 1 of" in err and f"rlvr train --resume {out}" in err, err[-3000:]
    assert not (out / "seed-1").exists()
    stopped = json.loads((out / "seed-0" / "summary.json").read_text())
    assert stopped["interrupted"] == "SIGTERM" and stopped["steps"] < 12
    assert main(["train", "--resume", str(out)]) == 0
    assert main(["train", *args, "--train.seed=0", f"--train.out={whole}"]) == 0
    assert untimed(read_jsonl(out / "seed-0" / "metrics.jsonl")) == untimed(read_jsonl(whole / "metrics.jsonl"))
    assert json.loads((out / "seed-1" / "summary.json").read_text())["steps"] == 12
    assert not (out / "seed-0" / "checkpoints").exists()  # finished now: its weights went


def test_compare_runs_each_config_over_the_seeds(config, tmp_path, capsys):
    """rlvr compare CONFIG CONFIG --seeds: each config run as a group (OUT/NAME/seed-N), then compared as groups."""
    still = tmp_path / "still.yaml"
    still.write_text(config.read_text().replace("lr: 1.0e-2", "lr: 0.0"))
    out = tmp_path / "cmp"
    assert main(["compare", str(config), str(still), "--seeds", "0,1", f"--out={out}"]) == 0
    text = capsys.readouterr().out
    assert json.loads((out / "digits" / "group.json").read_text())["seeds"] == [0, 1]
    assert (out / "still" / "seed-1" / "eval_after.jsonl").is_file()
    assert "held-out, still against digits: beyond seed noise: -" in text, text
