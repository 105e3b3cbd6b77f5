"""Curriculum samplers: hand-computed EMA, unlock rule, schedule and allocation; exact state restore;
the adaptive curriculum keeping a synthetic policy's pass rate in band."""
import math
import random

import pytest

from rlvr.config import CurriculumConfig
from rlvr.errors import RlvrError
from rlvr.tasks.base import Epochs, Problem
from rlvr.tasks.curriculum import (CurriculumSampler, adaptive_counts, build_sampler, ema, natural_key,
                                   review_pool, scheduled_level, unlocked_after)


def make_problems(counts: dict[str, int]) -> list[Problem]:
    return [Problem(question=f"{label} #{i}", answer="0", difficulty=label) for label,
            n in counts.items() for i in range(n)]


def test_natural_order_of_labels():
    labels = ["d10-n2", "d2-n2", "d1-n3", "d1-n2"]
    assert sorted(labels, key=natural_key) == ["d1-n2", "d1-n3", "d2-n2", "d10-n2"]
    sampler = build_sampler(CurriculumConfig(), make_problems({"d10-n2": 2, "d2-n2": 2, "d1-n2": 2}), 0)
    assert sampler.levels == ["d1-n2", "d2-n2", "d10-n2"]


def test_ema():
    assert ema(None, 0.25, 0.5) == 0.25  # first observation is taken as is
    assert ema(0.25, 1.0, 0.5) == pytest.approx(0.625)  # 0.5 * 0.25 + 0.5 * 1
    assert ema(0.5, 0.0, 0.2) == pytest.approx(0.4)  # 0.8 * 0.5


def test_observe_averages_groups_of_a_level_then_updates_once():
    problems = make_problems({"d1": 2, "d2": 2})  # indices 0, 1 are d1; 2, 3 are d2
    s = CurriculumSampler(problems, ["d1", "d2"], 0, mode="adaptive", smoothing=0.5)
    s.observe([0, 1, 2], [1.0, 0.5, 0.25], step=1)
    assert s.rates == [pytest.approx(0.75), pytest.approx(0.25)]
    s.observe([1], [0.25], step=2)  # 0.5 * 0.75 + 0.5 * 0.25
    assert s.rates == [pytest.approx(0.5), pytest.approx(0.25)]
    assert s.metrics()["curriculum/pass_rate/d1"] == pytest.approx(0.5)


def test_unlock_rule():
    assert unlocked_after([0.95, None, None], 1, 0.9) == 2  # frontier mastered: the next opens
    assert unlocked_after([0.9, None, None], 1, 0.9) == 1  # must exceed band_high
    assert unlocked_after([0.95, 0.92, 0.3], 2, 0.9) == 3
    assert unlocked_after([0.95, 0.95, 0.95], 3, 0.9) == 3  # no level beyond the last
    assert unlocked_after([0.95, 0.5, None], 2, 0.9) == 2


def test_adaptive_counts():
    # unseen frontier alone: everything from it
    assert adaptive_counts([None, None], 1, 8, 0.1, 0.9) == [8, 0]
    # frontier in band with two earlier levels in band: frontier 4, the rest hardest first: 2, 2
    assert adaptive_counts([0.5, 0.6, 0.4], 3, 8, 0.1, 0.9) == [2, 2, 4]
    # odd k: frontier ceil(7 / 2) = 4; then level 1, level 0, level 1
    assert adaptive_counts([0.5, 0.6, 0.4], 3, 7, 0.1, 0.9) == [1, 2, 4]
    # mastered level 0 is out of band; unseen frontier counts as a candidate
    assert adaptive_counts([0.95, 0.5, None], 3, 6, 0.1, 0.9) == [0, 3, 3]
    # frontier too hard, level 1 in band: everything from level 1
    assert adaptive_counts([0.95, 0.5, 0.05], 3, 6, 0.1, 0.9) == [0, 6, 0]
    # nothing in band: the frontier
    assert adaptive_counts([0.95, 0.97, 0.05], 3, 6, 0.1, 0.9) == [0, 0, 6]
    # levels not yet open are never drawn
    assert adaptive_counts([0.5, None, None], 1, 4, 0.1, 0.9) == [4, 0, 0]


def test_review_pool_holds_the_earlier_levels_outside_the_band():
    assert review_pool([0.95, 0.5, None], 3, 0.1, 0.9) == [0]  # mastered; level 1 is in the band
    assert review_pool([0.95, 0.05, 0.3], 3, 0.1, 0.9) == [0, 1]  # mastered, and fallen below band_low
    assert review_pool([0.95, 0.05, 0.3], 3, 0.2, 0.9) == [0, 1]
    assert review_pool([0.5, None], 1, 0.1, 0.9) == []  # the frontier is never reviewed


