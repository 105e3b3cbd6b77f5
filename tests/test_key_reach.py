"""Every key of `rlvr train --help` reaches the code that reads it and does what it promises there: for each
key, a value other than the default gives the effect the key promises (a bound, a count, a dtype, the same
values within rounding by another mechanism, ...), asserted by the effect function in its table entry; where
a key has no definite effect to assert here (a seed, an objective's knob whose maths tests/algo and
tests/compat pin), the entry is Differs(why) and the check asserts only that the key moves what the phase
produces. A key a CPU cannot show is listed with the reason.

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
knob is checked with algo.policy_loss=sapo). The base observation of each context is made once per module
(`observed`), not once per key.
"""
import atexit
import copy
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from rlvr.algo.presets import PRESETS
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
from rlvr.train.optim import current_lr
from rlvr.train.step import collect, learn
from rlvr.train.settings import Settings, engine_settings
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


def _cfg(*overrides):
    return build_config(None, [*BASE, *[str(o) for o in overrides]])


def _arg(key, value):
    return f"--{key}={json.dumps(value)}"  # JSON is YAML: a string stays a string


# ---------------------------------------------------------------- what a check asserts

@dataclass(frozen=True)
class Differs:
    """A key with no definite value to assert here: its check asserts only that it moves the phase's output,
    and `why` says why nothing more definite can be asserted (and where its maths is pinned)."""

    why: str


@dataclass(frozen=True)
class SameAs:
    """The key is a name for other keys' values: the changed observation equals the one of the context with
    these overrides instead, to the last bit."""

    overrides: tuple[str, ...]


MATHS = "the objective's maths; tests/algo and the verl/TRL parity tests (tests/compat) pin it with hand values"
ADVANTAGES = "the advantages' maths; tests/algo/test_advantages.py and tests/compat/test_verl_advantages.py pin it"
SEEDED = "a seed: which values it draws has no closed form, only that they are others"


def close(a: float, b: float, rel: float, tiny: float = 1e-7) -> bool:
    """a and b within rel of the larger, or both within `tiny` of each other (a loss of 1e-8 is a zero's
    rounding: the group-centred advantages sum to 0 and the first pass's ratio is 1)."""
    return abs(a - b) <= rel * max(abs(a), abs(b)) + tiny


def vec(tensors: dict) -> torch.Tensor:
    return torch.cat([t.flatten() for _, t in sorted(tensors.items())])


# ---------------------------------------------------------------- the update phase

@dataclass
class Learned:
    """Two `learn` steps on the fixed batch, and what the update did in them."""

    rows: list[dict]  # each step's update and advantage metrics
    lrs: list[float]  # the learning rate each step's update ran at
    weights: list[dict]  # name -> fp64 copy of every policy weight: at the start, after step 1, after step 2
    grads: list[dict]  # name -> the gradient each optimizer step took (after the clip), fp64
    vocab_saved: int  # elements of the largest [..., vocabulary] tensor autograd kept for a backward
    fed: list[tuple]  # (rows, tokens) of each token batch the policy's embedding took with a gradient (the update's)
    dtypes: set  # dtypes the policy's linear layers computed in, with a gradient
    held: set  # dtypes the policy's weights are held in
    tokens: int  # real completion tokens of the batch
    trained: dict  # name -> shape of each weight the optimizer trains
    lora: tuple  # (alpha / r scaling, dropout p) of the adapters (None, None without)
    entropy: tuple  # the adaptive entropy controller's (coefficient, last entropy) after the steps

    def key(self) -> tuple:
        """What `Differs` compares: the metrics (to 1e-10), the weights, the schedule, the controller."""
        rows = [sorted((k, round(v, 10) if isinstance(v, float) else v) for k, v in r.items()) for r in self.rows]
        return rows, round(float(vec(self.weights[-1]).abs().sum()), 10), self.lrs, self.entropy


