"""The training loop. It owns the order of the phases; each phase is a plain function.

    tasks -> prompts;  rollout -> G completions each;  rewards -> scores;
    algo -> advantages and loss;  train -> optimizer step;  report -> metrics, samples, summary

`train` -> `_train`: start (setup or resume), evaluate before, then per step `train_step` (collect, then
`learn`: make_batch, policy_update; rlvr/train/step.py), `log_step`, `evaluate_mid` and `try_checkpoint`
when due; then `finish`. Every phase reads its own settings (`run.settings`, rlvr/train/settings.py), never
the config.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from rlvr.config import Config, to_dict
from rlvr.config.paths import anchored
from rlvr.device import determinism_applied
from rlvr.envs.episode_metrics import first_error
from rlvr.report.console import (before_after_table, format_samples, live_postfix, overlap_line, progress, say,
                                 set_quiet)
from rlvr.report.health import HealthMonitor, HealthStop, RewardNames
from rlvr.report.html import write_report
from rlvr.io import atomic_write_json
from rlvr.report.sinks import JsonlWriter, NullWriter
from rlvr.report.trackers import eval_metrics
from rlvr.rewards.call import StopWaiting
from rlvr.rewards.workers import owned_by_run
from rlvr.errors import RlvrError, WriteError, guard_os_exit
from rlvr.train.callbacks import check_callbacks, run_callbacks
from rlvr.train.checkpoint import (CHECKPOINTS, checkpoint_path,
                                   finished_run, latest_checkpoint, load_newest, restore_checkpoint, resume_records,
                                   save_final, set_aside, try_checkpoint)
from rlvr.train.distributed import Dist, allreduce_scalars, close_distributed, init_distributed, lost_peer
from rlvr.train.evaluation import eval_on_main, flip_summary, keep_before, kept_before, log_eval, read_records
from rlvr.train.metrics import sample_records
from rlvr.train.overlap import RolloutError, Rollouts, overlap_summary
from rlvr.train.assemble import claim_run_dir, setup
from rlvr.train.sft import baseline_of, prompt_differences
from rlvr.train.state import Collected, Progress, Run
from rlvr.train.step import collect, train_step
from rlvr.train.rundir import RunLock, check_data, check_restart, check_run_dir, fingerprint
from rlvr.train.settings import determinism_of
from rlvr.train.signals import StopOnSignal
from rlvr.train.update import EntropyState


@dataclass(kw_only=True)
class Outputs:
    """Where a run's records go: JSONL files on rank 0 (null writers elsewhere), trackers, health rules."""

    metrics: object
    samples: object
    evals: object
    health: object
    trackers: list = field(default_factory=list)
    monitor: HealthMonitor = field(default_factory=HealthMonitor)

    @staticmethod
    def open(run: Run, p: Progress) -> Outputs:
        main = run.dist.is_main
        sink = (lambda name: JsonlWriter(run.out / name)) if main else (lambda name: NullWriter())
        monitor = HealthMonitor(names=RewardNames.of(run.data.rewards, run.data.grader))  # the run's strict reward
        out = Outputs(metrics=sink("metrics.jsonl"), samples=sink("samples.jsonl"), evals=sink("evals.jsonl"),
                      health=sink("health.jsonl"), trackers=run.trackers, monitor=monitor)
        out.monitor.fired = p.fired
        return out

    def track_eval(self, row: dict) -> None:
        """An evaluation's row of evals.jsonl (accuracies and flips per split) to every tracker, at its step."""
        for t in self.trackers:
            t.log(row["step"], eval_metrics(row))

    def close(self) -> None:
        for w in (self.metrics, self.samples, self.evals, self.health, *self.trackers):
            w.close()


