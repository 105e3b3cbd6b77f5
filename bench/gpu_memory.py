"""bench/gpu.py's memory part (--parts memory): which jobs it adds, and its table of `rlvr plan` beside the
measured peaks.

Rows: Llama-3.1-8B's shape with LoRA r=16 on a bf16 and on an NF4 base (8x8x512; targets 20 and 12 GiB),
Qwen2.5-32B's on an NF4 base (8x4x1024; target: one 80 GiB card), each in the settings `rlvr plan` says fit
(LEAN), random weights built on the GPU from the shipped public configs (model.name random:SHAPE), one timed
step; then the largest shipped shape that runs a step under 24, 48 and 80 GiB (set_per_process_memory_fraction),
and TRL as shipped (bf16, gradient checkpointing) with the same LoRA on the 8B shape. TRL runs on no 4-bit
base here (its 4-bit path is bitsandbytes, which neither rlvr nor the GPU image carries), and not on the 32B
shape (TRL loads a checkpoint: 61 GiB in bf16, about the GPU machine's whole disk).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEAN = "--model.dtype=auto --model.lora.r=16 --train.gradient_checkpointing=true --optimizer.micro_batch_prompts=1"
MEMORY_ROWS = [  # (name, shape, PxGxT, overrides, target GiB)
    ("8B LoRA bf16", "llama-3.1-8b", (8, 8, 512), LEAN, 20),
    ("8B LoRA nf4", "llama-3.1-8b", (8, 8, 512), LEAN + " --model.quantize=nf4", 12),
    ("32B LoRA nf4", "qwen2.5-32b", (8, 4, 1024), LEAN + " --model.quantize=nf4", 80),
]
MEMORY_TIMEOUT_S = 240  # a 32B step: building it, 1024 decode steps through 4-bit weights, 8 micro-batches
FITS_CARDS = (24, 48, 80)  # GiB: the "largest model that fits" table, set with set_per_process_memory_fraction
FITS_SHAPES = ("qwen2.5-32b", "llama-3.1-8b", "qwen3-1.7b")  # largest first; each at 8x8x256, nf4 + LoRA
TRL_LORA = ("trl-lora 8B LoRA bf16 8x8x512", "llama-3.1-8b", (8, 8, 512))  # its checkpoint: the build job's
SMOKE_ROWS = [("tiny LoRA fp32", "tiny-random", (2, 2, 8), "--model.lora.r=4", 1),
              ("tiny LoRA nf4", "tiny-random", (2, 2, 8), "--model.lora.r=4 --model.quantize=nf4", 1)]


def planned_to_fit(shapes: tuple[str, ...], card: int, smoke: bool) -> tuple[str, ...]:
    """The shapes from the largest rlvr plan says fits `card` GiB on down (nf4 + LoRA r=16, checkpointing,
    micro-batches of 1 prompt, 8x8x256, 80-token prompts): the GPU verifies the plan's pick, and tries the
    next smaller only where that runs out of memory. rlvr.plan needs neither torch nor transformers."""
    if smoke:
        return shapes
    if str(ROOT) not in sys.path:  # the repository's rlvr, as the children import it
        sys.path.insert(0, str(ROOT))
    from rlvr.plan import GIB, PlanSettings, estimate, shape_of

    s = PlanSettings(dtype="bfloat16", quantize="nf4", lora_r=16, prompts=8, group=8, prompt_tokens=80, new_tokens=256,
                 micro_batch_prompts=1, checkpointing=True)
    fits = [i for i, name in enumerate(shapes) if estimate(shape_of(name), s).peak <= card * GIB]
    return shapes[fits[0]:] if fits else shapes[-1:]


def memory_jobs(args, base: dict, work: Path) -> tuple[list[dict], list[dict]]:
    """(the headline rows, then the largest-fits table and TRL with LoRA), each job as bench/gpu.py's Job
    fields: name, spec, after (the job whose outcome decides it), needs (that outcome)."""
    model = lambda shape: shape if shape == "tiny-random" else f"random:{shape}"
    one_step = {**base, "kind": "rlvr", "warmup": 0, "steps": 1}
    head = [dict(name=f"{name} {'x'.join(map(str, pgt))}",
                 spec={**one_step, "model_dir": model(shape), "shape": pgt, "model": shape, "name": f"mem-{i}",
                       "overrides": extra, "target_gib": gib, "timeout_s": max(args.timeout, MEMORY_TIMEOUT_S)})
            for i, (name, shape, pgt, extra, gib) in enumerate(SMOKE_ROWS if args.smoke else MEMORY_ROWS)]
    later = []
    cards, shapes = ((1,), ("tiny-random",)) if args.smoke else (FITS_CARDS, FITS_SHAPES)
    overrides = ("--model.lora.r=4" if args.smoke else LEAN) + " --model.quantize=nf4"
    for card in cards:
        before = ""
        for shape in planned_to_fit(shapes, card, args.smoke):
            name = f"fits {card} GiB: {shape}"
            later.append(dict(name=name, spec={**one_step, "model_dir": model(shape), "model": shape,
                                               "shape": (2, 2, 8) if args.smoke else (8, 8, 256),
                                               "name": f"fit-{card}-{shape}", "overrides": overrides,
                                               "memory_gib": card, "card_gib": card},
                              after=before, needs="oom" if before else "ok"))
            before = name  # the next smaller shape runs only where this one ran out of memory
    if "trl" in args.parts and not args.smoke:  # TRL as shipped (bf16, gradient checkpointing) with LoRA
        name, shape, pgt = TRL_LORA
        later.append(dict(name=name, after="build", spec={
            **base, "kind": "trl", "precision": "defaults", "model_dir": str(work / "models" / shape), "shape": pgt,
            "model": shape, "lora_r": 16, "warmup": 0, "steps": 1}))
    return head, later


def implied(job, done: dict) -> dict | None:
    """A largest-fits job's result without running it: the same shape ran a step on a smaller card (what
    fits 24 GiB fits 48), so the 32B shape, planned to fit all three, runs once."""
    card = job.spec.get("card_gib")
    smaller = [j for j in done.values() if card and j.spec.get("model") == job.spec["model"]
               and j.spec.get("card_gib", card) < card and j.result.get("status") == "ok"]
    return {**smaller[0].result, "why": f"ran within {smaller[0].spec['card_gib']} GiB", "wall_s": 0.0} \
        if smaller else None


def trl_lora_model(args) -> list[str]:
    """The checkpoint the build job writes for TRL's LoRA row (TRL loads a model directory)."""
    return [TRL_LORA[1]] if {"memory", "trl"} <= set(args.parts) and not args.smoke else []


