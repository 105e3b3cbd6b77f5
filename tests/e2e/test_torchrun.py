"""torchrun with 2 CPU processes (gloo): one rank writes the run directory, metrics cover the global batch,
a checkpoint written by 2 processes resumes in 1, and the same command repeats bit for bit. Each launch starts
three processes (the agent, two ranks), which is most of its cost, so a launch carries every check that can
read it: the DDP run (ddp_run) and the FSDP run of packed rows (fsdp_packed) are launched once each."""
import json
import os
from pathlib import Path
import shutil
import subprocess
import sys

import pytest
from transformers import AutoModelForCausalLM

from rlvr.cli import main
from rlvr.train.checkpoint import checkpoints
from tests.conftest import read_jsonl
from tests.e2e.conftest import copy_run, wait_until
from tests.e2e.test_same_run import same_run

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


def varied(completions, **kwargs):
    """Differs within groups on tiny-random (which scores 0 on arithmetic), so the weights move from step 1."""
    return [float(len(set(c)) % 3) for c in completions]


VARIED = "--rewards.weights={'tests.e2e.test_torchrun:varied': 1.0}"
KL = "--algo.beta=0.04"  # a reference model on each rank as well


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """One torchrun of RUN with a KL term and weights that move (train.parallel=ddp, the default): the
    directory two processes write, which one process resumes (copied), the run one process must repeat
    (train like one) and a second launch must repeat bit for bit; and its stderr."""
    out = tmp_path_factory.mktemp("torchrun") / "ddp"
    return out, torchrun(KL, VARIED, f"--train.out={out}", "--train.parallel=ddp").stderr


@pytest.fixture(scope="module")
def fsdp_packed(tmp_path_factory):
    """One torchrun of RUN under FSDP with packed rows (each rank one forward call per micro-batch, its
    placeholder's too, so their collectives pair up) and weights that move; and its stderr."""
    out = tmp_path_factory.mktemp("torchrun") / "fsdp"
    return out, torchrun(VARIED, "--train.packed=true", f"--train.out={out}", "--train.parallel=fsdp").stderr


@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_two_processes_write_one_run_directory_that_resumes_in_one(request, tmp_path, parallel):
    written, stderr = request.getfixturevalue({"ddp": "ddp_run", "fsdp": "fsdp_packed"}[parallel])
    out = copy_run(written, tmp_path / parallel)
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
    assert main(["train", *RUN, KL, VARIED, f"--train.out={one}"]) == 0
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
    assert all(row["grad_norm"] > 0 for row in rows_one)  # the weights moved: there were updates to match


def test_a_second_torchrun_of_one_command_repeats_it_bit_for_bit(ddp_run, tmp_path):
    """The same processes, twice (gloo on the CPU): the all-reduce sums the ranks' gradients in the same order,
    so the records, the last checkpoint and the final weights are the same bit for bit
    (tests/e2e/test_same_run.py: same_run)."""
    first, _ = ddp_run
    again = tmp_path / "again"
    torchrun(KL, VARIED, f"--train.out={again}", "--train.parallel=ddp")
    same_run(first, again)
    assert all(m["processes"] == 2 and m["grad_norm"] > 0 for m in read_jsonl(again / "metrics.jsonl"))


@pytest.fixture(scope="module")
def bf16_one(tmp_path_factory):
    """bf16 weights with fp32 masters in AdamW (rlvr/train/optim.py MasterAdamW), one process, with a reward
    that varies within groups, so the weights move from step 1 (tiny-random scores 0 on arithmetic)."""
    folder = tmp_path_factory.mktemp("bf16")
    args = [VARIED, "--model.dtype=bfloat16"]
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


def test_packed_forwards_train_in_two_processes_as_padded_in_one(fsdp_packed, tmp_path):
    """train.packed under FSDP on 2 processes: step 1 (sampled from the same weights) has one process's padded
    loss and gradient norm within float-summation tolerance."""
    one, (two, _) = tmp_path / "one", fsdp_packed
    assert main(["train", *RUN, VARIED, "--train.save_every=0", "--eval.after=false", f"--train.out={one}"]) == 0
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


