"""Is a difference in accuracy larger than the noise of the runs? Pure functions over per-problem grades.

A group is a config run over several seeds, each evaluated greedily on the same problems: its grades are a
[seeds, problems] array of 0/1. Two groups are compared on the same problems, so problems are paired: the
paired bootstrap draws the problems once per resample for both groups, and each group's seeds on their own
(seed N of one config has no partner in another config's seed N). Resampling both problems and seeds (a
two-way bootstrap of a crossed seeds x problems design) lets the interval hold both sources of noise: which
problems the evaluation happened to hold, and which draw of sampling and prompt order training got. With
one seed on a side only the problems are resampled for it, and the words say the seed noise is unmeasured.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RESAMPLES = 10_000
LEVEL = 0.95


@dataclass(frozen=True, kw_only=True)
class Spread:
    """One group's accuracy on one split: the mean over seeds of each seed's accuracy, and its spread."""

    mean: float
    sd: float | None  # sample standard deviation over seeds; None with one seed
    low: float  # the lowest and highest seed's accuracy
    high: float
    seeds: int
    problems: int


@dataclass(frozen=True, kw_only=True)
class Difference:
    """b's mean accuracy less a's, with a percentile interval of the paired bootstrap."""

    diff: float
    low: float
    high: float
    level: float
    seeds_a: int
    seeds_b: int
    problems: int

    @property
    def beyond(self) -> bool:
        """The interval leaves out 0: the difference is larger than the noise the bootstrap measured."""
        return self.low > 0 or self.high < 0

    @property
    def seed_noise_measured(self) -> bool:
        return min(self.seeds_a, self.seeds_b) >= 2


def grades(rows: list[list[float]]) -> np.ndarray:
    """[seeds, problems] as floats; every seed must hold the same problems (a rectangle, at least 1 x 1)."""
    a = np.asarray(rows, dtype=np.float64)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ValueError(f"grades need [seeds, problems] with at least one of each, got shape {a.shape}")
    return a


def spread(rows: list[list[float]]) -> Spread:
    a = grades(rows)
    per_seed = a.mean(axis=1)
    return Spread(mean=float(per_seed.mean()), sd=float(per_seed.std(ddof=1)) if len(per_seed) > 1 else None,
                  low=float(per_seed.min()), high=float(per_seed.max()), seeds=a.shape[0], problems=a.shape[1])


def paired_bootstrap(a_rows: list[list[float]], b_rows: list[list[float]], *, resamples: int = RESAMPLES,
                     level: float = LEVEL, seed: int = 0) -> Difference:
    """mean(b) - mean(a) and its `level` percentile interval over `resamples` draws: each draw takes the
    problems with replacement (the same draw for a and b: paired) and each group's seeds with replacement
    (apart), and measures the difference of the two means over what it drew. A fixed generator
    (numpy's PCG64 from `seed`): the same grades give the same interval every time."""
    a, b = grades(a_rows), grades(b_rows)
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"paired grades need the same problems on both sides, got {a.shape[1]} and {b.shape[1]}")
    if resamples < 1 or not 0 < level < 1:
        raise ValueError(f"resamples must be >= 1 and level in (0, 1), got {resamples} and {level}")
    rng = np.random.Generator(np.random.PCG64(seed))
    (sa, p), sb = a.shape, b.shape[0]
    # how often each problem and each seed is drawn in each resample: the mean over a draw is then a
    # weighted mean, with no [resamples, seeds, problems] array of copies
    weights = rng.multinomial(p, np.full(p, 1 / p), size=resamples).astype(np.float64)  # [R, P]
    seeds_a = rng.multinomial(sa, np.full(sa, 1 / sa), size=resamples).astype(np.float64)  # [R, Sa]
    seeds_b = rng.multinomial(sb, np.full(sb, 1 / sb), size=resamples).astype(np.float64)  # [R, Sb]
    mean_a = ((seeds_a @ a) * weights).sum(axis=1) / (sa * p)
    mean_b = ((seeds_b @ b) * weights).sum(axis=1) / (sb * p)
    low, high = np.quantile(mean_b - mean_a, [(1 - level) / 2, (1 + level) / 2])
    return Difference(diff=float(b.mean() - a.mean()), low=float(low), high=float(high), level=level,
                      seeds_a=sa, seeds_b=sb, problems=p)


def points(x: float) -> str:
    """A difference of accuracies in percentage points, signed: +12.5."""
    return f"{100 * x:+.1f}"


def verdict(d: Difference, how: str = "") -> str:
    """The difference in words: 'beyond seed noise: +12.5 points, 95% interval [+6.2, +18.8]', then in brackets
    `how` it was measured and, with one seed on a side (only the problems resampled), that the seed noise is not."""
    noise = "seed noise" if d.seed_noise_measured else "problem noise"
    words = f"{'beyond' if d.beyond else 'within'} {noise}: {points(d.diff)} points, " \
            f"{100 * d.level:g}% interval [{points(d.low)}, {points(d.high)}]"
    said = [how] if how else []
    if not d.seed_noise_measured:
        said.append("no seed spread: one run on a side, so only the problems were resampled; --seeds measures it")
    return words + (f" ({'; '.join(said)})" if said else "")


def describe_spread(s: Spread) -> str:
    """'64.0% (sd 3.1, 60.0-68.0%, 5 seeds, 100 problems)'; one seed: 'no seed spread'."""
    if s.sd is None:
        return f"{100 * s.mean:.1f}% (one seed: no seed spread; {s.problems} problems)"
    return (f"{100 * s.mean:.1f}% (sd {100 * s.sd:.1f}, {100 * s.low:.1f}-{100 * s.high:.1f}%, {s.seeds} seeds, "
            f"{s.problems} problems)")
