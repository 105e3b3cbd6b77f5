"""Decode speed and GRPO step time along the length axis: 128, 256 and 512 generated tokens.

    python bench/length.py [--sections bandwidth decode train] [--lengths 128 256 512] [--engines builtin hf llama]
                           [--weights fp32 int8] [--mode forced|real] [--prompts 2] [--group-size 8] [--repeats 1]
                           [--steps 2] [--warmup 1] [--train-overrides '--rollout.weights=int8'] [--threads 0]
                           [--save FILE] [--report FILE] [--quick]

Earlier benchmarks never exercised length: on the demo's prompts SmolLM2-135M-Instruct stops after about
25 tokens, so budgets of 32, 64 and 128 measured the same thing. Every figure here counts tokens actually
generated, never budgets. Prompts: the arithmetic task's 4-digit, 3-operand +/- questions behind TEMPLATE
("explain step by step, in great detail, every digit, carry and borrow; check your work twice"); at
temperature 1 the model writes long answers to them (16 rows at a 512 budget: mean 469 tokens, 11 cut).
A batch is --prompts x --group-size rows (2 x 8 = 16, a GRPO step's). Temperature 1 throughout.

bandwidth  Memory read bandwidth: the best of several sums over a 1 GiB float32 tensor (far beyond cache)
           at --threads threads; compute: a batch-B GEMM [B, 576] x [576, 1536] on a cache-resident fp32 /
           bf16 weight. Decode ceilings at batch B, assuming each step reads every weight once (bytes per
           step = parameters x bytes per weight, the tied embedding counted once, as the output layer):
           bandwidth tok/s = B x bandwidth / bytes per step; compute tok/s = GEMM FLOP/s / (2 x
           parameters); ceiling = the lower. KV-cache reads and attention FLOPs are extra (KV bytes per
           step are shown: B x (prompt + L/2) x layers x 2 x kv heads x head dim x 4 in fp32). Rows fp32,
           bf16, int8 (1 byte per weight, scales ignored) and the GGUF's Q4_1 tensors (their exact bytes);
           compute is not measured for int8 / Q4_1 (own kernels). "matmuls only": one step's products of
           B rows with every Linear weight of the model in torch and nothing else (no attention, sampling
           or Python), what a perfect torch decoder with these weights could reach.
decode     Per length L, decode tokens/s at batch B of the built-in engine (rlvr.rollout.builtin.generate) with
           each --weights format (fp32: the policy; bf16 / int8: its rollout copy, rlvr.rollout.quant),
           HF generate (rlvr.rollout.hf_engine.hf_generate), and llama.cpp (llama-cpp-python) on the same GGUF
           file with the same prompt token ids: Q4_1 weights (5.7 bits per weight with the block scales,
           1/5.6 of fp32's bytes), f16 KV cache, flash attention on. llama.cpp is batched for real: one
           llama_decode per step over all B sequences (llama_batch, n_seq_max = B, one KV stream per
           sequence), each prompt prefilled once and its KV copied to its group (as the built-in engine
           shares it), llama.cpp's own dist sampler. --mode forced (default) passes a stop id no token can
           be (torch engines) or ignores end of turn (llama.cpp), so every row generates exactly L tokens;
           --mode real stops at end of turn. decode tok/s = (generated - B) / (t(L) - t(1)) for the torch
           engines, t(n) being one generate call at max_new_tokens n (prefill and first token cancel);
           llama.cpp's decode loop is timed directly. e2e tok/s = generated / t(L), prefill included. One
           short warm-up call per engine.
train      rlvr's own loop (rlvr.train.grpo.train via build_config, as bench/scaling.py) at
           rollout.max_new_tokens L on the same prompts, correctness reward, no evaluation, plus
           --train-overrides (e.g. '--rollout.weights=int8'); medians of
           metrics.jsonl's time/step_s, time/rollout_s and time/train_s over the steps after --warmup,
           tokens/generated a mean. rollout = rollout_s / step_s; ms/token = seconds per generated token
           (target: flat or falling from 128 to 512); 1st = step 1 only, comparable across runs whatever
           their --warmup. rlvr has no knob that ignores stop tokens in training, so these lengths are the
           real ones (trunc = rows cut at L).

On a shared machine run each piece under `flock /tmp/bench.lock`, one section (or engine and length) per
command so that each holds the lock for minutes, saving to one file, then print everything:

    flock /tmp/bench.lock python bench/length.py --sections decode --engines builtin --lengths 256 --save r.jsonl
    python bench/length.py --report r.jsonl

--threads defaults to 0: torch's default (one per core, what `rlvr train` uses) and llama.cpp's. On a 2-core
machine shared with another busy process, two OpenMP threads that wait on each other ran every op many
times slower than one; there pass --threads 1 (and train.threads=1 to rlvr train). --quick:
tiny lengths and batch, one step (< 2 min), a smoke check whose figures mean nothing. llama.cpp needs
llama-cpp-python (the `bench` extra; it builds from source with cmake); without it its rows are skipped.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch

from ceilings import (gemm_flops, matmul_step, model_shape, print_ceilings,  # bench/ siblings
                      read_copy_bandwidth)
from common import task_prompts
from llamacpp_batch import LlamaCpp, llama_unavailable

MODEL = "smollm2-135m-instruct"
TEMPLATE = ("Explain step by step, in great detail, how to work this out. Describe every digit, every carry "
            "and every borrow, and check your work twice. {prompt}")
TASK = ["--task.name=arithmetic", "--task.params.digits=4", "--task.params.operands=3", "--task.params.operators=+-",
        "--task.few_shot=0", "--task.heldout_size=4", "--task.ood_size=0", "--task.train_size=64"]
ENGINES = ("builtin", "hf", "llama")


def task_config(extra: list[str] = ()):
    from rlvr.config import build_config

    cfg = build_config(None, [f"--model.name={MODEL}", *TASK, *extra])
    cfg.task.prompt_template = TEMPLATE  # set here: its commas and braces need no override quoting
    return cfg


# ---------------------------------------------------------------- bandwidth and ceilings

def measure_bandwidth(args, model) -> dict:
    gib = 1 << (28 if args.quick else 30)
    reps = 2 if args.quick else 5
    read, copy = read_copy_bandwidth(gib, reps)
    rows = args.prompts * args.group_size
    return {"kind": "bandwidth", "threads": torch.get_num_threads(), "array_bytes": gib, "read_Bps": read,
            "copy_Bps": copy, "rows": rows, "gemm_fp32": gemm_flops(torch.float32, rows, reps),
            "gemm_bf16": gemm_flops(torch.bfloat16, rows, reps),
            "step_fp32": matmul_step(model, torch.float32, rows, reps),
            "step_bf16": matmul_step(model, torch.bfloat16, rows, reps), **model_shape()}


# ---------------------------------------------------------------- decode: three engines

def torch_run(engine_name: str, model, prompts, group_size: int, n: int, stop_ids, pad_id: int, seed: int):
    """One generate call: (seconds, generated tokens)."""
    from rlvr.rollout import builtin, hf_engine

    fn = {"builtin": builtin.generate, "hf": hf_engine.hf_generate}[engine_name]
    t = time.perf_counter()
    r = fn(model, prompts, group_size=group_size, max_new_tokens=n, temperature=1.0, stop_ids=stop_ids,
           pad_id=pad_id, generator=torch.Generator().manual_seed(seed))
    return time.perf_counter() - t, int(r.completion_mask.sum())


def decode_torch(args, name: str, model, tok, prompts) -> list[dict]:
    from rlvr.models import stop_token_ids
    from rlvr.rollout.quant import rollout_copy

    # forced: a stop id past the vocabulary, which no sampled token can be
    stop = [model.config.vocab_size] if args.mode == "forced" else stop_token_ids(model, tok)
    out = []
    for fmt in (args.weights if name == "builtin" else ["fp32"]):  # rollout.weights: the builtin engine's copies
        m = model if fmt == "fp32" else rollout_copy(model, fmt)
        run = lambda n, seed: torch_run(name, m, prompts, args.group_size, n, stop, tok.pad_token_id, seed)
        run(8, args.seed)  # warm-up
        for n in args.lengths:
            for rep in range(args.repeats):
                t_first, k_first = run(1, args.seed + rep)
                t_full, k_full = run(n, args.seed + rep)
                out.append({"engine": name, "weights": fmt, "length": n, "tokens": k_full,
                            "decode_tokens": k_full - k_first, "decode_s": t_full - t_first, "total_s": t_full})
                print(f"  {name:<8} {fmt:<5} L={n:<4} {k_full} tokens in {t_full:.1f} s", flush=True)
    return out


def decode_llama(args, model, tok, prompts) -> list[dict]:
    from rlvr.models import stop_token_ids

    n_rows = len(prompts) * args.group_size
    stop = None if args.mode == "forced" else stop_token_ids(model, tok)
    llm = LlamaCpp(n_rows, max(map(len, prompts)), max(args.lengths), args.threads, args.seed)
    try:
        llm.generate(prompts, args.group_size, 8, stop)  # warm-up
        out = []
        for n in args.lengths:
            for _ in range(args.repeats):
                r = llm.generate(prompts, args.group_size, n, stop)
                out.append({"engine": "llama", "weights": "Q4_1", "length": n, "tokens": r["tokens"],
                            "decode_tokens": r["tokens"] - n_rows, "decode_s": r["decode_s"],
                            "total_s": r["prefill_s"] + r["decode_s"]})
                print(f"  llama    L={n:<4} {r['tokens']} tokens in {out[-1]['total_s']:.1f} s", flush=True)
    finally:
        llm.close()
    return out


def measure_decode(args, model, tok) -> list[dict]:
    prompts = task_prompts(tok, task_config(), args.prompts)
    records = []
    for name in args.engines:
        if name == "llama" and (why := llama_unavailable()):
            print(f"  llama.cpp skipped: {why}")
            records.append({"engine": "llama", "skipped": why})
            continue
        got = decode_llama(args, model, tok, prompts) if name == "llama" else decode_torch(args, name, model, tok,
                                                                                             prompts)
        records += got
    meta = {"kind": "decode", "mode": args.mode, "rows": args.prompts * args.group_size, "prompts": args.prompts,
            "threads": args.threads, "prompt_len": statistics.fmean(map(len, prompts)), "load": os.getloadavg()[0]}
    return [{**meta, **r} for r in records]


FORMATS = ("fp32", "bf16", "int8", "Q4_1")


def print_decode(records: list[dict]) -> None:
    skipped = {r["skipped"] for r in records if "skipped" in r}
    records = [r for r in records if "skipped" not in r]
    for mode in dict.fromkeys(r["mode"] for r in records):
        sums: dict[tuple, dict] = {}
        for r in (r for r in records if r["mode"] == mode):
            key = (r["length"], ENGINES.index(r["engine"]), FORMATS.index(r.get("weights", "fp32")), r["rows"])
            s = sums.setdefault(key, {**r, "n": 0, "tokens": 0,
                                "decode_tokens": 0, "decode_s": 0.0, "total_s": 0.0})
            for k in ("tokens", "decode_tokens", "decode_s", "total_s"):
                s[k] += r[k]
            s["n"] += 1
        first = next(iter(sums.values()))
        print(f"\ndecode, {mode} lengths, batch {first['rows']} ({first['prompts']} prompts x "
              f"{first['rows'] // first['prompts']}), {first['threads'] or 'default'} thread(s), temperature 1, "
              f"prompt {first['prompt_len']:.0f} tokens:")
        print(f"  {'L':>4}  {'engine':<8}{'weights':<8}{'runs':>5}{'tok/row':>8}{'decode tok/s':>14}"
              f"{'e2e tok/s':>11}{'x builtin':>11}")
        base = {}
        for (n, *_), s in sorted(sums.items()):
            rate = s["decode_tokens"] / s["decode_s"]
            base.setdefault(n, rate if s["engine"] == "builtin" and s.get("weights", "fp32") == "fp32" else None)
            ratio = f"{rate / base[n]:.2f}" if base[n] else "-"
            per_row = s["tokens"] / s["n"] / s["rows"]
            print(f"  {n:>4}  {s['engine']:<8}{s.get('weights', 'fp32'):<8}{s['n']:>5}{per_row:>8.0f}"
                  f"{rate:>14.1f}{s['tokens'] / s['total_s']:>11.1f}{ratio:>11}")
    for why in skipped:
        print(f"  llama.cpp: skipped ({why})")


# ---------------------------------------------------------------- train: rollout share of a GRPO step

def measure_train(args) -> list[dict]:
    from rlvr.train.grpo import train

    records = []
    for n in args.lengths:
        with tempfile.TemporaryDirectory() as out:
            cfg = task_config([
                f"--rollout.prompts_per_step={args.prompts}", f"--rollout.group_size={args.group_size}",
                f"--rollout.max_new_tokens={n}", "--rollout.temperature=1.0", "--rewards.weights={correctness: 1.0}",
                "--eval.before=false", "--eval.after=false", f"--train.steps={args.warmup + args.steps}",
                "--train.samples_every=0", f"--train.seed={args.seed}", f"--train.threads={args.threads}",
                f"--train.out={out}", *args.train_overrides.split()])
            quiet = io.StringIO()  # the run's own console summary and progress bar
            with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                train(cfg)
            rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
        for r in rows[args.warmup:]:
            records.append({"kind": "train", "overrides": args.train_overrides, "length": n, "step": r["step"],
                            "rows": args.prompts * args.group_size, "threads": args.threads,
                            "load": os.getloadavg()[0], "step_s": r["time/step_s"], "rollout_s": r["time/rollout_s"],
                            "train_s": r["time/train_s"], "tokens": r["tokens/generated"],
                            "truncated": r["completion/truncated_frac"]})
        print(f"  train    L={n:<4} {len(rows) - args.warmup} timed step(s)", flush=True)
    return records


def print_train(all_records: list[dict]) -> None:
    for overrides in dict.fromkeys(r.get("overrides", "") for r in all_records):
        print_train_runs([r for r in all_records if r.get("overrides", "") == overrides], overrides)


def print_train_runs(records: list[dict], overrides: str) -> None:
    by_len: dict[int, list[dict]] = {}
    for r in records:
        by_len.setdefault(r["length"], []).append(r)
    r0 = records[0]
    print(f"\nGRPO step (rlvr.train.grpo.train), {r0['rows']} completions per step, real lengths (no knob forces "
          f"them in training), {r0['threads'] or 'default'} thread(s), overrides: {overrides or 'none'}; medians over "
          "n timed steps; ms/token = "
          "seconds per generated token (step, rollout, update); 1st = step 1 of a run only:")
    print(f"  {'max':>4}{'n':>3}{'step s':>8}{'rollout s':>10}{'update s':>9}{'rollout':>8}{'tok/row':>8}{'trunc':>6}"
          f"{'ms/token':>9}{'rollout':>8}{'update':>7}{'x first':>8}{'1st':>6}")
    first = None
    for n in sorted(by_len):
        rs = by_len[n]
        med = lambda k: statistics.median(r[k] for r in rs)
        tokens = statistics.fmean(r["tokens"] for r in rs)
        per = lambda k: 1000 * med(k) / tokens
        first = first or per("step_s")
        ones = [1000 * r["step_s"] / r["tokens"] for r in rs if r.get("step") == 1]
        print(f"  {n:>4}{len(rs):>3}{med('step_s'):>8.1f}{med('rollout_s'):>10.1f}{med('train_s'):>9.1f}"
              f"{100 * med('rollout_s') / med('step_s'):>7.0f}%{tokens / r0['rows']:>8.0f}"
              f"{100 * statistics.fmean(r['truncated'] for r in rs):>5.0f}%{per('step_s'):>9.1f}"
              f"{per('rollout_s'):>8.1f}{per('train_s'):>7.1f}{per('step_s') / first:>8.2f}"
              f"{f'{statistics.fmean(ones):.1f}' if ones else '-':>6}")


# ---------------------------------------------------------------- main

def report(records: list[dict], lengths: list[int]) -> None:
    bws = [r for r in records if r["kind"] == "bandwidth"]
    if bws:
        bw = max(bws, key=lambda r: r["read_Bps"])  # best of every measurement saved
        prompt_len = next((r["prompt_len"] for r in records if r["kind"] == "decode" and "prompt_len" in r),
                          bw.get("prompt_len", 0))
        print_ceilings(bw, sorted({r["length"] for r in records if "length" in r} or set(lengths)), round(prompt_len))
    if decode := [r for r in records if r["kind"] == "decode"]:
        print_decode(decode)
    if trains := [r for r in records if r["kind"] == "train"]:
        print_train(trains)
    loads = [r["load"] for r in records if "load" in r]
    if loads:
        print(f"\nload average during the runs: {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="Sections, figures and assumptions: the module docstring (bench/length.py).")
    p.add_argument("--sections", nargs="+", default=["bandwidth", "decode", "train"],
                   choices=["bandwidth", "decode", "train"])
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512], help="tokens per row (budgets)")
    p.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    p.add_argument("--weights", nargs="+", default=["fp32", "int8"], choices=FORMATS[:3],
                   help="decode: the builtin engine's rollout.weights formats")
    p.add_argument("--train-overrides", default="", help="train: extra rlvr overrides, e.g. '--rollout.weights=int8'")
    p.add_argument("--mode", default="forced", choices=["forced", "real"],
                   help="decode: forced generates exactly L tokens per row; real stops at end of turn")
    p.add_argument("--prompts", type=int, default=2, help="distinct prompts per batch")
    p.add_argument("--group-size", type=int, default=8, help="rows per prompt (batch = prompts x group size)")
    p.add_argument("--repeats", type=int, default=1, help="decode: timed calls per engine and length")
    p.add_argument("--steps", type=int, default=2, help="train: timed steps per length")
    p.add_argument("--warmup", type=int, default=1, help="train: untimed steps first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0,
                   help="torch and llama.cpp threads; 0 (default) keeps torch's (as rlvr train) and llama.cpp's")
    p.add_argument("--save", type=Path, help="append this run's records to FILE (JSON lines)")
    p.add_argument("--report", type=Path, help="print the tables of every record in FILE and exit")
    p.add_argument("--quick", action="store_true", help="tiny smoke run (< 2 min); figures mean nothing")
    args = p.parse_args()
    if args.quick:
        args.lengths, args.prompts, args.group_size, args.steps, args.warmup = [8, 16], 1, 2, 1, 0
    return args


def main() -> None:
    args = parse_args()
    if args.report:
        report([json.loads(line) for line in args.report.read_text().splitlines() if line.strip()], args.lengths)
        return
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores; {MODEL}; batch {args.prompts} x {args.group_size}; lengths {args.lengths}",
          flush=True)
    records = []
    if "decode" in args.sections or "bandwidth" in args.sections:
        from rlvr.models import load_model

        model, tok = load_model(MODEL)
        model.eval()
    if "bandwidth" in args.sections:
        prompt_len = statistics.fmean(map(len, task_prompts(tok, task_config(), args.prompts)))
        records.append({**measure_bandwidth(args, model), "prompt_len": prompt_len})
    if "decode" in args.sections:
        records += measure_decode(args, model, tok)
    if "train" in args.sections:
        records += measure_train(args)
    if args.save:
        with open(args.save, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
    report(records, args.lengths)


if __name__ == "__main__":
    main()
