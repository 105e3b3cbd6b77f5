"""rlvr against TRL's GRPOTrainer on one GPU, and rlvr's decode against HF `generate`, in one run.

    python bench/gpu.py --tokenizer .gpubench/tokenizer --wheels .gpubench/wheels [--save FILE]
                        [--models 1.7b,135m] [--shapes 8x8x128,32x8x256] [--parts tests,rlvr,trl,decode]
                        [--decode-batches 64,256] [--decode-tokens 128] [--warmup 1] [--steps 2]
                        [--budget 290] [--timeout 150] [--rlvr NAME=OVERRIDES ...] [--device cuda]
                        [--log FILE] [--keep]
    python bench/gpu.py --device cpu --smoke [--parts rlvr,decode]    # the whole script on tiny shapes, on a CPU

Runs on a bare GPU machine (no package registry, no model hub) from the repository plus two folders:
- --tokenizer DIR: SmolLM2's tokenizer files (3.5 MB), copied from the model `make setup` converts:
      mkdir -p .gpubench/tokenizer && cp ~/.cache/rlvr/models/smollm2-135m-instruct/{tokenizer.json,\\
          tokenizer_config.json,chat_template.jinja} .gpubench/tokenizer/
- --wheels DIR: what rlvr and TRL need beyond that machine's image (its Python is 3.12; its transformers
  5.17 is not the 5.24 rlvr pins; it has no trl, datasets, dill or multiprocess):
      python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \\
          --abi cp312 --abi abi3 --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \\
          --platform manylinux2014_x86_64 --platform any -d .gpubench/wheels trl==1.16.0 datasets==5.2.0 \\
          dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0 transformers==5.24.0 regex==2026.4.4 torchao==0.18.0
  bench/gpu_wheels.py installs a carried wheel (pip --no-index --no-deps --target, into the work directory)
  only where the image lacks the package or holds a version rlvr's or TRL's requirements reject; TRL's set
  goes on PYTHONPATH of the TRL processes alone. .gpubench/ is git-ignored: carry it (20 MiB in all).
Models: random weights (seed 0) built on the device from the SmolLM2-135M and SmolLM2-1.7B configurations
(bench/gpu_children.py SHAPES), saved in bf16 with the tokenizer into the work directory; both frameworks
load them in fp32 straight onto the GPU and train under bf16 autocast (TRL: bf16=True; rlvr: its defaults
on CUDA, which decode from a bf16 copy of the weights, rollout.weights=auto).
Work: bench/same_work.py: the 256 "What is a + b? Reply with only the number." prompts, reward
bench/last_number.py, temperature 1, lr 2e-5 constant, beta 0. A shape PxGxT is P prompts x G completions x
T new tokens; random weights almost never draw the stop token, so nearly every completion is T tokens.

Memory (--parts memory, first after the models): the 8B shape with LoRA r=16 on a bf16 and on an NF4 base
(8x8x512), the 32B shape on an NF4 base (8x4x1024), the largest shape that runs under 24, 48 and 80 GiB
(set_per_process_memory_fraction), TRL as shipped with LoRA on the 8B shape; `rlvr plan` beside each phase.

Before any job, rlvr is probed on the Python its jobs will run (a tiny model sampled and scored on the CPU,
a few seconds); where it cannot run the script stops with one line. Each measurement is then its own process
(bench/gpu_children.py) with the GPU to itself, its peak memory its own, killed at its timeout (--timeout,
and never past the budget); the run stops starting new ones when --budget seconds are spent and lists what
it skipped. Order (plan): the CUDA tests (tests/rollout/test_graphed.py, tests/test_device.py: about a
minute), the models, then the headline comparison, the first model and shape: rlvr, then TRL matched to
rlvr's update (trl-matched: bf16, per-device batch 4 x G, gradient accumulation P / 4, one generation batch
of P x G rows, as rlvr samples all rows at once and updates in micro-batches of 4 prompts); the decode
table; then TRL with every row in one forward (trl-bf16; where that runs out of memory, TRL as shipped:
bf16 + gradient checkpointing); then the other models and shapes.
Per step (medians over the timed steps, after --warmup untimed ones): step seconds, generation and scoring
seconds (both sides time their reward function), update seconds, generated tokens and tokens/s, peak
memory of the rollout and of the update (CUDA allocator, reset between phases) and of the whole process;
rlvr also its sampler/trainer log-prob mismatch (rollout/logp_mismatch_mean_abs). The 1.7B rows add
rlvr-bf16-weights (BF16_WEIGHTS: bf16 weights, fp32 masters in AdamW) beside rlvr's fp32 weights + autocast. Decode: HF `generate`
(bf16 weights) and rlvr's engine (each --rlvr variant, as its GRPO step samples) at each batch size,
distinct prompts, temperature 1, no stop token: tokens/s after one untimed run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpu_wheels import install_wheels

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
MIN_START_S = 20  # a job started with less time than this left could not even load its model


@dataclass
class Job:
    name: str
    spec: dict
    after: str = ""  # the job whose outcome decides this one: "ok" needed, or "oom" for a fallback
    needs: str = "ok"
    result: dict = field(default_factory=dict)


def parse_shape(text: str) -> tuple[int, int, int]:
    """'8x8x128' -> (8, 8, 128): prompts x group size x new tokens."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise SystemExit(f"--shapes {text!r}: expected PROMPTSxGROUPxTOKENS of positive integers, e.g. 8x8x128")
    return int(parts[0]), int(parts[1]), int(parts[2])


