"""torchrun with 2 CPU processes (gloo): one rank writes the run directory, metrics cover the global batch,
and a checkpoint written by 2 processes resumes in 1."""
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys
import time

import pytest
from transformers import AutoModelForCausalLM

from rlvr.cli import main
from rlvr.train.checkpoint import checkpoints
from tests.conftest import read_jsonl

# The old demo's arithmetic task (tiny-random has a character tokenizer; no reasoning-gym needed).
ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
RUN = [ARITHMETIC, "--model.name=tiny-random", "--task.heldout_size=6", "--task.ood_size=4", "--rollout.prompts_per_step=2",
       "--rollout.group_size=3", "--rollout.max_new_tokens=6", "--eval.max_new_tokens=6", "--train.steps=3",
       "--train.save_every=2", "--train.samples_every=0", "--train.threads=1",
       "--train.device=cpu"]  # gloo: as many processes as devices, on a machine with one GPU or none


def torchrun(*args):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "-m", "rlvr", "train", *RUN, *args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


KL = "--algo.beta=0.04"  # a reference model on each rank as well


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """One torchrun of RUN with a KL term (train.parallel=ddp, the default): the directory two processes
    write, which one process resumes (copied), and the run one process must repeat (train like one)."""
    out = tmp_path_factory.mktemp("torchrun") / "ddp"
    return out, torchrun(KL, f"--train.out={out}", "--train.parallel=ddp").stderr


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_write_one_run_directory_that_resumes_in_one(request, tmp_path, parallel):
    out = tmp_path / parallel
    if parallel == "ddp":
        written, stderr = request.getfixturevalue("ddp_run")
        shutil.copytree(written, out)
    else:
        stderr = torchrun(f"--train.out={out}", f"--train.parallel={parallel}").stderr
    assert stderr.count("eval at step 0") == 1  # one rank prints
    assert stderr.count(f"torchrun: 2 processes (gloo, train.parallel={parallel}, cpu), 1 of the 2 prompts "
                        "per step on each; rank 0 prints and writes") == 1
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(m["completions"] == 2 * 3 and m["processes"] == 2 for m in metrics)  # the global batch
    assert len(read_jsonl(out / "samples.jsonl")) == 3 * 2 * 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 3 and "heldout_accuracy_after" in summary
    AutoModelForCausalLM.from_pretrained(out / "final")
    assert json.loads((out / "final" / "rlvr_model.json").read_text())["form"] == "full"  # gathered, as one saves it
    assert main(["train", "--resume", str(out), "--train.steps=5"]) == 0  # written by 2, resumed by 1
    assert [(m["step"], m["processes"]) for m in read_jsonl(out / "metrics.jsonl")] == [(1, 2), (2, 2), (3, 2),
                                                                                     (4, 1), (5, 1)]


def test_prompts_must_split_into_whole_groups(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                           "-m", "rlvr", "train", *RUN, "--rollout.prompts_per_step=3", f"--train.out={tmp_path}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0
    assert "rollout.prompts_per_step=3 is not divisible by the world size 2" in proc.stderr


def test_two_processes_train_like_one(ddp_run, tmp_path):
    """Sampling is seeded per prompt group (seed, step, group index), so the same config gives
    the same completions, rewards, losses and weights on 1 or 2 processes (to float-summation tolerance)."""
    one, (two, _) = tmp_path / "one", ddp_run
    assert main(["train", *RUN, KL, f"--train.out={one}"]) == 0
    rows_one, rows_two = read_jsonl(one / "metrics.jsonl"), read_jsonl(two / "metrics.jsonl")
    assert len(rows_one) == len(rows_two) == 3
    for a, b in zip(rows_one, rows_two):
        assert a.keys() == b.keys()
        for key in a:
            if key.startswith(("time/", "memory/")) or key == "processes":
                continue
            if isinstance(a[key], float):
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)
            else:
                assert a[key] == b[key], (a["step"], key)
    completions = lambda run: [s["completion"] for s in read_jsonl(run / "samples.jsonl")]
    assert completions(one) == completions(two)
    assert len(set(completions(one))) > 3  # they are sampled, not all alike


VARIED = "def varied(completions, **kwargs):\n    return [float(len(set(c)) % 3) for c in completions]\n"


