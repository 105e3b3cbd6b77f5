"""The paired bootstrap over problems and seeds (rlvr/report/noise.py), on grades small enough to work out by hand."""
import math

import pytest

from rlvr.report.noise import Difference, describe_spread, paired_bootstrap, spread, verdict


def test_the_same_grades_differ_by_nothing():
    a = [[1, 0, 1, 1], [1, 0, 1, 1]]  # two seeds that agree: every draw of seeds and problems means the same
    d = paired_bootstrap(a, a)
    assert (d.diff, d.low, d.high) == (0.0, 0.0, 0.0) and not d.beyond
    assert verdict(d) == "within seed noise: +0.0 points, 95% interval [+0.0, +0.0]"


def test_one_seed_each_and_identical_problems_give_a_zero_width_interval():
    d = paired_bootstrap([[1, 0, 1]], [[1, 0, 1]])
    assert (d.diff, d.low, d.high) == (0.0, 0.0, 0.0) and not d.beyond


def test_everything_right_against_nothing_right_is_beyond_noise_with_no_width():
    d = paired_bootstrap([[0, 0, 0], [0, 0, 0]], [[1, 1, 1], [1, 1, 1], [1, 1, 1]])
    assert (d.diff, d.low, d.high) == (1.0, 1.0, 1.0) and d.beyond
    assert (d.seeds_a, d.seeds_b, d.problems) == (2, 3, 3)
    assert verdict(d) == "beyond seed noise: +100.0 points, 95% interval [+100.0, +100.0]"


def test_problems_are_resampled():
    """One seed each, b right on problem 0 of 2 only: a draw of the two problems takes problem 0 twice (1/4:
    difference 1), once (1/2: 0.5) or never (1/4: 0), so the 2.5% and 97.5% quantiles are 0 and 1."""
    d = paired_bootstrap([[0, 0]], [[1, 0]])
    assert (d.diff, d.low, d.high) == (0.5, 0.0, 1.0) and not d.beyond
    assert verdict(d) == ("within problem noise: +50.0 points, 95% interval [+0.0, +100.0] (no seed spread: one run "
                          "on a side, so only the problems were resampled; --seeds measures it)")
    assert verdict(d, "over 2 problems").endswith("[+0.0, +100.0] (over 2 problems; no seed spread: one run on a "
                                                  "side, so only the problems were resampled; --seeds measures it)")


def test_seeds_are_resampled():
    """a's seed 0 right on both problems, its seed 1 on neither; b always right. Drawing a's two seeds takes
    seed 0 twice (1/4: a's mean 1, difference 0), once (1/2: 0.5) or never (1/4: 1): the interval [0, 1]
    holds 0, so the +50 points are within seed noise, though every problem moved the same way."""
    d = paired_bootstrap([[1, 1], [0, 0]], [[1, 1], [1, 1]])
    assert (d.diff, d.low, d.high) == (0.5, 0.0, 1.0) and not d.beyond and d.seed_noise_measured
    assert verdict(d) == "within seed noise: +50.0 points, 95% interval [+0.0, +100.0]"


def test_a_large_change_over_many_problems_is_beyond_noise():
    """b right on 30 of 40 problems in both seeds, a on none: the difference is the share of problem draws b
    gets right, binomial(40, 0.75) / 40, whose 95% interval is about 0.75 +- 1.96 * sqrt(0.75 * 0.25 / 40),
    [0.616, 0.884]."""
    b = [[1] * 30 + [0] * 10] * 2
    d = paired_bootstrap([[0] * 40] * 2, b)
    half = 1.96 * math.sqrt(0.75 * 0.25 / 40)
    assert d.diff == 0.75 and d.beyond
    assert d.low == pytest.approx(0.75 - half, abs=0.03) and d.high == pytest.approx(0.75 + half, abs=0.03)
    again = paired_bootstrap([[0] * 40] * 2, b)
    assert again == d  # a fixed generator: the same interval every time
    few = lambda seed: paired_bootstrap([[0] * 40] * 2, b, resamples=40, seed=seed)
    assert few(0) == few(0) and few(1) != few(0)  # another generator's seed draws other resamples


def test_the_words_round_as_printed():
    d = Difference(diff=0.125, low=0.0625, high=0.1875, level=0.95, seeds_a=5, seeds_b=5, problems=100)
    assert verdict(d) == "beyond seed noise: +12.5 points, 95% interval [+6.2, +18.8]"
    assert not Difference(diff=0.01, low=-0.02, high=0.0, level=0.95, seeds_a=2, seeds_b=2, problems=8).beyond


def test_spread_over_seeds():
    s = spread([[1, 0], [1, 1]])  # the seeds' accuracies 0.5 and 1
    assert (s.mean, s.low, s.high, s.seeds, s.problems) == (0.75, 0.5, 1.0, 2, 2)
    assert s.sd == pytest.approx(math.sqrt(0.125))  # ((0.25^2 + 0.25^2) / 1) ** 0.5
    assert describe_spread(s) == "75.0% (sd 35.4, 50.0-100.0%, 2 seeds, 2 problems)"
    one = spread([[1, 0, 0, 0]])
    assert one.sd is None and describe_spread(one) == "25.0% (one seed: no seed spread; 4 problems)"


def test_unpaired_or_empty_grades_are_refused():
    with pytest.raises(ValueError, match="same problems on both sides, got 2 and 3"):
        paired_bootstrap([[1, 0]], [[1, 0, 1]])
    with pytest.raises(ValueError, match="at least one of each"):
        paired_bootstrap([[]], [[]])
