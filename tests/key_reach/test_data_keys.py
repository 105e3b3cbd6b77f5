"""Key reach, the data and evaluation settings: each key of DATA changes the problems, the prompt order or
the evaluation's settings as it promises (tests/key_reach/harness.py says how a check is made)."""
import re
from dataclasses import dataclass

import pytest

from rlvr.eval.grader import choose_grader
from rlvr.rewards import rewards_of
from rlvr.tasks import build_splits
from rlvr.tasks.curriculum import build_sampler
from rlvr.train.settings import Settings

from tests.key_reach.harness import DATA_DIR, Differs, SEEDED, _cfg, cached, check


@dataclass
class Drawn:
    """The problems of every split, the prompt order of 6 steps, the evaluation's settings and grader."""

    train: list
    heldout: list
    ood: list
    order: list  # each step's prompt indices into train
    eval: object
    grader: tuple  # (name, threshold)

    def key(self) -> tuple:
        text = lambda ps: [(p.question, p.answer, p.difficulty) for p in ps]
        return text(self.train), text(self.heldout), text(self.ood), self.order, self.eval, self.grader

    def levels(self) -> list[set]:
        return [{self.train[i].difficulty for i in idx} for idx in self.order]


def data_observable(world, overrides) -> Drawn:
    """The problems of every split, the prompt order of 6 steps (adaptive: with pass rates that fall
    with the difficulty), the evaluation's settings."""
    cfg = _cfg(*overrides)
    splits = build_splits(cfg.task)
    sampler = build_sampler(cfg.curriculum, splits.train, cfg.train.seed)
    order = []
    for step in range(1, 7):
        idx = list(sampler.next(4, step))
        order.append(idx)
        # the easiest level passes 0.7 at first, then always until step 4: mastered at once above
        # band_high 0.5, at step 2 with smoothing 1, at step 3 with the defaults (0.7, 0.85, 0.925 > 0.9);
        # from step 4 its reviews fail, so its rate falls back into the band (or below a high band_low)
        passes = [(0.7 if step == 1 else 1.0 if step < 4 else 0.0) * (splits.train[i].difficulty == "d1-n2")
                  for i in idx]
        sampler.observe(idx, passes, step)
    settings = Settings.of(cfg, stop_ids=[0], pad_id=0, precision="no")
    grader = choose_grader(rewards_of(cfg.rewards, cfg.rollout.max_new_tokens), cfg.eval.grader, cfg.eval.grader_threshold)
    return Drawn(list(splits.train), list(splits.heldout), list(splits.ood), order, settings.eval,
                 (grader.name, grader.threshold))


def operands(problems) -> list[int]:
    return [int(n) for p in problems for n in re.findall(r"\d+", p.question)]


def task_is_pyfunc(split: str):
    def effect(base: Drawn, changed: Drawn) -> None:
        """The split's problems are pyfunc's: Python functions with tests, pyfunc levels (base: arithmetic)."""
        assert all(p.tests and p.difficulty.startswith("pyfunc-") for p in getattr(changed, split))
        assert all(p.question.startswith("What is") for p in getattr(base, split))
    effect.__doc__ = f"the {split} problems are pyfunc's"
    return effect


def digits(split: str, n: int):
    def effect(base: Drawn, changed: Drawn) -> None:
        """Operands of at most n digits, some of n (the base's have fewer)."""
        assert 10 ** (n - 1) <= max(operands(getattr(changed, split))) < 10 ** n
        assert max(operands(getattr(base, split))) < 10 ** (n - 1)
    effect.__doc__ = f"{split} operands of up to {n} digits"
    return effect


def templated(base: Drawn, changed: Drawn) -> None:
    """Every problem's user turn is the template filled with its text."""
    for b, c in zip(base.train + base.heldout, changed.train + changed.heldout):
        assert c.question == f"Q: {b.question}"


def sized(split: str, n: int):
    def effect(base: Drawn, changed: Drawn) -> None:
        assert len(getattr(changed, split)) == n != len(getattr(base, split))
    effect.__doc__ = f"{n} {split} problems"
    return effect


def levels_by_step(*levels: str):
    def effect(base: Drawn, changed: Drawn) -> None:
        """Each step's prompts all of the level open then."""
        assert changed.levels() == [{f"{lv}-n2"} for lv in levels], changed.levels()
    effect.__doc__ = f"the levels of steps 1-6: {levels}"
    return effect


def opens_at(step: int):
    def effect(base: Drawn, changed: Drawn) -> None:
        """d1 is mastered so d2 opens at this step (the base: later)."""
        first = lambda obs: next(s for s, lv in enumerate(obs.levels(), 1) if "d2-n2" in lv)
        assert first(changed) == step < first(base), (changed.levels(), base.levels())
    effect.__doc__ = f"the second level opens at step {step}"
    return effect