def start(cfg: Config, resume: bool, d: Dist, given: dict | None = None) -> tuple[Run, Progress, bool, dict | None]:
    """A fresh run, or the run directory's newest whole checkpoint restored; returns (run, progress,
    resumed, the batch collected for the next step when the checkpoint was written: rollout.overlap).
    A resume writes nothing into the run directory (config.yaml included) until the checkpoint, the data
    it trained on and the models have all loaded: one that fails leaves the run as it was."""
    newest = load_newest(cfg.train.out) if resume else None  # damaged ones skipped with a note
    if resume and d.enabled:  # every process reads train.out: nodes that see different directories would
        # train on different steps' prompts with different optimizer states, silently
        step = newest[1]["progress"]["step"] if newest else 0
        low, high = (allreduce_scalars({"step": step}, d, op)["step"] for op in ("min", "max"))
        if low != high:
            raise RlvrError(f"process {d.rank} of {d.world} resumes {cfg.train.out} from step {step}, but the "
                            f"processes do not agree (steps {low:g} to {high:g}): every node must see the same run "
                            "directory (train.out on a filesystem shared by all nodes)")
    kept = None
    if resume and newest is None:
        check_restart(cfg.train.out)
        say(f"{Path(cfg.train.out) / CHECKPOINTS}: no checkpoint yet; starting the run from step 0")
        kept = kept_before(Path(cfg.train.out), cfg.eval.before, to_dict(cfg), d)  # read now: setup clears the directory
    if newest is not None:
        check_data(newest[1]["progress"]["summary"].get("data", {}).get("files"), cfg.task, newest[0])
    run = setup(cfg, fresh=newest is None, d=d, given=given)
    p = Progress()
    before = keep_before(kept, run.data.splits, run.data.grader, run.out) if kept is not None else None
    if before is not None:  # the evaluation before training is not made again (_train)
        p.summary.update(before)
        p.eval_rows.append(kept[0])
        run.baseline = kept[1]
    sft = baseline_of(cfg.model.name)
    if sft is not None:  # started from an SFT model: its accuracy is the baseline
        p.summary["sft"] = sft
        differ = prompt_differences(sft["run"], cfg.task)
        if differ:  # the baseline's accuracy was measured on other prompts: not like with like
            say(f"warning: the SFT baseline ({sft['run']}) was evaluated with other prompts than this run: "
                + "; ".join(f"{k}={there!r} there, {here!r} here" for k, there, here in differ)
                + f"; give this run the same (--{differ[0][0]}={differ[0][1]!r}) to compare like with like")
    pending = None
    if newest is not None:
        last, state, damaged = newest
        p, pending = restore_checkpoint(run, state, last, to_dict(cfg)), state.get("pending")
        run.engine.sync_weights(run.models.policy)  # an engine with its own weights (vLLM) got them before the restore
        run.baseline = read_records(run.out / "eval_before.jsonl")
        if not run.baseline and d.is_main and any(row.get("step") == 0 for row in p.eval_rows):
            say(f"note: {run.out / 'eval_before.jsonl'} is missing or cut short: the final evaluation is compared "
                "with the accuracies before training, without per-problem flips")
        if d.is_main:  # everything has loaded: only now is the directory written
            set_aside(damaged)
            resume_records(run.out, p)
            run.trackers = claim_run_dir(cfg, fresh=False, log=run.settings.log)
        say(f"resuming {run.out} from step {p.step} ({last.name})")
    p.summary["grader"] = run.data.grader.name  # what the accuracies in the summary count as correct
    p.summary["data"] = {"files": fingerprint(cfg.task), "problems": {s: len(getattr(run.data.splits, s)) for s in
                                                                       ("train", "heldout", "ood")}}
    return run, p, newest is not None, pending


def log_step(run: Run, p: Progress, out: Outputs, step: int, m: dict, collected: Collected) -> None:
    """The step's metrics row to metrics.jsonl and trackers, its samples to samples.jsonl, then the health rules
    (a finding that ends the run raises HealthStop with the step's records written)."""
    out.metrics.write(m)
    for t in out.trackers:
        t.log(step, m)
    p.history.append(m)
    records = sample_records(step, collected, run.data.rewards)
    for rec in records:
        out.samples.write(rec)
    out.monitor.note(first_error(collected.episodes))  # a rule says the run's first environment error
    out.monitor.report(p.history, p.eval_rows, out.health)
    every = run.settings.log.samples_every
    if every and step % every == 0:
        say(format_samples(step, records, run.settings.rollout.group_size))