CUDA_TESTS = ["tests/rollout/test_graphed.py", "tests/test_device.py"]  # the captured graph, CPU against CUDA
# The memory rows: random weights built on the GPU from the shipped public configs (model.name random:SHAPE),
# each in the settings rlvr plan says fit; one timed step each (the peak is the figure; the time is reported).
LEAN = "--model.dtype=auto --model.lora.r=16 --train.gradient_checkpointing=true --optimizer.micro_batch_prompts=1"
MEMORY_ROWS = [  # (name, shape, PxGxT, overrides, target GiB)
    ("8B LoRA bf16", "llama-3.1-8b", (8, 8, 512), LEAN, 20),
    ("8B LoRA nf4", "llama-3.1-8b", (8, 8, 512), LEAN + " --model.quantize=nf4", 12),
    ("32B LoRA nf4", "qwen2.5-32b", (8, 4, 1024), LEAN + " --model.quantize=nf4", 80),
]
MEMORY_TIMEOUT_S = 240  # a 32B step: building it, 1024 decode steps through 4-bit weights, 8 micro-batches
FITS_CARDS = (24, 48, 80)  # GiB: the "largest model that fits" table, set with set_per_process_memory_fraction
FITS_SHAPES = ("qwen2.5-32b", "llama-3.1-8b", "qwen3-1.7b")  # largest first; each at 8x8x256, nf4 + LoRA
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
    from rlvr.plan import GIB, Settings, estimate, shape_of

    s = Settings(dtype="bfloat16", quantize="nf4", lora_r=16, prompts=8, group=8, prompt_tokens=80, new_tokens=256,
                 micro_batch_prompts=1, checkpointing=True)
    fits = [i for i, name in enumerate(shapes) if estimate(shape_of(name), s).peak <= card * GIB]
    return shapes[fits[0]:] if fits else shapes[-1:]


def memory_jobs(args, base: dict, work: Path) -> tuple[list[Job], list[Job]]:
    """(the headline memory rows, the largest-fits table and TRL with LoRA on the 8B row's shape)."""
    rows = SMOKE_ROWS if args.smoke else MEMORY_ROWS
    model = lambda shape: shape if shape == "tiny-random" else f"random:{shape}"
    head = [Job(f"{name} {'x'.join(map(str, pgt))}", {**base, "kind": "rlvr", "model_dir": model(shape), "shape": pgt,
                "model": shape, "name": f"mem-{i}", "overrides": extra, "warmup": 0, "steps": 1, "target_gib": gib,
                "timeout_s": max(args.timeout, MEMORY_TIMEOUT_S)})
            for i, (name, shape, pgt, extra, gib) in enumerate(rows)]
    later = []
    cards, shapes = ((1,), ("tiny-random",)) if args.smoke else (FITS_CARDS, FITS_SHAPES)
    for card in cards:
        before = ""
        for shape in planned_to_fit(shapes, card, args.smoke):
            name = f"fits {card} GiB: {shape}"
            later.append(Job(name, {**base, "kind": "rlvr", "model_dir": model(shape), "shape": (8, 8, 256) if not
                                    args.smoke else (2, 2, 8), "model": shape, "name": f"fit-{card}-{shape}",
                                    "overrides": (LEAN if not args.smoke else "--model.lora.r=4")
                                    + " --model.quantize=nf4", "warmup": 0, "steps": 1, "memory_gib": card,
                                    "card_gib": card}, before, "oom" if before else "ok"))
            before = name  # the next smaller shape runs only where this one ran out of memory
    if "trl" in args.parts and not args.smoke:  # TRL as shipped (bf16, gradient checkpointing) with LoRA
        later.append(Job("trl-lora 8B LoRA bf16 8x8x512", {**base, "kind": "trl", "precision": "defaults",
                         "model_dir": str(work / "models" / "llama-3.1-8b"), "shape": (8, 8, 512),
                         "model": "llama-3.1-8b", "lora_r": 16, "warmup": 0, "steps": 1}, "build"))
    return head, later
