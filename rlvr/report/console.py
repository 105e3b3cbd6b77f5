"""What a person sees in the terminal: a progress bar, sample completions, the before/after table."""
from __future__ import annotations

import datetime
import sys
import time

from tqdm import tqdm

from rlvr.text import say, set_quiet, terminal_safe  # noqa: F401 - the console's API too


def progress(total: int, initial: int = 0, disable: bool = False, every_s: float = 10.0):
    """tqdm's bar on a terminal; elsewhere (a log file, a pipe, CI) LineProgress, whose lines never share
    one with what `say` writes (tqdm redraws its bar with carriage returns, so in a file a health finding
    or an evaluation line would follow the bar's text on its line)."""
    if disable or sys.stderr.isatty():
        return tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True, file=sys.stderr,
                    disable=disable)
    return LineProgress(total, initial, every_s)


class LineProgress:
    """A progress bar as whole lines, `train 3/20 [0:00:12 elapsed, 0:01:10 left] reward=0.500 ...`: at the
    first and last step and at most every `every_s` seconds between."""

    def __init__(self, total: int, initial: int = 0, every_s: float = 10.0):
        self.total, self.n, self.start_n, self.every_s = total, initial, initial, every_s
        self.postfix: dict = {}
        self.started = time.monotonic()
        self.last = -float("inf")

    def set_postfix(self, ordered_dict: dict | None = None, **kwargs) -> None:
        self.postfix = {**(ordered_dict or {}), **kwargs}

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if self.n - n == self.start_n or self.n >= self.total or now - self.last >= self.every_s:
            self.last = now
            done = self.n - self.start_n
            elapsed = now - self.started
            left = elapsed / done * (self.total - self.n) if done else 0.0
            clock = lambda t: str(datetime.timedelta(seconds=round(t)))
            fields = " ".join(f"{k}={v}" for k, v in self.postfix.items())
            say(f"train {self.n}/{self.total} [{clock(elapsed)} elapsed, {clock(left)} left] {fields}".rstrip())

    def close(self) -> None:
        pass


def verdict_text(name: str, verdict: dict, sep: str) -> str:
    """'correctness=1 (right answer)': a reward's score, and its reason when it gave one (a TRL function
    returns bare numbers: no empty brackets)."""
    reason = verdict.get("reason")
    score = "none" if verdict.get("score") is None else f"{verdict['score']:g}"
    return f"{name}{sep}{score}" + (f" ({reason})" if reason else "")


def format_samples(step: int, samples: list[dict], group_size: int, k: int = 2) -> str:
    """The first completion of the first k groups, with each reward's score and reason, terminal-safe
    whoever prints it: model turns, tool output and reasons quote text the model chose."""
    lines = [f"--- samples at step {step} ---"]
    for s in samples[::group_size][:k]:
        rewards = ", ".join(verdict_text(n, v, "=") for n, v in s["rewards"].items())
        if "episode" in s:  # multi-turn: every turn, then the final answer's scores
            from rlvr.envs.episode_metrics import episode_text

            lines.append(f"Q: {s['prompt']}\n{episode_text(s['episode']).rstrip()}\n   {rewards}")
        else:
            lines.append(f"Q: {s['prompt']}\nA: {s['completion'].strip()!r}\n   {rewards}")
    return terminal_safe("\n".join(lines))


ROWS = (("held-out accuracy", "heldout_accuracy"), ("held-out format-free", "heldout_lenient"),
        ("held-out format", "heldout_format"), ("OOD accuracy", "ood_accuracy"),
        ("OOD format-free", "ood_lenient"), ("OOD format", "ood_format"))


def before_after_table(summary: dict) -> str:
    """Strict accuracy, format-free accuracy and format rate before and after, then per split the
    flips and the strict change in words (rlvr.eval.flips)."""
    def cell(key: str) -> str:
        v = summary.get(key)
        return "   -  " if v is None else f"{100 * v:5.1f}%"

    out = [f"{'':22} {'before':>7} {'after':>7} {'change':>8}"]
    if summary.get("grader", "builtin") != "builtin":
        out.insert(0, f"accuracy = graded by your reward '{summary['grader']}'")
    if summary.get("sft"):
        out.insert(0, f"before = the SFT baseline ({summary['sft']['run']})")
    for label, key in ROWS:
        b, a = summary.get(f"{key}_before"), summary.get(f"{key}_after")
        if b is None and a is None:
            continue
        change = f"{100 * (a - b):+7.1f}" if a is not None and b is not None else "      -"
        out.append(f"{label:22} {cell(key + '_before'):>7} {cell(key + '_after'):>7} {change:>8}")
    for split, label in (("heldout", "held-out"), ("ood", "OOD")):
        f, d = summary.get("flips", {}).get(split), summary.get("decomposition", {}).get(split)
        if f:
            out.append(f"{label} problems (format-free): {f['fixed']} fixed, {f['broken']} broken, "
                       f"{f['kept']} kept, {f['never']} never right, of {f['n']}")
        if d:
            out.append(f"{label}: {d['text']}")
    return "\n".join(out)


def live_postfix(m: dict, eval_rows: list[dict]) -> dict[str, str]:
    """What the progress bar shows after each step (tqdm adds the ETA)."""
    post = {"reward": f"{m['reward/mean']:.3f}", "len": f"{m['completion/length_mean']:.1f}"}
    acc = [e["heldout_accuracy"] for e in eval_rows if e.get("heldout_accuracy") is not None]
    if acc:
        post["heldout"] = f"{100 * acc[-1]:.0f}%"
    if m.get("kl") is not None:
        post["kl"] = f"{m['kl']:.3f}"
    if m.get("time/overlap_frac") is not None:  # one step off: how old the batch was, how much of it was hidden
        post["lag"] = f"{m['rollout/policy_lag']:g}"
        post["overlap"] = f"{100 * m['time/overlap_frac']:.0f}%"
    return post


def overlap_line(o: dict) -> str:
    """summary.json's "overlap" (rlvr.train.overlap.overlap_summary) in words: the console's and report's."""
    share = f" ({100 * o['saved_s'] / o['collect_s']:.0f}%)" if o["collect_s"] > 0 else ""
    return (f"one step off: each batch sampled {o['policy_lag_mean']:.2f} updates behind the policy it trained "
            f"(rollout/policy_lag, mean of {o['steps']} steps); collection overlapped the update "
            f"{100 * o['overlap_frac_mean']:.0f}% on average (time/overlap_frac); {o['saved_s']:.1f} s of "
            f"{o['collect_s']:.1f} s of collection hidden behind updates{share}, {o['rollout_wait_s']:.1f} s waited")
