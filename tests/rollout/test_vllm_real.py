"""rlvr's vLLM engine for real, colocated in this process, on vLLM's CPU platform (or a GPU where the vLLM venv
has one), with SmolLM2-135M-Instruct: the pushed weights reach vLLM (the tied output head included), the
sampler's log-probs match the trainer's, seeds reproduce, and multi-turn sessions continue a row's history.

Runs in the vLLM venv (`make vllm`; `make test` runs `pytest -m vllm` there): skipped where vllm is not
installed. One engine for the module (vLLM takes ~30-90 s to start on 2 shared cores).
"""
import importlib.util
import os

import pytest
import torch

pytestmark = [pytest.mark.vllm, pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                 reason="needs vLLM: make vllm, then make test (or .venv-vllm/bin/python -m pytest -m vllm THIS_FILE)")]

MAX_MODEL_LEN = 384
KV_GIB = 0.25
TEMPERATURE = 0.9


@pytest.fixture(scope="module")
def colocated(tmp_path_factory):
    from rlvr.config import build_config
    from rlvr.models import load_model, stop_token_ids
    from rlvr.rollout.vllm_engine import make_vllm_engine
    from rlvr.train.settings import engine_settings

    cfg = build_config(None, ["--model.name=smollm2-135m-instruct", "--rollout.engine=vllm",
                              f"--rollout.vllm.max_model_len={MAX_MODEL_LEN}", f"--rollout.vllm.kv_cache_gib={KV_GIB}"])
    policy, tok = load_model(cfg.model.name)
    policy.eval()
    # one thread for the trainer and so for vLLM (OMP_NUM_THREADS follows it): on a machine shared with other
    # jobs, vLLM's spinning OpenMP threads took 4-5x the CPU time of one thread for the same tokens
    torch.set_num_threads(1)
    engine = make_vllm_engine(engine_settings(cfg), policy, tmp_path_factory.mktemp("vllm"))
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True)
               for q in ("What is 7 + 5?", "Name a colour.")]
    prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]
    sampling = dict(group_size=3, max_new_tokens=12, temperature=TEMPERATURE, top_p=1.0, top_k=0,
                    stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id)
    return engine, policy, tok, prompts, sampling


def mismatch(policy, rollout, pad_id) -> float:
    """Mean |trainer - sampler| log-prob over the sampled tokens, as the training loop logs it."""
    from rlvr.train.forward import completion_logprobs

    with torch.no_grad():
        trainer = completion_logprobs(policy, rollout.prompt_ids, rollout.completion_ids, rollout.completion_mask,
                                      rollout.group_size, pad_id, TEMPERATURE)
    mask = rollout.completion_mask
    return float(((trainer - rollout.sampler_logp).abs() * mask).sum() / mask.sum())


def test_settings_take_effect(colocated):
    engine, *_ = colocated
    config = engine.llm.llm_engine.vllm_config
    assert config.model_config.max_model_len == MAX_MODEL_LEN
    assert config.cache_config.kv_cache_memory_bytes == int(KV_GIB * 2**30)
    assert config.model_config.logprobs_mode == "processed_logprobs"
    if config.device_config.device_type == "cpu":
        assert not config.scheduler_config.enable_chunked_prefill
        assert os.environ["OMP_NUM_THREADS"] == str(torch.get_num_threads()) == "1"
        assert config.model_config.enforce_eager and not engine.sleep_enabled
    assert engine.weights_version == 1  # the policy's weights pushed once at start


def test_sampler_logprobs_match_the_trainer_and_seeds_reproduce(colocated):
    engine, policy, tok, prompts, sampling = colocated
    a = engine.generate(prompts, seeds=[11, 12], **sampling)
    b = engine.generate(prompts, seeds=[11, 12], **sampling)
    c = engine.generate(prompts, seeds=[13, 14], **sampling)
    assert a.completion_ids.shape[0] == 6 and int(a.completion_mask.sum()) > 6
    assert torch.equal(a.completion_ids, b.completion_ids) and torch.equal(a.sampler_logp, b.sampler_logp)
    assert not torch.equal(a.completion_ids, c.completion_ids)
    assert mismatch(policy, a, tok.pad_token_id) < 1e-3  # fp32 on both sides: ~1e-6 measured


def test_sync_reaches_vllm_with_the_tied_head(colocated):
    from rlvr.rollout.weights import policy_weight_items

    engine, policy, tok, prompts, sampling = colocated
    original = policy.model.embed_tokens.weight.detach().clone()
    try:
        with torch.no_grad():  # the embedding is also the output head (tied): both move
            policy.model.embed_tokens.weight.mul_(1.5)
        stale = mismatch(policy, engine.generate(prompts, seeds=[1, 2], **sampling), tok.pad_token_id)
        # what rlvr sent before: every weight but the tied head; vLLM's reload keeps its old head
        items = [(n, t) for n, t in policy_weight_items(policy) if n != "lm_head.weight"]
        engine.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items)})
        headless = mismatch(policy, engine.generate(prompts, seeds=[1, 2], **sampling), tok.pad_token_id)
        version = engine.weights_version
        engine.sync_weights(policy)
        synced = mismatch(policy, engine.generate(prompts, seeds=[1, 2], **sampling), tok.pad_token_id)
        assert engine.weights_version == version + 1
        print(f"mismatch: stale {stale:.4f}, head left out {headless:.4f}, synced {synced:.2e}")
        assert stale > 0.1 and headless > 0.1
        assert synced < 1e-3
    finally:
        with torch.no_grad():
            policy.model.embed_tokens.weight.copy_(original)
        engine.sync_weights(policy)