@pytest.fixture(scope="module")
def bf16_one(tmp_path_factory):
    """bf16 weights with fp32 masters in AdamW (rlvr/train/optim.py MasterAdamW), one process, with a reward
    that varies within groups, so the weights move from step 1 (tiny-random scores 0 on arithmetic)."""
    folder = tmp_path_factory.mktemp("bf16")
    (folder / "varied.py").write_text(VARIED)
    args = [f"--rewards.weights={{{folder / 'varied.py'}:varied: 1.0}}", "--model.dtype=bfloat16"]
    assert main(["train", *RUN, *args, f"--train.out={folder / 'one'}"]) == 0
    return args, folder / "one"


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_bf16_weights_with_fp32_masters_train_in_two_processes_as_in_one(tmp_path, bf16_one, parallel):
    """The same run on 2 processes: gradient norms within 1% of one process's (measured 0.3%: bf16 gradients
    summed over ranks), the checkpoint's masters full fp32 tensors (FSDP gathers its shards) within 5e-5 of
    one process's (measured 2.1e-5: each step moves a weight by about lr = 2e-5, near lr * sign(g), and an
    entry whose gradient is near 0 may step the other way), and that checkpoint resumes in one process."""
    import torch

    args, one = bf16_one
    out = tmp_path / parallel
    torchrun(*args, f"--train.out={out}", f"--train.parallel={parallel}")
    rows_one, rows_two = read_jsonl(one / "metrics.jsonl"), read_jsonl(out / "metrics.jsonl")
    assert [r["reward/mean"] for r in rows_one] == [r["reward/mean"] for r in rows_two]
    assert all(b["grad_norm"] == pytest.approx(a["grad_norm"], rel=0.01) for a, b in zip(rows_one, rows_two))
    two_state, one_state = (torch.load(checkpoints(d)[0], weights_only=False) for d in (out, one))
    masters, theirs = two_state["optimizer"]["state"]["state"], one_state["optimizer"]["state"]["state"]
    assert set(masters) == set(theirs) and len(masters) > 10
    for name, entry in masters.items():
        m = entry["master"]
        assert type(m) is torch.Tensor and m.dtype == torch.float32 and m.shape == two_state["policy"][name].shape
        assert (m - theirs[name]["master"]).abs().max() <= 5e-5, name
    assert main(["train", "--resume", str(out), "--train.steps=4"]) == 0
    assert [r["step"] for r in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4]


def test_packed_forwards_train_in_two_processes_as_padded_in_one(tmp_path):
    """train.packed under FSDP on 2 processes (each rank one forward call per micro-batch, its placeholder's
    too, so their collectives pair up): step 1 (sampled from the same weights) has one process's padded
    loss and gradient norm within float-summation tolerance."""
    (tmp_path / "varied.py").write_text(VARIED)
    args = [f"--rewards.weights={{{tmp_path / 'varied.py'}:varied: 1.0}}", "--train.save_every=0", "--eval.after=false"]
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["train", *RUN, *args, f"--train.out={one}"]) == 0
    torchrun(*args, "--train.packed=true", "--train.parallel=fsdp", f"--train.out={two}")
    first_one, first_two = read_jsonl(one / "metrics.jsonl")[0], read_jsonl(two / "metrics.jsonl")[0]
    assert first_one["reward/mean"] == first_two["reward/mean"] and first_one["grad_norm"] > 0
    for key in ("loss", "grad_norm", "entropy"):
        assert first_two[key] == pytest.approx(first_one[key], rel=1e-4, abs=1e-6), key
    assert len(read_jsonl(two / "metrics.jsonl")) == 3


def node(rank: int, offset: int, *args) -> subprocess.Popen:
    """Node `rank` of a 2-node torchrun job on this machine (its own torchrun, one process); `offset` picks
    the job's port, so the tests' jobs do not meet."""
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node_rank={rank}", "--nproc-per-node=1",
         "--master_addr=127.0.0.1", f"--master_port={29500 + (os.getpid() * 3 + offset) % 1000}", "-m", "rlvr",
         "train", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(agent: subprocess.Popen) -> None:
    """Kill a torchrun agent and its workers: a test that fails leaves no process waiting in a collective."""
    import psutil

    try:
        for p in psutil.Process(agent.pid).children(recursive=True):
            p.kill()
    except psutil.NoSuchProcess:
        pass
    agent.kill()
    agent.wait()


def test_a_node_that_fails_before_joining_stops_the_other_within_the_join_timeout(tmp_path):
    """Two "nodes" on one machine (two torchruns, --nnodes=2): node 1's process stops before it joins (a
    --resume of a directory that does not exist). Its torchrun ends, but node 0's agent never hears of it:
    node 0's process must stop after train.join_timeout_s with a message, not wait torch's 30 minutes."""
    out = tmp_path / "run"
    first = node(0, 1, *RUN, "--train.join_timeout_s=5", f"--train.out={out}")
    second = node(1, 1, "--resume", str(tmp_path / "nowhere"))
    try:
        _, err1 = second.communicate(timeout=300)
        _, err0 = first.communicate(timeout=300)  # without the bound: 30 minutes, then this fails
    finally:
        for p in (first, second):
            stop(p)
    assert "no config.yaml there" in err1
    assert first.returncode != 0
    assert ("process 0 of 2: not every process joined within train.join_timeout_s=5 s" in err0
            and "Another process stopped before joining" in err0), err0[-3000:]
    assert not out.exists()  # nothing was written before every process had joined


