"""Same config, seed and thread count: the same run, bit for bit, on the CPU (train.deterministic auto).

Two fresh processes with different hash seeds (one a side) each run every mode below in turn, and each mode's
two run directories must hold the same metrics (but time/* and memory/*), samples, checkpoint and final
weights. The modes whose sums the threads could order (the default run, one step off, micro-batches of packed
rows) run on three threads with SmolLM2-135M's layers (9 heads of 64, 3 KV heads), two of them, and the tiny
tokenizer's vocabulary: a prompt's keys read by its 4 completions pass 32768 values, past which torch's CPU
kernels split a sum over the threads (rlvr.train.packed.take_rows sums them in one order). Those whose
randomness is drawn (LoRA dropout, Clip-Cov's picks, the HF engine on its collecting thread one step off,
NF4's 4-bit base) run on tiny-random on two threads. torchrun twice with the same processes:
tests/e2e/test_torchrun.py."""
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

ROOT = Path(__file__).resolve().parents[2]
ARITHMETIC = str(ROOT / "configs" / "arithmetic.yaml")
REWARD = "--rewards.weights={'tests.e2e.test_same_run:varied': 1.0}"
COMMON = ["--task.heldout_size=2", "--task.ood_size=2", "--eval.before=false", "--eval.after=false",
          "--train.eval_every=0", "--train.samples_every=0", "--task.few_shot=0", REWARD]
# two steps, the second from weights the first moved; a checkpoint at the last step: its weights, AdamW's
# moments and the generators' states are compared too
STEPS = ["--rollout.group_size=4", "--train.steps=2", "--train.save_every=2"]
GROUP_SIZE = 4
TINY = [ARITHMETIC, "--model.name=tiny-random", "--rollout.prompts_per_step=2", *STEPS, "--rollout.max_new_tokens=8",
        "--eval.max_new_tokens=8", "--optimizer.lr=1e-2", "--train.threads=2", *COMMON]
THRESHOLD = 32768  # at::internal::GRAIN_SIZE: a CPU kernel over more elements runs on several threads
THREADS = 3


def shaped(model: Path) -> list[str]:
    """One prompt a step on THREADS threads: a kernel splits its elements in equal parts, one a thread, so the
    4 rows of the prompt's completions fall to every thread, and all of them add into the gradient of that
    prompt's keys (2 prompts on 2 threads would fall one to a thread, each summed by one thread in order).
    Measured with that sum made by atomics again (take_rows as advanced indexing, train.deterministic off):
    on 3 threads 8 of 8 pairs of fresh processes differed, on 2 threads 5 of 8."""
    return [ARITHMETIC, f"--model.name={model}", "--rollout.prompts_per_step=1", *STEPS, "--rollout.max_new_tokens=4",
            "--eval.max_new_tokens=4", "--optimizer.lr=1e-3", f"--train.threads={THREADS}", *COMMON]


def modes(model: Path) -> dict[str, list[str]]:
    """Each mode's arguments; `model`: the SmolLM2-layered model's directory."""
    return {
        "default": shaped(model),
        "one_step_off": [*shaped(model), "--rollout.overlap=one_step_off"],
        # packed rows gather each prompt's last state for its G completions, in two micro-batches of one group
        "packed-micro_batches": [*shaped(model), "--train.packed=true", "--rollout.prompts_per_step=2",
                                 "--optimizer.micro_batch_prompts=1"],
        # LoRA's dropout masks and Clip-Cov's picks drawn during the update, while the HF engine seeds and draws
        # from the global generator on the collecting thread
        "lora-dropout-clip_cov-hf-one_step_off": [
            *TINY, "--model.lora.r=4", "--model.lora.dropout=0.3", "--algo.preset=clip_cov", "--algo.clip_cov_lb=-100",
            "--algo.clip_cov_ub=100", "--algo.cov_ratio=0.3", "--rollout.engine=hf", "--rollout.overlap=one_step_off"],
        "nf4": [*TINY, "--model.quantize=nf4", "--model.lora.r=4", "--model.lora.dropout=0.1"],
    }


def varied(completions, completion_ids, **kw):
    """Differs within every group of a random model (by token ids), so every update moves the weights."""
    return [sum(ids) % 10 / 10 for ids in completion_ids]


def smollm2_layers(path: Path) -> Path:
    """A model directory: SmolLM2-135M's shape (rlvr/shapes/smollm2-135m.json) with 2 of its 30 layers and the
    tiny tokenizer's vocabulary (its 49152-token head would be most of the cost), random weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from rlvr.models import SHAPES, tiny_tokenizer

    tok = tiny_tokenizer()
    values = json.loads((SHAPES / "smollm2-135m.json").read_text())
    values.update(num_hidden_layers=2, vocab_size=len(tok), pad_token_id=tok.pad_token_id,
                  eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id, torch_dtype="float32")
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def run_every_mode(root: Path, model: Path) -> None:
    """`rlvr train` of every mode in turn, in this process, into root/MODE."""
    for name, args in modes(model).items():
        if main(["train", *args, f"--train.out={root / name}"]) != 0:
            raise SystemExit(f"mode {name} failed")


def side(root: Path, model: Path, hash_seed: str) -> None:
    """run_every_mode in a fresh process of its own, with PYTHONHASHSEED `hash_seed` (a different one a side:
    no order may hang on hashing)."""
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "tests.e2e.test_same_run", str(root), str(model)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def sides(tmp_path_factory) -> tuple[Path, Path]:
    """The two sides' roots, each holding one run directory per mode."""
    root = tmp_path_factory.mktemp("same_run")
    model = smollm2_layers(root / "model")
    side(root / "a", model, "1")
    side(root / "b", model, "2")
    return root / "a", root / "b"


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


@pytest.mark.slow
@pytest.mark.parametrize("mode", modes(Path("MODEL")))
def test_two_processes_of_one_command_write_the_same_run(sides, mode):
    a, b = (root / mode for root in sides)
    same_run(a, b)
    metrics = records(a, "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["grad_norm"] > 0 for m in metrics)  # every update moved the weights: there was a sum to get wrong


@pytest.mark.slow
def test_the_smollm2_layered_prompts_keys_pass_the_threshold(sides):
    """What lets the SmolLM2-layered modes fail: the gradient of a prompt's keys, read by its G completions,
    passes THRESHOLD values in every layer (counted from the prompts' text alone; the chat template adds
    more tokens), so a kernel adding it splits it over the threads."""
    from transformers import AutoConfig

    from rlvr.models import tiny_tokenizer

    config = AutoConfig.from_pretrained(sides[0].parent / "model")
    per_token = config.num_key_value_heads * config.hidden_size // config.num_attention_heads  # 3 x 64
    prompts = {r["prompt"] for r in records(sides[0] / "default", "samples.jsonl")}
    shortest = min(len(tiny_tokenizer()(p, add_special_tokens=False).input_ids) for p in prompts)
    assert GROUP_SIZE * per_token * shortest > THRESHOLD, (shortest, per_token)


if __name__ == "__main__":  # one side: python -m tests.e2e.test_same_run ROOT MODEL
    run_every_mode(Path(sys.argv[1]), Path(sys.argv[2]))
