"""Every key of `rlvr train --help` reaches the code that reads it: for each key, a value other than the
default changes what that code produces, or the key is listed with the reason it cannot be seen on a CPU.

The table of keys is the config's own (rlvr.config.describe, what --help prints), so a new key fails
`test_every_key_is_checked` until it is given a check. The keys are checked where their effect is
whole, through the functions a run builds itself with (one tiny-random policy, no run directory):

- LEARN: the update phase, `rlvr.train.step.learn` (make_batch, policy_update, the schedule, the
  reference sync) on one fixed scored batch, twice, with the run's own builders (Settings.of and
  assemble.models_of): its metrics, the weights after it and the learning rate;
- ROLLOUT: the rollout phase, `sample_and_score` on a Run built by those builders (the engine of
  make_engine, the sampling settings, the per-group seeds, the rewards): its texts, log-probs, scores;
- DATA: the problems (build_splits), the prompt order (build_sampler), the episodes' environment
  (make_spec, one greedy episode), evaluation's settings;
- RUN (tests/e2e/test_key_reach_runs.py): what only a whole run shows (files, steps, checkpoints).
Each check compares with the same harness at the defaults (plus the check's context: e.g. a SAPO
knob is checked with algo.policy_loss=sapo).
"""
import atexit
import copy
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

from rlvr.config import build_config, describe
from rlvr.device import resolve_precision
from rlvr.errors import RlvrError
from rlvr.envs.episodes import make_spec, run_episodes
from rlvr.eval.grader import choose_grader
from rlvr.models import load_model, stop_token_ids
from rlvr.rewards import rewards_of
from rlvr.rewards.base import Scores
from rlvr.rollout.engines import builtin_engine, make_engine
from rlvr.tasks import build_splits
from rlvr.tasks.curriculum import build_sampler
from rlvr.train.assemble import models_of
from rlvr.train.distributed import Dist
from rlvr.train.step import collect, learn
from rlvr.train.settings import Settings
from rlvr.train.state import Collected, Data, Models, Run
from rlvr.train.update import EntropyState

from tests.e2e.test_key_reach_runs import RUN