MICRO_PROMPTS = 4  # rlvr's algo.micro_batch_prompts default: the matched TRL row updates in these micro-batches
# Beside the 1.7B rows (tiny with --smoke): full fine-tuning in bf16 weights, AdamW over fp32 master copies
# (rlvr/train/optim.py MasterAdamW; no autocast casts, no bf16 decode copy), against the fp32 weights + autocast
# of rlvr's defaults; added unless --rlvr names it.
BF16_WEIGHTS = ("rlvr-bf16-weights", "--model.dtype=bfloat16")


def plan(args, work: Path) -> list[Job]:
    """Jobs in the order they run: what matters most first, so a spent budget skips the least. The CUDA
    tests, the models, the headline pair (the first model and shape: rlvr, then TRL micro-batched as rlvr
    is), the decode table, then TRL with every row in one batch (as shipped where that runs out of memory),
    then the other models and shapes."""
    base = {"device": args.child_device, "work": str(work), "task_file": str(work / "sums.jsonl"),
            "lr": 2e-5, "seed": 0, "warmup": args.warmup, "steps": args.steps}
    built = dict.fromkeys([*args.models, *([args.decode_model] if "decode" in args.parts else []),
                           *(["llama-3.1-8b"] if {"memory", "trl"} <= set(args.parts) and not args.smoke else [])])
    model_dir = {m: str(work / "models" / m) for m in built}
    jobs = [Job("CUDA tests", {**base, "kind": "tests", "files": CUDA_TESTS})] if "tests" in args.parts else []
    jobs.append(Job("build", {**base, "kind": "build", "tokenizer": args.tokenizer and str(args.tokenizer),
                              "models": model_dir}))
    dspec = {**base, "model_dir": model_dir[args.decode_model], "batches": args.decode_batches,
             "new_tokens": args.decode_tokens}
    decode = [Job(f"engine {name}", {**dspec, "kind": "engine", "overrides": extra}, "build")
              for name, extra in args.rlvr] + [Job("HF generate", {**dspec, "kind": "generate"}, "build")]
    decode = decode if "decode" in args.parts else []
    head, later = memory_jobs(args, base, work) if "memory" in args.parts else ([], [])
    jobs += head  # the issue's headline: 8B on a 24 GB card, 32B on one 80 GB card
    for i, (model, shape) in enumerate((m, s) for m in args.models for s in args.shapes):
        tag = f"{model} {'x'.join(map(str, shape))}"
        spec = {**base, "model_dir": model_dir[model], "shape": shape, "model": model}
        if "rlvr" in args.parts:
            extra_rows = [BF16_WEIGHTS] if model in ("1.7b", "tiny") and BF16_WEIGHTS[0] not in dict(args.rlvr) else []
            jobs += [Job(f"{name} {tag}", {**spec, "kind": "rlvr", "name": f"{name}-{i}", "overrides": extra},
                         "build") for name, extra in args.rlvr + extra_rows]
        trl = "trl" in args.parts
        micro = min(MICRO_PROMPTS, shape[0])
        jobs += [Job(f"trl-matched {tag}", {**spec, "kind": "trl", "precision": "bf16", "micro_prompts": micro},
                     "build")] if trl and shape[0] % micro == 0 else []
        jobs += decode if i == 0 else []
        jobs += [Job(f"trl-bf16 {tag}", {**spec, "kind": "trl", "precision": "bf16"}, "build"),
                 Job(f"trl-shipped {tag}", {**spec, "kind": "trl", "precision": "defaults"}, f"trl-bf16 {tag}",
                     "oom")] if trl else []
    i = next((k for k, j in enumerate(jobs) if j.name.startswith("engine ")), len(jobs))
    return jobs[:i] + later + jobs[i:] if not args.smoke else jobs + later