SLOW_ONCE = ("import os, time\nslept = []\ndef slow(completions, **kwargs):\n"
             "    if os.environ['RANK'] == '1' and not slept:  # rank 0 meanwhile waits in a collective\n"
             "        slept.append(time.sleep(8))\n    return [0.0 for c in completions]\n")


def test_collectives_wait_longer_than_the_join_timeout(tmp_path):
    """The join bound holds for joining only: rank 1's reward takes 8 s the first time while rank 0 waits for
    it in a collective, longer than train.join_timeout_s=5, and the run goes on (torch's 30 minutes apply)."""
    (tmp_path / "slow.py").write_text(SLOW_ONCE)
    torchrun(f"--rewards.weights={{{tmp_path / 'slow.py'}:slow: 1.0}}", "--train.join_timeout_s=5", "--train.steps=1",
             "--train.save_every=0", "--eval.before=false", "--eval.after=false", f"--train.out={tmp_path / 'run'}")
    assert [m["step"] for m in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [1]


def test_a_process_killed_mid_run_stops_the_other_node_with_where_the_run_stands(tmp_path):
    """kill -9 of node 1's process after the first checkpoint: node 0's agent does not hear of it, and its
    process, in a collective, stops with one line saying so and naming the newest checkpoint, which is whole."""
    import psutil

    from rlvr.train.checkpoint import load_newest

    out = tmp_path / "run"
    args = [*RUN, "--train.steps=500", "--train.save_every=1", "--eval.before=false", f"--train.out={out}"]
    first, second = node(0, 2, *args), node(1, 2, *args)
    try:
        for _ in range(1200):
            if (out / "checkpoints" / "step_000001.pt.sha256").exists() or first.poll() is not None:
                break
            time.sleep(0.1)
        for worker in psutil.Process(second.pid).children():
            worker.kill()
        second.communicate(timeout=300)
        _, err0 = first.communicate(timeout=300)  # without gloo noticing, torch's 30 minutes
    finally:
        for p in (first, second):
            stop(p)
    assert first.returncode != 0
    assert "process 0 of 2: another process of this torchrun job stopped" in err0, err0[-3000:]
    assert "typically caused" not in err0  # gloo's first sentence only (Connection closed by peer, Read error)
    last, state, damaged = load_newest(out)
    assert (f"The run is saved up to {last.name}: continue it with torchrun (as before, 2 processes) -m rlvr "
            f"train --resume {out}") in err0
    assert damaged == [] and state["progress"]["step"] >= 1 and not (out / "final").exists()


def test_nodes_that_see_different_run_directories_are_refused_on_resume(tmp_path):
    """--resume on every node reads train.out there: a node whose copy has no checkpoint (no shared
    filesystem) would start from step 0 beside one at step 1, on other prompts and optimizer state."""
    run, copy = tmp_path / "run", tmp_path / "copy"
    assert main(["train", *RUN, "--train.steps=1", "--train.save_every=100", "--eval.after=false",
                 f"--train.out={run}"]) == 0
    copy.mkdir()
    shutil.copy(run / "config.yaml", copy / "config.yaml")  # the run directory as another node's disk has it
    first, second = node(0, 3, "--resume", str(run), "--train.steps=2"), node(1, 3, "--resume", str(copy),
                                                                               "--train.steps=2")
    try:
        (_, err0), (_, err1) = first.communicate(timeout=300), second.communicate(timeout=300)
    finally:
        for p in (first, second):
            stop(p)
    assert first.returncode != 0 and second.returncode != 0
    assert ("process 0 of 2 resumes" in err0 and "from step 1, but the processes do not agree (steps 0 to 1): "
            "every node must see the same run directory" in err0), err0[-3000:]
    assert "process 1 of 2 resumes" in err1 and "from step 0" in err1
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1]  # nothing trained, nothing written


def test_sigterm_to_torchrun_checkpoints_and_says_to_resume_under_torchrun(tmp_path):
    """torchrun passes SIGTERM to every process; they agree to stop after the step, rank 0 writes the checkpoint,
    and the line that says how to continue names torchrun, not a plain `rlvr train --resume` (one process)."""
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                             "-m", "rlvr", "train", *RUN, "--train.steps=500", "--train.save_every=1000",
                             "--eval.before=false", f"--train.out={out}"], stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            if (out / "metrics.jsonl").exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        proc.terminate()
        _, err = proc.communicate(timeout=300)
    finally:
        stop(proc)
    stopped = [line for line in err.splitlines() if line.startswith("stopped at step")]
    assert len(stopped) == 1, err[-3000:]
    step = int(stopped[0].split()[3])
    assert stopped[0] == (f"stopped at step {step} by SIGTERM; continue with: torchrun (as before, 2 processes) -m "
                          f"rlvr train --resume {out}")
    assert [c.name for c in checkpoints(out)] == [f"step_{step:06d}.pt"]
