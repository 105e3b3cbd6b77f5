"""Same config, seed and thread count: the same run, bit for bit, on the CPU (train.deterministic auto).

On two threads and a model whose tensors take torch's multi-threaded kernels (a SmolLM2-shaped model with
random weights: its prompt keys pass 32768 elements), in fresh processes with different hash seeds, two runs
of one command write the same metrics (but time/* and memory/*), samples, checkpoint and final weights. The
modes whose repeats depend on the threads (micro-batches, packed rows) run on that model twice in one process;
those whose randomness is drawn (LoRA dropout, Clip-Cov's picks, the HF engine on its collecting thread one
step off, NF4's 4-bit base) on tiny-random."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from rlvr.cli import main
from rlvr.train.checkpoint import checkpoints

ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
REWARD = "--rewards.weights={'tests.e2e.test_same_run:varied': 1.0}"
COMMON = ["--task.heldout_size=2", "--task.ood_size=2", "--eval.before=false", "--eval.after=false",
          "--train.eval_every=0", "--train.samples_every=0", "--train.threads=2", "--task.few_shot=0", REWARD]
# a checkpoint at the last step: its weights, AdamW's moments and the generators' states are compared too
SHAPED = [ARITHMETIC, "--model.name=random:smollm2-135m", "--rollout.prompts_per_step=2", "--rollout.group_size=4",
          "--rollout.max_new_tokens=4", "--eval.max_new_tokens=4", "--train.steps=2", "--train.save_every=2",
          "--optimizer.lr=1e-3", *COMMON]
TINY = [ARITHMETIC, "--model.name=tiny-random", "--rollout.prompts_per_step=2", "--rollout.group_size=4",
        "--rollout.max_new_tokens=8", "--eval.max_new_tokens=8", "--train.steps=3", "--train.save_every=3",
        "--optimizer.lr=1e-2", *COMMON]


def varied(completions, completion_ids, **kw):
    """Differs within every group of a random model (by token ids: the SmolLM2-shaped model samples ids the
    tiny tokenizer decodes to nothing), so every update moves the weights."""
    return [sum(ids) % 10 / 10 for ids in completion_ids]


def records(out: Path, name: str) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith(("time/", "memory/"))}
            for line in (out / name).read_text().splitlines()]


def same_values(a, b, where: str) -> None:
    """a == b bit for bit, tensors and arrays included, through dicts, lists, tuples and objects' fields (the
    batch in flight of a checkpoint one step off)."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor) and hasattr(a, "__tensor_flatten__"):  # a tensor subclass: NF4's 4-bit weights
        (names, meta), (names_b, meta_b) = a.__tensor_flatten__(), b.__tensor_flatten__()
        assert names == names_b and repr(meta) == repr(meta_b), where
        for name in names:
            same_values(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and np.array_equal(a, b), where
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        same_values(vars(a), vars(b), where)
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            same_values(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same_values(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def same_run(a: Path, b: Path) -> None:
    """Two run directories hold the same run: records, the last checkpoint's state, the final weights."""
    for name in ("metrics.jsonl", "samples.jsonl"):
        ra, rb = records(a, name), records(b, name)
        assert ra and ra == rb, name
    (ca,), (cb,) = checkpoints(a)[-1:], checkpoints(b)[-1:]
    sa, sb = (torch.load(c, weights_only=False) for c in (ca, cb))
    for key in ("step", "policy", "optimizer", "scheduler", "sampler", "rng", "pending"):
        same_values(sa[key], sb[key], f"checkpoint {key}")
    fa, fb = sorted((a / "final").glob("*.safetensors")), sorted((b / "final").glob("*.safetensors"))
    assert [f.name for f in fa] == [f.name for f in fb]
    for x, y in zip(fa, fb):
        same_values(load_file(x), load_file(y), f"final/{x.name}")


def fresh_process(out: Path, args: list[str], hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}  # a different one per run: no order may hang on hashing
    proc = subprocess.run([sys.executable, "-m", "rlvr", "train", *args, f"--train.out={out}"], env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("overlap", ["none", "one_step_off"])
def test_two_processes_of_one_command_write_the_same_run(tmp_path, overlap):
    args = [*SHAPED, f"--rollout.overlap={overlap}"]
    fresh_process(tmp_path / "a", args, "1")
    fresh_process(tmp_path / "b", args, "2")
    same_run(tmp_path / "a", tmp_path / "b")
    grad = [m["grad_norm"] for m in records(tmp_path / "a", "metrics.jsonl")]
    assert all(g > 0 for g in grad)  # every update moved the weights: there was a sum to get wrong


def twice(tmp_path: Path, args: list[str]) -> None:
    threads = torch.get_num_threads()
    try:
        for name in ("a", "b"):
            assert main(["train", *args, f"--train.out={tmp_path / name}"]) == 0
    finally:
        torch.set_num_threads(threads)
    same_run(tmp_path / "a", tmp_path / "b")


@pytest.mark.slow
def test_micro_batches_and_packed_rows_repeat_on_two_threads(tmp_path):
    """Packed rows gather each prompt's last state for its G completions (rlvr.train.packed.take_rows), in two
    micro-batches of one group each."""
    twice(tmp_path, [*SHAPED, "--train.packed=true", "--optimizer.micro_batch_prompts=1"])


@pytest.mark.slow
@pytest.mark.parametrize("mode", [
    # LoRA's dropout masks and Clip-Cov's picks drawn during the update, while the HF engine seeds and draws
    # from the global generator on the collecting thread
    ("--model.lora.r=4", "--model.lora.dropout=0.3", "--algo.preset=clip_cov", "--algo.clip_cov_lb=-100",
     "--algo.clip_cov_ub=100", "--algo.cov_ratio=0.3", "--rollout.engine=hf", "--rollout.overlap=one_step_off"),
    ("--model.quantize=nf4", "--model.lora.r=4", "--model.lora.dropout=0.1"),
], ids=["lora-dropout-clip_cov-hf-one_step_off", "nf4"])
def test_drawn_modes_repeat(tmp_path, mode):
    twice(tmp_path, [*TINY, *mode])


@pytest.mark.slow
def test_torchrun_with_the_same_processes_repeats(tmp_path):
    """Two processes (gloo on the CPU), twice: the all-reduce sums the ranks' gradients in the same order."""
    args = [*TINY, "--train.device=cpu", "--train.threads=1"]
    for name in ("a", "b"):
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                               "-m", "rlvr", "train", *args, f"--train.out={tmp_path / name}"],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
    same_run(tmp_path / "a", tmp_path / "b")
    assert all(m["processes"] == 2 for m in records(tmp_path / "a", "metrics.jsonl"))
