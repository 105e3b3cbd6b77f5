"""vLLM with LoRA: bytes and seconds per weight sync, the adapters alone against the merged weights, and the
sampler/trainer log-prob mismatch with a QLoRA trainer (NF4 base) against vLLM's float32 base.

    .venv-vllm/bin/python bench/vllm_lora.py [--syncs 5] [--rank 16] [--targets all-linear]

SmolLM2-135M-Instruct in float32 on vLLM's CPU platform, LoRA on every linear layer (rank --rank), a colocated
engine (rlvr.rollout.vllm_engine.make_vllm_engine) for rollout.vllm.sync adapters and one for merged, each in a
process of its own run one after the other (vLLM's parallel state is one per process), synced --syncs times after
the adapters moved. Printed
per sync kind: bytes handed to vLLM, median seconds of the colocated push (the product's sync_weights), and the
trainer side of a server push (the files written under rollout.vllm.weights_dir: write_adapter, write_weights).
The mismatch: 8 prompts x 4 completions at temperature 1 sampled by the adapters engine, scored by the float32
LoRA policy (the control: float rounding) and by the same adapters on an NF4 base (model.quantize=nf4, needs
torchao); with each, the share of tokens whose importance ratio pi_train / pi_sampler exceeds rollout.tis_cap's
default 2.0, the tokens the sampler correction truncates.
"""
from __future__ import annotations

import argparse
import shutil
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from rlvr.config import build_config
from rlvr.models import apply_lora, load_model, stop_token_ids
from rlvr.rollout.engines import OFF_POLICY_TIS_CAP
from rlvr.rollout.vllm_engine import make_vllm_engine
from rlvr.rollout.vllm_server import write_weights
from rlvr.rollout.weights import dir_bytes, policy_weight_items, write_adapter
from rlvr.train.forward import completion_logprobs
from rlvr.train.settings import engine_settings

QUESTIONS = ["What is 7 + 5?", "Name a colour.", "What is 12 * 3?", "Spell 'cat' backwards.",
             "What is the capital of France?", "Is 17 prime?", "What is 100 - 37?", "Say hello in Spanish."]