def learn_observable(world, overrides) -> Learned:
    """Two `learn` steps on the fixed batch under cfg, watched through torch's own hooks: the optimizer's
    step pre-hook (the gradient it steps with), saved-tensor hooks (what autograd keeps for the backward),
    the embedding's and linear layers' forward hooks (what the update's forwards take and compute in)."""
    policy0, tok, splits, spec, collected = world
    cfg = _cfg(*overrides)
    torch.manual_seed(0)
    precision = resolve_precision(cfg.train.mixed_precision, torch.device("cpu"))
    models = models_of(cfg, copy.deepcopy(policy0), tok, Dist(), precision)
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy0, tok), pad_id=tok.pad_token_id, precision=precision)
    run = Run(settings=settings, models=models, data=Data(splits=splits, env=spec),
              engine=builtin_engine(models.policy), out=None)
    policy, vocab = models.policy, policy0.config.vocab_size
    names = {id(p): n for n, p in policy.named_parameters()}
    names.update({id(p): f"critic.{n}" for n, p in (models.critic.named_parameters() if models.critic else ())})
    weights = lambda: {n: p.detach().double().clone() for n, p in policy.named_parameters()}
    seen = {"grads": [], "vocab": 0, "rows": [], "dtypes": set()}

    def stepped(optimizer, args, kwargs):
        seen["grads"].append({names[id(p)]: p.grad.double().clone() for g in optimizer.param_groups
                              for p in g["params"] if p.grad is not None})

    def saved(t):
        if t.dim() and t.shape[-1] == vocab:
            seen["vocab"] = max(seen["vocab"], t.numel())
        return t

    def embedded(module, args):
        if torch.is_grad_enabled():
            seen["rows"].append((args[0].shape[0], args[0].numel()))

    def computed(module, args, out):
        if torch.is_grad_enabled():
            seen["dtypes"].add(out.dtype)

    hooks = [models.optimizer.register_step_pre_hook(stepped)]
    for m in policy.modules():
        if isinstance(m, torch.nn.Embedding):
            hooks.append(m.register_forward_pre_hook(embedded))
        elif isinstance(m, torch.nn.Linear):
            hooks.append(m.register_forward_hook(computed))
    rows, lrs, states, e = [], [], [weights()], settings.update.entropy
    entropy = EntropyState(e.coef)  # the adaptive entropy controller's state, carried as the loop does
    try:
        for step in (1, 2):
            lrs.append(current_lr(models.scheduler))
            with torch.autograd.graph.saved_tensors_hooks(saved, lambda t: t):
                update, adv = learn(run, copy.deepcopy(collected), step, entropy)
            if e.adaptive:
                entropy = entropy.after(e, update["entropy/watched_mean"])
            rows.append({**update, **adv})
            states.append(weights())
    finally:
        for h in hooks:
            h.remove()
    lora = next(((m.scaling["default"], float(m.lora_dropout["default"].p) if isinstance(
        m.lora_dropout["default"], torch.nn.Dropout) else 0.0) for m in policy.modules()
                 if hasattr(m, "scaling") and isinstance(getattr(m, "scaling"), dict)), (None, None))
    trained = {names[id(p)]: tuple(p.shape) for g in models.optimizer.param_groups for p in g["params"]}
    return Learned(rows=rows, lrs=lrs, weights=states, grads=seen["grads"], vocab_saved=seen["vocab"],
                   fed=seen["rows"], dtypes=seen["dtypes"],
                   held={p.dtype for p in policy.parameters()}, tokens=int(collected.rollout.completion_mask.sum()), trained=trained, lora=lora,
                   entropy=(entropy.coef, entropy.last_entropy))


# the first step's metrics that the forward and the loss make (a mechanism that promises the same values
# must give them within rounding; the rest of a row counts, e.g. micro_batches, or is the sampler's)
FORWARD_METRICS = ("loss", "entropy", "grad_norm", "ratio/mean", "ratio/min", "ratio/max", "kl",
                   "rollout/logp_mismatch_mean_abs", "rollout/logp_mismatch_max")


def same_values(base: Learned, changed: Learned, rel: float, grad: float) -> None:
    """The first step's metrics within `rel` of the base's, its gradient within `grad` of the base's in norm
    (||g - g0|| <= grad ||g0||), and the weights after it as close as that gradient allows: AdamW's first step
    is lr * g / (|g| + eps), so an entry whose gradient is near 0 may move by up to lr in either direction."""
    for k in FORWARD_METRICS:
        assert close(changed.rows[0][k], base.rows[0][k], rel), (k, changed.rows[0][k], base.rows[0][k])
    g0, g1 = vec(base.grads[0]), vec(changed.grads[0])
    assert (g1 - g0).norm() <= grad * g0.norm(), float((g1 - g0).norm() / g0.norm())
    moved0, moved1 = vec(base.weights[1]) - vec(base.weights[0]), vec(changed.weights[1]) - vec(changed.weights[0])
    assert float(torch.nn.functional.cosine_similarity(moved0, moved1, 0)) > 0.99


def fused_head(base: Learned, changed: Learned) -> None:
    """fused: no [tokens, vocabulary] tensor kept for the backward (the chunked head keeps its log-softmax),
    the same log-probs and gradients within rounding."""
    assert base.vocab_saved > 0 and changed.vocab_saved == 0, (base.vocab_saved, changed.vocab_saved)
    same_values(base, changed, 1e-6, 1e-5)


def packed(base: Learned, changed: Learned) -> None:
    """Padding-free: each micro-batch's update forward is one call of a packed row per group (sdpa: the
    group's prompt once, then its completions; pads only after the shorter group's row), where the padded
    forward makes several (the prompts' rows, then the completions' rows per length bucket); the same
    log-probs and gradients within rounding."""
    assert [n for n, _ in changed.fed] == [2, 2], changed.fed  # 2 steps x 1 micro-batch: 2 groups a call
    assert len(base.fed) > 2 * len(changed.fed), base.fed
    same_values(base, changed, 1e-5, 1e-4)


def micro_batched(n: int):
    def effect(base: Learned, changed: Learned) -> None:
        """n forward/backward passes instead of one, gradients summed: the same step within rounding."""
        assert base.rows[0]["micro_batches"] == 1 and changed.rows[0]["micro_batches"] == n
        same_values(base, changed, 1e-6, 1e-5)
    effect.__doc__ = f"{n} micro-batches: {effect.__doc__}"
    return effect