def evaluate_mid(run: Run, p: Progress, out: Outputs, step: int, clock: Callable[[], float]) -> None:
    """Held-out greedy evaluation during the run (train.eval_every), then the skill health rules."""
    t0 = time.perf_counter()
    result, _ = eval_on_main(run.models, run.data, run.settings.eval, run.dist, "mid", run.baseline, ("heldout",))
    p.eval_rows.append(log_eval(out.evals, step, result, "mid", clock() - p.eval_seconds))
    out.monitor.report(p.history, p.eval_rows, out.health)  # the skill rules read this evaluation
    out.track_eval(p.eval_rows[-1])
    p.eval_seconds += time.perf_counter() - t0
    run.models.policy.train()


def finish(run: Run, p: Progress, out: Outputs, interrupted: str | None, train_seconds: float) -> dict:
    """The final evaluation (unless interrupted), flips, health, final model, summary.json, report.html."""
    summary = p.summary
    summary["train_seconds"] = train_seconds - p.eval_seconds
    if interrupted:
        summary["interrupted"] = interrupted
        say(f"stopped at step {p.step} by {interrupted}; " + (f"continue with: {resume_command(run.out, run.dist)}"
            if run.settings.checkpoint.every else "train.save_every=0 writes no checkpoint, so it cannot be continued"))
    elif run.settings.eval.after:
        after, records = eval_on_main(run.models, run.data, run.settings.eval, run.dist, "after", run.baseline)
        summary.update(after)
        if run.baseline:
            summary.update(flip_summary(run.baseline, records))
        p.eval_rows.append(log_eval(out.evals, summary["steps"], after, "after", train_seconds - p.eval_seconds))
        out.track_eval(p.eval_rows[-1])
        if p.history:
            out.monitor.report(p.history, p.eval_rows, out.health, "at the end")
    summary["health"] = sorted(out.monitor.fired)  # a resumed run's included: the checkpoint keeps them
    overlap = overlap_summary(p.history)
    if overlap is not None:  # one step off: its lag and the time it saved, said once and kept
        summary["overlap"] = overlap
        say(overlap_line(overlap))
    out.close()
    if not interrupted:
        save_final(run)
    return summary


def train(cfg: Config, resume: bool = False, given: dict[str, Callable] | None = None,
          callbacks: list | None = None) -> dict:
    """Run the configured algorithm; write the run directory; return the summary. With `resume`,
    continue from the run directory's newest checkpoint. A fresh run refuses a run directory that holds
    anything unless train.overwrite (nothing in it is touched before the run has loaded). `given`: Python
    reward functions by their rewards.weights name (rlvr.fit); `callbacks`: objects with on_step_end
    (rlvr/train/callbacks.py). Under torchrun every process runs this."""
    wall_start = time.perf_counter()
    callbacks = check_callbacks(callbacks)
    cfg = anchored(cfg)  # config.yaml resumes from any working directory
    # one process writes a run directory: the lock is taken before anything loads (torchrun: by rank 0),
    # so a second start into a directory in use is told the PID that holds it
    with RunLock(cfg.train.out, enabled=os.environ.get("RANK", "0") == "0"):
        if not resume:
            check_run_dir(cfg.train.out, cfg.train.overwrite)
        # a finished run resumed as it is: its final evaluation and model made again would cost time and change
        # nothing (TRL's resume past max_steps trains nothing either)
        elif (done := finished_run(Path(cfg.train.out), cfg.train.steps, cfg.train.save_every, to_dict(cfg))) is not None:
            say(f"{cfg.train.out} finished at step {cfg.train.steps} (summary.json, final/): nothing to do and "
                f"nothing changed; extend it with --train.steps=N (more than {cfg.train.steps}), or evaluate its "
                f"model with rlvr eval --model {Path(cfg.train.out) / 'final'}")
            return done
        try:
            return _locked(cfg, resume, given, wall_start, callbacks)
        except WriteError as e:  # a full disk: what was written stays whole and the run resumes from it
            last, out = latest_checkpoint(cfg.train.out), Path(cfg.train.out)
            again = (f": free space, then start it again with `rlvr train --resume {out}` (from step 0; with the same "
                     "config it keeps the evaluation before training)" if (out / "config.yaml").is_file() else "")
            raise WriteError(f"{e}; " + (f"the checkpoints up to {last.name} are whole: free space, then continue "
                                         f"with `rlvr train --resume {out}`" if last else
                                         f"no checkpoint was written yet{again}")) from None


def _locked(cfg: Config, resume: bool, given: dict | None, wall_start: float, callbacks: list) -> dict:
    with determinism_applied(determinism_of(cfg)):  # before CUDA starts and the process group is joined
        return _joined(cfg, resume, given, wall_start, callbacks)


