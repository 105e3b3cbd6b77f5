"""rlvr against TRL's GRPOTrainer on one GPU, and rlvr's decode against HF `generate`, in one run.

    python3 bench/gpu.py --tokenizer .gpubench/tokenizer --wheels .gpubench/wheels [--save FILE] [--log FILE]
                         [--models 1.7b,135m] [--shapes 8x8x128,32x8x256] [--parts tests,memory,rlvr,trl,decode]
                         [--decode-batches 64,256] [--decode-tokens 128] [--warmup 1] [--steps 2]
                         [--budget 470] [--timeout 150] [--rlvr NAME=OVERRIDES ...] [--device cuda] [--keep]
    python3 bench/gpu.py --device cpu --smoke [--parts memory]    # the whole script on tiny shapes, on a CPU

Runs on a bare GPU machine (no package registry, no model hub) from the repository plus two folders, both
under .gpubench/ (git-ignored; about 24 MiB together: carry it). Prepare them here, from the repository root:
- --tokenizer DIR: SmolLM2's tokenizer files (3.5 MB), copied from the model `make setup` converts:
      mkdir -p .gpubench/tokenizer && cp ~/.cache/rlvr/models/smollm2-135m-instruct/{tokenizer.json,\
          tokenizer_config.json,chat_template.jinja} .gpubench/tokenizer/
- --wheels DIR: what rlvr and TRL need beyond that machine's image (its Python is 3.12; its transformers
  5.17 is not the 5.24 rlvr pins; it has no trl, datasets, dill, multiprocess or torchao, and its peft's
  version is not known here):
      python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
          --abi cp312 --abi abi3 --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d .gpubench/wheels \
          trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0 transformers==5.24.0 \
          regex==2026.4.4 torchao==0.18.0 peft==0.21.2
  bench/gpu_wheels.py installs a carried wheel (pip --no-index --no-deps --target, into the work directory)
  only where the image lacks the package or holds a version rlvr's (its dependencies and the lora and quant
  extras) or TRL's requirements reject; TRL's set goes on PYTHONPATH of the TRL processes alone.
The one command on the GPU machine (device tool: carry [".gpubench"]; 470 s of the 600 a command may run):
      python3 bench/gpu.py --tokenizer .gpubench/tokenizer --wheels .gpubench/wheels --save $OUT/gpu.jsonl \
          --log $OUT/gpu.log
Models: random weights (seed 0) built on the device from the SmolLM2-135M and SmolLM2-1.7B configurations
(bench/gpu_children.py SHAPES), saved in bf16 with the tokenizer into the work directory; both frameworks
load them in fp32 straight onto the GPU and train under bf16 autocast (TRL: bf16=True; rlvr: its defaults
on CUDA, which decode from a bf16 copy of the weights, rollout.weights=auto).
Work: bench/same_work.py: the 256 "What is a + b? Reply with only the number." prompts, reward
bench/last_number.py, temperature 1, lr 2e-5 constant, beta 0. A shape PxGxT is P prompts x G completions x
T new tokens; random weights almost never draw the stop token, so nearly every completion is T tokens.

Memory (--parts memory, bench/gpu_memory.py; first after the models): the 8B shape with LoRA r=16 on a bf16
and on an NF4 base (8x8x512), the 32B shape on an NF4 base (8x4x1024), the largest shape that runs under 24,
48 and 80 GiB (set_per_process_memory_fraction), TRL as shipped with LoRA on the 8B shape; `rlvr plan`
beside each measured phase, for these rows and every other rlvr row.

vLLM weight sync (--parts sync, not in the default parts: the merged files of the 8B shape are 16 GB to write):
the trainer's side of one push after an update for the 8B shape in bf16 with LoRA r=16 on every linear layer,
the adapters alone (rollout.vllm.sync adapters: what each server loads) against the merged weights (sync merged,
weight_push disk): bytes and seconds of the files written, from the GPU-resident policy.

Before any job, rlvr is probed on the Python its jobs will run (a tiny model sampled and scored on the CPU);
where it cannot run the script stops with one line. Each measurement is then its own process
(bench/gpu_children.py) with the GPU to itself, its peak memory its own, killed at its timeout (--timeout,
never past --budget, after which the rest is skipped and listed). Order: plan()'s docstring.
Per step (medians over the timed steps, after --warmup untimed ones): step, generation, scoring and update
seconds, generated tokens and tokens/s, peak memory of the rollout, of the update (CUDA allocator, reset
between phases) and of the whole process; rlvr also its sampler/trainer log-prob mismatch. The 1.7B rows
add (VARIANTS) rlvr-bf16-weights (bf16 weights, fp32 masters in AdamW) and rlvr-packed (train.packed=true:
the update's forwards padding-free), as --smoke's tiny rows do. Decode: HF `generate` (bf16 weights) and
rlvr's engine (each variant that samples differently) at each batch size, distinct prompts, temperature 1,
no stop token: tokens/s after one untimed run.
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

from gpu_memory import implied, is_memory, memory_jobs, memory_table, trl_lora_model
from gpu_wheels import install_wheels

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
MIN_START_S = 20  # a job started with less time than this left could not even load its model


@dataclass(kw_only=True)
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
# rlvr's rows: (name, overrides, whether it samples differently from the defaults: a decode row of its own).
# The first runs at every model and shape, the others at VARIANT_MODELS'; --rlvr replaces them all.
VARIANTS = [
    ("rlvr", "", True),
    # bf16 weights, AdamW over fp32 masters (rlvr/train/optim.py MasterAdamW) against fp32 weights + autocast
    ("rlvr-bf16-weights", "--model.dtype=bfloat16", False),
    # padding-free updates: faster on CUDA? (on the CPU 0.58-0.67x the padded forward + backward)
    ("rlvr-packed", "--train.packed=true", False),
]
VARIANT_MODELS = ("1.7b", "tiny")
MICRO_PROMPTS = 4  # rlvr's algo.micro_batch_prompts default: the matched TRL row updates in these micro-batches


def plan(args, work: Path) -> list[Job]:
    """Jobs in the order they run: what matters most first, so a spent budget skips the least. The CUDA
    tests (about a minute), the models, the memory rows (8B, 32B), the headline pair (the first model and
    shape: rlvr and its variants, then TRL matched: bf16, per-device batch 4 x G, accumulation P / 4, one
    generation batch of P x G, as rlvr samples all rows at once and updates in micro-batches of 4 prompts),
    the largest-fits table and TRL with LoRA, the decode table, then TRL with every row in one batch (as
    shipped, bf16 + gradient checkpointing, where that runs out of memory), then the other models and shapes."""
    base = {"device": args.child_device, "work": str(work), "task_file": str(work / "sums.jsonl"),
            "lr": 2e-5, "seed": 0, "warmup": args.warmup, "steps": args.steps}
    built = dict.fromkeys([*args.models, *([args.decode_model] if "decode" in args.parts else []),
                           *trl_lora_model(args)])
    model_dir = {m: str(work / "models" / m) for m in built}
    tests = Job(name="CUDA tests", spec={**base, "kind": "tests", "files": CUDA_TESTS})
    jobs = [tests] if "tests" in args.parts else []
    sync_shape = "tiny-random" if args.smoke else "llama-3.1-8b"  # the 24 GB card's LoRA run: bf16 base, r=16
    jobs += [Job(name=f"vLLM sync {sync_shape} LoRA r=16", spec={**base, "kind": "sync", "shape": sync_shape,
                                                               "rank": 16})] if "sync" in args.parts else []
    jobs.append(Job(name="build", spec={**base, "kind": "build", "tokenizer": args.tokenizer and str(args.tokenizer),
                              "models": model_dir}))
    dspec = {**base, "model_dir": model_dir[args.decode_model], "batches": args.decode_batches,
             "new_tokens": args.decode_tokens}
    decode = [Job(name=f"engine {name}", spec={**dspec, "kind": "engine", "overrides": extra}, after="build")
              for name, extra, decodes in args.rlvr if decodes]
    decode.append(Job(name="HF generate", spec={**dspec, "kind": "generate"}, after="build"))
    decode = decode if "decode" in args.parts else []
    head, later = ([[Job(**fields) for fields in part] for part in memory_jobs(args, base, work)]
                   if "memory" in args.parts else ([], []))
    jobs += head  # the issue's headline: 8B on a 24 GB card, 32B on one 80 GB card
    for i, (model, shape) in enumerate((m, s) for m in args.models for s in args.shapes):
        tag = f"{model} {'x'.join(map(str, shape))}"
        spec = {**base, "model_dir": model_dir[model], "shape": shape, "model": model}
        if "rlvr" in args.parts:
            jobs += [Job(name=f"{name} {tag}", spec={**spec, "kind": "rlvr", "name": f"{name}-{i}", "overrides": extra},
                         after="build") for k, (name, extra, _) in enumerate(args.rlvr)
                     if k == 0 or model in VARIANT_MODELS]
        trl = "trl" in args.parts
        micro = min(MICRO_PROMPTS, shape[0])
        matched = {**spec, "kind": "trl", "precision": "bf16", "micro_prompts": micro}
        jobs += [Job(name=f"trl-matched {tag}", spec=matched, after="build")] if trl and shape[0] % micro == 0 else []
        jobs += decode if i == 0 else []
        jobs += [Job(name=f"trl-bf16 {tag}", spec={**spec, "kind": "trl", "precision": "bf16"}, after="build"),
                 Job(name=f"trl-shipped {tag}", spec={**spec, "kind": "trl", "precision": "defaults"},
                     after=f"trl-bf16 {tag}", needs="oom")] if trl else []
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
        elif (known := implied(job, done)) is not None:
            job.result = known
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
    shown = lambda j: j.spec["kind"] in ("rlvr", "trl") and j.result.get("status") not in ("skipped", "unneeded")
    for job in filter(shown, jobs):
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


def sync_table(jobs: list[Job]) -> None:
    """--parts sync: the trainer's side of a vLLM push per update, the LoRA adapters alone against the merged
    weights (bench/gpu_children.py sync_files)."""
    for job in (j for j in jobs if j.spec["kind"] == "sync" and j.result.get("status") == "ok"):
        r = job.result
        print(f"\n{job.name}: push files per update (written under rollout.vllm.weights_dir)")
        for kind in ("adapters", "merged"):
            print(f"  {kind:9} {r[kind]['bytes'] / 2**30:9.3f} GiB {r[kind]['s']:8.2f} s")
        print(f"  merged / adapters: bytes {r['merged']['bytes'] / r['adapters']['bytes']:.0f}x, "
              f"seconds {r['merged']['s'] / r['adapters']['s']:.0f}x")


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
    p.add_argument("--parts", help="comma-separated of tests (the CUDA tests, first), sync (vLLM pushes: 8B LoRA adapters vs merged), memory (the 8B and 32B "
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
                        "e.g. rlvr-bf16=--rollout.weights=bf16; given, these replace VARIANTS")
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
    args.rlvr = [(*spec.partition("=")[::2], True) for spec in args.rlvr] if args.rlvr else VARIANTS
    args.child_device = "cuda" if args.device.startswith("cuda") else args.device
    bad = [m for m in args.models if m not in ("1.7b", "135m", "tiny")] + [
        x for x in args.parts if x not in ("tests", "memory", "rlvr", "trl", "decode", "sync")]
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
        sync_table(jobs)
        skipped = [f"{j.name} ({j.result['why']})" for j in jobs
                   if j.result.get("status") == "skipped" and j.needs == "ok"]
        print("skipped: " + ("; ".join(skipped) if skipped else "nothing"))
        print(f"total {time.monotonic() - start:.0f} s")
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