def clipped(base: Learned, changed: Learned) -> None:
    """The gradient the optimizer steps with has norm min(the raw norm (grad_norm), max_grad_norm): the bound
    (1e-6 here) where the raw norm is above it, as clip_grad_norm_ makes it (max / (norm + 1e-6))."""
    for obs, bound in ((base, 1.0), (changed, 1e-6)):
        for row, grads in zip(obs.rows, obs.grads):
            raw, applied = row["grad_norm"], float(vec(grads).norm())
            assert raw > bound  # the bound binds
            assert close(applied, bound * raw / (raw + 1e-6), 1e-5), (applied, bound, raw)


def lr_steps(base: Learned, changed: Learned) -> None:
    """The schedule runs at the configured lr (warm-up 3: 1/3, then 2/3 of it), and AdamW's first step
    moves each weight by lr * g / (|g| + 1e-8): the largest move is that lr, to the fp32 rounding of the
    weight it is added to (an ulp of the largest weight, 2^-23 of it)."""
    for obs, lr in ((base, 2e-5), (changed, 0.01)):
        assert obs.lrs == pytest.approx([lr / 3, 2 * lr / 3], rel=1e-12)
        w0 = vec(obs.weights[0])
        moved = float((vec(obs.weights[1]) - w0).abs().max())
        assert abs(moved - lr / 3) <= 2 ** -23 * float(w0.abs().max()), (moved, lr / 3)


def warmup(base: Learned, changed: Learned) -> None:
    """Warm-up over 1 step: the full lr from the first (the default 3: 1/3, then 2/3)."""
    assert base.lrs == pytest.approx([2e-5 / 3, 4e-5 / 3], rel=1e-12)
    assert changed.lrs == pytest.approx([2e-5, 2e-5], rel=1e-12)


def decayed(base: Learned, changed: Learned) -> None:
    """Decoupled decay: the first step multiplies each weight by (1 - lr * 0.5) before the same Adam step, so
    it moves the weights by -lr * 0.5 * w beyond the base's step."""
    lr, w0 = 0.01 / 3, vec(base.weights[0])
    extra = (vec(changed.weights[1]) - vec(base.weights[1]))
    assert torch.allclose(extra, -lr * 0.5 * w0, rtol=0, atol=1e-7), float((extra + lr * 0.5 * w0).abs().max())
    assert float((lr * 0.5 * w0).abs().max()) > 1e-5  # a shift the tolerance cannot hide


def eight_bit(base: Learned, changed: Learned) -> None:
    """8-bit moments follow fp32 AdamW: the first step is fp32's (its moments are computed before they are
    stored in 8 bits), and over the two steps the whole model's movement is within 5% of fp32 AdamW's in norm
    (docs/gpu.md's bound, there per tensor over tests/train/test_optim.py's 3 steps; measured here 3.3%);
    per tensor within 10% (measured: at most 8.2%, layer 0's down_proj, and 5.8% the embedding: at this lr
    and warm-up the per-tensor 5% of test_optim does not hold for every tensor). And 8-bit, not fp32 in
    disguise: a tensor of 4096 values or more moves otherwise than under fp32 moments."""
    start, quantised = base.weights[0], [n for n, w in base.weights[0].items() if w.numel() >= 4096]
    first32, first8 = vec(base.weights[1]) - vec(start), vec(changed.weights[1]) - vec(start)
    assert (first8 - first32).norm() <= 1e-3 * first32.norm()  # fp32 rounding of the weights (measured 4e-5)
    d32, d8 = vec(base.weights[-1]) - vec(start), vec(changed.weights[-1]) - vec(start)
    assert (d8 - d32).norm() <= 0.05 * d32.norm(), float((d8 - d32).norm() / d32.norm())
    for n in start:
        d32, d8 = base.weights[-1][n] - start[n], changed.weights[-1][n] - start[n]
        assert (d8 - d32).norm() <= 0.1 * d32.norm(), n
    assert any(not torch.equal(changed.weights[-1][n], base.weights[-1][n]) for n in quantised)


def bf16_autocast(base: Learned, changed: Learned) -> None:
    """bf16: the update's forward computes its linear layers in bfloat16 (autocast), over fp32 weights."""
    assert base.dtypes == {torch.float32} and torch.bfloat16 in changed.dtypes, (base.dtypes, changed.dtypes)
    assert changed.held == base.held == {torch.float32}


def iterations(base: Learned, changed: Learned) -> None:
    """Two optimizer steps per batch (one per iteration) instead of one."""
    assert len(base.grads) == 2 and len(changed.grads) == 4


def entropy_coef(base: Learned, changed: Learned) -> None:
    """The bonus's coefficient is 0.1 at each step (reported as entropy/coef; the default 0 adds none)."""
    assert "entropy/coef" not in base.rows[0]
    assert [r["entropy/coef"] for r in changed.rows] == [0.1, 0.1]


def adaptive(start: float, target: float, delta: float, low: float, high: float):
    """Skywork-OR1's controller, by its definition in algo.adaptive_entropy's help: the coefficient rises by
    delta while the watched entropy is at or below the target and falls otherwise, within [low, high]; the
    bonus applies only while the entropy is at or below the target (the first step: no entropy seen yet)."""
    def effect(base: Learned, changed: Learned) -> None:
        coef, last = start, math.inf
        for row in changed.rows:
            assert row["entropy/coef"] == pytest.approx(coef if last <= target else 0.0, abs=1e-12)
            entropy = row["entropy/watched_mean"]
            coef, last = min(max(coef + (delta if entropy <= target else -delta), low), high), entropy
        assert changed.entropy == pytest.approx((coef, last), abs=1e-12)
        assert changed.key() != base.key()
    return effect