def _joined(cfg: Config, resume: bool, given: dict | None, wall_start: float, callbacks: list) -> dict:
    d = init_distributed(cfg.train.device, join_timeout_s=cfg.train.join_timeout_s)
    set_quiet(not d.is_main)  # one rank prints
    if d.enabled:  # what torchrun started, said once: a wrong --nproc_per_node shows here, not in the figures
        say(f"torchrun: {d.world} processes ({d.backend}, train.parallel={cfg.train.parallel}, {d.device.type}), "
            f"{cfg.rollout.prompts_per_step // d.world} of the {cfg.rollout.prompts_per_step} prompts per step "
            "on each; rank 0 prints and writes")
    try:
        # the rewards' worker processes are this run's; os._exit in loaded code is its caller's error
        with StopOnSignal(checkpoint=cfg.train.save_every > 0) as stop, owned_by_run(), guard_os_exit():
            summary = _train(cfg, resume, stop, d, given, callbacks)
    except StopWaiting as e:  # outside a step (the rewards tried before training, an evaluation's grader)
        last = latest_checkpoint(cfg.train.out)
        raise RlvrError(f"stopped by {e.signal_name} while a call of user code had not returned; "
                        + (f"the run is saved up to {last.name}: continue it with {resume_command(cfg.train.out, d)}"
                           if last else "no checkpoint was written yet")) from None
    except RuntimeError as e:
        if not lost_peer(e, d):
            raise
        # the cause is in the other process's log; this one only says so, in one line, and where the run stands
        last = latest_checkpoint(cfg.train.out)
        raise RlvrError(f"process {d.rank} of {d.world}: another process of this torchrun job stopped (its own "
                        f"log, on its node, says why), so this one stops too ({_first_sentence(e)}). "
                        + (f"The run is saved up to {last.name}: continue it with "
                           f"{resume_command(cfg.train.out, d)}" if last else
                           "No checkpoint was written yet" if d.is_main else "Rank 0 writes the checkpoints")
                        ) from None
    finally:
        close_distributed(d)
    summary["wall_seconds"] = time.perf_counter() - wall_start
    # what train.deterministic made of torch (rlvr.device.determinism): a reader of two runs sees whether
    # their differences could be the kernels'
    summary["deterministic"] = torch.are_deterministic_algorithms_enabled()
    if d.is_main:
        atomic_write_json(Path(cfg.train.out) / "summary.json", summary)
        say(before_after_table(summary))
        say(f"report: {write_report(cfg.train.out)}")
    return summary


def resume_command(out: Path | str, d: Dist) -> str:
    """What continues the run: under torchrun the same torchrun command (a plain `rlvr train --resume` would
    go on in one process, which works, checkpoints holding full tensors, but is not what was asked for)."""
    command = f"rlvr train --resume {out}"
    return f"torchrun (as before, {d.world} processes) -m {command}" if d.enabled else command


def _first_sentence(e: BaseException) -> str:
    """'Connection closed by peer [127.0.0.1]:43652' of gloo's '[.../pair.cc:553] Connection closed by peer
    [127.0.0.1]:43652. This is typically caused by ...'."""
    line = (str(e).splitlines() or [""])[0]
    return line.split("] ", 1)[-1].split(". ")[0][:200] if line.startswith("[") else line.split(". ")[0][:200]


def save_before_stopping(run: Run, p: Progress, train_seconds: float, rollouts: Rollouts) -> str:
    """Checkpoint the steps done before a rollout failure stops the run (unless the newest checkpoint is
    already of step p.step); says where the run stands. A single process only: under torchrun the other
    ranks may not have failed, and a checkpoint needs them all."""
    if not run.settings.checkpoint.every:
        return f"train.save_every=0 writes no checkpoint: the {p.step} steps done cannot be continued"
    if p.step == 0:
        return (f"No step had finished: once that is fixed, start the run again with "
                f"{resume_command(run.out, run.dist)} "
                "(from step 0; with the same config, the evaluation before training is kept)")
    if not run.dist.enabled and latest_checkpoint(run.out) != checkpoint_path(run.out, p.step):
        try_checkpoint(run, p, train_seconds, rollouts.state())  # a failed write is reported there
    last = latest_checkpoint(run.out)
    if last is None:
        return f"No checkpoint was written: the {p.step} steps done are lost"
    return (f"The run is saved up to {last.relative_to(run.out)} (of the {p.step} steps done): once that is "
            f"fixed, continue it with {resume_command(run.out, run.dist)}")


