"""`rlvr train CONFIG --seeds 0,1,2`: one config over several seeds (train.seed), into one folder, a group:

    OUT/group.json    what the group is: the config, the overrides, the seeds, each seed's folder
    OUT/seed-0/ ...   each seed's run directory, as `rlvr train CONFIG --train.seed=0 --train.out=OUT/seed-0`

Each seed runs in a child process of its own, the command line a user would type for that seed alone: nothing a
run leaves in a process (the global generators, torch's thread settings, loaded reward modules and their state,
caches, the memory of the last model) reaches the next seed, and one seed's crash leaves the others' records
whole. Starting a process costs seconds against a run's minutes.

A finished seed keeps its records (what `rlvr compare` reads: eval_before/after.jsonl, evals.jsonl, metrics,
samples, summary.json, report.html) and, unless --keep-weights, not its weights (checkpoints/, final/): a
SmolLM2 seed's are 0.5 GB of final/ and 1.7 GB per checkpoint, and the same command with --train.seed=N makes
them again (bit for bit on the CPU at the same thread count). A seed stopped by a signal keeps its checkpoint,
and `rlvr train --resume OUT` continues the group: the seeds that finished are skipped, a stopped one resumed,
the rest started.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.io import atomic_write_json
from rlvr.report.console import say
from rlvr.report.group import GROUP, KIND, seed_dir


def parse_seeds(text: str) -> list[int]:
    """'0,1,2' -> [0, 1, 2]; 'A-B' (inclusive) -> A..B; refuses what is not a list of distinct whole numbers >= 0."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        lo, dash, hi = part.partition("-")
        try:
            span = range(int(lo), int(hi) + 1) if dash else [int(part)]
        except ValueError:
            raise RlvrError(f"--seeds {text}: '{part}' is not a seed (whole numbers >= 0, e.g. --seeds 0,1,2 "
                            "or --seeds 0-4)") from None
        if dash and not span:
            raise RlvrError(f"--seeds {text}: '{part}' is an empty range (write the lower seed first)")
        seeds += span
    if any(s < 0 for s in seeds):
        raise RlvrError(f"--seeds {text}: seeds are whole numbers >= 0")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise RlvrError(f"--seeds {text}: seed {twice[0]} is given twice (a seed's run is the same run again)")
    return seeds


def finished(run: Path) -> bool:
    """The seed's run ended at its steps, uninterrupted: its summary.json is written last, after the final
    evaluation."""
    try:
        summary = json.loads((run / "summary.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(summary, dict) and not summary.get("interrupted")


def drop_weights(run: Path) -> None:
    """A finished seed's checkpoints/ and final/ go (the group keeps records: see the module's docstring)."""
    for name in ("checkpoints", "final"):
        shutil.rmtree(run / name, ignore_errors=True)


def seed_command(config: str | None, overrides: list[str], seed: int, out: Path) -> list[str]:
    """The `rlvr train` command of one seed: the group's config and overrides, then this seed and its folder."""
    return [*([config] if config else []), *overrides, f"--train.seed={seed}", f"--train.out={seed_dir(out, seed)}"]


def run_seed(command: list[str], cwd: str) -> tuple[int, bool]:
    """Run one seed's process to its end; (its exit status, whether the group was asked to stop). Ctrl-C
    reaches the seed's process from the terminal itself (one process group), which then stops after its step
    and writes its checkpoint: this process only waits for it, rather than being interrupted and killing it
    mid-write. A SIGTERM sent to this process alone is passed on."""
    proc = subprocess.Popen(command, cwd=cwd)
    asked: list[int] = []

    def stop(signum, frame):
        asked.append(signum)
        if signum == signal.SIGTERM:
            proc.send_signal(signum)

    main = threading.current_thread() is threading.main_thread()
    old = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        return proc.wait(), bool(asked)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def run_group(config: str | None, overrides: list[str], seeds: list[int], out: Path, *, keep_weights: bool,
              cwd: str | None = None, resume: bool = False) -> int:
    """Run each seed in turn (module docstring), in `cwd` (the group's: the relative paths of its config and
    overrides mean what they meant when it started); group.json is written first, so a group stopped part
    way is still one. Returns 0, or the exit status of the seed that failed (the group stops there)."""
    out, cwd = Path(out).resolve(), cwd or os.getcwd()
    if not resume:
        atomic_write_json(out / GROUP, {"kind": KIND, "config": config, "overrides": overrides, "cwd": cwd,
                                        "seeds": seeds, "runs": {str(s): seed_dir(out, s).name for s in seeds},
                                        "keep_weights": keep_weights})
    for i, seed in enumerate(seeds, 1):
        run = seed_dir(out, seed)
        if resume and finished(run):
            say(f"== seed {seed} ({i} of {len(seeds)}): {run} finished already")
            continue
        if resume and any((run / "checkpoints").glob("step_*.pt")):
            argv = ["--resume", str(run)]  # stopped part way: from its newest checkpoint
        else:  # not started, or stopped with nothing to continue from (train.save_every=0): from step 0
            argv = seed_command(config, overrides, seed, out) + (["--train.overwrite=true"] if resume else [])
        say(f"== seed {seed} ({i} of {len(seeds)}): rlvr train {shlex.join(argv)}")
        code, asked = run_seed([sys.executable, "-m", "rlvr", "train", *argv], cwd)
        if code != 0 or asked or not finished(run):
            left = [s for s in seeds[i - 1:] if not finished(seed_dir(out, s))]
            say(f"seed {seed} " + (f"failed (exit {code}; its messages are above)" if code else "was stopped")
                + f"; seed(s) {', '.join(map(str, left))} of {out} are not finished: continue the group with "
                f"`rlvr train --resume {out}`")
            return code if code > 0 else 130  # stopped by a signal (the seed's own exit, or its death by one)
        if not keep_weights:
            drop_weights(run)
    from rlvr.report.compare import accuracy, accuracy_lines, load

    group = load(out)
    for line in accuracy_lines(accuracy([group]), group.name):  # its accuracy after training, with the seed spread
        say(line)
    say(f"group {out}: {len(seeds)} seeds; compare it with `rlvr compare {out} OTHER` (another group or run)")
    return 0