def top_entropy(base: Learned, changed: Learned) -> None:
    """The policy gradient on the top half of the tokens by entropy (those at or above the median):
    entropy/selected_frac is 0.5, to a token, plus ties at the median: a group's 4 rows share their first
    token's distribution, so up to 3 ties a group (2 groups)."""
    assert "entropy/selected_frac" not in base.rows[0]
    n = changed.tokens
    assert 0.5 - 1 / n <= changed.rows[0]["entropy/selected_frac"] <= 0.5 + 6 / n, changed.rows[0]


def lora_rank(base: Learned, changed: Learned) -> None:
    """Rank-4 adapters are all that trains: each trained weight is a lora_A (4 x in) or lora_B (out x 4), and
    the base's weights end as they started."""
    assert all("lora_" not in n for n in base.trained)
    assert changed.trained and all(("lora_A" in n and s[0] == 4) or ("lora_B" in n and s[1] == 4)
                                   for n, s in changed.trained.items()), changed.trained
    frozen = [n for n in changed.weights[0] if "lora_" not in n]
    assert frozen and all(torch.equal(changed.weights[0][n], changed.weights[-1][n]) for n in frozen)


def lora_scaling(base: Learned, changed: Learned) -> None:
    """The adapters' scale is alpha / r = 64 / 4 (the default alpha 16: 4)."""
    assert base.lora[0] == 4.0 and changed.lora[0] == 16.0


def lora_dropout(base: Learned, changed: Learned) -> None:
    """The adapters' dropout drops with p 0.5 (the default: none)."""
    assert base.lora[1] == 0.0 and changed.lora[1] == 0.5
    assert changed.key() != base.key()  # and it is on in the update's forwards


def lora_targets(base: Learned, changed: Learned) -> None:
    """Adapters only on the q projections."""
    layers = lambda obs: {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in obs.trained}
    assert layers(base) == {"q_proj", "k_proj", "v_proj", "o_proj"} and layers(changed) == {"q_proj"}


