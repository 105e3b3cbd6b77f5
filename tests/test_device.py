"""train.device: resolved once, refused clearly, and (where torch sees a GPU) the same run on CPU and CUDA."""
import json

import pytest
import torch

from rlvr.config import ConfigError, RolloutConfig, build_config
from rlvr.device import check_device_spec, resolve_device, resolve_precision
from rlvr.errors import RlvrError
from rlvr.rollout.decoding import Rollout
from rlvr.rollout.builtin import generate
from rlvr.rollout.engines import check_device
from rlvr.train.forward import completion_logprobs

NO_GPU = not torch.cuda.is_available()  # read at import, before tests/conftest.py hides the GPU from other tests


def CUDA(test):
    return pytest.mark.gpu(pytest.mark.skipif(NO_GPU, reason="needs a CUDA GPU (torch.cuda.is_available())")(test))


def fake_gpus(monkeypatch, n: int):
    """Pretend torch sees n GPUs: resolve_device only asks is_available and device_count."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: n > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: n)


def test_resolve_device_without_a_gpu(monkeypatch):
    fake_gpus(monkeypatch, 0)
    assert resolve_device("auto") == resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto", local_rank=1) == torch.device("cpu")  # torchrun on a CPU machine: gloo
    with pytest.raises(RlvrError, match="train.device=cuda but torch sees no CUDA GPU"):
        resolve_device("cuda")


def test_resolve_device_with_gpus(monkeypatch):
    fake_gpus(monkeypatch, 2)
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_device("auto", local_rank=1) == resolve_device("cuda", local_rank=1) == torch.device("cuda", 1)
    assert resolve_device("cpu", local_rank=1) == torch.device("cpu")
    with pytest.raises(RlvrError, match="under torchrun would put every process on one GPU"):
        resolve_device("cuda:1", local_rank=0)
    with pytest.raises(RlvrError, match="asks for GPU 2 but torch sees 2"):
        resolve_device("cuda:2")


@pytest.mark.parametrize("spec", ["gpu", "cpu:0", "cuda:", "CUDA", "auto:1", ""])
def test_a_bad_device_names_the_key_and_the_choices(spec):
    assert check_device_spec(spec) == f"train.device '{spec}' is not one of auto, cpu, cuda or cuda:N"
    with pytest.raises(ConfigError, match="train.device"):
        build_config(None, [f"--train.device={spec}"])


def test_precision_auto_is_bf16_on_cuda_only():
    cpu, gpu = torch.device("cpu"), torch.device("cuda", 0)
    assert [resolve_precision(p, cpu) for p in ("auto", "no", "bf16")] == ["no", "no", "bf16"]
    assert [resolve_precision(p, gpu) for p in ("auto", "no", "bf16")] == ["bf16", "no", "bf16"]
    assert build_config(None, []).train.mixed_precision == "auto"


def test_rollout_settings_that_do_not_work_on_the_device_are_refused():
    gpu, cpu = torch.device("cuda", 0), torch.device("cpu")
    with pytest.raises(RlvrError, match="rollout.weights=int8 is a CPU format"):
        check_device(RolloutConfig(weights="int8"), gpu)
    with pytest.raises(RlvrError, match="rollout.compile compiles the CPU decode step"):
        check_device(RolloutConfig(weights="bf16", compile=True), gpu)
    for ok in (RolloutConfig(weights="bf16"), RolloutConfig(), RolloutConfig(engine="vllm")):
        check_device(ok, gpu)
    check_device(RolloutConfig(weights="int8", compile=True), cpu)


def test_vllm_beside_a_cpu_trainer_is_refused(monkeypatch):
    from rlvr.config import Config
    from rlvr.rollout import vllm_engine as ve
    from rlvr.train.settings import engine_settings

    monkeypatch.setattr(ve, "check_vllm_usable", lambda: "cuda")  # as if vllm and a GPU were there
    with pytest.raises(RlvrError, match="rollout.engine=vllm samples on cuda .* while the trainer is on cpu"):
        ve.make_vllm_engine(engine_settings(Config()), torch.nn.Linear(1, 1), "unused")


def test_rollouts_live_on_the_host_until_the_batch_crosses(tiny):
    model, tok = tiny
    r = generate(model, [[5, 6, 7]], group_size=2, max_new_tokens=4, temperature=1.0, stop_ids=[3],
                 pad_id=tok.pad_token_id, seeds=[1])
    assert {t.device.type for t in (r.completion_ids, r.completion_mask, r.sampler_logp, r.truncated)} == {"cpu"}
    moved = r.to(torch.device("cpu"))
    assert isinstance(moved, Rollout) and moved.prompt_ids == r.prompt_ids and moved.env_mask is None
    assert torch.equal(moved.completion_ids, r.completion_ids) and moved.group_size == 2


# ---------------------------------------------------------------- on a GPU: the same run as on the CPU


@CUDA
def test_cuda_samples_the_same_tokens_and_log_probs_as_the_cpu(tiny):
    """Per-group draws are made on the host, so fp32 on CUDA samples the CPU's tokens (a token whose
    inverse-CDF draw lands within float rounding of a bucket edge could differ; none does here) and the
    log-probs agree to float32 summation-order differences."""
    model, tok = tiny
    prompts = [tok(q)["input_ids"] for q in ("5+5=", "9*9=", "12-3=")]
    kw = dict(group_size=4, max_new_tokens=12, temperature=1.0, stop_ids=[tok.eos_token_id],
              pad_id=tok.pad_token_id, seeds=[3, 4, 5])
    on_cpu = generate(model, prompts, **kw)
    gpu_model = model.to("cuda")
    on_gpu = generate(gpu_model, prompts, **kw)
    assert on_gpu.completion_ids.device.type == "cpu"  # back on the host
    assert torch.equal(on_cpu.completion_ids, on_gpu.completion_ids)
    assert torch.allclose(on_cpu.sampler_logp, on_gpu.sampler_logp, atol=1e-4)
    batch = on_gpu.to(torch.device("cuda"))
    lp = completion_logprobs(gpu_model, prompts, batch.completion_ids, batch.completion_mask, 4, tok.pad_token_id)
    assert torch.allclose(lp.cpu(), on_cpu.sampler_logp, atol=1e-4)


@CUDA
def test_bf16_autocast_log_probs_are_within_bf16_rounding_of_fp32(tiny):
    """bf16 keeps 8 mantissa bits (relative rounding 2^-9 ~ 0.002 per product); through two layers and a
    96-word head the tiny model's per-token log-probs move by a few hundredths: 0.1 nats bounds one token,
    0.03 the mean."""
    model, tok = tiny
    model.to("cuda")
    prompts = [tok(q)["input_ids"] for q in ("5+5=", "9*9=")]
    r = generate(model, prompts, group_size=4, max_new_tokens=12, temperature=1.0, stop_ids=[tok.eos_token_id],
                 pad_id=tok.pad_token_id, seeds=[1, 2]).to(torch.device("cuda"))
    fp32 = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 4, tok.pad_token_id)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        bf16 = completion_logprobs(model, prompts, r.completion_ids, r.completion_mask, 4, tok.pad_token_id)
    diff = (bf16 - fp32).abs()[r.completion_mask.bool()]
    assert float(diff.max()) < 0.1 and float(diff.mean()) < 0.03


@CUDA
def test_first_step_on_cuda_matches_the_cpu(tmp_path):
    """The same config (fp32) on both devices: the same completions and rewards in the first step, the
    loss and gradient norm within float tolerance; the whole loop runs with the model on the GPU."""
    from rlvr.train.grpo import train

    rows = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        cfg = build_config(None, ["--model.name=tiny-random", "--task.heldout_size=4", "--task.ood_size=2",
                                  "--rollout.prompts_per_step=2", "--rollout.group_size=4", "--rollout.max_new_tokens=8",
                                  "--eval.max_new_tokens=8", "--train.steps=1", "--train.samples_every=0",
                                  f"--train.device={device}", "--train.mixed_precision=no", "--algo.beta=0.04",
                                  f"--train.out={out}"])
        train(cfg)
        rows[device] = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
        rows[device]["samples"] = [json.loads(line)["completion"] for line in
                                   (out / "samples.jsonl").read_text().splitlines()]
    cpu, gpu = rows["cpu"], rows["cuda"]
    assert cpu["samples"] == gpu["samples"]
    assert cpu["reward/mean"] == gpu["reward/mean"]
    assert gpu["loss"] == pytest.approx(cpu["loss"], abs=1e-4)
    assert gpu["grad_norm"] == pytest.approx(cpu["grad_norm"], rel=1e-3)


PEAK_PROBE = """
import json, torch
from rlvr.device import peak_memory_gib, reset_peak_memory
cpu = torch.device("cpu")
reset_peak_memory(cpu)
before = peak_memory_gib(cpu)
block = torch.ones(64 * 2**20, dtype=torch.float32)  # 256 MiB, touched
held = peak_memory_gib(cpu)
del block
reset_peak_memory(cpu)
print(json.dumps([before, held, peak_memory_gib(cpu)]))
"""


def test_peak_memory_on_the_cpu_is_the_resident_peak_since_the_reset():
    # in a fresh interpreter: in this one, memory freed by earlier tests can stay resident in the allocator's
    # arenas, and a new block placed there raises no resident peak
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", PEAK_PROBE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, held, after = json.loads(out.stdout.strip().splitlines()[-1])
    assert held - before >= 0.24  # the block's 0.25 GiB, resident
    assert after < held - 0.2  # the reset forgot it once it was freed
