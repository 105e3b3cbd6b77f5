"""`rlvr train` against TRL 1.16's GRPOTrainer: GRPO step time, generated tokens/s and peak memory on the same work.

    python bench/vs_trl.py [--prompts-set sums|long] [--steps 4] [--warmup 1] [--prompts 2] [--group-size 8]
                           [--max-new-tokens N] [--threads 0] [--rlvr NAME=OVERRIDES ...] [--trl fp32|bf16 ...]
                           [--trl-defaults] [--only NAME ...] [--save FILE] [--report FILE]

The work: SmolLM2-135M-Instruct, --prompts prompts x --group-size completions per step, temperature 1 (top-p 1,
no top-k), lr 2e-5 constant, beta 0 (no reference model), one update per batch, gradient norm clipped at 1,
reward bench/last_number.py (1 when the completion's last integer is the answer, else 0). Prompt sets, written
to a JSONL task file ({"prompt", "answer"} rows) in the work directory printed at the start:
  sums  256 "What is {a} + {b}? Reply with only the number." with two-digit a, b; 32 new tokens at most.
  long  256 of bench/length.py's prompts (its TEMPLATE, "explain step by step ...", around 4-digit, 3-operand
        +/- questions), on which the model writes long answers; 256 new tokens at most.
Both frameworks get a prompt's chat messages from rlvr.tasks.chat_messages (no few-shot turns, no system message:
rlvr's task.system_prompt is empty, so the chat template adds its default one) rendered by the same tokenizer's
chat template, so the prompt token ids are the same.

rlvr: each variant is its own `python -m rlvr train` process, as a user runs it (configs/demo.yaml underneath),
with the settings above as overrides, the task file, task.few_shot=0, no held-out or OOD split, no evaluation
or printed samples, plus the variant's OVERRIDES (default one variant `rlvr=`: the product's defaults). Times
come from its metrics.jsonl (time/step_s, time/rollout_s, tokens/generated); peak RSS is that process's
ru_maxrss, read by a wrapper process that runs nothing else; its output goes to NAME.log in the work directory.
Like a user's run it ends by writing a checkpoint and the final model (about 2.2 GB free disk needed under
$TMPDIR; deleted after the run; in the wall time, not in the step times).

TRL: a child process per variant running GRPOTrainer (loss_type grpo, scale_rewards group, use_cpu) on the
weights and tokenizer rlvr loads (rlvr.models.load_model). fp32: bf16=False; bf16: bf16=True (autocast); both
without gradient checkpointing; --trl-defaults adds TRL's as-shipped bf16 + gradient checkpointing. Step time
from a TrainerCallback (on_step_begin to on_step_end), rollout = time inside model.generate, tokens from
completions/mean_length; peak RSS is the child's VmHWM.

The first --warmup steps are not timed. --threads N > 0 gives rlvr --train.threads=N and TRL
torch.set_num_threads(N); 0 (default) keeps both at their defaults (torch's: one thread per core).
Target: each rlvr variant's median step time <= 0.25 x the fastest TRL variant's. On a shared machine run one
variant per command under `flock /tmp/bench.lock`, saving to one file, then print the table:

    flock /tmp/bench.lock python bench/vs_trl.py --only rlvr --save r.jsonl
    flock /tmp/bench.lock python bench/vs_trl.py --only fp32 --save r.jsonl
    python bench/vs_trl.py --report r.jsonl
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from same_work import rlvr_overrides, run_trl, write_prompts

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
MODEL = "smollm2-135m-instruct"
MAX_NEW = {"sums": 32, "long": 256}
STEP_TARGET = 0.25
SETTINGS = ("prompts_set", "prompts", "group_size", "max_new_tokens", "threads", "warmup", "steps", "seed")


def rlvr_child(args, name: str, extra: str, task_file: Path) -> dict:
    out, log = task_file.parent / f"run-{name}", task_file.parent / f"{name}.log"
    cmd = [sys.executable, "-m", "rlvr", "train",
           *rlvr_overrides(task_file, MODEL, args.prompts, args.group_size, args.max_new_tokens, args.lr,
                           args.warmup + args.steps, args.seed, out),
           *([f"--train.threads={args.threads}"] if args.threads > 0 else []), *shlex.split(extra)]
    path = filter(None, [str(BENCH), str(ROOT), os.environ.get("PYTHONPATH")])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    with open(log, "w") as f:
        f.write(f"$ {shlex.join(cmd)}\n")
        f.flush()
        done = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # the rlvr train process, the only child
    try:
        if done.returncode != 0:
            sys.stderr.write(log.read_text()[-4000:])
            raise SystemExit(f"rlvr train exited {done.returncode}; its log: {log}")
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][args.warmup:]
    finally:
        shutil.rmtree(out, ignore_errors=True)  # checkpoints and final weights, ~0.5 GiB a run; the log stays
    return {"step_s": [r["time/step_s"] for r in rows], "rollout_s": [r["time/rollout_s"] for r in rows],
            "tokens": [r["tokens/generated"] for r in rows], "peak_rss_mib": peak_kib / 1024,
            "overrides": extra, "log": str(log)}


def trl_child(args, precision: str, task_file: Path) -> dict:
    import torch

    from rlvr.models import load_model

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    model, tok = load_model(MODEL)
    r = run_trl(model, tok, task_file, prompts=args.prompts, group_size=args.group_size,
                max_new_tokens=args.max_new_tokens, lr=args.lr, steps=args.warmup + args.steps, seed=args.seed,
                use_cpu=True, precision=precision)
    w = args.warmup
    vm_hwm_kib = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                      if line.startswith("VmHWM:"))
    return {**{k: v[w:] for k, v in r.items()}, "peak_rss_mib": vm_hwm_kib / 1024, "precision": precision}


def variants(args) -> dict[str, tuple[str, str]]:
    """name -> (framework, spec): rlvr variants' extra overrides, TRL variants' precision."""
    out = {}
    for spec in args.rlvr or ["rlvr="]:
        name, eq, extra = spec.partition("=")
        if not name or not eq:
            raise SystemExit(f"--rlvr {spec!r}: expected NAME=OVERRIDES (OVERRIDES may be empty)")
        out[name] = ("rlvr", extra)
    for precision in dict.fromkeys((args.trl or ["fp32", "bf16"]) + (["defaults"] if args.trl_defaults else [])):
        if f"trl-{precision}" in out:
            raise SystemExit(f"--rlvr name trl-{precision} is taken by a TRL variant")
        out[f"trl-{precision}"] = ("trl", precision)
    return out


def selected(name: str, only: list[str] | None) -> bool:
    return not only or name in only or name.removeprefix("trl-") in only


def run_child(args, name: str, task_file: Path) -> dict:
    load, t = os.getloadavg()[0], time.perf_counter()
    argv = [*sys.argv[1:], "--child", name, "--task-file", str(task_file)]
    done = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the {name} child failed (exit {done.returncode})")
    framework = variants(args)[name][0]
    return {"name": name, "framework": framework, **{k: getattr(args, k) for k in SETTINGS},
            **json.loads(lines[-1].removeprefix("RESULT ")), "wall_s": time.perf_counter() - t,
            "load": [load, os.getloadavg()[0]]}


def table(results: list[dict]) -> None:
    med = statistics.median
    r0, rows = results[0], {}
    for r in results:
        step, tokens = med(r["step_s"]), statistics.fmean(r["tokens"])
        rows[r["name"]] = {
            "step time, median s": f"{step:.2f}",
            "  rollout (generate), median s": f"{med(r['rollout_s']):.2f}",
            "  rest of the step, median s": f"{med(s - g for s, g in zip(r['step_s'], r['rollout_s'])):.2f}",
            "generated tokens per step": f"{tokens:.0f}",
            "generated tokens / step second": f"{tokens / step:.1f}",
            "generated tokens / rollout second": f"{tokens / med(r['rollout_s']):.1f}",
            "peak RSS, MiB": f"{r['peak_rss_mib']:.0f}",
            "child wall time, s": f"{r['wall_s']:.0f}",
            "load average at start / end": "{:.1f} / {:.1f}".format(*r["load"]),
        }
    print(f"\n{r0['prompts_set']} prompts, {r0['prompts']} x G={r0['group_size']} per step, max "
          f"{r0['max_new_tokens']} new tokens, {r0['threads'] or 'default'} torch threads, {r0['warmup']} warm-up + "
          f"{r0['steps']} timed steps, seed {r0['seed']}; {os.cpu_count()} cores")
    width = max(12, *(len(n) + 2 for n in rows))
    print(f"{'':<36}" + "".join(f"{n:>{width}}" for n in rows))
    for key in next(iter(rows.values())):
        print(f"{key:<36}" + "".join(f"{rows[n][key]:>{width}}" for n in rows))
    for r in results:
        extra = f" (overrides: {r['overrides'] or 'none'})" if r["framework"] == "rlvr" else ""
        print(f"{r['name']} step times{extra}: " + ", ".join(f"{s:.2f}" for s in r["step_s"]))
    trl = [r for r in results if r["framework"] == "trl"]
    if not trl:
        print("no TRL variant in these results: no ratio")
        return
    fastest = min(trl, key=lambda r: med(r["step_s"]))
    for r in (r for r in results if r["framework"] == "rlvr"):
        ratio = med(r["step_s"]) / med(fastest["step_s"])
        print(f"{r['name']} / {fastest['name']} (fastest TRL) median step time: {ratio:.3f} (target <= "
              f"{STEP_TARGET}: {'met' if ratio <= STEP_TARGET else 'NOT met'}); peak RSS "
              f"{r['peak_rss_mib'] / fastest['peak_rss_mib']:.2f} x")


def report(results: list[dict]) -> None:
    """One table per settings; of several results for one variant under the same settings, the newest."""
    groups: dict[tuple, dict[str, dict]] = {}
    for r in results:
        groups.setdefault(tuple(r[k] for k in SETTINGS), {})[r["name"]] = r
    for group in groups.values():
        table(list(group.values()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--prompts-set", choices=list(MAX_NEW), default="sums")
    p.add_argument("--steps", type=int, default=4, help="timed steps per variant")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--prompts", type=int, default=2, help="prompts per step")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, help="default: 32 for sums, 256 for long")
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads for both; 0 keeps each one's default")
    p.add_argument("--rlvr", action="append", metavar="NAME=OVERRIDES",
                   help="an rlvr variant: extra `--key=value` overrides, space-separated (default: rlvr=)")
    p.add_argument("--trl", action="append", choices=["fp32", "bf16"], help="TRL variants (default: fp32 and bf16)")
    p.add_argument("--trl-defaults", action="store_true", help="also TRL as shipped: bf16 + gradient checkpointing")
    p.add_argument("--only", action="append", metavar="NAME", help="run only these variants (trl-fp32 or fp32, ...)")
    p.add_argument("--save", type=Path, help="append the results to FILE (JSON lines)")
    p.add_argument("--report", type=Path, help="print the tables of the results saved in FILE and exit")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--task-file", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    args.max_new_tokens = args.max_new_tokens or MAX_NEW[args.prompts_set]
    if args.report:
        report([json.loads(line) for line in args.report.read_text().splitlines() if line.strip()])
        return
    todo = variants(args)
    if args.child:
        framework, spec = todo[args.child]
        result = (rlvr_child(args, args.child, spec, args.task_file) if framework == "rlvr"
                  else trl_child(args, spec, args.task_file))
        print("RESULT " + json.dumps(result), flush=True)
        return
    unknown = [n for n in args.only or [] if not any(selected(v, [n]) for v in todo)]
    if unknown:
        raise SystemExit(f"--only {', '.join(unknown)}: no such variant (there are {', '.join(todo)})")
    work = Path(tempfile.mkdtemp(prefix="vs_trl-"))
    task_file = work / f"{args.prompts_set}.jsonl"
    write_prompts(task_file, args.prompts_set, args.seed)
    print(f"work directory (task file, rlvr logs): {work}; load average {os.getloadavg()[0]:.1f}", flush=True)
    results = []
    for name in (n for n in todo if selected(n, args.only)):
        results.append(run_child(args, name, task_file))
        print(f"  {name}: done in {results[-1]['wall_s']:.0f} s", flush=True)
        if args.save:
            with open(args.save, "a") as f:
                f.write(json.dumps(results[-1]) + "\n")
    report(results)


if __name__ == "__main__":
    main()