KEYS = [key for key, _, _ in describe()]
FILES = Path(tempfile.mkdtemp(prefix="rlvr-key-reach-"))  # file tasks' rows (written once, below)
atexit.register(shutil.rmtree, FILES, ignore_errors=True)  # made at import, so no fixture removes it
for name, rows in (("train", [{"prompt": f"{i} + 1 =", "answer": str(i + 1)} for i in range(20)]),
                   ("heldout", [{"prompt": f"{i} * 2 =", "answer": str(2 * i)} for i in range(5)]),
                   ("ood", [{"prompt": f"{i} - 3 =", "answer": str(i - 3)} for i in range(5)]),
                   ("qa", [{"prompt": f"p{i}", "q": f"{i} + 2 =", "a": str(i + 2)} for i in range(20)])):
    (FILES / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
BASE = ["--model.name=tiny-random", "--task.heldout_size=4", "--task.ood_size=4", "--rollout.prompts_per_step=2",
        "--rollout.group_size=4", "--rollout.max_new_tokens=6", "--eval.max_new_tokens=6"]

# the update phase: key -> (value, context)
ITER2 = ("--algo.iterations=2", "--optimizer.lr=0.01")  # a second pass, where the ratio has left 1
LEARN = {
    "algo.preset": ("dr_grpo", ()),
    "algo.adv_estimator": ("rloo", ()),
    "algo.adv_scale": ("batch", ()),
    "algo.adv_eps": (10.0, ()),
    "algo.clip_low": (0.001, ITER2),
    "algo.clip_high": (0.001, ITER2),
    "algo.dual_clip": (1.001, ITER2),
    "algo.policy_loss": ("cispo", ITER2),
    "algo.sapo_tau_pos": (5.0, ("--algo.policy_loss=sapo", *ITER2)),
    "algo.sapo_tau_neg": (5.0, ("--algo.policy_loss=sapo", *ITER2)),
    "algo.cov_ratio": (0.5, ("--algo.policy_loss=clip_cov", "--algo.clip_cov_lb=-100", "--algo.clip_cov_ub=100",
                             *ITER2)),
    "algo.clip_cov_lb": (-5.0, ("--algo.policy_loss=clip_cov", "--algo.cov_ratio=0.5", *ITER2)),
    "algo.clip_cov_ub": (-50.0, ("--algo.policy_loss=clip_cov", "--algo.cov_ratio=0.5", "--algo.clip_cov_lb=-100",
                                 *ITER2)),
    "algo.kl_cov_coef": (50.0, ("--algo.policy_loss=kl_cov", "--algo.cov_ratio=0.5", *ITER2)),
    "algo.vespo_k_pos": (9.0, ("--algo.policy_loss=vespo", *ITER2)),
    "algo.vespo_lambda_pos": (9.0, ("--algo.policy_loss=vespo", *ITER2)),
    "algo.vespo_k_neg": (9.0, ("--algo.policy_loss=vespo", *ITER2)),
    "algo.vespo_lambda_neg": (9.0, ("--algo.policy_loss=vespo", *ITER2)),
    "algo.ratio_level": ("sequence", ITER2),
    "algo.aggregation": ("token-mean", ()),
    "algo.sampler_correction": ("token_truncate", ()),
    "algo.sampler_c_min": (0.9, ("--algo.sampler_correction=token_mask",)),
    "algo.sampler_c_max": (1.01, ("--algo.sampler_correction=token_truncate",)),
    "algo.off_policy_mask_threshold": (0.001, ITER2),
    "algo.top_entropy_quantile": (0.5, ()),
    "algo.norm_length": (100, ("--algo.aggregation=seq-mean-token-sum-norm",)),
    "algo.iterations": (2, ()),
    "algo.beta": (0.5, ITER2),
    "algo.kl_estimator": ("k1", ITER2),
    "algo.kl_in": ("reward", ()),
    "algo.entropy_coef": (0.1, ()),
    "algo.adaptive_entropy": (True, ()),
    "algo.entropy_target": (100.0, ("--algo.adaptive_entropy=true",)),
    "algo.entropy_coef_delta": (0.5, ("--algo.adaptive_entropy=true", "--algo.entropy_target=100")),
    "algo.entropy_coef_min": (0.3, ("--algo.adaptive_entropy=true",)),
    "algo.entropy_coef_max": (0.001, ("--algo.adaptive_entropy=true", "--algo.entropy_target=100")),
    "algo.mask_truncated": (True, ()),
    "algo.ref_sync_every": (1, ITER2),
    "algo.ref_mixup": (0.5, ("--algo.ref_sync_every=1", *ITER2)),
    "algo.value_lr": (0.1, ("--algo.adv_estimator=gae",)),
    "algo.value_coef": (5.0, ("--algo.adv_estimator=gae", *ITER2)),
    "algo.value_clip": (0.0001, ("--algo.adv_estimator=gae", *ITER2)),
    "algo.gamma": (0.5, ("--algo.adv_estimator=gae",)),
    "algo.lam": (0.5, ("--algo.adv_estimator=gae",)),
    "optimizer.lr": (0.01, ()),
    "optimizer.weight_decay": (0.5, ()),
    "optimizer.warmup_steps": (1, ()),
    "optimizer.max_grad_norm": (0.000001, ()),
    "optimizer.micro_batch_prompts": (1, ()),
    "optimizer.micro_batch_tokens": (20, ()),
    "rollout.tis_cap": (1.01, ()),
    "train.mixed_precision": ("bf16", ()),
    "train.lm_head": ("fused", ()),  # the fused head: the same log-probs, gradients within rounding
    "train.packed": (True, ()),  # padding-free forwards: the same log-probs and gradients within rounding
    "model.lora.r": (4, ()),
    "model.lora.alpha": (64, ("--model.lora.r=4", "--optimizer.lr=0.01")),
    "model.lora.dropout": (0.5, ("--model.lora.r=4", "--optimizer.lr=0.01")),
    "model.lora.target_modules": (["q_proj"], ("--model.lora.r=4", "--optimizer.lr=0.01")),
}

# the rollout phase: key -> (value, context)
ROLLOUT = {
    "rollout.prompts_per_step": (3, ()),
    "rollout.group_size": (2, ()),
    "rollout.max_new_tokens": (3, ()),
    "rollout.temperature": (0.5, ()),
    "rollout.top_p": (0.5, ()),
    "rollout.top_k": (3, ()),
    "rollout.weights": ("int8", ()),
    "rollout.engine": ("hf", ()),
    "train.seed": (1, ()),
    "rewards.weights": ({"format": 1.0}, ()),
    "rewards.soft_overlong": (True, ("--rewards.overlong_buffer=4",)),
    "rewards.overlong_buffer": (2, ("--rewards.weights={'length': 1.0}",)),
    "rewards.overlong_penalty": (5.0, ("--rewards.weights={'length': 1.0}",)),
    "algo.dynamic_sampling": (True, ()),
    "algo.max_refill": (0, ("--algo.dynamic_sampling=true",)),
    "env.name": ("tools", ()),
    "env.tools": (["python"], ("--env.name=tools",)),
    "env.example": ([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], ("--env.name=tools",)),
    "env.max_episode_tokens": (3, ("--env.name=tools",)),
    "rewards.timeout_s": (0.2, (f"--rewards.weights={{{__name__}:slow_reward: 1.0}}",)),
    "rewards.isolate": (True, (f"--rewards.weights={{{__name__}:pid_reward: 1.0}}",)),
    "task.system_prompt": ("Answer in one word.", ()),
    "task.few_shot": (1, ()),
}

# the data: key -> (value, context); what build_splits, build_sampler, the evaluation settings are
LEVELS = "--task.params={digits: 3, min_digits: 1}"  # three arithmetic levels, d1-n2 < d2-n2 < d3-n2
VARIED = "tests.e2e.test_tiny_run:varied_reward"
DATA = {
    "task.name": ("pyfunc", ()),
    "task.params": ({"digits": 2}, ()),
    "task.ood_name": ("pyfunc", ()),
    "task.ood_params": ({"digits": 3}, ()),
    "task.prompt_template": ("Q: {prompt}", ()),
    "task.heldout_size": (3, ()),
    "task.ood_size": (3, ()),
    "task.train_size": (10, ()),
    "task.seed": (1, ()),
    "curriculum.mode": ("schedule", (LEVELS, "--curriculum.schedule=[3, 5]")),
    "curriculum.levels": (["d3-n2", "d2-n2", "d1-n2"], (LEVELS, "--curriculum.mode=schedule", "--curriculum.schedule=[3, 5]")),
    "curriculum.schedule": ([1, 2], (LEVELS, "--curriculum.mode=schedule", "--curriculum.schedule=[3, 5]")),
    "curriculum.band_high": (0.5, (LEVELS, "--curriculum.mode=adaptive")),
    "curriculum.band_low": (0.6, (LEVELS, "--curriculum.mode=adaptive")),
    "curriculum.smoothing": (1.0, (LEVELS, "--curriculum.mode=adaptive")),
    "eval.batch_size": (1, ()),
    "eval.grader": (VARIED, (f"--rewards.weights={{{VARIED}: 1.0, correctness: 1.0}}",)),
    "eval.grader_threshold": (0.1, (f"--rewards.weights={{{VARIED}: 1.0}}",)),
    "task.columns": ({"prompt": "q", "answer": "a"}, (f"--task.name={FILES / 'qa.jsonl'}",)),
    "task.heldout_file": (str(FILES / "heldout.jsonl"), (f"--task.name={FILES / 'train.jsonl'}",)),
    "task.ood_file": (str(FILES / "ood.jsonl"), (f"--task.name={FILES / 'train.jsonl'}",)),
}

# what the run's models are: key -> (value, context)
MODELS = {
    "model.dtype": ("bfloat16", ()),
    "train.gradient_checkpointing": (True, ()),
    "model.quantize": ("nf4", ("--model.lora.r=4",)),
    "optimizer.state": ("8bit", ()),
}

# keys whose effect a CPU run cannot show, and why (each is covered where it can be: see the reason)
CPU_UNOBSERVABLE = {
    "rollout.cuda_graph": "CUDA only: decode replayed as CUDA graphs (tests/rollout/test_graphed.py on a GPU)",
    "rollout.vllm.gpu_memory_utilization": "vLLM on a GPU only (tests/rollout/test_vllm_gpu.py)",
    "rollout.vllm.sleep": "vLLM on a GPU only (tests/rollout/test_vllm_gpu.py)",
    "rollout.vllm.server_url": "needs a vLLM server: tests/rollout/test_vllm_server.py runs one in the vLLM venv",
    "train.parallel": "torchrun with several processes (tests/e2e/test_torchrun.py runs ddp and fsdp on gloo)",
    "train.join_timeout_s": "torchrun with several processes (tests/e2e/test_torchrun.py: a node whose process "
                            "never joins, and a collective that waits longer than it)",
    "rollout.compile": "speed only: the compiled decode step gives the eager step's tokens "
                       "(tests/rollout/test_lean.py); compiling takes tens of seconds on a CPU",
    "env.tool_budget_s": "binds only when a tool call outlasts it; a random model writes no tool call "
                         "(tests/envs/test_tool_batches.py times the budget out with a slow tool)",
    "env.max_turns": "a random model writes no tool call, so its episodes end after one turn "
                     "(tests/envs/test_episodes.py runs scripted multi-turn episodes to the limit)",
    "env.max_tool_tokens": "a random model writes no tool call, so no tool result is cut "
                           "(tests/envs/test_episodes.py cuts a scripted tool's result)",
    "task.config": "Hub datasets only (no Hub here); tests/tasks/test_files.py reads local files",
    "task.split": "Hub datasets and save_to_disk directories: RUN checks the file task keys",
    "task.heldout_split": "Hub datasets and save_to_disk directories: RUN checks the file task keys",
    "sft.batch_size": "rlvr sft only (tests/train/test_sft.py)",
    **{f"rollout.vllm.{k}": "vLLM only, not installed here (tests/rollout/test_vllm_engine.py, test_vllm_gpu.py)"
       for k in ("kv_cache_gib", "max_model_len", "weight_push", "weights_dir", "timeout_s")},
    "rollout.vllm.sync": "vLLM only, not installed here (tests/rollout/test_vllm_lora.py and test_vllm_lora_server.py "
                         "push adapters and merged weights to real vLLM; tests/rollout/test_weights.py resolves it)",
    "log.project": "read by wandb and trackio only, neither installed here (tensorboard writes into the run "
                   "directory: RUN checks log.trackers)",
}
# keys known not to reach their code today (strict xfail: the test fails once they do, to move them)
KNOWN_UNREACHED: dict[str, str] = {}


def slow_reward(completions, **kw):
    """Takes half a second a call: past rewards.timeout_s=0.2."""
    time.sleep(0.5)
    return [0.0] * len(completions)


def pid_reward(completions, **kw):
    """Scores with the id of the process that calls it: the trainer's, or rewards.isolate's worker's."""
    return [float(os.getpid())] * len(completions)


def test_every_key_is_checked_once():
    tables = (LEARN, ROLLOUT, DATA, MODELS, RUN, CPU_UNOBSERVABLE)
    counts = Counter(k for table in tables for k in table)
    assert sorted(set(KEYS) - set(counts)) == [], "give each new key a check (or a reason) in a table here"
    assert sorted(set(counts) - set(KEYS)) == []  # no check of a key that no longer exists
    assert [k for k, n in counts.items() if n > 1] == []


def _cfg(*overrides):
    return build_config(None, [*BASE, *[str(o) for o in overrides]])


def _arg(key, value):
    return f"--{key}={json.dumps(value)}"  # JSON is YAML: a string stays a string


def check(table, key, observe, phase):
    """The observable at the check's context and with the key changed on top: they differ."""
    value, context = table[key]
    base, changed = observe(context), observe((*context, _arg(key, value)))
    if key in KNOWN_UNREACHED:
        if base == changed:
            pytest.xfail(KNOWN_UNREACHED[key])
        pytest.fail(f"{key} now reaches {phase}: take it out of KNOWN_UNREACHED")
    assert changed != base, f"{key}={value!r} changes nothing in {phase}"


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny model's ops are too small to share out: one thread is faster, and far faster when the
    machine's cores are busy (a learn check: 1.2 s on one thread against 10 s on two, on a shared 2-core box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- the update phase

@pytest.fixture(scope="module")
def batch_world():
    """One scored batch of 2 prompts x 4 completions of the arithmetic task by tiny-random, with a
    sampler's log-probs moved off the trainer's (as an int8 or vLLM sampler's are), so sampler
    corrections act, and rewards that differ within each group."""
    torch.manual_seed(0)
    cfg = _cfg()
    policy, tok = load_model("tiny-random")
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id, precision="no")
    splits = build_splits(cfg.task)
    spec = make_spec(cfg.env, tok, splits.few_shot)
    problems = splits.train[:2]
    ep = run_episodes(builtin_engine(policy), spec, problems, group_size=4, sampling=settings.rollout.sampling,
                      seeds=[1, 2])
    r = ep.rollout
    shift = torch.linspace(-0.6, 0.6, r.sampler_logp.numel()).view_as(r.sampler_logp)
    r.sampler_logp = (r.sampler_logp + shift) * r.completion_mask
    totals = [1.0, 0.0, 0.5, 0.0, 0.0, 1.0, 0.25, 0.75]
    scores = Scores(per_function={"v": totals}, reasons={"v": [""] * 8}, total=totals, failed={"v": [False] * 8})
    collected = Collected(problems=problems, rollout=r, texts=ep.texts, scores=scores, metrics={})
    return policy, tok, splits, spec, collected