def test_a_prompt_longer_than_the_context_is_an_error_naming_the_setting(colocated):
    from rlvr.errors import RlvrError

    engine, policy, tok, prompts, sampling = colocated
    with pytest.raises(RlvrError, match=f"vLLM refused a rollout request: .*maximum context length is {MAX_MODEL_LEN} "
                                        f"tokens.* vLLM's context here is {MAX_MODEL_LEN} tokens "
                                        r"\(rollout.vllm.max_model_len"):
        engine.generate([prompts[0] * 40], seeds=[1], **sampling)
    assert engine.generate(prompts, seeds=[1, 2], **sampling).completion_ids.shape[0] == 6  # the engine lives on


def test_multi_turn_session_continues_each_row(colocated):
    from rlvr.rollout.decoding import Rollout

    engine, policy, tok, prompts, sampling = colocated
    first = engine.session(prompts, seeds=[5, 6], **{k: v for k, v in sampling.items() if k != "max_new_tokens"})
    rows = list(range(6))
    turn1 = first.sample(rows, [8] * 6)
    env = tok.encode("\nTool says: 42\n", add_special_tokens=False)
    first.extend(rows, [env] * 6)
    turn2 = first.sample(rows, [8] * 6)
    assert all(t.tokens for t in turn2)
    # the same session again: the same turns (seeded per row and turn)
    again = engine.session(prompts, seeds=[5, 6], **{k: v for k, v in sampling.items() if k != "max_new_tokens"})
    assert [t.tokens for t in again.sample(rows, [8] * 6)] == [t.tokens for t in turn1]
    again.extend(rows, [env] * 6)
    assert [t.tokens for t in again.sample(rows, [8] * 6)] == [t.tokens for t in turn2]
    # turn 2 was sampled from the whole history: its log-probs are the trainer's given prompt + turn 1 + env
    history = [prompts[b // 3] + turn1[b].tokens + env for b in rows]
    width = max(len(t.tokens) for t in turn2)
    ids = torch.full((6, width), tok.pad_token_id)
    mask, logp = torch.zeros(6, width), torch.zeros(6, width)
    for b, t in enumerate(turn2):
        ids[b, :len(t.tokens)] = torch.tensor(t.tokens)
        mask[b, :len(t.tokens)] = 1
        logp[b, :len(t.tokens)] = torch.tensor(t.logp)
    as_rollout = Rollout(prompt_ids=history, completion_ids=ids, completion_mask=mask, sampler_logp=logp,
                         truncated=torch.zeros(6, dtype=torch.bool), group_size=1)
    assert mismatch(policy, as_rollout, tok.pad_token_id) < 1e-3


ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
MISMATCH = "rollout/logp_mismatch_mean_abs"
# 32 sequences of 159 prompt tokens (characters) per rollout: 5088 tokens, more than one engine step of prefill
# (4096), where a chunked prefill of seeded requests killed vLLM's CPU engine
BIG_BATCH = ["--rollout.prompts_per_step=4", "--rollout.group_size=8"]


def learning(folder) -> list[str]:
    """Overrides under which a random model's weights move at every step: a reward that varies within groups (the
    arithmetic rewards score a random model 0, so no gradient) and a large learning rate. Without them a run
    samples from the weights it started with, and a missing weight push would go unseen."""
    reward = folder / "varied.py"
    reward.write_text("def varied(completions, **kwargs):\n    return [float(len(set(c)) % 3) for c in completions]\n")
    return [f"--rewards.weights={{{reward}:varied: 1.0}}", "--optimizer.lr=1e-3", "--optimizer.warmup_steps=0"]


def small_model_dir(path):
    """A 2-layer random Llama with heads 32 wide (vLLM's CPU attention has no kernel for tiny-random's 16) as a
    Hugging Face model directory, read by the trainer and vLLM alike."""
    from rlvr.models import tiny_random

    model, tok = tiny_random(seed=0, hidden=128)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def metrics_rows(out):
    import json

    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_rlvr_train_with_the_colocated_engine(tmp_path):
    import subprocess
    import sys

    model = small_model_dir(tmp_path / "model")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rlvr", "train", str(ROOT / "configs" / "smoke.yaml"),
                           f"--model.name={model}", "--rollout.engine=vllm", "--rollout.vllm.kv_cache_gib=0.0625",
                           f"--train.out={out}", "--eval.before=false", "--eval.after=false", *BIG_BATCH,
                           *learning(tmp_path)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = metrics_rows(out)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["grad_norm"] > 0 for r in rows)  # the weights moved at step 1
    for r in rows:  # vLLM sampled what the trainer scores, the weights synced after step 1's update
        assert r[MISMATCH] < 1e-3, r


def test_tiny_random_is_refused_on_the_cpu_platform_naming_why(tmp_path):
    from rlvr.config import build_config
    from rlvr.errors import RlvrError
    from rlvr.models import tiny_random
    from rlvr.rollout.vllm_engine import make_vllm_engine, vllm_platform
    from rlvr.train.settings import engine_settings

    if vllm_platform() != "cpu":
        pytest.skip("vLLM's GPU attention takes tiny-random's heads")
    cfg = build_config(None, ["--model.name=tiny-random", "--rollout.engine=vllm"])
    with pytest.raises(RlvrError, match="heads of size 16, and vLLM's CPU platform supports 32, 64"):
        make_vllm_engine(engine_settings(cfg), tiny_random()[0], tmp_path)
