"""LoRA adapters pushed to a real vLLM server (rollout.vllm.sync adapters): a server on 127.0.0.1 started with
--enable-lora and runtime adapter loading, the small random model of test_vllm_server.py as its base. The pushed
adapter is what the server samples from (greedy outputs equal the trainer's), a new push unloads the old, a server
holding another trainer's adapters is refused naming it, short `rlvr train` runs learn as the merged push does
(the same rewards and losses), a resume pushes the checkpoint's adapters, and a QLoRA run (nf4 base in the
trainer, the float32 base in vLLM) trains through the server.

Runs in the vLLM venv (`make vllm`; `make test` runs `pytest -m vllm` there): skipped where vllm is not installed.
The tests run in file order: the last one pushes merged weights, after which the server's base is no longer the
one it loaded, and adapter pushes are refused.
"""
import importlib.util
import json
import urllib.request

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="needs vLLM: make vllm, then make test (or .venv-vllm/bin/python -m pytest -m vllm THIS_FILE)")]

from tests.rollout.test_vllm_server import MISMATCH, run_train, running_server, trainer_logprobs  # noqa: E402
from tests.rollout.test_vllm_real import learning  # noqa: E402

RANK = 8
LORA = [f"--model.lora.r={RANK}", "--model.lora.target_modules=all-linear"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("server"), "--enable-lora", "--max-lora-rank", str(RANK),
                        "--max-loras", "1", env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}) as running:
        yield running


def lora_policy(seed: int):
    """The server's base (tiny_random seed 0, hidden 128) with r=8 adapters whose B is drawn (seed)."""
    from rlvr.config import LoraConfig
    from rlvr.models import apply_lora, tiny_random

    policy, tok = tiny_random(seed=0, hidden=128)
    policy = apply_lora(policy, LoraConfig(r=RANK, target_modules="all-linear"))
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    return policy.eval(), tok


def served_adapters(url: str) -> list[str]:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as r:
        return [m["id"] for m in json.loads(r.read())["data"] if m.get("parent")]


def test_pushed_adapters_reach_the_server_and_replace_the_last(server, tmp_path):
    from rlvr.rollout.builtin import generate
    from rlvr.rollout.vllm_server import VllmServerEngine, call
    from rlvr.rollout.weights import dir_bytes

    url, *_ = server
    policy, tok = lora_policy(seed=1)
    prompts = [tok.encode("<|im_start|>user\n12+30=?<|im_end|>\n"), tok.encode("abc")]
    greedy = dict(group_size=1, max_new_tokens=12, temperature=0.0, stop_ids=[tok.eos_token_id],
                  pad_id=tok.pad_token_id)
    engine = VllmServerEngine([url], weights_dir=tmp_path / "w", timeout_s=120, owns_dir=True, adapters_rank=RANK)
    with torch.no_grad():
        trainer = generate(policy, prompts, seeds=[1, 2], **greedy).completion_ids
        with policy.disable_adapter():
            base = generate(policy, prompts, seeds=[1, 2], **greedy).completion_ids
    assert not torch.equal(base, trainer)  # the adapter changes what is sampled
    pushed = engine.sync_weights(policy)
    version = f"lora-{engine.tag}-1"
    assert call(url, "/weight_info", timeout=10, what="")["weight_version"] == version
    assert served_adapters(url) == [version]
    assert pushed == dir_bytes(tmp_path / "w" / version)  # adapter_model.safetensors and adapter_config.json
    assert torch.equal(engine.generate(prompts, seeds=[1, 2], **greedy).completion_ids, trainer)
    sampled = engine.generate(prompts, seeds=[3, 4], **{**greedy, "group_size": 4, "temperature": 1.0})
    mask = sampled.completion_mask
    diff = (trainer_logprobs(policy, sampled, 1.0) - sampled.sampler_logp).abs() * mask
    print(f"server adapter mismatch {float(diff.sum() / mask.sum()):.2e} nats/token")
    assert float(diff.sum() / mask.sum()) < 1e-4

    policy2, _ = lora_policy(seed=2)
    engine.sync_weights(policy2)
    assert served_adapters(url) == [f"lora-{engine.tag}-2"]  # the old version unloaded
    assert [p.name for p in (tmp_path / "w").iterdir()] == [f"lora-{engine.tag}-2"]
    with torch.no_grad():
        trainer2 = generate(policy2, prompts, seeds=[1, 2], **greedy).completion_ids
    assert torch.equal(engine.generate(prompts, seeds=[1, 2], **greedy).completion_ids, trainer2)