def run_child(job: Job, timeout: float, env: dict, log: Path) -> dict:
    """The job's process under a time limit; its own process group, so a timeout ends all it started."""
    cmd = [sys.executable, str(BENCH / "gpu_children.py"), json.dumps(job.spec)]
    t = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"status": "timeout", "wall_s": time.perf_counter() - t, "why": f"killed after {timeout:.0f} s"}
    wall = time.perf_counter() - t
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.startswith("RESULT ")]
    if code != 0 or not lines:
        tail = log.read_text(errors="replace").strip().splitlines()[-12:]
        return {"status": "failed", "wall_s": wall, "why": f"exit {code}; log {log}:\n    " + "\n    ".join(tail)}
    result = json.loads(lines[-1].removeprefix("RESULT "))
    return {**result, "status": "oom" if result.get("oom") else "ok", "wall_s": wall}


def run_all(args, jobs: list[Job], envs: dict[str, dict], work: Path, deadline: float) -> None:
    done: dict[str, Job] = {}
    for job in jobs:
        before = done.get(job.after)
        left = deadline - time.monotonic()
        if job.after and (before is None or before.result["status"] != job.needs):
            job.result = ({"status": "skipped", "why": f"{job.after}: {before.result['status'] if before else '-'}"}
                          if job.needs == "ok" else {"status": "unneeded"})  # a fallback whose case did not arise
        elif job.spec["kind"] == "trl" and envs.get("trl") is None:
            job.result = {"status": "skipped", "why": envs["trl_why"]}
        elif left < MIN_START_S:
            job.result = {"status": "skipped", "why": f"time budget spent ({args.budget:.0f} s, --budget)"}
        else:
            print(f"[{time.monotonic() - (deadline - args.budget):5.0f} s] {job.name} ...", flush=True)
            env = envs["trl"] if job.spec["kind"] == "trl" else envs["plain"]
            log = work / f"{job.spec['kind']}-{len(done)}.log"
            job.result = run_child(job, min(job.spec.get("timeout_s", args.timeout), left), env, log)
            if job.result["status"] == "timeout" and job.spec["kind"] == "rlvr":
                job.result["why"] += partial_steps(work / f"run-{job.spec['name']}" / "metrics.jsonl")
            if args.log:  # every process's output in one file, which survives the work directory
                with open(args.log, "a") as f:
                    f.write(f"\n===== {job.name}: {job.result['status']} =====\n{log.read_text(errors='replace')}")
            if job.spec["kind"] == "tests" and job.result["status"] == "ok":
                print("        " + ", ".join(f"{k} {job.result[k]}" for k in ("passed", "failed", "skipped")
                                             if k in job.result)
                      + "".join(f"\n        FAILED {t}" for t in job.result["failed_tests"]))
            if job.spec["kind"] == "build" and job.result["status"] == "ok":
                print("        " + ", ".join(f"{k} {job.result[k]}" for k in ("gpu", "python", "torch", "cuda",
                                                                          "transformers")))
            print(f"        {job.result['status']} in {job.result['wall_s']:.0f} s" + brief(job.result), flush=True)
        done[job.name] = job
        if args.save and job.result["status"] != "unneeded":
            with open(args.save, "a") as f:
                f.write(json.dumps({"name": job.name, **{k: v for k, v in job.spec.items() if k in
                                    ("kind", "model", "shape", "precision", "overrides")}, **job.result}) + "\n")


def partial_steps(metrics: Path) -> str:
    """The step times a killed rlvr run had logged (warm-up included), so a slow run still says how slow."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    return "; steps logged: " + (", ".join(f"{r['time/step_s']:.1f} s (rollout {r['time/rollout_s']:.1f})"
                                          for r in rows) or "none")


def brief(r: dict) -> str:
    """A finished job's figures in a line, printed as it ends (the tables come at the end of the run)."""
    if "why" in r:
        return f": {r['why']}"
    if "step_s" in r:
        return ": steps " + ", ".join(f"{s:.2f}" for s in r["step_s"]) + f" s, peak {r['peak_gib']:.1f} GiB"
    if "batches" in r:
        return ": " + ", ".join(f"batch {b} " + ("out of memory" if c.get("oom") else f"{c['tokens_per_s']:.0f} tok/s")
                                for b, c in r["batches"].items())
    return f" (peak {r['peak_gib']:.1f} GiB)" if "peak_gib" in r else ""


