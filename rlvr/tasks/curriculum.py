"""Which train prompts each step sees: uniform epochs, a step schedule over difficulty levels, or an
adaptive curriculum that keeps each sampled level's pass rate inside a learning-signal band.

One sampler class serves every mode; the training loop calls:

    idx = sampler.next(k, step)                 # k train indices for this step
    sampler.observe(idx, group_pass, step)      # mean strict correctness of each index's group
    sampler.metrics()                           # {"curriculum/level": ..., "curriculum/pass_rate/<label>": ...}
    sampler.state_dict() / load_state_dict(s)   # plain lists and numbers: part of a checkpoint

Levels are difficulty labels, easiest first: curriculum.levels, or the train problems' labels in
natural order (d2 before d10). Within a level, prompts come in seeded epochs (each once before any
repeats), each level with its own generator, so the order inside a level does not depend on the mix.
Groups whose rewards are all equal carry no GRPO gradient; a level whose pass rate lies inside
[band_low, band_high] is one where groups are often mixed (the DAPO / curriculum-RL observation that
learning happens at the edge of ability).
"""
from __future__ import annotations

import bisect
import re

from rlvr.errors import RlvrError
from rlvr.tasks.base import Epochs, Problem


def natural_key(label: str) -> list:
    """Sort key that orders digit runs by value: d2-n2 < d10-n2."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label)]


def ema(previous: float | None, value: float, smoothing: float) -> float:
    """Running pass rate: the first observation, then (1 - smoothing) * previous + smoothing * value."""
    return value if previous is None else (1 - smoothing) * previous + smoothing * value


def scheduled_level(schedule: list[int], step: int) -> int:
    """Index of the level open at `step`: schedule[i] is the step at which level i + 1 opens."""
    return bisect.bisect_right(schedule, step)


def unlocked_after(rates: list[float | None], unlocked: int, band_high: float) -> int:
    """Open the next level while the frontier (the hardest open level) has a pass rate above band_high."""
    while unlocked < len(rates) and rates[unlocked - 1] is not None and rates[unlocked - 1] > band_high:
        unlocked += 1
    return unlocked


def adaptive_counts(rates: list[float | None], unlocked: int, k: int, band_low: float,
                    band_high: float) -> list[int]:
    """Prompts per level for one step. Candidates are the open levels whose pass rate lies in
    [band_low, band_high], plus the frontier while it is unseen. The frontier, when a candidate, takes
    half the prompts (rounded up); the other candidates share the rest, one at a time hardest first.
    With no candidate, every prompt comes from the frontier."""
    frontier = unlocked - 1
    inside = lambda r: r is not None and band_low <= r <= band_high
    others = [i for i in range(frontier - 1, -1, -1) if inside(rates[i])]
    counts = [0] * len(rates)
    if inside(rates[frontier]) or rates[frontier] is None or not others:
        counts[frontier] = k if not others else (k + 1) // 2
    for j in range(k - counts[frontier]):
        counts[others[j % len(others)]] += 1
    return counts


def review_pool(rates: list[float | None], unlocked: int, band_low: float, band_high: float) -> list[int]:
    """The open levels below the frontier whose running pass rate lies outside [band_low, band_high]: mastered
    ones (above it, which is how a level is left) and ones fallen below it (too hard for now). A level is
    rated only when sampled, so each step one of these, in turn, gets a review prompt: its rate stays
    current, and once it falls back inside the band it is a candidate again (adaptive_counts)."""
    inside = lambda r: band_low <= r <= band_high
    return [i for i in range(unlocked - 1) if rates[i] is not None and not inside(rates[i])]


def resolve_levels(problems: list[Problem], levels: list[str]) -> list[str]:
    """curriculum.levels checked against the train labels, or the labels in natural order."""
    present = {p.difficulty for p in problems}
    if not levels:
        return sorted(present, key=natural_key)
    if len(set(levels)) != len(levels):
        raise RlvrError(f"curriculum.levels lists a label twice: {levels}")
    missing = sorted(present - set(levels), key=natural_key)
    if missing:
        raise RlvrError(f"train problems have difficulty labels {missing} that curriculum.levels {levels} "
                        "does not list: add them, or leave curriculum.levels empty to use every label")
    empty = [lv for lv in levels if lv not in present]
    if empty:
        raise RlvrError(f"curriculum.levels {empty} have no train problems; the train labels are "
                        f"{sorted(present, key=natural_key)}")
    return list(levels)


class CurriculumSampler:
    """One sampler for every mode; the mode decides only how many prompts each level gets per step.

    none: seeded epochs over the whole train split, ignoring levels (Epochs(range(n), seed));
        pass rates per level are still tracked, for the report.
    schedule: every prompt of a step comes from the one level open at that step; earlier levels are
        not mixed back in (the adaptive mode revisits unmastered ones).
    adaptive: start at the easiest level; when the frontier's running pass rate exceeds band_high the
        next level opens; sample open levels whose rate lies in the band (adaptive_counts), and with two
        prompts or more a step, one review prompt for an earlier level outside the band, in turn
        (review_pool), so that a level whose rate falls back inside the band is revisited.
    """

    def __init__(self, problems: list[Problem], levels: list[str], seed: int, *, mode: str = "none",
                 schedule: list[int] = (), band_low: float = 0.1, band_high: float = 0.9,
                 smoothing: float = 0.5):
        if not problems:
            raise RlvrError("the train split is empty: there is nothing to sample")
        if mode == "schedule" and len(schedule) != len(levels) - 1:
            raise RlvrError(f"curriculum.schedule has {len(schedule)} steps for {len(levels)} levels {levels}: "
                            f"give the step at which each level after the first opens ({len(levels) - 1} steps)")
        if any(b <= a for a, b in zip(schedule, schedule[1:])):
            raise RlvrError(f"curriculum.schedule must increase step by step, got {list(schedule)}")
        self.mode, self.levels, self.schedule = mode, list(levels), list(schedule)
        self.band_low, self.band_high, self.smoothing = band_low, band_high, smoothing
        self.level_of = [self.levels.index(p.difficulty) for p in problems]  # train index -> level index
        self.all = Epochs(range(len(problems)), seed)
        self.streams = [Epochs([i for i, lv in enumerate(self.level_of) if lv == j], f"{seed}/{label}")
                        for j, label in enumerate(self.levels)]
        self.rates: list[float | None] = [None] * len(levels)  # running pass rate per level
        self.last_counts = [0] * len(levels)  # prompts per level in the latest next()
        self.unlocked = 1  # adaptive: levels open so far
        self.level = 0  # schedule: the open level; adaptive: the frontier
        self.reviews = 0  # adaptive: review prompts given so far (whose turn is next in the review pool)

    def next(self, k: int, step: int) -> list[int]:
        """k train indices for `step` (1-based)."""
        if self.mode == "none":
            picked = self.all.take(k)
            self.last_counts = [sum(self.level_of[i] == j for i in picked) for j in range(len(self.levels))]
            return picked
        if self.mode == "schedule":
            self.level = scheduled_level(self.schedule, step)
            self.last_counts = [k if j == self.level else 0 for j in range(len(self.levels))]
        else:
            pool = review_pool(self.rates, self.unlocked, self.band_low, self.band_high)
            review = pool[self.reviews % len(pool)] if pool and k >= 2 else None
            self.last_counts = adaptive_counts(self.rates, self.unlocked, k - (review is not None), self.band_low,
                                               self.band_high)
            if review is not None:
                self.last_counts[review] += 1
                self.reviews += 1
        return [i for stream, c in zip(self.streams, self.last_counts) for i in stream.take(c)]

    def observe(self, indices: list[int], group_pass: list[float], step: int) -> None:
        """Fold each level's mean group pass rate of this step into its running rate (one EMA update per
        level per step); adaptive: then open the next level if the frontier is mastered."""
        if len(indices) != len(group_pass):
            raise ValueError(f"{len(indices)} indices but {len(group_pass)} group pass rates")
        by_level: dict[int, list[float]] = {}
        for i, r in zip(indices, group_pass):
            by_level.setdefault(self.level_of[i], []).append(float(r))
        for lv, values in by_level.items():
            self.rates[lv] = ema(self.rates[lv], sum(values) / len(values), self.smoothing)
        if self.mode == "adaptive":
            self.unlocked = unlocked_after(self.rates, self.unlocked, self.band_high)
            self.level = self.unlocked - 1

    def metrics(self) -> dict:
        m: dict = {} if self.mode == "none" else {"curriculum/level": self.level}
        for lv, rate, c in zip(self.levels, self.rates, self.last_counts):
            name = lv or "all"
            if rate is not None:
                m[f"curriculum/pass_rate/{name}"] = rate
            if self.mode != "none":
                m[f"curriculum/prompts/{name}"] = c
        return m

    def state_dict(self) -> dict:
        """Plain lists and numbers (safe for torch.load(weights_only=True) and JSON)."""
        return {"mode": self.mode, "levels": list(self.levels), "rates": list(self.rates),
                "last_counts": list(self.last_counts), "unlocked": self.unlocked, "level": self.level,
                "reviews": self.reviews,
                "all": self.all.state_dict(), "streams": [s.state_dict() for s in self.streams]}

    def load_state_dict(self, state: dict) -> None:
        if state.get("mode") != self.mode or state.get("levels") != self.levels:
            raise RlvrError(f"the checkpoint's curriculum (mode {state.get('mode')}, levels {state.get('levels')}) "
                            f"differs from this run's (mode {self.mode}, levels {self.levels})")
        self.rates, self.last_counts = list(state["rates"]), list(state["last_counts"])
        self.unlocked, self.level = int(state["unlocked"]), int(state["level"])
        self.reviews = int(state.get("reviews", 0))  # a checkpoint from before reviews: none given yet
        self.all.load_state_dict(state["all"])
        for stream, s in zip(self.streams, state["streams"]):
            stream.load_state_dict(s)


def build_sampler(c, problems: list[Problem], seed: int) -> CurriculumSampler:
    """The sampler for the curriculum section `c` (a CurriculumConfig) over the train split `problems`."""
    if c.mode not in ("none", "schedule", "adaptive"):
        raise RlvrError(f"curriculum.mode must be none, schedule or adaptive, got '{c.mode}'")
    if not 0 < c.smoothing <= 1:
        raise RlvrError(f"curriculum.smoothing must be in (0, 1], got {c.smoothing}")
    if not 0 <= c.band_low < c.band_high <= 1:
        raise RlvrError("curriculum.band_low and band_high must satisfy 0 <= band_low < band_high <= 1")
    return CurriculumSampler(problems, resolve_levels(problems, list(c.levels)), seed, mode=c.mode,
                             schedule=list(c.schedule), band_low=c.band_low, band_high=c.band_high,
                             smoothing=c.smoothing)