def test_a_server_holding_other_adapters_is_refused_naming_it(server, tmp_path):
    from rlvr.rollout.vllm_server import ServerError, VllmServerEngine

    url, *_ = server
    policy, tok = lora_policy(seed=1)
    mine = VllmServerEngine([url], weights_dir=tmp_path / "a", timeout_s=120, adapters_rank=RANK)
    mine.sync_weights(policy)
    theirs = VllmServerEngine([url], weights_dir=tmp_path / "b", timeout_s=120, adapters_rank=RANK)
    theirs.sync_weights(policy)  # another trainer's push
    with pytest.raises(ServerError, match=f"vLLM server {url} holds weights version 'lora-{theirs.tag}-1', not "
                                          f"'lora-{mine.tag}-1'.*stale"):
        mine.generate([[5, 6]], seeds=[1], group_size=2, max_new_tokens=2, temperature=1.0, stop_ids=[3], pad_id=0)


def metrics(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def adapter_run(server, tmp_path_factory):
    url, model, *_ = server
    root = tmp_path_factory.mktemp("adapters")
    return root / "run", run_train(root / "run", url, model, "--train.steps=2", *LORA, *learning(root))


def test_a_short_run_pushes_the_adapters_alone(adapter_run):
    from rlvr.rollout.weights import dir_bytes

    out, done = adapter_run
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["grad_norm"] > 0 for r in rows)
    for r in rows:  # step 2 sampled from the adapter pushed after step 1's update
        assert r[MISMATCH] < 1e-4, r
    pushed = list((out / "vllm-weights").iterdir())
    assert len(pushed) == 1 and pushed[0].name.startswith("lora-") and pushed[0].name.endswith("-2")
    assert sorted(p.name for p in pushed[0].iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert "rollout/sync_bytes" not in rows[0]  # step 1 samples from the push made at start
    assert rows[1]["rollout/sync_bytes"] == dir_bytes(pushed[0]) and rows[1]["rollout/sync_s"] > 0


def test_a_resume_pushes_the_checkpoints_adapters(server, adapter_run):
    """Step 3 of the resumed run samples from the adapters the checkpoint holds: were the fresh adapters (B = 0)
    left on the server, the sampler would be the base, far from the trained policy after two steps at lr 1e-3."""
    import subprocess
    import sys

    out, done = adapter_run
    assert done.returncode == 0
    resumed = subprocess.run([sys.executable, "-m", "rlvr", "train", "--resume", str(out), "--train.steps=3"],
                             capture_output=True, text=True, timeout=900, cwd=out.parent)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[2][MISMATCH] < 1e-4, rows[2]


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="model.quantize=nf4 needs torchao (make vllm "
                                                                         "installs it in .venv-vllm)")
def test_qlora_trains_through_the_server(server, tmp_path):
    """The trainer's base in NF4, the server's the float32 model it loaded: the adapters cross, and the sampler's
    log-probs differ from the trainer's by the 4-bit rounding of the base (logged, corrected by rollout.tis_cap)."""
    url, model, *_ = server
    out = tmp_path / "run"
    done = run_train(out, url, model, "--train.steps=2", "--model.quantize=nf4", *LORA, *learning(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = metrics(out)
    assert [r["step"] for r in rows] == [1, 2] and all(r["grad_norm"] > 0 for r in rows)
    print("QLoRA mismatch per step (nats/token):", [f"{r[MISMATCH]:.4f}" for r in rows],
          "tokens cut by tis_cap:", [r.get("sampler/truncated_token_frac") for r in rows])
    assert all(1e-4 < r[MISMATCH] < 1.0 for r in rows)  # two bases: more than float rounding apart
    assert rows[1]["rollout/sync_bytes"] > 0


def test_adapters_learn_as_the_merged_push_does(server, adapter_run, tmp_path):
    """The same run with rollout.vllm.sync=merged: step 1 samples the base either way (B starts at zero), step 2 the
    updated policy, as W + s B A merged or as the adapter beside W: the same tokens, so the same rewards and
    losses to float rounding, while each merged push is several times larger. Last: it changes the server's
    base."""
    url, model, *_ = server
    out, done = adapter_run
    merged_out = tmp_path / "run"
    merged = run_train(merged_out, url, model, "--train.steps=2", *LORA, "--rollout.vllm.sync=merged",
                       *learning(out.parent))
    assert merged.returncode == 0, merged.stdout[-3000:] + merged.stderr[-3000:]
    a, m = metrics(out)[:2], metrics(merged_out)
    for x, y in zip(a, m):
        print(f"step {x['step']}: reward {x['reward/mean']} vs {y['reward/mean']}, loss {x['loss']:.6f} vs "
              f"{y['loss']:.6f}")
        assert x["reward/mean"] == y["reward/mean"] and x["loss"] == pytest.approx(y["loss"], rel=1e-3, abs=1e-6)
    print(f"sync bytes at step 2: adapters {a[1]['rollout/sync_bytes']}, merged {m[1]['rollout/sync_bytes']}")
    # a 2-layer model 128 wide: r=8 adapters are about a ninth of its weights (SmolLM2: test_vllm_lora.py, >10x)
    assert m[1]["rollout/sync_bytes"] > 5 * a[1]["rollout/sync_bytes"]
    assert not any(p.name.startswith("lora-") for p in (merged_out / "vllm-weights").iterdir())