def learn_observable(world, overrides) -> tuple:
    """Two `learn` steps on the fixed batch under cfg: the metrics, the weights, the learning rate."""
    policy0, tok, splits, spec, collected = world
    cfg = _cfg(*overrides)
    torch.manual_seed(0)
    precision = resolve_precision(cfg.train.mixed_precision, torch.device("cpu"))
    models = models_of(cfg, copy.deepcopy(policy0), tok, Dist(), precision)
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy0, tok), pad_id=tok.pad_token_id, precision=precision)
    run = Run(settings=settings, models=models, data=Data(splits=splits, env=spec),
              engine=builtin_engine(models.policy), out=None)
    rows, a = [], settings.update.algo
    entropy = EntropyState(a.entropy_coef)  # the adaptive entropy controller's state, carried as the loop does
    for step in (1, 2):
        update, adv = learn(run, copy.deepcopy(collected), step, entropy)
        if a.adaptive_entropy:
            entropy = entropy.after(a, update["entropy/watched_mean"])
        rows.append(sorted((k, round(v, 10) if isinstance(v, float) else v) for k, v in {**update, **adv}.items()))
    weights = round(sum(float(p.double().abs().sum()) for p in models.policy.parameters()), 10)
    return rows, weights, models.scheduler.get_last_lr(), entropy.coef, entropy.last_entropy


