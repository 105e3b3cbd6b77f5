"""Server mode for real: a vLLM server on 127.0.0.1 started by this module (once: ~60 s on an idle 2-core machine),
weights pushed and checked (greedy outputs equal the trainer's after a push), a short `rlvr train` through it, a
server holding other weights or serving another model refused, and a server killed mid-run named in the error with the steps done
checkpointed.

Runs in the vLLM venv (`make vllm`; `make test` runs `pytest -m vllm` there): skipped where vllm is not installed.
"""
import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="needs vLLM: make vllm, then make test (or .venv-vllm/bin/python -m pytest -m vllm THIS_FILE)")]

ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 420  # bounded wait for the server: ~60 s idle, several minutes on a shared machine
MISMATCH = "rollout/logp_mismatch_mean_abs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


from tests.rollout.test_vllm_real import BIG_BATCH, learning  # noqa: E402 (the same runs as the colocated one)


def server_command(model: Path, port: int) -> list[str]:
    """The command docs/vllm.md gives for a CPU server, sized small."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port),
            "--model", str(model), "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024",
            "--kv-cache-memory-bytes", str(64 << 20), "--logprobs-mode", "processed_logprobs", "--seed", "0",
            "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"]


@contextlib.contextmanager
def running_server(root: Path, *extra: str, env: dict | None = None):
    """A vLLM server of small_model_dir's model started under `root` (extra: more flags, env: more variables):
    (url, model directory, the server process, its log), stopped on leaving."""
    from tests.rollout.test_vllm_real import small_model_dir

    model = small_model_dir(root / "model")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = root / "server.log"
    # one thread: the trainer runs beside it on the same cores (vLLM's OpenMP threads spin while they wait)
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           **(env or {})}
    with open(log, "w") as sink:
        proc = subprocess.Popen([*server_command(model, port), *extra], stdout=sink, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
    deadline = time.monotonic() + STARTUP_S
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the vLLM server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the vLLM server was not healthy after {STARTUP_S} s:\n{log.read_text()[-3000:]}")
            time.sleep(2)
        yield url, model, proc, log
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """(url, model directory, the server process, its log); stopped at the end of the module."""
    with running_server(tmp_path_factory.mktemp("server")) as running:
        yield running


def trainer_logprobs(policy, rollout, temperature):
    from rlvr.train.forward import completion_logprobs

    with torch.no_grad():
        return completion_logprobs(policy, rollout.prompt_ids, rollout.completion_ids, rollout.completion_mask,
                                   rollout.group_size, 0, temperature)


def test_pushed_weights_reach_the_server(server, tmp_path):
    from rlvr.models import tiny_random
    from rlvr.rollout.builtin import generate
    from rlvr.rollout.vllm_server import VllmServerEngine, call

    url, *_ = server
    policy, tok = tiny_random(seed=1, hidden=128)  # not the weights the server started with (seed 0)
    policy.eval()
    prompts = [tok.encode("<|im_start|>user\n12+30=?<|im_end|>\n"), tok.encode("abc")]
    greedy = dict(group_size=1, max_new_tokens=12, temperature=0.0, stop_ids=[tok.eos_token_id],
                  pad_id=tok.pad_token_id)
    leftover = tmp_path / "w" / "0123abcd-7"  # the last version of a run killed in this directory
    leftover.mkdir(parents=True)
    (leftover / "model.safetensors").write_bytes(b"...")
    engine = VllmServerEngine([url], weights_dir=tmp_path / "w", timeout_s=120, owns_dir=True)
    trainer = generate(policy, prompts, seeds=[1, 2], **greedy).completion_ids
    before = engine.generate(prompts, seeds=[1, 2], **greedy).completion_ids
    assert not torch.equal(before, trainer)  # the server's own weights
    pushed = engine.sync_weights(policy)
    assert call(url, "/weight_info", timeout=10, what="")["weight_version"] == f"{engine.tag}-1"
    assert pushed == (tmp_path / "w" / f"{engine.tag}-1" / "model.safetensors").stat().st_size  # rollout/sync_bytes
    assert [p.name for p in (tmp_path / "w").iterdir()] == [f"{engine.tag}-1"]  # the killed run's removed
    assert torch.equal(engine.generate(prompts, seeds=[1, 2], **greedy).completion_ids, trainer)
    sampled = engine.generate(prompts, seeds=[3, 4], **{**greedy, "group_size": 4, "temperature": 1.0})
    mask = sampled.completion_mask
    diff = (trainer_logprobs(policy, sampled, 1.0) - sampled.sampler_logp).abs() * mask
    assert float(diff.sum() / mask.sum()) < 1e-3
    again = engine.generate(prompts, seeds=[3, 4], **{**greedy, "group_size": 4, "temperature": 1.0})
    assert torch.equal(again.completion_ids, sampled.completion_ids)  # seeded requests reproduce


def test_a_server_with_other_weights_is_refused(server, tmp_path):
    from rlvr.models import tiny_random
    from rlvr.rollout.vllm_server import ServerError, VllmServerEngine, call

    url, *_ = server
    policy, tok = tiny_random(seed=0, hidden=128)
    engine = VllmServerEngine([url], weights_dir=tmp_path / "w", timeout_s=120)
    engine.sync_weights(policy)
    call(url, "/update_weight_version", {"new_version": "someone-else"}, timeout=10, what="")  # another trainer
    with pytest.raises(ServerError, match=f"vLLM server {url} holds weights version 'someone-else'.*stale"):
        engine.generate([[5, 6]], seeds=[1], group_size=2, max_new_tokens=2, temperature=1.0, stop_ids=[3],
                        pad_id=0)


def test_a_server_serving_another_model_is_refused_before_any_push(server, tmp_path):
    """`rlvr train` of a model with another hidden size than the server's: refused naming both, with nothing pushed
    (a failed reload leaves vLLM unable to reload again) and no run directory left behind."""
    from rlvr.models import tiny_random
    from rlvr.rollout.vllm_server import VllmServerEngine

    url, model, *_ = server
    other = tmp_path / "other"
    policy, tok = tiny_random(seed=0, hidden=64)
    policy.save_pretrained(other)
    tok.save_pretrained(other)
    out = tmp_path / "run"
    done = run_train(out, url, other, "--train.steps=1")
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert (f"vLLM server {url} serves {model} (vocabulary 100, hidden size 128), and the trainer trains {other} "
            "(vocabulary 100, hidden size 64): its weights cannot be pushed there") in done.stderr, done.stderr[-3000:]
    assert not out.exists()  # the same command runs once the server is the right one
    engine = VllmServerEngine([url], weights_dir=tmp_path / "w", timeout_s=120)
    engine.sync_weights(tiny_random(seed=0, hidden=128)[0])  # the server still takes the right model's weights


def train_command(out: Path, url: str, model: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlvr", "train", str(ROOT / "configs" / "smoke.yaml"), f"--model.name={model}",
            "--rollout.engine=vllm", f"--rollout.vllm.server_url={url}", "--rollout.vllm.timeout_s=120",
            f"--train.out={out}", "--eval.before=false", "--eval.after=false", "--train.save_every=1", *BIG_BATCH,
            *extra]


def run_train(out: Path, url: str, model: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(train_command(out, url, model, *extra), capture_output=True, text=True, timeout=900,
                          cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def short_run(server, tmp_path_factory):
    url, model, *_ = server
    root = tmp_path_factory.mktemp("run")
    return root / "run", run_train(root / "run", url, model, "--train.steps=2", *learning(root))


def test_a_short_run_through_the_server(short_run):
    out, done = short_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["grad_norm"] > 0 for r in rows)  # the weights moved at step 1
    for r in rows:  # step 2 sampled from the weights pushed after step 1's update
        assert r[MISMATCH] < 1e-3, r
    pushed = list((out / "vllm-weights").iterdir())
    # pushed at start and before step 2's rollout (the last step's update is not pushed): the last one kept
    assert len(pushed) == 1 and pushed[0].name.endswith("-2")


def test_one_step_off_samples_from_the_server_while_the_trainer_updates(server, short_run, tmp_path):
    """rollout.overlap=one_step_off through a server: each push lands before the next rollout starts, so the
    version check holds while every batch after the first is one update old."""
    url, model, *_ = server
    out = tmp_path / "off"
    done = run_train(out, url, model, "--train.steps=3", "--rollout.overlap=one_step_off", *learning(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["rollout/policy_lag"] for r in rows] == [0, 1, 1]
    assert rows[0][MISMATCH] < 1e-3  # step 1: sampled from the weights the trainer holds
    assert all(0.0 <= r["time/overlap_frac"] <= 1.0 for r in rows)
    # pushed at start and after step 1's update (step 3's batch is sampled from it); step 2's batch was
    # sampled from the starting weights, and the update of the last step is not pushed
    assert [p.name[-2:] for p in (out / "vllm-weights").iterdir()] == ["-2"]


def test_a_server_killed_mid_run_is_named_and_the_steps_done_are_kept(server, tmp_path):
    """The server dies while a run without a checkpoint due (train.save_every=100) is at step 2 or so: the run stops
    naming the server, with the steps it finished checkpointed and resumable (the resume, the server still dead,
    stops the same way with nothing changed). Small batches: the steps, not the prefill, are what is tested. Last in
    the module: it kills the server."""
    url, model, proc, _ = server
    out = tmp_path / "run"
    with open(tmp_path / "stderr", "w+") as err:
        small = ["--rollout.prompts_per_step=2", "--rollout.group_size=4"]
        run = subprocess.Popen(train_command(out, url, model, "--train.steps=8", "--train.save_every=100", *small),
                               stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=ROOT,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
        deadline = time.monotonic() + 600
        metrics = out / "metrics.jsonl"
        while not (metrics.is_file() and metrics.read_text().count("\n") >= 1):
            assert run.poll() is None and time.monotonic() < deadline, (tmp_path / "stderr").read_text()[-3000:]
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert run.wait(600) == 2
        err.seek(0)
        stderr = err.read()
    done = len(metrics.read_text().splitlines())  # 1, or 2 when step 2's update was running at the kill
    assert f"vLLM server {url}" in stderr and "Is the server running" in stderr, stderr[-3000:]
    assert f"saved up to checkpoints/step_{done:06d}.pt (of the {done} steps done)" in stderr, stderr[-3000:]
    assert f"continue it with rlvr train --resume {out}" in stderr
    assert [p.name for p in (out / "checkpoints").glob("*.pt")] == [f"step_{done:06d}.pt"]
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    resumed = subprocess.run([sys.executable, "-m", "rlvr", "train", "--resume", str(out)],
                             capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert resumed.returncode == 2, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert f"vLLM server {url}" in resumed.stderr and "Is the server running" in resumed.stderr
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == checkpoints  # nothing lost
