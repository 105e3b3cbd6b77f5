"""Exact resume: a run killed (one real SIGKILL, the other kills raised in the run's own process) and resumed
ends with the metrics of the run left alone."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlvr.cli import main
from rlvr.train.checkpoint import checkpoints, save_checkpoint, truncate_jsonl
from tests.e2e.conftest import at_step, copy_run, crashed, finished, wait_until
from tests.conftest import read_jsonl

# The old demo's arithmetic task (tiny-random has a character tokenizer; no reasoning-gym needed).
ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
RUN = [ARITHMETIC, "--model.name=tiny-random", "--task.heldout_size=6", "--task.ood_size=4", "--rollout.prompts_per_step=2",
       "--rollout.group_size=3", "--rollout.max_new_tokens=6", "--eval.max_new_tokens=6", "--train.steps=6",
       "--train.save_every=2", "--train.eval_every=3", "--train.samples_every=0", "--algo.beta=0.04",
       "--algo.ref_sync_every=2", "--train.threads=1", "--task.params.min_digits=1", "--task.params.digits=2",
       "--curriculum.mode=adaptive"]


def untimed(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "memory/")) and k != "train_seconds"}
            for r in rows]


@pytest.fixture
def alone(learning_alone):
    """RUN with a reward that varies within groups, left alone (tests/e2e/conftest.py: one run, shared with
    test_run_faults and test_full_disk): the weights move from step 1, so a resume that lost any state shows."""
    return learning_alone


def same_run(a, b):
    for name in ("metrics.jsonl", "samples.jsonl", "evals.jsonl"):
        assert untimed(read_jsonl(a / name)) == untimed(read_jsonl(b / name)), name
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for key in ("heldout_accuracy_before", "heldout_accuracy_after", "ood_accuracy_after", "steps"):
        assert sa[key] == sb[key]


def killed_after(args: list[str], out: Path, lines: int) -> None:
    """`rlvr train ARGS --train.out=OUT` in a process of its own, SIGKILLed once its metrics.jsonl holds
    `lines` lines (the run must still be going then)."""
    proc = subprocess.Popen([sys.executable, "-m", "rlvr", "train", *args, f"--train.out={out}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    wait_until(lambda: metrics.exists() and metrics.read_text().count("\n") >= lines, proc,
               f"{metrics} held {lines} lines (the run must still be going to be killed)")
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def test_sigkill_then_resume_matches_the_run_left_alone(alone, learning, tmp_path):
    """A real SIGKILL, wherever step 4 stands (its lock file left behind, a write perhaps cut short):
    resumed from step 2's checkpoint."""
    out = tmp_path / "run"
    killed_after(learning, out, 3)
    assert main(["train", "--resume", str(out)]) == 0
    same_run(alone, out)
    steps = [m["step"] for m in read_jsonl(out / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("step", [2, 6])  # before the first checkpoint (from step 0), after step 4's
def test_a_kill_then_resume_matches_the_run_left_alone(alone, learning, tmp_path, step):
    out = crashed(learning, tmp_path / "run", step)
    assert len(read_jsonl(out / "metrics.jsonl")) == step - 1
    assert [p.name for p in checkpoints(out)] == ([] if step == 2 else ["step_000002.pt", "step_000004.pt"])
    assert main(["train", "--resume", str(out)]) == 0
    same_run(alone, out)
    steps = [m["step"] for m in read_jsonl(out / "metrics.jsonl")]
    assert steps == [1, 2, 3, 4, 5, 6]


# Skywork-OR1's adaptive entropy coefficient, with a target above tiny-random's entropy: the coefficient
# rises every step (0.01, 0.015, 0.02, ...) and the bonus applies from step 2, so a resume that restarted
# the controller (coefficient 0.01, no entropy measured: no bonus) would train step 3 differently
ADAPTIVE = ["--algo.adaptive_entropy=true", "--algo.entropy_coef=0.01", "--algo.entropy_target=100",
            "--algo.entropy_coef_delta=0.005"]


def test_adaptive_entropy_resumes_value_for_value(tmp_path):
    alone_out = tmp_path / "alone"
    assert main(["train", *RUN, *ADAPTIVE, f"--train.out={alone_out}"]) == 0
    coefs = [m["entropy/coef"] for m in read_jsonl(alone_out / "metrics.jsonl")]
    assert coefs[0] == 0.0 and coefs[1:] == pytest.approx([0.015, 0.02, 0.025, 0.03, 0.035])
    out = crashed([*RUN, *ADAPTIVE], tmp_path / "run", 4)
    assert [p.name for p in checkpoints(out)] == ["step_000002.pt"]  # it resumes from step 2
    assert main(["train", "--resume", str(out)]) == 0
    same_run(alone_out, out)


@pytest.mark.parametrize("kind", ["--model.dtype=bfloat16", "--optimizer.state=offload"])
def test_fp32_masters_resume_exactly(tmp_path, kind):
    """bf16 weights at the config's lr (2e-5, warmed up): most updates are below half a bf16 ulp and live only
    in AdamW's fp32 masters (rlvr/train/optim.py MasterAdamW), so a resume that took its masters from the
    weights would train on from other values; the masters of optimizer.state=offload (host memory) likewise.
    Killed after step 3, resumed from step 2's checkpoint, whose lr is the warm-up's third. The reward varies
    within groups (test_run_faults.learning_run): the weights move from step 1."""
    from tests.e2e.test_run_faults import learning_run

    bf16 = [*learning_run(tmp_path), kind]
    alone_out = tmp_path / "alone"
    assert main(["train", *bf16, f"--train.out={alone_out}"]) == 0
    out = crashed(bf16, tmp_path / "run", 4)
    (ckpt,) = checkpoints(out)
    import torch

    state = torch.load(ckpt, weights_only=False)
    masters = {n: e["master"] for n, e in state["optimizer"]["state"]["state"].items()}
    assert len(masters) > 10 and all(m.dtype == torch.float32 for m in masters.values())
    if "bfloat16" in kind:
        assert any(not torch.equal(m, state["policy"][n].float()) for n, m in masters.items())  # finer than bf16
    assert main(["train", "--resume", str(out)]) == 0
    same_run(alone_out, out)


def test_sigterm_writes_a_checkpoint_and_exits_0(alone, learning, tmp_path):
    """A real SIGTERM to a process of its own once step 1 is in metrics.jsonl: it finishes its step, writes
    that step's checkpoint (train.save_every=100: none was due) and exits 0; the resume ends as the run left
    alone."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "rlvr", "train", *learning, "--train.save_every=100",
                             f"--train.out={out}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    wait_until(lambda: metrics.exists() and metrics.read_text(), proc, f"{metrics} held step 1")
    proc.send_signal(signal.SIGTERM)
    code, err = finished(proc, 120, "a run sent SIGTERM")
    assert code == 0, err
    assert "rlvr train --resume" in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == "SIGTERM"
    (ckpt,) = checkpoints(out)
    assert ckpt.name == f"step_{summary['steps']:06d}.pt"
    assert main(["train", "--resume", str(out)]) == 0
    same_run(alone, out)


def test_save_every_0_writes_no_checkpoint_at_all(alone, learning, tmp_path, capsys):
    """train.save_every=0 is TRL's save_strategy="no": no checkpoint, not even at the end (a sweep of SmolLM2
    runs kept 1.7 GB each); the run is the same, final/ is written, and a resume says what it can and cannot do."""
    out = tmp_path / "run"
    assert main(["train", *learning, "--train.save_every=0", f"--train.out={out}"]) == 0
    assert not (out / "checkpoints").exists() and (out / "final" / "config.json").is_file()
    same_run(alone, out)
    capsys.readouterr()
    assert main(["train", "--resume", str(out)]) == 0  # finished as it is: nothing to do, nothing changed
    assert f"{out} finished at step 6" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--train.steps=8"]) == 2
    assert ("found no checkpoint in" in (err := capsys.readouterr().err)
            and "(it ran with train.save_every=0, which writes no checkpoint)" in err), err
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def test_sigterm_with_save_every_0_stops_without_a_checkpoint(tmp_path, capsys):
    """A real SIGTERM, sent to this process as step 2 begins (the path to a checkpoint keeps a process of its
    own above): the step finishes, nothing is checkpointed, and the line says the run cannot be continued."""
    out = tmp_path / "run"
    capsys.readouterr()
    with at_step(2, lambda: os.kill(os.getpid(), signal.SIGTERM)):
        assert main(["train", *RUN, "--train.save_every=0", "--train.steps=500", f"--train.out={out}"]) == 0
    err = capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == "SIGTERM" and summary["steps"] == 2 and not (out / "checkpoints").exists()
    assert "SIGTERM: finishing step, then exiting" in err
    assert (f"stopped at step {summary['steps']} by SIGTERM; train.save_every=0 writes no checkpoint, so it cannot "
            "be continued") in err and "--resume" not in err


def test_resume_extends_a_finished_run(stopped_at_4, tmp_path):
    out = copy_run(stopped_at_4[0], tmp_path / "run")
    assert main(["train", "--resume", str(out), "--train.steps=6"]) == 0
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1610837760 "
                                                "vs 1610837648")])  # torch's zip writer on a full disk
def test_failed_checkpoint_write_keeps_the_previous_one(tmp_path, monkeypatch, error):
    save_checkpoint(tmp_path, 2, {"x": 1}, keep=2)

    def full(*a, **k):
        raise error

    monkeypatch.setattr("rlvr.train.checkpoint.torch.save", full)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 4, {"x": 2}, keep=2)
    assert [p.name for p in checkpoints(tmp_path)] == ["step_000002.pt"]
    assert not list((tmp_path / "checkpoints").glob(".*tmp"))


def test_keep_checkpoints_prunes_the_oldest(tmp_path):
    for step in (2, 4, 6):
        save_checkpoint(tmp_path, step, {"step": step}, keep=2)
    assert [p.name for p in checkpoints(tmp_path)] == ["step_000004.pt", "step_000006.pt"]


def test_truncate_jsonl_drops_later_steps_and_a_torn_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 4, "x"')
    truncate_jsonl(path, 2)
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'


def test_resume_syncs_the_engine_with_the_restored_weights(alone, tmp_path, monkeypatch):
    """An engine holding its own weights (vLLM) is built, and synced, before the checkpoint is restored;
    the loop must sync it again before the first rollout, or that rollout samples the old weights."""
    import torch

    import rlvr.train.assemble as assemble_module
    from rlvr.rollout.engines import PolicyEngine, make_engine

    calls = []

    class Recording(PolicyEngine):
        def generate(self, prompts, **sampling):
            calls.append("generate")
            return super().generate(prompts, **sampling)

        def sync_weights(self, policy):
            calls.append(("sync", float(sum(v.double().sum() for v in policy.state_dict().values()))))

    monkeypatch.setattr(assemble_module, "make_engine",
                        lambda s, policy, out, precision: Recording(policy, make_engine(s, policy, out, precision)._generate))
    out = copy_run(alone, tmp_path / "run")
    assert main(["train", "--resume", str(out), "--train.steps=7"]) == 0
    state = torch.load(checkpoints(out)[0], weights_only=False)  # step 6, where the resume started
    first = calls[:calls.index("generate")]
    assert first and first[-1][0] == "sync"
    assert first[-1][1] == pytest.approx(float(sum(v.double().sum() for v in state["policy"].values())), rel=1e-9)


def test_a_learning_rate_changed_at_a_resume_is_the_one_the_next_update_uses(tmp_path, capsys):
    """`rlvr train --resume RUN --optimizer.lr=...`: metrics.jsonl's lr is the new one from the next step, and
    the update used it: at an lr of 1e-30 the step moves no weight (AdamW moves a weight by about lr, and its
    decay scales it by 1 - lr * weight_decay), where the run's own lr moves them all."""
    from safetensors.torch import load_file

    from rlvr.checkpoint_files import load_checkpoint

    out = tmp_path / "run"
    base = [*RUN[:-1], "--train.steps=2", "--train.save_every=1", "--train.keep_checkpoints=3", "--train.eval_every=0", "--eval.before=false",
            "--eval.after=false", "--optimizer.warmup_steps=0", "--optimizer.lr=0.01",
            "--rewards.weights={tests.e2e.test_tiny_run:varied_reward: 1.0}"]  # rewards that differ: a gradient
    assert main(["train", *base, f"--train.out={out}"]) == 0
    assert main(["train", "--resume", str(out), "--train.steps=3", "--optimizer.lr=1e-30"]) == 0
    assert "optimizer.lr=1e-30 (was 0.01)" in capsys.readouterr().err
    assert [m["lr"] for m in read_jsonl(out / "metrics.jsonl")] == [0.01, 0.01, 1e-30]
    at_2 = load_checkpoint(out / "checkpoints" / "step_000002.pt")["policy"]
    final = load_file(out / "final" / "model.safetensors")
    assert set(final) <= set(at_2) and all(torch.equal(final[k], at_2[k].to(final[k].dtype)) for k in final)
    at_1 = load_checkpoint(out / "checkpoints" / "step_000001.pt")["policy"]
    assert any(not torch.equal(at_1[k], at_2[k]) for k in final)  # where the run's own lr 0.01 moved weights