@pytest.mark.slow
def test_learn_harness_is_deterministic(batch_world):
    assert learn_observable(batch_world, ()) == learn_observable(batch_world, ())


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(LEARN))
def test_update_key_reaches_the_update(batch_world, key):
    check(LEARN, key, lambda o: learn_observable(batch_world, o), "the update phase")


# ---------------------------------------------------------------- the rollout phase

def rollout_observable(world, overrides, tmp_path) -> tuple:
    """One step's collection (sample_and_score) under cfg, with the run's own builders."""
    policy0, tok, _, _, _ = world
    cfg = _cfg(*overrides)
    torch.manual_seed(0)
    splits = build_splits(cfg.task)
    policy = copy.deepcopy(policy0)
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id, precision="no")
    data = Data(splits=splits, env=make_spec(cfg.env, tok, splits.few_shot, cfg.task.system_prompt),
                rewards=rewards_of(cfg), sampler=build_sampler(cfg.curriculum, splits.train, cfg.train.seed))
    run = Run(settings=settings, models=Models(policy=policy, tok=tok), data=data,
              engine=make_engine(cfg, policy, tmp_path), out=tmp_path)
    try:
        c = collect(run, 1)
    except RlvrError as e:  # what a run stops with (rewards.timeout_s) is what it shows
        return str(e)
    logp = c.rollout.sampler_logp
    return (c.texts, sorted(c.scores.per_function.items()), [round(float(x), 6) for x in logp.flatten()],
            c.rollout.prompt_ids, sorted(c.metrics))


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(ROLLOUT))
def test_rollout_key_reaches_the_rollout(batch_world, key, tmp_path):
    check(ROLLOUT, key, lambda o: rollout_observable(batch_world, o, tmp_path), "the rollout phase")


