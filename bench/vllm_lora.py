"""vLLM with LoRA: bytes and seconds per weight sync, the adapters alone against the merged weights, and the
sampler/trainer log-prob mismatch with a QLoRA trainer (NF4 base) against vLLM's float32 base.

    .venv-vllm/bin/python bench/vllm_lora.py [--syncs 5] [--rank 16] [--targets all-linear]

SmolLM2-135M-Instruct in float32 on vLLM's CPU platform, LoRA on every linear layer (rank --rank), two colocated
engines in this process (rlvr.rollout.vllm_engine.make_vllm_engine: rollout.vllm.sync adapters and merged), each
synced --syncs times after the adapters moved, alternately, so the machine's load falls on both alike. Printed
per sync kind: bytes handed to vLLM, median seconds of the colocated push (the product's sync_weights), and the
trainer side of a server push (the files written under rollout.vllm.weights_dir: write_adapter, write_weights).
The mismatch: 8 prompts x 4 completions at temperature 1 sampled by the adapters engine, scored by the float32
LoRA policy (the control: float rounding) and by the same adapters on an NF4 base (model.quantize=nf4, needs
torchao); with each, the share of tokens whose importance ratio pi_train / pi_sampler exceeds rollout.tis_cap's
default 2.0, the tokens the sampler correction truncates.
"""
from __future__ import annotations

import argparse
import statistics
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--syncs", type=int, default=5)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--targets", default="all-linear")
    args = parser.parse_args()
    torch.set_num_threads(1)
    common = ["--model.name=smollm2-135m-instruct", "--rollout.engine=vllm", f"--model.lora.r={args.rank}",
              f"--model.lora.target_modules={args.targets}", "--rollout.vllm.max_model_len=512",
              "--rollout.vllm.kv_cache_gib=0.25"]
    work = Path(tempfile.mkdtemp(prefix="rlvr-vllm-lora-"))
    policy, tok = load_model("smollm2-135m-instruct")
    policy = apply_lora(policy, build_config(None, common).model.lora).eval()
    move(policy, 0)
    engines = {kind: make_vllm_engine(build_config(None, [*common, f"--rollout.vllm.sync={kind}"]), policy,
                                      work / kind) for kind in ("adapters", "merged")}
    pushed = {k: [] for k in engines}
    for i in range(args.syncs):
        move(policy, i + 1)
        for kind in (("adapters", "merged") if i % 2 == 0 else ("merged", "adapters")):
            t0 = time.perf_counter()
            n = engines[kind].sync_weights(policy)
            pushed[kind].append((n, time.perf_counter() - t0))
    files = {}
    for kind, write in (("adapters", lambda d: write_adapter(policy, d)),
                        ("merged", lambda d: write_weights(policy_weight_items(policy), d))):
        times = []
        for i in range(args.syncs):
            t0 = time.perf_counter()
            out = write(work / "files" / f"{kind}-{i}")
            times.append(time.perf_counter() - t0)
        files[kind] = (dir_bytes(out), statistics.median(times))
    print(f"SmolLM2-135M fp32, LoRA r={args.rank} on {args.targets}, {args.syncs} syncs each (medians)")
    print(f"{'sync':10} {'colocated bytes':>16} {'colocated s':>12} {'server files bytes':>19} {'files s':>8}")
    for kind in engines:
        print(f"{kind:10} {pushed[kind][-1][0]:16,d} {statistics.median(t for _, t in pushed[kind]):12.3f} "
              f"{files[kind][0]:19,d} {files[kind][1]:8.3f}")
    size = {k: v[-1][0] for k, v in pushed.items()}
    secs = {k: statistics.median(t for _, t in v) for k, v in pushed.items()}
    print(f"merged / adapters: colocated bytes {size['merged'] / size['adapters']:.1f}x, seconds "
          f"{secs['merged'] / secs['adapters']:.1f}x; files bytes {files['merged'][0] / files['adapters'][0]:.1f}x, "
          f"seconds {files['merged'][1] / files['adapters'][1]:.1f}x")

    engine = engines["adapters"]
    del engines["merged"]
    prompts = [tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True) for q in QUESTIONS]
    prompts = [list(p["input_ids"] if hasattr(p, "keys") else p) for p in prompts]
    rollout = engine.generate(prompts, seeds=list(range(len(prompts))), group_size=4, max_new_tokens=48,
                              temperature=1.0, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id)
    rows = {"LoRA, fp32 base": mismatch(policy, rollout, tok.pad_token_id)}
    try:
        nf4, _ = load_model("smollm2-135m-instruct", quantize="nf4")
    except Exception as e:  # noqa: BLE001 - torchao missing from this venv
        print(f"QLoRA row skipped: {e}")
    else:
        qlora = apply_lora(nf4, build_config(None, common).model.lora).eval()
        lora = {n: p for n, p in policy.named_parameters() if "lora_" in n}
        with torch.no_grad():  # the same adapters on the 4-bit base: what vLLM serves is unchanged
            for n, p in qlora.named_parameters():
                if n in lora:
                    p.copy_(lora[n])
        rows["QLoRA, NF4 base"] = mismatch(qlora, rollout, tok.pad_token_id)
    print(f"\nsampler (vLLM, fp32 base + adapters) vs trainer, {int(rollout.completion_mask.sum())} tokens:")
    print(f"{'trainer':18} {'mean |dlogp|':>13} {'max |dlogp|':>12} {'ratio > ' + str(OFF_POLICY_TIS_CAP):>12}")
    for name, (mean, peak, cut) in rows.items():
        print(f"{name:18} {mean:13.2e} {peak:12.2e} {cut:12.2%}")


if __name__ == "__main__":
    main()
