"""`rlvr.fit`: the Python entry point, in the habits of TRL's GRPOTrainer: reward functions as callables,
the dataset in memory, the rest of the config as keywords; the same run as `rlvr train`.

Callables never go into config.yaml: a reward is recorded there by a readable name, `python:<its
__name__>` (`verl:python:<name>` for a verl compute_score), and a resume is given the same callables
again. Rows given in memory are saved as RUN_DIR/data/train.jsonl (and heldout.jsonl) once the run has
loaded, and config.yaml names those files, so `rlvr train --resume RUN_DIR` finds its data.

It is `fit`, not `train`, because `rlvr.train` is the package of the training loop.
"""
from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Callable, Iterable

from rlvr.errors import RlvrError


def is_verl_scorer(fn: Callable) -> bool:
    """verl's compute_score(data_source, solution_str, ground_truth, extra_info), one sample or batched;
    a TRL reward takes completions instead."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "completions" not in params and bool({"solution_str", "solution_strs"} & set(params))


def name_rewards(rewards) -> tuple[dict[str, float], dict[str, Callable]]:
    """rewards.weights and the callables by their names, from a dict {reward: weight}, a list (weight 1
    each, as TRL's reward_funcs) or one reward; a reward is a callable or a name rlvr train takes."""
    from rlvr.rewards.base import PYTHON_PREFIX
    from rlvr.rewards.verl import VERL_PREFIX, from_compute_score

    if callable(rewards) or isinstance(rewards, str):
        rewards = [rewards]
    pairs = rewards.items() if isinstance(rewards, dict) else ((r, 1.0) for r in rewards)
    weights, given = {}, {}
    for reward, weight in pairs:
        if isinstance(reward, str):
            weights[reward] = weight
            continue
        if not callable(reward):
            raise RlvrError(f"rewards: {reward!r} is neither a callable nor a reward name")
        verl = is_verl_scorer(reward)
        base = f"{VERL_PREFIX if verl else ''}{PYTHON_PREFIX}{getattr(reward, '__name__', type(reward).__name__)}"
        name, n = base, 1
        while name in weights:  # two lambdas, or two functions of one name: told apart by their order
            n += 1
            name = f"{base}_{n}"
        weights[name] = weight
        given[name] = from_compute_score(reward) if verl else reward
    return weights, given


def check_resumed(weights: dict[str, float], given: dict[str, Callable]) -> None:
    """A resume's Python rewards are the run's: matched to config.yaml's python:<name> entries by each
    function's __name__ (a repeated name by order, as name_rewards names them); the weights stay the run's.
    A function renamed, left out or added since is an error listing both sides, before anything loads."""
    from rlvr.rewards.base import PYTHON_PREFIX
    from rlvr.rewards.verl import VERL_PREFIX

    theirs = [n for n in weights if n.startswith((PYTHON_PREFIX, VERL_PREFIX + PYTHON_PREFIX))]
    if sorted(theirs) != sorted(given):
        raise RlvrError(f"rlvr.fit(resume=...): the run's Python rewards are {', '.join(theirs) or 'none'} "
                        f"(config.yaml names each by its function's __name__), and this call gives "
                        f"{', '.join(given) or 'none'}; pass the same functions under the same names (the run's "
                        "weights are kept)")


def as_rows(data, label: str) -> list[dict]:
    """A list of dicts, or a datasets.Dataset (anything with to_list), as a list of row dicts."""
    if hasattr(data, "to_list"):
        data = data.to_list()
    if isinstance(data, dict) and data and all(hasattr(v, "to_list") for v in data.values()):
        first = next(iter(data))  # load_dataset(name) without split=: a DatasetDict of splits
        raise RlvrError(f"{label}: a DatasetDict of splits ({', '.join(map(str, data))}); pass one split, e.g. "
                        f"{label}=dataset[{first!r}]")
    if isinstance(data, dict) or not isinstance(data, Iterable):
        raise RlvrError(f"{label}: give a list of dicts (one per row), a datasets.Dataset, or a file name; "
                        f"got {type(data).__name__}")
    return list(data)


# GRPOTrainer's own arguments, as TRL users pass them to it: what rlvr.fit takes instead
TRAINER_ARGUMENTS = {
    "reward_funcs": "rewards=[...] (a list, or {function: weight})",
    "args": "config keys as keywords (train__steps=40, rollout__group_size=8), not a GRPOConfig",
    "peft_config": "model__lora__r=16 (and model__lora__alpha, model__lora__target_modules)",
    "processing_class": "nothing: the tokenizer is the model's own",
}


def _override(key: str, value) -> str:
    """A keyword (train__steps or 'train.steps') as the command line's --train.steps=VALUE; JSON is YAML."""
    key = key.replace("__", ".")
    if key in TRAINER_ARGUMENTS:
        raise RlvrError(f"rlvr.fit: unknown keyword '{key}' (TRL's GRPOTrainer argument): rlvr.fit takes "
                        f"{TRAINER_ARGUMENTS[key]}")
    if "." not in key:
        from rlvr.config.names import FOREIGN, foreign_name

        ours = FOREIGN.get(key, ("",))[0]
        said = (f": {foreign_name(key)}, rlvr.fit(..., {ours.replace('.', '__')}=...)" if ours
                else f": {foreign_name(key)}" if key in FOREIGN else "")
        raise RlvrError(f"rlvr.fit: unknown keyword '{key}'{said}; config keys are written section__key=value "
                        f"(e.g. train__steps=40) or **{{'section.key': value}}")
    return f"--{key}={json.dumps(value)}"


def _dataset(data, label: str, path: Path) -> str:
    """task.name / task.heldout_file for `data`: a file or Hub name as it is; rows become `path`."""
    if isinstance(data, (str, Path)):
        return str(data)
    from rlvr.tasks.readers import give_rows

    give_rows(path, label, as_rows(data, label))
    return str(path)


def fit(model: str | None = None, rewards=None, train_dataset=None, *, eval_dataset=None,
        config: str | Path | None = None, resume: str | Path | None = None, callbacks: list | None = None,
        **overrides) -> dict:
    """Train and return the run's summary (summary.json's contents).

    model: a built-in name, a local directory or a Hub name (model.name). rewards: {reward: weight}, a
    list, or one reward; a reward is a TRL-style function (completions, **columns), a verl compute_score
    (recognised by its solution_str parameter), or any name rewards.weights takes. train_dataset /
    eval_dataset: a list of dicts, a datasets.Dataset, or a file or Hub name (task.name,
    task.heldout_file). config: a YAML file the rest starts from. resume: a run directory to continue
    (pass its Python rewards again). callbacks: objects with on_step_end(step, metrics, control), called
    after each step: what one returns ({name: number}) is added to the step's metrics, and
    control.should_training_stop = True ends the run after that step (rlvr/train/callbacks.py). overrides:
    any config key, as train__steps=40 or **{"train.steps": 40}."""
    from rlvr.config import build_config, validate
    from rlvr.train.rundir import check_run_dir
    from rlvr.train.grpo import train

    argv = [_override(k, v) for k, v in overrides.items()]
    if model is not None:
        argv.append(_override("model.name", str(model)))
    weights, given = name_rewards(rewards) if rewards is not None else ({}, {})
    if resume is not None:
        if config is not None or train_dataset is not None or eval_dataset is not None:
            raise RlvrError("rlvr.fit(resume=RUN_DIR) continues with the run's own config and data; give only "
                            "its Python rewards and any overrides")
        path = Path(resume) / "config.yaml"
        if not path.is_file():
            raise RlvrError(f"resume={resume}: no config.yaml there; give a run directory that rlvr wrote")
        cfg = build_config(path, [*argv, _override("train.out", str(resume))], source="rlvr.fit")
        check_resumed(cfg.rewards.weights, given)
        return train(cfg, resume=True, given=given, callbacks=callbacks)
    if weights:
        argv.append(_override("rewards.weights", weights))
    cfg = build_config(config, argv, source="rlvr.fit")
    data = Path(cfg.train.out).resolve() / "data"
    if train_dataset is not None:
        cfg.task.name = _dataset(train_dataset, "train_dataset", data / "train.jsonl")
    if eval_dataset is not None:
        cfg.task.heldout_file = _dataset(eval_dataset, "eval_dataset", data / "heldout.jsonl")
    validate(cfg)
    check_run_dir(cfg.train.out, cfg.train.overwrite, "rlvr.fit")  # said in this entry point's words
    return train(cfg, given=given, callbacks=callbacks)