# ---------------------------------------------------------------- the data and evaluation settings

def data_observable(world, overrides) -> tuple:
    """The problems of every split, the prompt order of 6 steps (adaptive: with pass rates that fall
    with the difficulty), the evaluation's settings."""
    _, tok, _, _, _ = world
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
    text = lambda ps: [(p.question, p.answer, p.difficulty) for p in ps]
    settings = Settings.of(cfg, stop_ids=[0], pad_id=0, precision="no")
    grader = choose_grader(rewards_of(cfg), cfg.eval.grader, cfg.eval.grader_threshold)
    return text(splits.train), text(splits.heldout), text(splits.ood), order, settings.eval, grader.name, grader.threshold


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(DATA))
def test_data_key_reaches_the_data(batch_world, key):
    check(DATA, key, lambda o: data_observable(batch_world, o), "the data or the evaluation's settings")


# ---------------------------------------------------------------- the models

def models_observable(overrides) -> tuple:
    """What each weight is held as (dtype, tensor type), gradient checkpointing, the optimizer's class."""
    cfg = _cfg(*overrides)
    policy, tok = load_model(cfg.model.name, cfg.model.dtype, quantize=cfg.model.quantize)
    m = models_of(cfg, policy, tok, Dist(), "no")
    held = sorted({(str(p.dtype), type(p.data).__name__) for p in m.policy.parameters()})
    return held, bool(getattr(m.policy, "is_gradient_checkpointing", False)), type(m.optimizer).__name__


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(MODELS))
def test_model_key_reaches_the_models(key):
    check(MODELS, key, models_observable, "the run's models")
