"""Two or more source trees of rlvr (or one tree under different environments) side by side on one machine:
each tree's own bench/vs_trl.py --only rlvr, run in turn, round after round, so a shared machine's load
falls on every variant alike.

    python bench/trees.py --variant old=/tmp/old --variant new=. [--variant 'spin=.;OMP_WAIT_POLICY=ACTIVE']
                          [--variant 'x=.;;--train.mixed_precision=bf16'] [--rounds 3] [--steps 4]
                          [--prompts-set sums] [--save FILE] [--report FILE]

A variant is NAME=TREE[;ENV=VALUE,...[;OVERRIDES]]: TREE a checkout (`git worktree add /tmp/old c45d173`),
ENV environment variables for its process, OVERRIDES `rlvr train` overrides passed as vs_trl's --rlvr.
Each run is the tree's `rlvr train` on vs_trl's work (SmolLM2-135M-Instruct, 2 prompts x 8 x 32 tokens
by default), its first step untimed. Per round and variant it prints the median step, rollout (the rollout
weights' refresh, sampling and scoring: time/rollout_s) and update (time/train_s: advantages, policy update)
in seconds; at the end, per variant, the medians over every timed step and each as a ratio of the first
variant's. Report the ratios and how they spread over rounds: the absolute times depend on the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PHASES = ("step_s", "rollout_s", "update_s")


def parse_variant(spec: str) -> tuple[str, Path, dict[str, str], str]:
    name, eq, rest = spec.partition("=")
    if not name or not eq:
        raise SystemExit(f"--variant {spec!r}: expected NAME=TREE[;ENV=VALUE,...[;OVERRIDES]]")
    tree, _, rest = rest.partition(";")
    env_spec, _, overrides = rest.partition(";")
    env = dict(kv.split("=", 1) for kv in env_spec.split(",") if kv)
    root = Path(tree).resolve()
    if not (root / "bench" / "vs_trl.py").is_file():
        raise SystemExit(f"--variant {name}: {root} has no bench/vs_trl.py")
    return name, root, env, overrides


def run_once(name: str, root: Path, env: dict, overrides: str, args, work: Path) -> dict:
    """One `rlvr train` of the tree through its vs_trl.py; returns its per-step phase times."""
    save = work / f"{name}.jsonl"
    save.unlink(missing_ok=True)
    cmd = [sys.executable, str(root / "bench" / "vs_trl.py"), "--only", "rlvr", "--save", str(save),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--prompts-set", args.prompts_set,
           "--rlvr", f"rlvr={overrides}"]
    # the tree's own code: vs_trl puts its root first on the child's path; nothing of this checkout leaks in
    child_env = {**os.environ, "PYTHONPATH": str(root), **env}
    done = subprocess.run(cmd, cwd=root, env=child_env, capture_output=True, text=True)
    if done.returncode != 0 or not save.is_file():
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-4000:])
        raise SystemExit(f"variant {name} failed (exit {done.returncode})")
    r = json.loads(save.read_text().splitlines()[-1])
    update = [s - g for s, g in zip(r["step_s"], r["rollout_s"])]
    return {"name": name, "step_s": r["step_s"], "rollout_s": r["rollout_s"], "update_s": update,
            "peak_rss_mib": r["peak_rss_mib"], "load": r["load"]}


def report(rows: list[dict]) -> None:
    med = statistics.median
    names = list(dict.fromkeys(r["name"] for r in rows))
    rounds = max(r["round"] for r in rows) + 1
    print(f"\nper round, median seconds (step / rollout / update), load average at start:")
    for k in range(rounds):
        cells = [f"{r['name']} {med(r['step_s']):.2f} / {med(r['rollout_s']):.2f} / {med(r['update_s']):.2f}"
                 f" (load {r['load'][0]:.1f})" for r in rows if r["round"] == k]
        print(f"  round {k}: " + "; ".join(cells))
    pooled = {n: {p: [x for r in rows if r["name"] == n for x in r[p]] for p in PHASES} for n in names}
    first = names[0]
    print(f"\nall timed steps pooled: median seconds, and as a ratio of {first}'s")
    print(f"{'':<14}" + "".join(f"{p:>22}" for p in PHASES))
    for n in names:
        cells = [f"{med(pooled[n][p]):.2f} ({med(pooled[n][p]) / med(pooled[first][p]):.3f}x)" for p in PHASES]
        print(f"{n:<14}" + "".join(f"{c:>22}" for c in cells))
    print("\nratio of the update's median to " + first + "'s, round by round:")
    for n in names[1:]:
        per = [med(a["update_s"]) / med(b["update_s"]) for a, b in
               zip([r for r in rows if r["name"] == n], [r for r in rows if r["name"] == first])]
        print(f"  {n}: " + ", ".join(f"{x:.3f}" for x in per))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", action="append", default=[], help="NAME=TREE[;ENV=VALUE,...[;OVERRIDES]]")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=4, help="timed steps per run")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--prompts-set", default="sums")
    p.add_argument("--save", type=Path, help="append each run's row to FILE (JSON lines)")
    p.add_argument("--report", type=Path, help="print the tables of the rows saved in FILE and exit")
    args = p.parse_args()
    if args.report:
        report([json.loads(line) for line in args.report.read_text().splitlines() if line.strip()])
        return
    variants = [parse_variant(v) for v in args.variant]
    if len(variants) < 2:
        raise SystemExit("give two variants or more (--variant NAME=TREE ...)")
    work = Path(tempfile.mkdtemp(prefix="trees-"))
    rows = []
    for k in range(args.rounds):
        order = variants if k % 2 == 0 else variants[::-1]  # neither variant always runs first
        for name, root, env, overrides in order:
            row = {**run_once(name, root, env, overrides, args, work), "round": k}
            rows.append(row)
            print(f"round {k} {name}: step {statistics.median(row['step_s']):.2f} s, update "
                  f"{statistics.median(row['update_s']):.2f} s", flush=True)
            if args.save:
                with open(args.save, "a") as f:
                    f.write(json.dumps(row) + "\n")
    report(sorted(rows, key=lambda r: (r["round"], [v[0] for v in variants].index(r["name"]))))


if __name__ == "__main__":
    main()