def eval_setting(name: str, want):
    def effect(base: Drawn, changed: Drawn) -> None:
        assert getattr(changed.eval, name) == want != getattr(base.eval, name)
    effect.__doc__ = f"evaluation's {name} is {want!r}"
    return effect


def graded(want: tuple):
    def effect(base: Drawn, changed: Drawn) -> None:
        assert changed.grader == want != base.grader, (changed.grader, base.grader)
    effect.__doc__ = f"the grader and its threshold are {want}"
    return effect


def columns(base: Drawn, changed: Drawn) -> None:
    """The question from column q, the answer from column a ("{i} + 2 =" -> i + 2)."""
    assert changed.train and all(int(p.answer) == int(p.question.split()[0]) + 2 for p in changed.train)


def from_file(split: str, prompts: list[str]):
    def effect(base: Drawn, changed: Drawn) -> None:
        """task.heldout_size / ood_size (4) of the file's 5 rows."""
        questions = [p.question for p in getattr(changed, split)]
        assert len(questions) == 4 and set(questions) <= set(prompts), questions
    effect.__doc__ = f"the {split} split is drawn from the file's rows"
    return effect


LEVELS = "--task.params={digits: 3, min_digits: 1}"  # three arithmetic levels, d1-n2 < d2-n2 < d3-n2
VARIED = "tests.e2e.test_tiny_run:varied_reward"
SCHEDULE = (LEVELS, "--curriculum.mode=schedule", "--curriculum.schedule=[3, 5]")
ADAPTIVE = (LEVELS, "--curriculum.mode=adaptive")
DATA = {
    "task.name": ("pyfunc", (), task_is_pyfunc("train")),
    "task.params": ({"digits": 2}, (), digits("train", 2)),
    "task.ood_name": ("pyfunc", (), task_is_pyfunc("ood")),
    "task.ood_params": ({"digits": 3}, (), digits("ood", 3)),
    "task.prompt_template": ("Q: {prompt}", (), templated),
    "task.heldout_size": (3, (), sized("heldout", 3)),
    "task.ood_size": (3, (), sized("ood", 3)),
    "task.train_size": (10, (), sized("train", 10)),
    "task.seed": (1, (), Differs(SEEDED)),
    "curriculum.mode": ("schedule", SCHEDULE[:-2] + SCHEDULE[-1:], levels_by_step(*"d1 d1 d2 d2 d3 d3".split())),
    "curriculum.levels": (["d3-n2", "d2-n2", "d1-n2"], SCHEDULE, levels_by_step(*"d3 d3 d2 d2 d1 d1".split())),
    "curriculum.schedule": ([1, 2], SCHEDULE, levels_by_step(*"d2 d3 d3 d3 d3 d3".split())),
    "curriculum.band_high": (0.5, ADAPTIVE, opens_at(2)),
    "curriculum.band_low": (0.6, ADAPTIVE, Differs("which review prompts a level below the band gets after step 4 "
                                                   "is the sampler's turn order; tests/tasks/test_curriculum.py "
                                                   "pins it")),
    "curriculum.smoothing": (1.0, ADAPTIVE, opens_at(3)),
    "eval.batch_size": (1, (), eval_setting("batch_size", 1)),
    "eval.grader": (VARIED, (f"--rewards.weights={{{VARIED}: 1.0, correctness: 1.0}}",), graded((VARIED, 1.0))),
    "eval.grader_threshold": (0.1, (f"--rewards.weights={{{VARIED}: 1.0}}",), graded((VARIED, 0.1))),
    "task.columns": ({"prompt": "q", "answer": "a"}, (f"--task.name={DATA_DIR / 'qa.jsonl'}",), columns),
    "task.heldout_file": (str(DATA_DIR / "heldout.jsonl"), (f"--task.name={DATA_DIR / 'train.jsonl'}",),
                          from_file("heldout", [f"{i} * 2 =" for i in range(5)])),
    "task.ood_file": (str(DATA_DIR / "ood.jsonl"), (f"--task.name={DATA_DIR / 'train.jsonl'}",),
                      from_file("ood", [f"{i} - 3 =" for i in range(5)])),
}


@pytest.fixture(scope="module")
def drawn(batch_world):
    return cached(lambda o: data_observable(batch_world, o))


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(DATA))
def test_data_key_does_what_it_promises(batch_world, drawn, key):
    check(DATA, key, lambda o: data_observable(batch_world, o), drawn, "the data or the evaluation's settings")