ITER2 = ("--algo.iterations=2", "--optimizer.lr=0.01")  # a second pass, where the ratio has left 1
LORA = ("--model.lora.r=4", "--optimizer.lr=0.01")
# key -> (value, context, effect)
LEARN = {
    "algo.preset": ("dr_grpo", (), SameAs(tuple(_arg(f"algo.{k}", v) for k, v in PRESETS["dr_grpo"].items()))),
    "algo.adv_estimator": ("rloo", (), Differs(ADVANTAGES)),
    "algo.adv_scale": ("batch", (), Differs(ADVANTAGES)),
    "algo.adv_eps": (10.0, (), Differs(ADVANTAGES)),
    "algo.clip_low": (0.001, ITER2, Differs(MATHS)),
    "algo.clip_high": (0.001, ITER2, Differs(MATHS)),
    "algo.dual_clip": (1.001, ITER2, Differs(MATHS)),
    "algo.policy_loss": ("cispo", ITER2, Differs(MATHS)),
    "algo.sapo_tau_pos": (5.0, ("--algo.policy_loss=sapo", *ITER2), Differs(MATHS)),
    "algo.sapo_tau_neg": (5.0, ("--algo.policy_loss=sapo", *ITER2), Differs(MATHS)),
    "algo.cov_ratio": (0.5, ("--algo.policy_loss=clip_cov", "--algo.clip_cov_lb=-100", "--algo.clip_cov_ub=100",
                             *ITER2), Differs(MATHS)),
    "algo.clip_cov_lb": (-5.0, ("--algo.policy_loss=clip_cov", "--algo.cov_ratio=0.5", *ITER2), Differs(MATHS)),
    "algo.clip_cov_ub": (-50.0, ("--algo.policy_loss=clip_cov", "--algo.cov_ratio=0.5", "--algo.clip_cov_lb=-100",
                                 *ITER2), Differs(MATHS)),
    "algo.kl_cov_coef": (50.0, ("--algo.policy_loss=kl_cov", "--algo.cov_ratio=0.5", *ITER2), Differs(MATHS)),
    "algo.vespo_k_pos": (9.0, ("--algo.policy_loss=vespo", *ITER2), Differs(MATHS)),
    "algo.vespo_lambda_pos": (9.0, ("--algo.policy_loss=vespo", *ITER2), Differs(MATHS)),
    "algo.vespo_k_neg": (9.0, ("--algo.policy_loss=vespo", *ITER2), Differs(MATHS)),
    "algo.vespo_lambda_neg": (9.0, ("--algo.policy_loss=vespo", *ITER2), Differs(MATHS)),
    "algo.ratio_level": ("sequence", ITER2, Differs(MATHS)),
    "algo.aggregation": ("token-mean", (), Differs(MATHS)),
    "algo.sampler_correction": ("token_truncate", (), Differs(MATHS)),
    "algo.sampler_c_min": (0.9, ("--algo.sampler_correction=token_mask",), Differs(MATHS)),
    "algo.sampler_c_max": (1.01, ("--algo.sampler_correction=token_truncate",), Differs(MATHS)),
    "algo.off_policy_mask_threshold": (0.001, ITER2, Differs(MATHS)),
    "algo.top_entropy_quantile": (0.5, (), top_entropy),
    "algo.norm_length": (100, ("--algo.aggregation=seq-mean-token-sum-norm",), Differs(MATHS)),
    "algo.iterations": (2, (), iterations),
    "algo.beta": (0.5, ITER2, Differs(MATHS)),
    "algo.kl_estimator": ("k1", ITER2, Differs(MATHS)),
    "algo.kl_in": ("reward", (), Differs(MATHS)),
    "algo.entropy_coef": (0.1, (), entropy_coef),
    "algo.adaptive_entropy": (True, (), adaptive(0.0, 0.2, 0.005, 0.0, 1.0)),
    "algo.entropy_target": (100.0, ("--algo.adaptive_entropy=true",), adaptive(0.0, 100.0, 0.005, 0.0, 1.0)),
    "algo.entropy_coef_delta": (0.5, ("--algo.adaptive_entropy=true", "--algo.entropy_target=100"),
                                adaptive(0.0, 100.0, 0.5, 0.0, 1.0)),
    "algo.entropy_coef_min": (0.3, ("--algo.adaptive_entropy=true",), adaptive(0.0, 0.2, 0.005, 0.3, 1.0)),
    "algo.entropy_coef_max": (0.001, ("--algo.adaptive_entropy=true", "--algo.entropy_target=100"),
                              adaptive(0.0, 100.0, 0.005, 0.0, 0.001)),
    "algo.mask_truncated": (True, (), Differs(MATHS)),
    "algo.ref_sync_every": (1, ITER2, Differs("the reference's refresh: tests/train/test_forward.py pins its "
                                              "values; here only the KL of step 2 can show it")),
    "algo.ref_mixup": (0.5, ("--algo.ref_sync_every=1", *ITER2), Differs("as algo.ref_sync_every")),
    "algo.value_lr": (0.1, ("--algo.adv_estimator=gae",), Differs(ADVANTAGES + " (the critic's values)")),
    "algo.value_coef": (5.0, ("--algo.adv_estimator=gae", *ITER2), Differs(MATHS)),
    "algo.value_clip": (0.0001, ("--algo.adv_estimator=gae", *ITER2), Differs(MATHS)),
    "algo.gamma": (0.5, ("--algo.adv_estimator=gae",), Differs(ADVANTAGES)),
    "algo.lam": (0.5, ("--algo.adv_estimator=gae",), Differs(ADVANTAGES)),
    "optimizer.lr": (0.01, (), lr_steps),
    "optimizer.weight_decay": (0.5, ("--optimizer.lr=0.01",), decayed),
    "optimizer.warmup_steps": (1, (), warmup),
    "optimizer.max_grad_norm": (0.000001, (), clipped),
    "optimizer.micro_batch_prompts": (1, (), micro_batched(2)),
    "optimizer.micro_batch_tokens": (20, (), micro_batched(2)),
    "optimizer.state": ("8bit", (), eight_bit),
    "rollout.tis_cap": (1.01, (), Differs(MATHS + " (the sampler correction's cap)")),
    "train.mixed_precision": ("bf16", (), bf16_autocast),
    "train.lm_head": ("fused", (), fused_head),
    "train.packed": (True, (), packed),
    "model.lora.r": (4, (), lora_rank),
    "model.lora.alpha": (64, LORA, lora_scaling),
    "model.lora.dropout": (0.5, LORA, lora_dropout),
    "model.lora.target_modules": (["q_proj"], LORA, lora_targets),
}


# ---------------------------------------------------------------- the rollout phase

@dataclass
class Sampled:
    """One step's collection (sample_and_score), or the error the run stops with."""

    error: str = ""
    prompts: list = field(default_factory=list)  # each group's prompt, decoded
    lengths: list = field(default_factory=list)  # each row's completion tokens (the environment's too)
    scores: dict = field(default_factory=dict)  # reward name -> each row's score
    metrics: dict = field(default_factory=dict)
    rollout: object = None
    texts: list = field(default_factory=list)
    few_shot: list = field(default_factory=list)  # the task's worked examples (question, solution)
    policy: object = None  # the weights it sampled from, to recompute its distribution

    def key(self) -> tuple:
        if self.error:
            return (self.error,)
        r = self.rollout
        return (self.texts, sorted(self.scores.items()), [round(float(x), 6) for x in r.sampler_logp.flatten()],
                r.prompt_ids, sorted(self.metrics))