def steps_table(jobs: list[Job]) -> None:
    med = lambda xs: statistics.median(x for x in xs if x is not None) if any(x is not None for x in xs) else None
    fmt = lambda v, spec: "-" if v is None else format(v, spec)
    if not any(j.spec["kind"] in ("rlvr", "trl") for j in jobs):
        return
    print(f"\n{'GRPO step (medians)':<34}{'step s':>8}{'generate':>9}{'score':>7}{'update':>8}{'tokens':>8}"
          f"{'tok/s':>8}{'peak GiB: rollout':>18}{'update':>8}{'all':>6}{'logp mism':>10}  status")
    for job in (j for j in jobs if j.spec["kind"] in ("rlvr", "trl") and j.result.get("status") not in ("skipped", "unneeded")):
        r = job.result
        if r["status"] != "ok":
            print(f"{job.name:<34}{'':>90}  {r['status']}" + (f" (peak {r['peak_gib']:.1f} GiB)" if "peak_gib" in r
                                                               else ""))
            continue
        step, roll, tokens = med(r["step_s"]), med(r["rollout_s"]), med(r["tokens"])
        score = med(r.get("reward_s", [None]))
        # rlvr's rollout_s holds its scoring (time/reward_s); TRL's rollout_s is model.generate alone
        generate = roll - score if job.spec["kind"] == "rlvr" and score is not None else roll
        update = med(r["update_s"]) if "update_s" in r else med([s - g for s, g in zip(r["step_s"], r["rollout_s"])])
        print(f"{job.name:<34}{fmt(step, '.2f'):>8}{fmt(generate, '.2f'):>9}{fmt(score, '.3f'):>7}"
              f"{fmt(update, '.2f'):>8}{fmt(tokens, '.0f'):>8}{fmt(tokens / step if step else None, '.0f'):>8}"
              f"{fmt(med(r.get('rollout_peak_gib', [None])), '.1f'):>18}"
              f"{fmt(med(r.get('update_peak_gib', [None])), '.1f'):>8}{r['peak_gib']:>6.1f}"
              f"{fmt(med(r.get('logp_mismatch', [None])), '.4f'):>10}  ok ({len(r['step_s'])} steps: "
              + ", ".join(f"{s:.2f}" for s in r["step_s"]) + ")")
    print("generate: rlvr's time/rollout_s less time/reward_s; TRL's time in model.generate. score: the reward "
          "function. update: rlvr's time/train_s; TRL's step less its generate time (scoring and log-probs "
          "included). peak: the CUDA allocator's (the process's resident set on the CPU) per phase and for the "
          "whole process. trl-matched updates in micro-batches of 4 prompts as rlvr does (per-device batch 4 x G, "
          "accumulation P / 4, one generation batch of P x G); trl-bf16 runs every row at once.")
    headline = [j for j in jobs if j.spec["kind"] in ("rlvr", "trl") and j.result.get("status") == "ok"]
    for job in (j for j in headline if j.spec["kind"] == "rlvr"):
        for other in (j for j in headline if j.spec["kind"] == "trl" and j.spec["shape"] == job.spec["shape"]
                      and j.spec["model"] == job.spec["model"]):
            print(f"{job.name} / {other.name.split()[0]}: step "
                  f"{med(job.result['step_s']) / med(other.result['step_s']):.2f}x, peak memory "
                  f"{job.result['peak_gib'] / other.result['peak_gib']:.2f}x")


def is_memory(job: Job) -> bool:
    return any(k in job.spec for k in ("target_gib", "card_gib", "lora_r"))


