"""What happens to a run directory from outside the model: a stop during the first evaluation, resumes
that cannot load, damaged checkpoints, two processes on one directory, data that changed, leftovers of
killed writes, a finished run extended. Each through `rlvr train` itself on real files (a process of its own
for a run that must hold the directory while another starts), both ways: the fault handled, the honest run
unchanged (resumed = uninterrupted, value for value)."""
import hashlib
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.train.checkpoint import checkpoints
from rlvr.train.rundir import LOCK
from tests.e2e.conftest import copy_run, wait_until
from tests.e2e.test_resume import RUN, read_jsonl, same_run

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke.yaml")


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def learning_run(folder: Path) -> list[str]:
    """test_resume's run with a reward that varies within groups, so the weights move from step 1 on
    (tiny-random scores 0 on the arithmetic rewards, and a run whose weights never move would resume
    "exactly" whatever its optimizer state)."""
    reward = folder / "varied.py"
    reward.write_text("def varied(completions, **kwargs):\n    return [float(len(set(c)) % 3) for c in completions]\n")
    return [*RUN, f"--rewards.weights={{{reward}:varied: 1.0}}"]


@pytest.fixture
def alone(learning_alone):
    """The learning run left alone (tests/e2e/conftest.py: one run, shared with test_full_disk)."""
    return learning_alone


def test_sigterm_during_the_first_evaluation_resumes_value_for_value(alone, learning, tmp_path, monkeypatch):
    """The step-0 checkpoint holds the optimizer as it is (never stepped), not a state stepped once with
    zero moments: the resumed run's steps equal the uninterrupted run's (they differed from step 2)."""
    import rlvr.train.grpo as grpo

    real = grpo.eval_on_main

    def signalled(*args, **kwargs):  # a real SIGTERM, arriving while the real evaluation before training runs
        if "before" in args or kwargs.get("tag") == "before":
            os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    out = tmp_path / "run"
    monkeypatch.setattr(grpo, "eval_on_main", signalled)
    assert main(["train", *learning, f"--train.out={out}"]) == 0
    monkeypatch.setattr(grpo, "eval_on_main", real)
    (ckpt,) = checkpoints(out)
    assert ckpt.name == "step_000000.pt"
    assert torch.load(ckpt, weights_only=False)["optimizer"] == {"format": "none"}  # it had not stepped
    assert not (out / "metrics.jsonl").read_text()
    assert main(["train", "--resume", str(out)]) == 0
    same_run(alone, out)


def test_a_resume_the_checkpoint_cannot_take_leaves_the_run_as_it_was(stopped_at_4, tmp_path, capsys):
    out = copy_run(stopped_at_4[0], tmp_path / "run")
    before = tree(out)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--algo.preset=ppo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 or not any("Traceback" in line for line in err)
    assert err[-1].startswith(f"rlvr: error: checkpoint {out / 'checkpoints' / 'step_000004.pt'} does not fit this "
                              "config (")
    assert "it differs from the run's config.yaml in algo.adv_estimator=gae (was group)" in err[-1]
    assert err[-1].endswith("nothing in the run directory was changed: resume without those overrides")
    assert tree(out) == before  # config.yaml too
    assert main(["train", "--resume", str(out), "--train.steps=6"]) == 0  # resumable as it was


