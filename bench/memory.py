"""Peak memory of a policy update: full fine-tuning vs LoRA, with and without gradient checkpointing, and
full fine-tuning of bf16 weights (AdamW over fp32 masters, rlvr/train/optim.py MasterAdamW) vs fp32 weights.

    python bench/memory.py [steps] [model] [configs]     # configs: comma-separated names of CONFIGS

Each configuration runs in a fresh subprocess (torch's allocator never hands memory back, so one
process cannot measure several), builds a demo-sized batch by hand (8 prompts x 8 completions x 24
random tokens, 64-token prompts; the values do not matter, the tensor sizes do), runs `steps`
policy_update calls with the trainers' AdamW (rlvr.train.optim.adamw), and reports its peak resident memory
(VmHWM) after loading the model and at the end, the trainable parameters, the optimizer state (moments, and
the masters where it keeps them) and the seconds per update; then bf16 weights against fp32 as ratios.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

CONFIGS = {  # name: (lora rank, gradient checkpointing, mixed precision, model.dtype)
    "full": (0, False, "no", "float32"),
    "full+ckpt": (0, True, "no", "float32"),
    "full+bf16": (0, False, "bf16", "float32"),
    "full+bf16w": (0, False, "no", "bfloat16"),  # bf16 weights and gradients, fp32 masters in AdamW
    "lora8": (8, False, "no", "float32"),
    "lora8+ckpt": (8, True, "no", "float32"),
}
PROMPTS, GROUP, PROMPT_TOKENS, COMPLETION_TOKENS = 8, 8, 64, 24


def vm_hwm_mib() -> float:
    """Peak resident set size of this process so far, from /proc/self/status."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def measure(name: str, steps: int, model_name: str) -> dict:
    """One configuration, in this (fresh) process."""
    import torch

    from rlvr.config import Config, LoraConfig, OptimizerConfig
    from rlvr.train.settings import update_settings
    from rlvr.models import apply_lora, enable_gradient_checkpointing, load_model
    from rlvr.train.batch import Batch
    from rlvr.train.optim import adamw
    from rlvr.train.update import policy_update

    rank, checkpointing, precision, dtype = CONFIGS[name]
    torch.manual_seed(0)
    policy, tok = load_model(model_name, dtype)
    after_load = vm_hwm_mib()
    if rank:
        policy = apply_lora(policy, LoraConfig(r=rank, alpha=2 * rank))
    if checkpointing:
        enable_gradient_checkpointing(policy)
    policy.train()
    vocab = policy.config.vocab_size
    b = PROMPTS * GROUP
    batch = Batch(prompts=[torch.randint(0, vocab, (PROMPT_TOKENS,)).tolist() for _ in range(PROMPTS)],
                  completion_ids=torch.randint(0, vocab, (b, COMPLETION_TOKENS)),
                  completion_mask=torch.ones(b, COMPLETION_TOKENS),
                  advantages=torch.randn(b), group_size=GROUP)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    optimizer = adamw([{"params": trainable, "lr": 1e-5}], 0.0)
    settings = update_settings(Config(optimizer=OptimizerConfig(micro_batch_prompts=4)), tok.pad_token_id,
                                 precision)
    t0 = time.perf_counter()
    for _ in range(steps):
        policy_update(policy, optimizer, batch, settings)
    step_s = (time.perf_counter() - t0) / steps
    state = sum(v.numel() * v.element_size() for s in optimizer.state_dict()["state"].values() for v in s.values()
                if torch.is_tensor(v))
    return {"config": name, "peak_mib": vm_hwm_mib(), "after_load_mib": after_load, "step_s": step_s,
            "trainable": sum(p.numel() for p in trainable),
            "total": sum(p.numel() for p in policy.parameters()), "optimizer_mib": state / 2 ** 20}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(measure(sys.argv[2], int(sys.argv[3]), sys.argv[4])))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("steps", nargs="?", type=int, default=2, help="policy updates per configuration (2)")
    parser.add_argument("model", nargs="?", default="smollm2-135m-instruct", help="model.name")
    parser.add_argument("configs", nargs="?", default=",".join(CONFIGS),
                        help="comma-separated, of " + ", ".join(CONFIGS) + " (all)")
    args = parser.parse_args()
    steps, model_name, names = args.steps, args.model, args.configs.split(",")
    if set(names) - set(CONFIGS):
        parser.error(f"unknown configs {', '.join(sorted(set(names) - set(CONFIGS)))}: of {', '.join(CONFIGS)}")
    print(f"{model_name}: {PROMPTS} prompts x {GROUP} completions x {COMPLETION_TOKENS} tokens "
          f"({PROMPT_TOKENS}-token prompts), micro-batches of 4 prompts, AdamW, {steps} steps")
    print(f"{'config':<12} {'peak MiB':>9} {'load MiB':>9} {'train +MiB':>10} {'trainable':>12} "
          f"{'optim MiB':>10} {'s/step':>7}")
    rows = {}
    for name in names:
        out = subprocess.run([sys.executable, __file__, "--one", name, str(steps), model_name],
                             capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{name:<12} failed: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else out.returncode}")
            continue
        r = rows[name] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{name:<12} {r['peak_mib']:>9.0f} {r['after_load_mib']:>9.0f} "
              f"{r['peak_mib'] - r['after_load_mib']:>10.0f} {r['trainable']:>12,} {r['optimizer_mib']:>10.1f} "
              f"{r['step_s']:>7.1f}")
    if "full" in rows and "full+bf16w" in rows:
        a, b = rows["full"], rows["full+bf16w"]
        added = (b["peak_mib"] - b["after_load_mib"]) / (a["peak_mib"] - a["after_load_mib"])
        print(f"bf16 weights + fp32 masters / fp32 weights: peak {b['peak_mib'] / a['peak_mib']:.2f}x, update's "
              f"addition {added:.2f}x, optimizer state {b['optimizer_mib'] / a['optimizer_mib']:.2f}x, "
              f"s/update {b['step_s'] / a['step_s']:.2f}x")


if __name__ == "__main__":
    main()