def run_adaptive(band_low: float) -> list[list[int]]:
    """Three levels of 8 problems, 4 prompts a step; level 0 is mastered at step 1, then fails its review
    at step 2 (rate 0.5 * 1 + 0.5 * 0 = 0.5) while level 1 sits at 0.5. Returns each step's counts."""
    s = CurriculumSampler(make_problems({"d1": 8, "d2": 8, "d3": 8}), ["d1", "d2", "d3"], 0, mode="adaptive",
                          band_low=band_low, band_high=0.9, smoothing=0.5)
    counts = []
    for step, rate_of in enumerate(({0: 1.0}, {0: 0.0, 1: 0.5}, {0: 0.5, 1: 0.5}), start=1):
        idx = s.next(4, step)
        counts.append(list(s.last_counts))
        s.observe(idx, [rate_of[s.level_of[i]] for i in idx], step)
    return counts


def test_a_level_whose_rate_falls_back_inside_the_band_is_revisited_and_band_low_decides():
    # step 1: level 0 alone, mastered (1.0 > 0.9): level 1 opens. Step 2: 3 prompts from the frontier
    # (unseen), 1 review of level 0, which fails: its rate 0.5. Step 3 with band_low 0.1: levels 0 and 1
    # are both inside the band: the frontier takes half (2), level 0 the rest (2)
    assert run_adaptive(0.1) == [[4, 0, 0], [1, 3, 0], [2, 2, 0]]
    # band_low 0.6: 0.5 is too hard for now: level 0 gets only its review prompt, the frontier the others
    assert run_adaptive(0.6) == [[4, 0, 0], [1, 3, 0], [1, 3, 0]]


def test_reviews_are_in_the_checkpoint():
    s = CurriculumSampler(make_problems({"d1": 4, "d2": 4}), ["d1", "d2"], 0, mode="adaptive")
    s.observe(s.next(2, 1), [1.0, 1.0], 1)
    s.next(2, 2)
    state = s.state_dict()
    assert state["reviews"] == 1 and state["last_counts"] == [1, 1]
    fresh = CurriculumSampler(make_problems({"d1": 4, "d2": 4}), ["d1", "d2"], 0, mode="adaptive")
    fresh.load_state_dict(state)
    assert fresh.reviews == 1 and fresh.next(2, 3) == s.next(2, 3)


def test_schedule():
    assert [scheduled_level([3, 5], s) for s in range(1, 8)] == [0, 0, 1, 1, 2, 2, 2]
    problems = make_problems({"d1": 3, "d2": 3, "d3": 3})
    s = build_sampler(CurriculumConfig(mode="schedule", schedule=[3, 5]), problems, 0)
    for step, level in [(1, "d1"), (2, "d1"), (3, "d2"), (4, "d2"), (5, "d3"), (9, "d3")]:
        picked = s.next(3, step)
        assert {problems[i].difficulty for i in picked} == {level}
        assert s.metrics()["curriculum/level"] == ["d1", "d2", "d3"].index(level)
    assert sorted(s.next(3, 10)) == [6, 7, 8]  # epochs within the level: each once before repeats


@pytest.mark.parametrize("schedule, message", [([3], "1 steps for 3 levels"), ([5, 5], "must increase")])
def test_bad_schedule_is_a_clear_error(schedule, message):
    with pytest.raises(RlvrError, match=message):
        build_sampler(CurriculumConfig(mode="schedule", schedule=schedule),
                      make_problems({"d1": 1, "d2": 1, "d3": 1}), 0)


def test_levels_must_match_the_train_labels():
    problems = make_problems({"d1": 1, "d2": 1})
    with pytest.raises(RlvrError, match=r"\['d2'\].*does not list"):
        build_sampler(CurriculumConfig(levels=["d1"]), problems, 0)
    with pytest.raises(RlvrError, match=r"\['d9'\] have no train problems"):
        build_sampler(CurriculumConfig(levels=["d1", "d2", "d9"]), problems, 0)
    assert build_sampler(CurriculumConfig(levels=["d2", "d1"]), problems, 0).levels == ["d2", "d1"]


