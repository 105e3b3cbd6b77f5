"""The same short run on three rollout engines: built-in, vLLM colocated, vLLM server (started here on 127.0.0.1).

    .venv-vllm/bin/python bench/vllm_engines.py [--steps 4] [--engines builtin,colocated,server] [--threads 0]

configs/arithmetic.yaml (SmolLM2-135M-Instruct, 8 prompts x G=8, 24 new tokens), no evaluation, run with the
vLLM venv's interpreter (`make vllm`). Per engine it prints the mean rollout time (time/rollout_s) and step
time (time/step_s) over the steps after the first (step 1 includes warm-up), the trainer's peak RSS
(memory/step_peak_gib, the largest of the run's steps), the server's peak RSS (VmHWM of its processes, read
before it is stopped), and the sampler/trainer log-prob mismatch per step (rollout/logp_mismatch_mean_abs;
the built-in engine samples with the trainer's own forward: 0). The server is started with one OpenMP thread
per process and --threads for the trainer, since the two share the cores. Ratios are within one run, and
only meaningful on an otherwise idle machine; say so when the machine was shared.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "arithmetic.yaml"
MISMATCH = "rollout/logp_mismatch_mean_abs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tree_hwm_gib(pid: int) -> float:
    """Sum of VmHWM over pid and its descendants (vLLM's server runs its engine core in a child)."""
    pids, total = [pid], 0
    while pids:
        p = pids.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            total += next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
            pids += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, StopIteration):
            pass
    return total / 2**20


def start_server(model: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1", "--port", str(port),
           "--model", str(model), "--dtype", "float32", "--enforce-eager", "--max-model-len", "2048",
           "--kv-cache-memory-bytes", str(1 << 30), "--logprobs-mode", "processed_logprobs", "--seed", "0",
            "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096"]
    env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "OMP_NUM_THREADS": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    proc = subprocess.Popen(cmd, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url, start = f"http://127.0.0.1:{port}", time.monotonic()
    while time.monotonic() - start < 900:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5):
                print(f"server healthy after {time.monotonic() - start:.0f} s", flush=True)
                return proc, url
        except OSError:
            time.sleep(2)
    os.killpg(proc.pid, signal.SIGKILL)
    raise SystemExit("the server was not healthy after 900 s")


def run(engine: str, steps: int, threads: int, work: Path) -> dict:
    from rlvr.models import prepare_smollm2

    out = work / engine
    args = [sys.executable, "-m", "rlvr", "train", str(CONFIG), f"--train.steps={steps}", f"--train.out={out}",
            "--eval.before=false", "--eval.after=false", "--train.samples_every=0", f"--train.threads={threads}"]
    proc = None
    if engine != "builtin":
        args.append("--rollout.engine=vllm")
    if engine == "server":
        proc, url = start_server(prepare_smollm2(), work / "server.log")
        args.append(f"--rollout.vllm.server_url={url}")
    try:
        start = time.monotonic()
        done = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
        wall = time.monotonic() - start
        server_gib = tree_hwm_gib(proc.pid) if proc else None
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(60)
    if done.returncode != 0:
        raise SystemExit(f"{engine}: rlvr train failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    later = rows[1:] or rows
    return {"engine": engine, "rollout_s": statistics.fmean(r["time/rollout_s"] for r in later),
            "step_s": statistics.fmean(r["time/step_s"] for r in later), "wall_s": wall,
            "trainer_peak_gib": max(r.get("memory/step_peak_gib", float("nan")) for r in rows),
            "server_peak_gib": server_gib, "mismatch": [r.get(MISMATCH, 0.0) for r in rows]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--engines", default="builtin,colocated,server")
    p.add_argument("--threads", type=int, default=0, help="trainer threads (train.threads; 0: torch's default)")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = [run(e, a.steps, a.threads, Path(tmp)) for e in a.engines.split(",")]
    print(f"{'engine':10} {'rollout s/step':>14} {'step s':>8} {'wall s':>8} {'trainer GiB':>11} {'server GiB':>10}  "
          "mismatch per step")
    for r in results:
        server = f"{r['server_peak_gib']:.2f}" if r["server_peak_gib"] is not None else "-"
        print(f"{r['engine']:10} {r['rollout_s']:14.2f} {r['step_s']:8.2f} {r['wall_s']:8.1f} "
              f"{r['trainer_peak_gib']:11.2f} {server:>10}  " + ", ".join(f"{m:.1e}" for m in r["mismatch"]))


if __name__ == "__main__":
    main()