def test_a_truncated_only_checkpoint_is_refused_with_one_line_and_nothing_changes(trained, tmp_path, capsys):
    out = copy_run(trained(*RUN, "--train.steps=2"), tmp_path / "run")
    (ckpt,) = checkpoints(out)
    with open(ckpt, "r+b") as f:
        f.truncate(ckpt.stat().st_size // 2)
    before = tree(out)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.steps=4"]) == 2
    err = capsys.readouterr().err
    assert (f"rlvr: error: no checkpoint in {out / 'checkpoints'} can be loaded: step_000002.pt is damaged: its "
            "sha256 differs from the one written with it in step_000002.pt.sha256") in err
    assert tree(out) == before


def test_a_damaged_checkpoint_is_refused_and_the_one_before_resumes_value_for_value(alone, stopped_at_4, tmp_path,
                                                                                   capsys):
    out = copy_run(stopped_at_4[0], tmp_path / "run")
    newest = out / "checkpoints" / "step_000004.pt"
    assert (out / "checkpoints" / "step_000004.pt.sha256").read_text().split() == [
        hashlib.sha256(newest.read_bytes()).hexdigest(), "step_000004.pt"]  # sha256sum -c reads it
    data = bytearray(newest.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 1024] = bytes(1024)  # 1 KiB of one tensor overwritten: torch.load would not notice
    newest.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.steps=6"]) == 0
    err = capsys.readouterr().err
    assert (f"note: checkpoint {newest} is damaged: its sha256 differs from the one written with it in "
            "step_000004.pt.sha256; resuming from step_000002.pt, the newest whole one") in err
    assert "resuming" in err and "from step 2" in err
    assert (out / "checkpoints" / "step_000004.pt.damaged").is_file()  # kept for a look, no longer a checkpoint
    same_run(alone, out)


def test_the_honest_resume_reads_no_damage_and_extends_a_finished_run_once(alone, stopped_at_4, tmp_path, capsys):
    """A finished run extended: one eval_after.jsonl (the new end's), its evals equal the uninterrupted
    run's; a non-UTF-8 tail in metrics.jsonl and the temporary files of killed writes are dropped."""
    out = copy_run(stopped_at_4[0], tmp_path / "run")
    n_eval = len((out / "eval_after.jsonl").read_text().splitlines())
    with open(out / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 5, "loss": \xff\xfe\x00')  # a tail cut short by a kill, bytes that are not UTF-8
    tmp = out / "checkpoints" / ".step_000006.pt.tmp"
    tmp.write_bytes(b"\0" * 4096)  # a checkpoint write a SIGKILL cut short
    (out / ".config.yaml.abcd1234").write_text("half")  # an atomic write's temporary file
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.steps=6"]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if line.startswith("note:")] == [  # no damaged checkpoint
        "note: resuming with settings changed from the run's config.yaml: train.steps=6 (was 4); they apply from the next step"]
    assert f"{out}: removed 2 temporary file(s) of writes cut short" in err
    assert not tmp.exists() and not (out / ".config.yaml.abcd1234").exists()
    assert len((out / "eval_after.jsonl").read_text().splitlines()) == n_eval  # not appended twice
    assert [r["step"] for r in read_jsonl(out / "evals.jsonl")] == [0, 3, 6]
    findings = lambda run: [(f["step"], f["rule"]) for f in read_jsonl(run / "health.jsonl")]
    assert findings(out) == findings(alone)  # the end-of-run findings of step 4 gone, step 6's made
    same_run(alone, out)
    assert not (out / LOCK).exists()  # released at the end


def test_two_trains_into_one_directory_and_a_resume_of_a_running_run_are_refused(tmp_path, capsys, monkeypatch):
    """The first run in a process of its own, holding the directory; the second start and the resume in this
    process, as a second command would meet it."""
    import rlvr.train.grpo as grpo

    out = tmp_path / "run"
    args = ["train", *RUN, "--train.steps=1000", "--train.save_every=1", f"--train.out={out}"]
    first = subprocess.Popen([sys.executable, "-m", "rlvr", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        wait_until((out / LOCK).exists, first, f"the first run took {out / LOCK}")
        capsys.readouterr()
        with monkeypatch.context() as here:  # where the lock did not hold, fail at once instead of training on
            here.setattr(grpo, "train_step", lambda *a, **k: pytest.fail("a start trains beside the running run"))
            assert main(args) == 2
            second = capsys.readouterr().err
            assert (f"rlvr: error: {out} is in use by another rlvr process (PID {first.pid}), which holds "
                    f"{out / LOCK}" in second), second
            # it has loaded and claimed the directory
            wait_until((out / "config.yaml").exists, first, "the first run wrote config.yaml")
            assert main(["train", "--resume", str(out)]) == 2
        resumed = capsys.readouterr().err
        assert f"(PID {first.pid})" in resumed, resumed
        assert "Traceback" not in second + resumed
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err  # the first run was not disturbed: it stops on SIGTERM as ever
    steps = [m["step"] for m in read_jsonl(out / "metrics.jsonl")]
    assert steps == list(range(1, len(steps) + 1))  # one writer: no step twice


def test_a_stale_lock_of_a_dead_process_is_taken_over(alone, learning, tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK).write_text(f"{dead.pid}\n")  # what a SIGKILLed run leaves: the file, no flock
    capsys.readouterr()
    assert main(["train", *learning, f"--train.out={out}"]) == 0  # a fresh run: the lock file is not "a file it holds"
    assert f"{out}: taking over the lock of process {dead.pid}, which is no longer running" in capsys.readouterr().err
    same_run(alone, out)


FAST = ["--train.steps=2", "--train.save_every=1", "--train.samples_every=0", "--eval.after=false",
        "--task.heldout_size=2", "--task.ood_size=0", "--rollout.max_new_tokens=4", "--eval.max_new_tokens=4"]


def test_data_that_changed_since_the_checkpoint_is_named_and_the_run_records_its_data(tmp_path, capsys):
    data = tmp_path / "sums.jsonl"
    rows = [{"prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(12)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    assert main(["train", SMOKE, *FAST, f"--task.name={data}", f"--train.out={out}"]) == 0
    recorded = json.loads((out / "summary.json").read_text())["data"]
    assert recorded["files"] == [{"path": str(data), "bytes": data.stat().st_size,
                                  "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}]
    assert recorded["problems"] == {"train": 10, "heldout": 2, "ood": 0}  # 12 rows, 2 held out
    whole = data.read_bytes()
    before = tree(out)
    for changed, how in ((whole[: whole.rindex(b"{")], "shrank"), (whole.replace(b"12", b"13"), "changed")):
        data.write_bytes(changed)
        capsys.readouterr()
        assert main(["train", "--resume", str(out), "--train.steps=3"]) == 2
        err = capsys.readouterr().err
        assert f"rlvr: error: {data} {how} since checkpoint {out / 'checkpoints' / 'step_000002.pt'} was written" in err
        assert "IndexError" not in err and tree(out) == before
    data.write_bytes(whole)
    assert main(["train", "--resume", str(out), "--train.steps=3"]) == 0
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3]


def test_an_lr_that_overflows_the_weights_is_undone_each_step_and_never_checkpointed(alone, learning, tmp_path,
                                                                                    capsys):
    """`rlvr train --optimizer.lr=1e38` is refused by the config's validation; a Config set by hand in
    Python is not validated again, and there the update's own guard holds."""
    from rlvr.config import build_config
    from rlvr.train.grpo import train

    out = tmp_path / "run"
    args = [a for a in learning if a.startswith("--")]
    assert main(["train", *learning, "--optimizer.lr=1e38", f"--train.out={out}"]) == 2
    cfg = build_config(learning[0], [*args, "--optimizer.warmup_steps=0", f"--train.out={out}"])
    cfg.optimizer.lr = 1e38
    train(cfg)
    rows = read_jsonl(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]  # step 2 no longer crashes
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in rows)
    assert [(r["skipped_updates"], r["skipped_nonfinite_weights"]) for r in rows] == [(1, 1)] * 6  # each undone
    health = read_jsonl(out / "health.jsonl")
    assert health[0]["rule"] == "non_finite" and health[0]["message"].startswith(
        "the update made weights non-finite (inf or NaN) although the loss and gradient were finite: "
        "optimizer.lr=")
    initial = torch.load(checkpoints(alone)[0], weights_only=False)  # only to read the names
    for ckpt in checkpoints(out):
        policy = torch.load(ckpt, weights_only=False)["policy"]
        assert set(policy) == set(initial["policy"])
        assert all(bool(torch.isfinite(v).all()) for v in policy.values())
    from rlvr.models import tiny_random

    fresh, _ = tiny_random(seed=0)  # the weights never moved: every update was undone
    last = torch.load(checkpoints(out)[-1], weights_only=False)["policy"]
    assert all(torch.equal(last[k], v) for k, v in fresh.state_dict().items())
    assert all(r.get("skipped_nonfinite_weights") == 0 for r in read_jsonl(alone / "metrics.jsonl"))  # honest lr


def test_a_resume_refuses_what_changes_the_weights_and_notes_the_rest(tmp_path, capsys):
    """LoRA's alpha, rank and target modules, the base's dtype: under another value the checkpoint's
    weights are another model (alpha rescales every adapter and loaded silently). Each is refused naming
    the key, the checkpoint's value and this start's, the run directory untouched; a dropout or learning
    rate is a note, and the run goes on under it."""
    out = tmp_path / "run"
    assert main(["train", *RUN, "--train.steps=2", "--model.lora.r=4", "--algo.beta=0", "--algo.ref_sync_every=0",
                 "--train.eval_every=0", f"--train.out={out}"]) == 0
    ckpt = out / "checkpoints" / "step_000002.pt"
    before = tree(out)
    refused = {"--model.lora.alpha=32": "model.lora.alpha=16; this start sets model.lora.alpha=32",
               "--model.lora.r=8": "model.lora.r=4; this start sets model.lora.r=8",
               "--model.lora.target_modules=all-linear": "model.lora.target_modules=['q_proj', 'k_proj', 'v_proj', "
                                                         "'o_proj']; this start sets model.lora.target_modules=all-linear",
               "--model.dtype=bfloat16": "model.dtype=float32; this start sets model.dtype=bfloat16",
               "--model.quantize=nf4": "model.quantize=none; this start sets model.quantize=nf4"}
    for override, said in refused.items():
        capsys.readouterr()
        assert main(["train", "--resume", str(out), "--train.steps=3", override]) == 2, override
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert err == (f"rlvr: error: checkpoint {ckpt} holds weights trained with {said}: under another value the "
                       "same weights are another model, so a resume keeps them; nothing in the run directory was "
                       f"changed: resume without {override.split('=')[0]}, or start a new run from the checkpoint's "
                       f"model with it (--model.name={ckpt} --train.out=NEW_DIR)")
        assert tree(out) == before
    assert main(["train", "--resume", str(out), "--train.steps=3", "--model.lora.dropout=0.1", "--optimizer.lr=0.0002"]) == 0
    assert ("note: resuming with settings changed from the run's config.yaml: model.lora.dropout=0.1 (was 0.0), "
            "optimizer.lr=0.0002 (was 2e-05), train.steps=3 (was 2)") in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["steps"] == 3


def test_a_checkpoint_without_its_weight_settings_is_checked_against_config_yaml(tmp_path, capsys):
    """A checkpoint written before it recorded them: the run's config.yaml says what they were."""
    from rlvr.train.checkpoint import save_checkpoint

    out = tmp_path / "run"
    assert main(["train", *RUN, "--train.steps=2", "--model.lora.r=4", "--algo.beta=0", "--algo.ref_sync_every=0",
                 "--train.eval_every=0", "--eval.before=false", f"--train.out={out}"]) == 0
    (ckpt,) = checkpoints(out)
    state = torch.load(ckpt, weights_only=False)
    assert state.pop("weights") == {"model.dtype": "float32", "model.quantize": "none",
                                    "model.lora.r": 4, "model.lora.alpha": 16,
                                    "model.lora.target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    save_checkpoint(out, 2, state, keep=1)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.steps=3", "--model.lora.alpha=8"]) == 2
    assert "holds weights trained with model.lora.alpha=16; this start sets model.lora.alpha=8" in capsys.readouterr().err


def test_a_run_that_stops_before_step_1_keeps_its_evaluation_before_training(tmp_path, capsys, monkeypatch):
    """A reward that raises on every completion of step 1 stops the run before its first checkpoint. The
    evaluation before training it made is on disk whole, and `--resume` once the reward is fixed keeps
    it instead of evaluating again: the run then equals one never stopped, value for value. With another
    config the restart evaluates again."""
    import shutil

    import rlvr.train.grpo as grpo

    broken = tmp_path / "broken"
    reward = tmp_path / "flaky.py"
    reward.write_text("import os\n\n\ndef flaky(completions, **kwargs):\n"
                      f"    if kwargs['trainer_state'].max_steps and os.path.exists({str(broken)!r}):\n"
                      "        raise ValueError('a bug in the reward')\n"
                      "    return [float(len(set(c)) % 3) for c in completions]\n")
    # graded by the built-in checker (correctness): a user's grader may be the code that was fixed
    args = [*RUN, "--train.steps=2", "--train.eval_every=0", f"--rewards.weights={{correctness: 1.0, {reward}:flaky: 1.0}}"]
    alone = tmp_path / "alone"
    assert main(["train", *args, f"--train.out={alone}"]) == 0
    out = tmp_path / "run"
    broken.touch()
    capsys.readouterr()
    assert main(["train", *args, f"--train.out={out}"]) == 2
    assert "a bug in the reward" in capsys.readouterr().err
    assert not checkpoints(out)
    assert (out / "eval_before.jsonl").read_bytes() == (alone / "eval_before.jsonl").read_bytes()
    broken.unlink()

    real, tags = grpo.eval_on_main, []

    def counted(*args, **kwargs):
        tags.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr(grpo, "eval_on_main", counted)
    other = shutil.copytree(out, tmp_path / "other")
    assert main(["train", "--resume", str(other), "--eval.max_new_tokens=5"]) == 0
    assert tags == ["before", "after"]  # another config: its own evaluation
    tags.clear()
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 0
    assert tags == ["after"]
    assert "(kept from the last start, which stopped before its first checkpoint" in capsys.readouterr().err
    same_run(alone, out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["flips"] == json.loads((alone / "summary.json").read_text())["flips"]


def test_resuming_a_finished_run_as_it_is_does_nothing_and_says_how_to_extend_it(stopped_at_4, tmp_path, capsys,
                                                                                  monkeypatch):
    """It evaluated again and saved final/ again (minutes on a real evaluation), for the same figures."""
    import rlvr.train.grpo as grpo

    out = copy_run(stopped_at_4[0], tmp_path / "run")
    before = tree(out)
    monkeypatch.setattr(grpo, "setup", lambda *a, **k: pytest.fail("a finished run was loaded again"))
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 0
    assert capsys.readouterr().err == (f"{out} finished at step 4 (summary.json, final/): nothing to do and nothing "
                                       "changed; extend it with --train.steps=N (more than 4), or evaluate its model "
                                       f"with rlvr eval --model {out / 'final'}\n")
    assert tree(out) == before
    monkeypatch.undo()
    assert main(["train", "--resume", str(out), "--eval.max_new_tokens=4"]) == 0  # an override: evaluated again
    err = capsys.readouterr().err
    assert "nothing to do" not in err and "eval.max_new_tokens=4 (was 6)" in err and "eval at step 4: " in err
    summary = json.loads((out / "summary.json").read_text())
    summary["interrupted"] = "SIGTERM"  # stopped at its last step: the final evaluation is still to make
    (out / "summary.json").write_text(json.dumps(summary))
    assert main(["train", "--resume", str(out)]) == 0
    assert "interrupted" not in json.loads((out / "summary.json").read_text())


def test_a_model_directory_that_moved_resumes_with_a_note(tmp_path, capsys):
    """model.name is not among the keys a resume refuses: the checkpoint holds every weight."""
    from rlvr.models import tiny_random

    model, tok = tiny_random()
    first = tmp_path / "models" / "mine"
    model.save_pretrained(first)
    tok.save_pretrained(first)
    out = tmp_path / "run"
    assert main(["train", *RUN, "--train.steps=2", "--train.eval_every=0", "--eval.before=false", "--eval.after=false",
                 f"--model.name={first}", f"--train.out={out}"]) == 0
    moved = first.rename(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.steps=3", f"--model.name={moved}"]) == 0
    assert (f"note: resuming with settings changed from the run's config.yaml: model.name={moved} (was {first}), "
            "train.steps=3 (was 2)") in capsys.readouterr().err


def test_a_resume_without_checkpoints_never_replaces_a_runs_results(stopped_at_4, tmp_path, capsys):
    """A finished run whose checkpoints were deleted to free space, resumed to extend it, started again from
    step 0 and replaced its final model and records. It is refused, the directory unchanged; a start that
    stopped before its first checkpoint still starts again."""
    import shutil

    out = copy_run(stopped_at_4[0], tmp_path / "run")
    shutil.rmtree(out / "checkpoints")
    before = tree(out)
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.steps=6"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"rlvr: error: a resume of {out} found no checkpoint in {out / 'checkpoints'} to continue from, and the "
        "directory holds a run's results (summary.json, final), which starting again from step 0 would replace; "
        f"nothing in it was changed: train its model further in a new run (--model.name={out / 'final'} "
        f"--train.out=NEW_DIR), or replace the run with rlvr train {out / 'config.yaml'} --train.overwrite=true")
    assert tree(out) == before
    assert main(["train", str(out / "config.yaml"), "--train.overwrite=true", "--train.steps=1"]) == 0


def test_a_resume_whose_eval_before_records_are_cut_short_says_so(stopped_at_4, tmp_path, capsys):
    """A torn eval_before.jsonl (a version that appended it line by line, killed) stopped the resume with
    a JSONDecodeError; it is no baseline: the run goes on, said once, without flips."""
    out = copy_run(stopped_at_4[0], tmp_path / "run")
    with open(out / "eval_before.jsonl", "ab") as f:
        f.write(b'{"split": "heldout", "quest')
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--train.steps=5"]) == 0
    assert (f"note: {out / 'eval_before.jsonl'} is missing or cut short: the final evaluation is compared with the "
            "accuracies before training, without per-problem flips") in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert "flips" not in summary and summary["heldout_accuracy_before"] == stopped_at_4[1]["heldout_accuracy_before"]