def memory_table(jobs: list[Job]) -> None:
    """The memory rows and the largest-fits table: rlvr plan's peak of each phase beside the measured one."""
    rows = [j for j in jobs if is_memory(j) and j.result.get("status") not in (None, "skipped", "unneeded")]
    if not rows:
        return
    fmt = lambda v: "-" if v is None else f"{v:.2f}"
    first = lambda xs: xs[0] if xs else None
    print(f"\n{'memory (GiB; plan / measured)':<40}{'rollout':>16}{'update':>16}{'peak':>8}{'target':>8}{'step s':>8}  status")
    for job in rows:
        r, plan = job.result, job.result.get("plan", {})
        roll, upd = first(r.get("rollout_peak_gib", [])), first(r.get("update_peak_gib", []))
        target = job.spec.get("target_gib") or job.spec.get("card_gib")
        print(f"{job.name:<40}{fmt(plan.get('rollout')):>8}{fmt(roll):>8}{fmt(plan.get('update')):>8}{fmt(upd):>8}"
              f"{fmt(r.get('peak_gib')):>8}{fmt(target):>8}{fmt(first(r.get('step_s', []))):>8}  {r.get('status')}"
              + (f" ({r['why']})" if r.get("why") and r.get("status") != "ok" else ""))
    for card in sorted({j.spec["card_gib"] for j in rows if "card_gib" in j.spec}):
        ok = [j.spec["model"] for j in rows if j.spec.get("card_gib") == card and j.result.get("status") == "ok"]
        print(f"largest that fits {card} GiB (nf4 + LoRA r=16, checkpointing, 8x8x256): {ok[0] if ok else 'none tried fits'}")


def decode_table(jobs: list[Job]) -> None:
    rows = [j for j in jobs if j.spec["kind"] in ("engine", "generate") and j.result.get("status") == "ok"]
    if not rows:
        return
    batches = [str(b) for b in rows[0].spec["batches"]]
    print(f"\n{'decode tokens/s (peak GiB)':<34}" + "".join(f"{'batch ' + b:>20}" for b in batches))
    for job in rows:
        cells = [job.result["batches"].get(b, {}) for b in batches]
        print(f"{job.name:<34}" + "".join(f"{'out of memory':>20}" if c.get("oom") else
                                          f"{c['tokens_per_s']:>12.0f} ({c['peak_gib']:4.1f})" for c in cells))
    hf = next((j.result["batches"] for j in rows if j.spec["kind"] == "generate"), {})
    for job in (j for j in rows if j.spec["kind"] == "engine"):
        eng = job.result["batches"]
        print(f"{job.name} / HF generate: " + ", ".join(
            f"batch {b} {eng[b]['tokens_per_s'] / hf[b]['tokens_per_s']:.1f}x" for b in batches
            if "tokens_per_s" in eng.get(b, {}) and "tokens_per_s" in hf.get(b, {})))


def check_runtime(env: dict, note: str) -> None:
    """Stop the run, with one line, when rlvr cannot run on the Python it would start its jobs with
    (bench/gpu_children.py's probe: a tiny model sampled and scored on the CPU, a few seconds), rather
    than let every job fail in turn; an unmet pin that the probe runs through is only a note."""
    cmd = [sys.executable, str(BENCH / "gpu_children.py"), json.dumps({"kind": "probe"})]
    done = subprocess.run(cmd, env={**env, "CUDA_VISIBLE_DEVICES": ""}, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode == 0 and lines:
        r = json.loads(lines[-1].removeprefix("RESULT "))
        print(f"rlvr runs here: torch {r['torch']}, transformers {r['transformers']} (probe passed)", flush=True)
        return
    error = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]
    unmet = next((ln.strip() for ln in note.splitlines() if "warning: rlvr needs" in ln), "")
    raise SystemExit(f"stopped before the first job: rlvr cannot run on this Python's packages ({error})"
                     + (f"; {unmet.removeprefix('warning: ')}" if unmet else "")
                     + "; carry the versions pyproject.toml pins with --wheels DIR (see --help)")