def test_a_process_killed_mid_run_stops_the_other_node_with_where_the_run_stands(tmp_path):
    """kill -9 of node 1's process after the first checkpoint: node 0's agent does not hear of it, and its
    process, in a collective, stops with one line saying so and naming the newest checkpoint, which is whole."""
    import psutil

    from rlvr.train.checkpoint import load_newest

    out = tmp_path / "run"
    args = [*RUN, "--train.steps=500", "--train.save_every=1", "--eval.before=false", f"--train.out={out}"]
    first, second = node(0, 2, *args), node(1, 2, *args)
    try:
        wait_until((out / "checkpoints" / "step_000001.pt.sha256").exists, first, "the first checkpoint", stop=stop)
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


def test_nodes_that_see_different_run_directories_are_refused_on_resume(ddp_run, tmp_path):
    """--resume on every node reads train.out there: a node whose copy has no checkpoint (no shared
    filesystem) would start from step 0 beside one at step 3, on other prompts and optimizer state."""
    run, copy = copy_run(ddp_run[0], tmp_path / "run"), tmp_path / "copy"
    copy.mkdir()
    shutil.copy(run / "config.yaml", copy / "config.yaml")  # the run directory as another node's disk has it
    first, second = node(0, 3, "--resume", str(run), "--train.steps=4"), node(1, 3, "--resume", str(copy),
                                                                               "--train.steps=4")
    try:
        (_, err0), (_, err1) = first.communicate(timeout=300), second.communicate(timeout=300)
    finally:
        for p in (first, second):
            stop(p)
    assert first.returncode != 0 and second.returncode != 0
    assert ("process 0 of 2 resumes" in err0 and "from step 3, but the processes do not agree (steps 0 to 3): "
            "every node must see the same run directory" in err0), err0[-3000:]
    assert "process 1 of 2 resumes" in err1 and "from step 0" in err1
    assert [m["step"] for m in read_jsonl(run / "metrics.jsonl")] == [1, 2, 3]  # nothing trained, nothing written


SLOW_ONCE = ("import os, time\nslept = []\ndef slow(completions, **kwargs):\n"
             "    if os.environ['RANK'] == '1' and not slept:  # rank 0 meanwhile waits in a collective\n"
             "        slept.append(time.sleep(8))\n    return [0.0 for c in completions]\n")


def test_sigterm_to_torchrun_checkpoints_and_says_to_resume_under_torchrun(tmp_path):
    """torchrun passes SIGTERM to every process; they agree to stop after the step, rank 0 writes the checkpoint,
    and the line that says how to continue names torchrun, not a plain `rlvr train --resume` (one process).
    On the way, the join bound holds for joining only: rank 1's reward takes 8 s the first time while rank 0
    waits for it in a collective, longer than train.join_timeout_s=5, and the run goes on to its first step
    (torch's 30 minutes apply)."""
    out = tmp_path / "run"
    (tmp_path / "slow.py").write_text(SLOW_ONCE)
    proc = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                             "-m", "rlvr", "train", *RUN, "--train.steps=500", "--train.save_every=1000",
                             f"--rewards.weights={{{tmp_path / 'slow.py'}:slow: 1.0}}", "--train.join_timeout_s=5",
                             "--eval.before=false", f"--train.out={out}"], stderr=subprocess.PIPE, text=True)
    try:
        metrics = out / "metrics.jsonl"
        wait_until(lambda: metrics.exists() and metrics.read_text(), proc, "step 1 (after rank 1's 8 s reward)",
                   stop=stop)
        proc.terminate()
        _, err = proc.communicate(timeout=300)
    finally:
        stop(proc)
    stopped = [line for line in err.splitlines() if line.startswith("stopped at step")]
    assert len(stopped) == 1, err[-3000:]
    step = int(stopped[0].split()[3])
    assert step >= 1 and read_jsonl(out / "metrics.jsonl")[0]["step"] == 1
    assert stopped[0] == (f"stopped at step {step} by SIGTERM; continue with: torchrun (as before, 2 processes) -m "
                          f"rlvr train --resume {out}")
    assert [c.name for c in checkpoints(out)] == [f"step_{step:06d}.pt"]