def is_memory(job) -> bool:
    return any(k in job.spec for k in ("target_gib", "card_gib", "lora_r"))


def memory_table(jobs: list) -> None:
    """Each phase's peak as rlvr plan has it beside the measured one: the memory rows, the largest-fits table,
    TRL's LoRA row (measured only) and every other rlvr row (the 1.7B and 135M steps)."""
    rows = [j for j in jobs if (is_memory(j) or "plan" in j.result)
            and j.result.get("status") not in (None, "skipped", "unneeded")]
    if not rows:
        return
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    last = lambda xs: xs[-1] if xs else None  # the last step: the optimizer state exists by then
    print(f"\n{'memory (GiB; plan / measured)':<40}{'rollout':>16}{'update':>16}{'peak':>8}{'target':>8}"
          f"{'plan/meas':>10}{'step s':>8}  status")
    for job in rows:
        r, plan = job.result, job.result.get("plan", {})
        roll, upd = last(r.get("rollout_peak_gib", [])), last(r.get("update_peak_gib", []))
        ratios = [plan[k] / v for k, v in (("rollout", roll), ("update", upd)) if k in plan and v]
        target = job.spec.get("target_gib") or job.spec.get("card_gib")
        print(f"{job.name:<40}{fmt(plan.get('rollout')):>8}{fmt(roll):>8}{fmt(plan.get('update')):>8}{fmt(upd):>8}"
              f"{fmt(r.get('peak_gib')):>8}{fmt(target):>8}{'/'.join(f'{x:.2f}' for x in ratios) or '-':>10}"
              f"{fmt(last(r.get('step_s', []))):>8}  {r.get('status')}"
              + (f" ({r['why']})" if r.get("why") else ""))
    print("plan/meas: rlvr plan's peak over the measured one, rollout/update (the issue's target: within 15%)")
    for card in sorted({j.spec["card_gib"] for j in rows if "card_gib" in j.spec}):
        ok = [j.spec["model"] for j in rows if j.spec.get("card_gib") == card and j.result.get("status") == "ok"]
        print(f"largest that fits {card} GiB (nf4 + LoRA r=16, checkpointing, 8x8x256): "
              + (ok[0] if ok else "none tried fits"))