def test_mode_none_draws_seeded_epochs_over_all_of_train():
    problems = make_problems({"d1": 4, "d2": 3})
    ours, epochs = build_sampler(CurriculumConfig(), problems, 7), Epochs(range(7), 7)
    # pinned: the demo's figures (and rlvr sft's example order, the same Epochs) depend on this order;
    # each run of 7 draws is one epoch, every index once
    want = [[2, 1, 3], [0, 4, 6, 5, 2], [4, 0], [1, 5, 6, 3, 3, 6, 0], [1, 4, 5, 2]]
    for step, (k, w) in enumerate(zip([3, 5, 2, 7, 4], want), start=1):
        assert ours.next(k, step) == epochs.take(k) == w
    assert "curriculum/level" not in ours.metrics()


@pytest.mark.parametrize("mode", ["none", "schedule", "adaptive"])
def test_state_restores_exactly(mode):
    problems = make_problems({"d1": 5, "d2": 4, "d3": 3})
    cfg = CurriculumConfig(mode=mode, schedule=[4, 8], band_low=0.2, band_high=0.8)
    rng = random.Random(0)

    def play(sampler, steps):
        out = []
        for step in steps:
            idx = sampler.next(4, step)
            sampler.observe(idx, [1.0 if problems[i].difficulty == "d1" else rng.choice([0.0, 0.5, 1.0])
                                  for i in idx], step)
            out.append((idx, sampler.metrics()))
        return out

    a = build_sampler(cfg, problems, 3)
    play(a, range(1, 6))
    state = a.state_dict()
    rng_state = rng.getstate()
    expected = play(a, range(6, 14))
    b = build_sampler(cfg, problems, 3)
    b.load_state_dict(state)
    rng.setstate(rng_state)
    assert play(b, range(6, 14)) == expected
    rng.setstate(rng_state)
    assert play(build_sampler(cfg, problems, 3), range(6, 14)) != expected  # the state mattered
    if mode == "adaptive":
        assert b.unlocked > 1


def test_state_of_another_curriculum_is_refused():
    problems = make_problems({"d1": 2, "d2": 2})
    state = build_sampler(CurriculumConfig(mode="adaptive"), problems, 0).state_dict()
    with pytest.raises(RlvrError, match="differs from this run"):
        build_sampler(CurriculumConfig(mode="none"), problems, 0).load_state_dict(state)


LEVELS = [f"d{i + 1}" for i in range(6)]


def synthetic_run(mode: str, steps: int = 150, k: int = 8, group: int = 8, low: float = 0.2,
                  high: float = 0.8) -> dict:
    """A policy whose success on level l is sigmoid(skill - 2 l). Each sampled group teaches in
    proportion to its reward variance 4 r (1 - r) (GRPO learns only from mixed groups), so training
    on mastered or hopeless levels teaches nothing."""
    problems = make_problems({lv: 20 for lv in LEVELS})
    sampler = build_sampler(CurriculumConfig(mode=mode, band_low=low, band_high=high, smoothing=0.5), problems, 0)
    rng, skill = random.Random(1), 1.0
    step_means, group_rates, levels = [], [], []
    for step in range(1, steps + 1):
        idx = sampler.next(k, step)
        rates = []
        for i in idx:
            p = 1 / (1 + math.exp(-(skill - 2.0 * sampler.level_of[i])))
            rates.append(sum(rng.random() < p for _ in range(group)) / group)
        skill += sum(0.01 * 4 * r * (1 - r) for r in rates)
        sampler.observe(idx, rates, step)
        step_means.append(sum(rates) / k)
        group_rates += rates
        levels.append(sampler.level)
    warm = 10
    return {"steps_in_band": sum(low <= m <= high for m in step_means[warm:]) / (steps - warm),
            "groups_in_band": sum(low <= r <= high for r in group_rates) / len(group_rates),
            "levels": levels, "skill": skill}


def test_adaptive_curriculum_keeps_the_pass_rate_in_band():
    adaptive, uniform = synthetic_run("adaptive"), synthetic_run("none")
    assert adaptive["steps_in_band"] >= 0.8
    assert uniform["steps_in_band"] < adaptive["steps_in_band"]
    # per group the difference is stark: uniform spends most prompts on levels it solves or cannot
    assert adaptive["groups_in_band"] >= 0.6 and uniform["groups_in_band"] <= 0.4
    lv = adaptive["levels"]
    assert all(a <= b for a, b in zip(lv, lv[1:])) and lv[0] == 0 and lv[-1] >= 4
    assert adaptive["skill"] > 2 * uniform["skill"]  # more signal, more learning