def rollout_observable(world, overrides, tmp_path) -> Sampled:
    """One step's collection (sample_and_score) under cfg, with the run's own builders."""
    policy0, tok, _, _, _ = world
    cfg = _cfg(*overrides)
    torch.manual_seed(0)
    splits = build_splits(cfg.task)
    policy = copy.deepcopy(policy0)
    settings = Settings.of(cfg, stop_ids=stop_token_ids(policy, tok), pad_id=tok.pad_token_id, precision="no")
    data = Data(splits=splits, env=make_spec(cfg.env, tok, splits.few_shot, cfg.task.system_prompt),
                rewards=rewards_of(cfg.rewards, cfg.rollout.max_new_tokens), sampler=build_sampler(cfg.curriculum, splits.train, cfg.train.seed))
    run = Run(settings=settings, models=Models(policy=policy, tok=tok), data=data,
              engine=make_engine(engine_settings(cfg), policy, tmp_path), out=tmp_path)
    try:
        c = collect(run, 1)
    except RlvrError as e:  # what a run stops with (rewards.timeout_s) is what it shows
        return Sampled(error=str(e))
    r = c.rollout
    present = r.completion_mask if r.env_mask is None else (r.completion_mask + r.env_mask).clamp(max=1)
    return Sampled(prompts=[tok.decode(p) for p in r.prompt_ids], lengths=present.sum(-1).int().tolist(),
                   scores=dict(c.scores.per_function), metrics=dict(c.metrics), rollout=r, texts=c.texts,
                   few_shot=list(splits.few_shot), policy=policy)