def environments(args, work: Path) -> dict:
    """Child environments: rlvr and bench/ importable; TRL's processes also see the carried wheels."""
    path = [str(BENCH), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    plain = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONUNBUFFERED": "1",
             "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if args.device.startswith("cuda:"):  # one visible GPU, so TRL (accelerate) and rlvr use the same one
        plain["CUDA_VISIBLE_DEVICES"] = args.device.split(":", 1)[1]
    rlvr_site, trl_site, note = install_wheels(args.wheels, work, "trl" in args.parts)
    print(note, flush=True)
    plain["PYTHONPATH"] = os.pathsep.join([*rlvr_site, *path])
    check_runtime(plain, note)
    envs = {"plain": plain, "trl": None, "trl_why": ""}
    if "trl" not in args.parts:
        return envs
    env = {**plain, "PYTHONPATH": os.pathsep.join([*trl_site, *rlvr_site, *path])}
    probe = subprocess.run([sys.executable, "-c", "import trl, datasets; print(trl.__version__, datasets.__version__)"],
                           env=env, capture_output=True, text=True)
    if probe.returncode == 0:
        print(f"trl, datasets: {probe.stdout.strip()}", flush=True)
        envs["trl"] = env
    else:
        envs["trl_why"] = ("trl or datasets not importable" + ("" if args.wheels else ": pass --wheels DIR")
                           + f" ({probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else ''})")
        print(f"TRL part skipped: {envs['trl_why']}", flush=True)
    return envs


def arguments() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (each process gets train.device)")
    p.add_argument("--smoke", action="store_true", help="tiny model and shapes: the whole script in a minute on a CPU")
    p.add_argument("--tokenizer", type=Path, help="SmolLM2 tokenizer folder (needed but with --smoke)")
    p.add_argument("--wheels", type=Path, help="folder of wheels for TRL (see above)")
    p.add_argument("--models", help="comma-separated of 1.7b, 135m (default both; --smoke: tiny)")
    p.add_argument("--shapes", help="comma-separated PxGxT (default 8x8x128,32x8x256; --smoke: 2x2x8)")
    p.add_argument("--parts", help="comma-separated of tests (the CUDA tests, first), memory (the 8B and 32B "
                                   "rows, the largest-fits table, TRL with LoRA), rlvr, trl, decode (default all "
                                   "five on CUDA; memory,rlvr,trl,decode on the CPU)")
    p.add_argument("--decode-batches", help="comma-separated batch sizes (default 64,256; --smoke: 2,4)")
    p.add_argument("--decode-tokens", type=int, help="new tokens per decode row (default 128; --smoke: 8)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--steps", type=int, default=2, help="timed steps")
    p.add_argument("--budget", type=float, default=470, help="seconds for the whole run; later jobs are skipped")
    p.add_argument("--timeout", type=float, default=150, help="seconds for any one process")
    p.add_argument("--rlvr", action="append", metavar="NAME=OVERRIDES",
                   help="an rlvr variant, for its steps and its engine decode: extra `--key=value` overrides, "
                        "e.g. rlvr-bf16=--rollout.weights=bf16 (default one: rlvr=, the defaults)")
    p.add_argument("--save", type=Path, help="append each result to FILE (JSON lines) as it comes")
    p.add_argument("--log", type=Path, help="append every process's output to FILE")
    p.add_argument("--keep", action="store_true", help="keep the work directory (models, logs)")
    args = p.parse_args()
    smoke = args.smoke
    args.models = (args.models or ("tiny" if smoke else "1.7b,135m")).split(",")
    args.shapes = [parse_shape(s) for s in (args.shapes or ("2x2x8" if smoke else "8x8x128,32x8x256")).split(",")]
    args.parts = (args.parts or ("tests,memory,rlvr,trl,decode" if args.device.startswith("cuda")
                                 else "memory,rlvr,trl,decode")).split(",")
    args.decode_batches = [int(b) for b in (args.decode_batches or ("2,4" if smoke else "64,256")).split(",")]
    args.decode_tokens = args.decode_tokens or (8 if smoke else 128)
    args.decode_model = "tiny" if smoke else "1.7b"
    args.rlvr = [spec.partition("=")[::2] for spec in args.rlvr or ["rlvr="]]
    args.child_device = "cuda" if args.device.startswith("cuda") else args.device
    bad = [m for m in args.models if m not in ("1.7b", "135m", "tiny")] + [
        x for x in args.parts if x not in ("tests", "memory", "rlvr", "trl", "decode")]
    if bad or (not args.tokenizer and not smoke):
        raise SystemExit(f"bad --models/--parts {bad}" if bad else "--tokenizer DIR is needed (see --help)")
    return args


def main() -> None:
    args = arguments()
    start = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="gpubench-"))
    print(f"work directory: {work}; device {args.device}; budget {args.budget:.0f} s", flush=True)
    from same_work import write_prompts

    write_prompts(work / "sums.jsonl", "sums", 0)
    envs = environments(args, work)
    jobs = plan(args, work)
    try:
        run_all(args, jobs, envs, work, start + args.budget)
    finally:
        memory_table(jobs)
        steps_table([j for j in jobs if not is_memory(j)])
        decode_table(jobs)
        skipped = [f"{j.name} ({j.result['why']})" for j in jobs
                   if j.result.get("status") == "skipped" and j.needs == "ok"]
        print("skipped: " + ("; ".join(skipped) if skipped else "nothing"))
        print(f"total {time.monotonic() - start:.0f} s")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