def move(policy, seed: int) -> None:
    """An update's worth of change in every adapter (B drawn anew: the push must carry it)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.01)


def mismatch(policy, rollout, pad_id: int) -> tuple[float, float, float]:
    """Mean and max |trainer - sampler| log-prob per sampled token, and the share of tokens with ratio > cap."""
    with torch.no_grad():
        trainer = completion_logprobs(policy, rollout.prompt_ids, rollout.completion_ids, rollout.completion_mask,
                                      rollout.group_size, pad_id, 1.0)
    mask = rollout.completion_mask.bool()
    diff = (trainer - rollout.sampler_logp)[mask]
    return float(diff.abs().mean()), float(diff.abs().max()), float((diff.exp() > OFF_POLICY_TIS_CAP).float().mean())


def one_kind(args) -> None:
    """This process's vLLM engine of rollout.vllm.sync=args.kind (vLLM holds one engine per process), synced
    --syncs times; then the files a server push writes; with adapters, the mismatch rows. Prints one JSON line."""
    torch.set_num_threads(1)
    common = ["--model.name=smollm2-135m-instruct", "--rollout.engine=vllm", f"--model.lora.r={args.rank}",
              f"--model.lora.target_modules={args.targets}", "--rollout.vllm.max_model_len=512",
              "--rollout.vllm.kv_cache_gib=0.25"]
    work = Path(tempfile.mkdtemp(prefix="rlvr-vllm-lora-"))
    try:  # the merged pushes' files are GBs: never left behind
        _one_kind(args, common, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _one_kind(args, common: list[str], work: Path) -> None:
    policy, tok = load_model("smollm2-135m-instruct")
    policy = apply_lora(policy, build_config(None, common).model.lora).eval()
    move(policy, 0)
    engine = make_vllm_engine(engine_settings(build_config(None, [*common, f"--rollout.vllm.sync={args.kind}"])), policy,
                              work)
    pushed = []
    for i in range(args.syncs):
        move(policy, i + 1)
        t0 = time.perf_counter()
        n = engine.sync_weights(policy)
        pushed.append((n, time.perf_counter() - t0))
    write = (lambda d: write_adapter(policy, d)) if args.kind == "adapters" else \
        (lambda d: write_weights(policy_weight_items(policy), d))
    times = []
    for i in range(args.syncs):
        t0 = time.perf_counter()
        out = write(work / "files" / str(i))
        times.append(time.perf_counter() - t0)
    result = {"kind": args.kind, "bytes": pushed[-1][0], "s": statistics.median(t for _, t in pushed),
              "file_bytes": dir_bytes(out), "file_s": statistics.median(times), "mismatch": {}}
    if args.kind == "adapters":
        result["mismatch"] = mismatch_rows(engine, policy, tok, common)
    print("RESULT " + json.dumps(result), flush=True)


def mismatch_rows(engine, policy, tok, common) -> dict:
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True) for q in QUESTIONS]
    prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]
    rollout = engine.generate(prompts, seeds=list(range(len(prompts))), group_size=4, max_new_tokens=48,
                              temperature=1.0, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id)
    rows = {"tokens": int(rollout.completion_mask.sum()), "LoRA, fp32 base": mismatch(policy, rollout, tok.pad_token_id)}
    try:
        nf4, _ = load_model("smollm2-135m-instruct", quantize="nf4")
    except Exception as e:  # noqa: BLE001 - torchao missing from this venv
        rows["QLoRA skipped"] = str(e)
        return rows
    qlora = apply_lora(nf4, build_config(None, common).model.lora).eval()
    lora = {n: p for n, p in policy.named_parameters() if "lora_" in n}
    with torch.no_grad():  # the same adapters on the 4-bit base: what vLLM serves is unchanged
        for n, p in qlora.named_parameters():
            if n in lora:
                p.copy_(lora[n])
    rows["QLoRA, NF4 base"] = mismatch(qlora, rollout, tok.pad_token_id)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--targets", default="all-linear")
    parser.add_argument("--kind", choices=("adapters", "merged"), help=argparse.SUPPRESS)  # one child's engine
    args = parser.parse_args()
    if args.kind:
        return one_kind(args)
    got = {}
    for kind in ("adapters", "merged"):
        done = subprocess.run([sys.executable, __file__, "--kind", kind, "--syncs", str(args.syncs), "--rank",
                               str(args.rank), "--targets", args.targets], capture_output=True, text=True)
        line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"{kind}: exit {done.returncode}\n{done.stderr[-3000:]}")
        got[kind] = json.loads(line.removeprefix("RESULT "))
    a, m = got["adapters"], got["merged"]
    print(f"SmolLM2-135M fp32, LoRA r={args.rank} on {args.targets}, {args.syncs} syncs each (medians)")
    print(f"{'sync':10} {'colocated bytes':>16} {'colocated s':>12} {'server files bytes':>19} {'files s':>8}")
    for r in (a, m):
        print(f"{r['kind']:10} {r['bytes']:16,d} {r['s']:12.3f} {r['file_bytes']:19,d} {r['file_s']:8.3f}")
    print(f"merged / adapters: colocated bytes {m['bytes'] / a['bytes']:.1f}x, seconds {m['s'] / a['s']:.1f}x; "
          f"files bytes {m['file_bytes'] / a['file_bytes']:.1f}x, seconds {m['file_s'] / a['file_s']:.1f}x")
    rows = a["mismatch"]
    print(f"\nsampler (vLLM, fp32 base + adapters) vs trainer, {rows.pop('tokens')} tokens:")
    print(f"{'trainer':18} {'mean |dlogp|':>13} {'max |dlogp|':>12} {'ratio > ' + str(OFF_POLICY_TIS_CAP):>12}")
    for name, row in rows.items():
        print(f"{name:18} {row}" if isinstance(row, str) else
              f"{name:18} {row[0]:13.2e} {row[1]:12.2e} {row[2]:12.2%}")


if __name__ == "__main__":
    main()