def _train(cfg: Config, resume: bool, stop: StopOnSignal, d: Dist, given: dict | None, callbacks: list) -> dict:
    run, p, resumed, pending = start(cfg, resume, d, given)
    s = run.settings  # from here on the loop reads its settings, not the config
    out = Outputs.open(run, p)
    # a signal (to any process) stops the run where it stands; a callback's stop ends it as finished
    stopping = lambda asked=None: allreduce_scalars({"s": float(stop.signal is not None), "c": float(asked is not None)},
                                                    d, "max")
    if s.eval.before and not resumed:
        if not p.eval_rows:  # else kept from a start that stopped before its first checkpoint (start)
            before, run.baseline = eval_on_main(run.models, run.data, s.eval, d, "before")
            p.summary.update(before)
            p.eval_rows.append(log_eval(out.evals, 0, before, "before", 0.0))
        out.track_eval(p.eval_rows[-1])
    started = time.perf_counter() - p.train_seconds  # the training clock, carried over a resume
    clock = lambda: time.perf_counter() - started
    bar = progress(s.steps, initial=p.step, disable=not d.is_main)
    run.models.policy.train()
    stopped = False
    with Rollouts(lambda step: collect(run, step), run.engine, run.models.policy,
                  one_step_off=s.rollout.one_step_off, updates=p.step, pending=pending) as rollouts:
        for step in range(p.step + 1, s.steps + 1):
            if stopped := bool(stopping()["s"]):  # arrived before this step began
                if s.checkpoint.every:
                    try_checkpoint(run, p, clock(), rollouts.state())
                break
            e = s.update.entropy
            entropy = EntropyState(e.coef if p.entropy_coef is None else p.entropy_coef, p.last_entropy)
            try:
                m, collected = train_step(run, step, rollouts, entropy)
            except RolloutError as e:  # the policy is as step p.step left it: keep what was done
                said = str(e) if str(e).endswith((".", "?")) else f"{e}."
                raise RolloutError(f"{said} {save_before_stopping(run, p, clock(), rollouts)}") from e
            except StopWaiting:  # a signal during a reward that hangs: this step is dropped, the steps done kept
                stopped = True
                rollouts.abandon()
                if s.checkpoint.every and p.step > 0 and latest_checkpoint(run.out) != checkpoint_path(run.out, p.step):
                    try_checkpoint(run, p, clock(), rollouts.state())
                break
            if e.adaptive:  # the controller's next state, carried and checkpointed in p
                entropy = entropy.after(e, m["entropy/watched_mean"])
                p.entropy_coef, p.last_entropy = entropy.coef, entropy.last_entropy
            asked = run_callbacks(callbacks, step, m) if callbacks else None  # their metrics join the row
            try:
                log_step(run, p, out, step, m, collected)
            except HealthStop as e:  # this step's records are written; the steps before it are kept
                raise HealthStop(f"{e} {save_before_stopping(run, p, clock(), rollouts)}") from None
            if s.eval.every and step % s.eval.every == 0 and step != s.steps:
                evaluate_mid(run, p, out, step, clock)
            bar.set_postfix(live_postfix(m, p.eval_rows))
            bar.update(1)
            p.step = p.summary["steps"] = step
            flags = stopping(asked)
            stopped, ended = bool(flags["s"]), bool(flags["c"])
            every = s.checkpoint.every  # 0: no checkpoint at all (TRL's save_strategy="no"), not even the last
            if every and (stopped or ended or step == s.steps or step % every == 0):
                try_checkpoint(run, p, clock(), rollouts.state())
            if ended and not stopped:
                p.summary["stopped_by"] = asked or "a callback in another process"
                say(f"step {step} of {s.steps}: {p.summary['stopped_by']}.on_step_end set "
                    "control.should_training_stop; the run ends here")
            if stopped or ended:
                break
    bar.close()
    interrupted = (stop.signal or "a signal to another process") if stopped else None
    return finish(run, p, out, interrupted, clock())