def token_stats(obs: Sampled, temperature: float = 1.0) -> tuple[list[int], list[float], torch.Tensor]:
    """For every sampled token: its rank in the policy's distribution there (0: the most likely), the mass of
    the tokens more likely than it, and (a [B, Tc] tensor, 0 off the tokens) its log-prob at `temperature`."""
    r, ranks, before = obs.rollout, [], []
    logp = torch.zeros_like(r.sampler_logp)
    with torch.no_grad():
        for row in range(r.completion_ids.shape[0]):
            prompt, n = r.prompt_ids[row // r.group_size], int(r.completion_mask[row].sum())
            ids = torch.tensor([prompt + r.completion_ids[row, :n].tolist()])
            logits = obs.policy(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + n].float()
            probs = logits.softmax(-1)
            for t in range(n):
                tok = int(r.completion_ids[row, t])
                above = probs[t] > probs[t, tok]
                ranks.append(int(above.sum()))
                before.append(float(probs[t][above].sum()))
            logp[row, :n] = (logits / temperature).log_softmax(-1).gather(-1, r.completion_ids[row, :n, None])[:, 0]
    return ranks, before, logp


def sampler_gap(obs: Sampled, temperature: float = 1.0) -> float:
    """The largest |sampler log-prob - the policy's own| over the sampled tokens."""
    r = obs.rollout
    return float(((r.sampler_logp - token_stats(obs, temperature)[2]).abs() * r.completion_mask).max())


def rows_of(prompts: int, group: int):
    def effect(base: Sampled, changed: Sampled) -> None:
        """The batch is prompts x group rows."""
        assert (len(base.prompts), len(base.lengths)) == (2, 8)
        assert (len(changed.prompts), len(changed.lengths)) == (prompts, prompts * group)
    effect.__doc__ = f"{prompts} prompts x {group} completions"
    return effect


def at_most(n: int, base_n: int = 6):
    def effect(base: Sampled, changed: Sampled) -> None:
        """No completion is longer than n tokens (the base's reach past it)."""
        assert max(changed.lengths) <= n < max(base.lengths) <= base_n, (changed.lengths, base.lengths)
    effect.__doc__ = f"every completion at most {n} tokens"
    return effect


def tempered(base: Sampled, changed: Sampled) -> None:
    """The sampler's log-probs are the policy's at temperature 0.5 (the base's at 1)."""
    assert sampler_gap(base, 1.0) < 1e-4 and sampler_gap(changed, 0.5) < 1e-4
    assert sampler_gap(changed, 1.0) > 1e-2


def top_k(base: Sampled, changed: Sampled) -> None:
    """Each token is one of the 3 most likely there (the base draws others too)."""
    assert max(token_stats(changed)[0]) < 3 <= max(token_stats(base)[0])


def top_p(base: Sampled, changed: Sampled) -> None:
    """Each token is in the nucleus of mass 0.5: the tokens more likely than it hold less than 0.5."""
    assert max(token_stats(changed)[1]) < 0.5 <= max(token_stats(base)[1])


def int8_copy(base: Sampled, changed: Sampled) -> None:
    """int8: a re-quantised copy samples, so its log-probs are not the policy's own (the base's are, to
    rounding); within int8's error of them (a bound of 0.5 nats a token: measured 0.1)."""
    assert sampler_gap(base) < 1e-4 and 1e-3 < sampler_gap(changed) < 0.5, (sampler_gap(base), sampler_gap(changed))


def rewarded_by(names: set):
    def effect(base: Sampled, changed: Sampled) -> None:
        assert set(base.scores) == {"correctness", "format"} and set(changed.scores) == names
    effect.__doc__ = f"the rewards are {sorted(names)}"
    return effect


def overlong(buffer: int, penalty: float, name: str = "length"):
    def effect(base: Sampled, changed: Sampled) -> None:
        """The length reward is DAPO's soft overlong punishment at max 6 tokens: 0 up to 6 - buffer tokens,
        then falling linearly to -penalty at 6 (computed here from each completion's length)."""
        free = 6 - buffer
        want = [-penalty * min(n - free, buffer) / buffer if n > free else 0.0 for n in changed.lengths]
        assert changed.scores[name] == pytest.approx(want, abs=1e-12)
        assert changed.scores[name] != base.scores.get(name)
    return effect


def refilled(most: int):
    def effect(base: Sampled, changed: Sampled) -> None:
        """Groups whose rewards are all equal are dropped and refilled: every kept group has unequal rewards,
        else (none informative: a random model's) the refill ran its `most` extra rounds."""
        totals = torch.tensor([sum(v) for v in zip(*changed.scores.values())]).view(-1, 4)
        mixed = bool((totals != totals[:, :1]).any(-1).all())
        assert mixed or changed.metrics["dynamic/rounds"] == 1 + most, (totals, changed.metrics)
        assert base.metrics.get("dynamic/rounds") != changed.metrics["dynamic/rounds"]
    return effect


def prompts_hold(text: str, absent_in_base: bool = True):
    def effect(base: Sampled, changed: Sampled) -> None:
        assert all(text in p for p in changed.prompts), changed.prompts[0]
        assert not absent_in_base or not any(text in p for p in base.prompts)
    effect.__doc__ = f"every prompt holds {text!r}"
    return effect


def few_shot(base: Sampled, changed: Sampled) -> None:
    """A worked example (the task's own: its question and solution) before the question."""
    (question, solution), = changed.few_shot[:1]
    assert all(question in p and solution.splitlines()[-1] in p for p in changed.prompts)
    assert not any(question in p for p in base.prompts)


def tools_offered(base: Sampled, changed: Sampled) -> None:
    """The tools environment: the prompt tells how to call a tool, and offers the calculator."""
    assert all("<tool_call>" in p and "calculator" in p for p in changed.prompts), changed.prompts[0]
    assert not any("<tool_call>" in p for p in base.prompts)


def python_offered(base: Sampled, changed: Sampled) -> None:
    """The python tool offered instead of the calculator."""
    assert all("python" in p and "calculator" not in p for p in changed.prompts), changed.prompts[0]
    assert all("calculator" in p for p in base.prompts)


def timed_out(base: Sampled, changed: Sampled) -> None:
    """A reward call that takes 0.5 s stops the run past 0.2 s, naming the reward and the limit."""
    assert not base.error
    assert "slow_reward" in changed.error and "rewards.timeout_s=0.2" in changed.error, changed.error


def isolated(base: Sampled, changed: Sampled) -> None:
    """The user's reward runs in a worker process of its own (it scores with its pid)."""
    assert set(base.scores[PID]) == {float(os.getpid())}
    pids = set(changed.scores[PID])
    assert len(pids) == 1 and pids != {float(os.getpid())} and pids != {0.0}, pids


SLOW = f"{__name__}:slow_reward"
PID = f"{__name__}:pid_reward"
# key -> (value, context, effect)
ROLLOUT = {
    "rollout.prompts_per_step": (3, (), rows_of(3, 4)),
    "rollout.group_size": (2, (), rows_of(2, 2)),
    "rollout.max_new_tokens": (3, (), at_most(3)),
    "rollout.temperature": (0.5, (), tempered),
    "rollout.top_p": (0.5, (), top_p),
    "rollout.top_k": (3, (), top_k),
    "rollout.weights": ("int8", (), int8_copy),
    "rollout.engine": ("hf", (), Differs("hf's generate samples the same distribution through its own random "
                                         "stream: other tokens from the same seeds, no definite ones")),
    "train.seed": (1, (), Differs(SEEDED)),
    "rewards.weights": ({"format": 1.0}, (), rewarded_by({"format"})),
    "rewards.soft_overlong": (True, ("--rewards.overlong_buffer=4",), overlong(4, 1.0)),
    "rewards.overlong_buffer": (2, ("--rewards.weights={'length': 1.0}",), overlong(2, 1.0)),
    "rewards.overlong_penalty": (5.0, ("--rewards.weights={'length': 1.0}",), overlong(8, 5.0)),
    "algo.dynamic_sampling": (True, (), refilled(3)),
    "algo.max_refill": (0, ("--algo.dynamic_sampling=true",), refilled(0)),
    "env.name": ("tools", (), tools_offered),
    "env.tools": (["python"], ("--env.name=tools",), python_offered),
    "env.example": ([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], ("--env.name=tools",),
                    prompts_hold("2+2?")),
    "env.max_episode_tokens": (3, ("--env.name=tools",), at_most(3)),
    "rewards.timeout_s": (0.2, (f"--rewards.weights={{{SLOW}: 1.0}}",), timed_out),
    "rewards.isolate": (True, (f"--rewards.weights={{{PID}: 1.0}}",), isolated),
    "task.system_prompt": ("Answer in one word.", (), prompts_hold("Answer in one word.")),
    "task.few_shot": (1, (), few_shot),
}


# ---------------------------------------------------------------- the data and evaluation settings

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
    "task.columns": ({"prompt": "q", "answer": "a"}, (f"--task.name={FILES / 'qa.jsonl'}",), columns),
    "task.heldout_file": (str(FILES / "heldout.jsonl"), (f"--task.name={FILES / 'train.jsonl'}",),
                          from_file("heldout", [f"{i} * 2 =" for i in range(5)])),
    "task.ood_file": (str(FILES / "ood.jsonl"), (f"--task.name={FILES / 'train.jsonl'}",),
                      from_file("ood", [f"{i} - 3 =" for i in range(5)])),
}


# ---------------------------------------------------------------- the models

@dataclass
class Built:
    held: dict  # name -> (dtype, tensor type) of each weight
    checkpointing: bool

    def key(self) -> tuple:
        return sorted(set(self.held.values())), self.checkpointing


def models_observable(overrides) -> Built:
    """What each weight is held as (dtype, tensor type), gradient checkpointing."""
    cfg = _cfg(*overrides)
    policy, tok = load_model(cfg.model.name, cfg.model.dtype, quantize=cfg.model.quantize)
    m = models_of(cfg, policy, tok, Dist(), "no")
    held = {n: (p.dtype, type(p.data).__name__) for n, p in m.policy.named_parameters()}
    return Built(held, bool(getattr(m.policy, "is_gradient_checkpointing", False)))


def bf16_weights(base: Built, changed: Built) -> None:
    """Every weight held in bfloat16 (the base: float32)."""
    assert {d for d, _ in base.held.values()} == {torch.float32}
    assert {d for d, _ in changed.held.values()} == {torch.bfloat16}


def checkpointing(base: Built, changed: Built) -> None:
    assert (base.checkpointing, changed.checkpointing) == (False, True)


def nf4(base: Built, changed: Built) -> None:
    """The base's linear layers are 4-bit NormalFloat (NF4Tensor); embeddings and adapters are not."""
    kinds = {n: t for n, (_, t) in changed.held.items()}
    linear = [n for n in kinds if n.endswith("proj.base_layer.weight") or n.endswith("proj.weight")]
    assert linear and all(kinds[n] == "NF4Tensor" for n in linear if "lora_" not in n), kinds
    assert all(kinds[n] != "NF4Tensor" for n in kinds if "embed" in n or "lora_" in n)
    assert "NF4Tensor" not in {t for _, t in base.held.values()}


MODELS = {
    "model.dtype": ("bfloat16", (), bf16_weights),
    "train.gradient_checkpointing": (True, (), checkpointing),
    "model.quantize": ("nf4", ("--model.lora.r=4",), nf4),
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
       for k in ("kv_cache_gib", "max_model_len", "weight_push", "weights_dir", "timeout_s", "sync")},
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




def check(table, key, observe, base_of, phase):
    """The key's effect at the check's context: its table's effect function on (the context's observation,
    made once per module by base_of, and the one with the key changed on top), or for Differs that they
    differ, or for SameAs that the changed one is the other overrides' to the last bit."""
    value, context, effect = table[key]
    base, changed = base_of(context), observe((*context, _arg(key, value)))
    if key in KNOWN_UNREACHED:
        if base.key() == changed.key():
            pytest.xfail(KNOWN_UNREACHED[key])
        pytest.fail(f"{key} now reaches {phase}: take it out of KNOWN_UNREACHED")
    if isinstance(effect, Differs):
        assert changed.key() != base.key(), f"{key}={value!r} changes nothing in {phase}"
    elif isinstance(effect, SameAs):
        assert changed.key() != base.key(), f"{key}={value!r} changes nothing in {phase}"
        assert changed.key() == base_of((*context, *effect.overrides)).key()
    else:
        effect(base, changed)


def cached(observe):
    """observe, remembering each context's observation: every key checked in a context compares with one."""
    seen = {}

    def base_of(context):
        if context not in seen:
            seen[context] = observe(context)
        return seen[context]
    return base_of


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny model's ops are too small to share out: one thread is faster, and far faster when the
    machine's cores are busy (a learn check: 1.2 s on one thread against 10 s on two, on a shared 2-core box)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


@pytest.fixture(scope="module")
def learned(batch_world):
    return cached(lambda o: learn_observable(batch_world, o))


@pytest.mark.slow
def test_learn_harness_is_deterministic(batch_world):
    assert learn_observable(batch_world, ()).key() == learn_observable(batch_world, ()).key()


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(LEARN))
def test_update_key_does_what_it_promises(batch_world, learned, key):
    check(LEARN, key, lambda o: learn_observable(batch_world, o), learned, "the update phase")


@pytest.fixture(scope="module")
def sampled(batch_world, tmp_path_factory):
    out = tmp_path_factory.mktemp("rollout-base")
    return cached(lambda o: rollout_observable(batch_world, o, out))


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(ROLLOUT))
def test_rollout_key_does_what_it_promises(batch_world, sampled, key, tmp_path):
    check(ROLLOUT, key, lambda o: rollout_observable(batch_world, o, tmp_path), sampled, "the rollout phase")


@pytest.fixture(scope="module")
def drawn(batch_world):
    return cached(lambda o: data_observable(batch_world, o))


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(DATA))
def test_data_key_does_what_it_promises(batch_world, drawn, key):
    check(DATA, key, lambda o: data_observable(batch_world, o), drawn, "the data or the evaluation's settings")


@pytest.fixture(scope="module")
def built():
    return cached(models_observable)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(MODELS))
def test_model_key_does_what_it_promises(built, key):
    check(MODELS, key, models_observable, built, "the run's models")
