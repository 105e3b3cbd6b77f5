"""The metrics a training step reports, each name with how it combines: over the update's micro-batches
(rlvr/train/update.py), over ranks under torchrun (rlvr/train/distributed.py `combine_metrics`), and the
names the health rules read (rlvr/report/health.py). A new metric is one line here.

Kinds:
    TOKEN_MEAN   a mean over the real tokens of the whole batch: each micro-batch adds its sum, divided
                 once by the batch's real tokens (equal on every rank after the update's all-reduce)
    TOKEN_SHARE  a share of the real tokens (a count summed, then divided likewise)
    SEQ_SHARE    a share of the sequences with a real token
    SUM          a count: summed over ranks
    MIN, MAX     the extreme over ranks (a step takes as long as its slowest rank, needs its fullest
                 rank's memory)
    MEAN         any other number: the mean over ranks weighted by their completions
"""
from __future__ import annotations

TOKEN_MEAN, TOKEN_SHARE, SEQ_SHARE = "token_mean", "token_share", "seq_share"
SUM, MIN, MAX, MEAN = "sum", "min", "max", "mean"

METRICS: dict[str, str] = {
    "step": MEAN,  # the same on every rank: kept as it is
    # the collected batch (train/metrics.py, train/step.py)
    "reward/mean": MEAN, "reward/std": MEAN, "frac_zero_std_groups": MEAN,
    "completion/length_mean": MEAN, "completion/length_p90": MEAN, "completion/truncated_frac": MEAN,
    "completion/self_verification_rate": MEAN, "completions": SUM, "tokens/generated": SUM,
    "reward/checker_restarts": MEAN, "dynamic/dropped_groups": SUM, "dynamic/rounds": MEAN,
    "rollout/nonfinite_logp_tokens": SUM, "kl_reward": MEAN,
    # the policy update (train/update.py): policy_loss's statistics, the KL and the entropy
    "loss": MEAN, "kl": TOKEN_MEAN, "entropy": TOKEN_MEAN,
    "clip/low_frac": TOKEN_MEAN, "clip/high_frac": TOKEN_MEAN, "clip/dual_frac": TOKEN_MEAN,
    "ratio/mean": TOKEN_MEAN, "approx_kl_old": TOKEN_MEAN, "objective/clipped_frac": TOKEN_MEAN,
    "ratio/min": MIN, "ratio/max": MAX, "grad_norm": MEAN, "value_loss": MEAN, "skipped_updates": MEAN,
    "skipped_nonfinite_weights": MEAN,
    "micro_batches": SUM, "untrained_micro_batches": SUM, "entropy/coef": MEAN, "entropy/watched_mean": MEAN,
    "lr": MEAN, "processes": MEAN,
    "rollout/logp_mismatch_mean_abs": MEAN, "rollout/logp_mismatch_max": MAX, "rollout/policy_lag": MEAN,
    # what crossed to an engine with weights of its own (vLLM) in the step: rank 0 pushes to servers
    "rollout/sync_bytes": MAX, "rollout/sync_s": MAX,
    # the update's token weights: the sampler correction, the off-policy mask, the high-entropy selection
    "sampler/masked_token_frac": TOKEN_SHARE, "sampler/truncated_token_frac": TOKEN_SHARE,
    "sampler/weight_mean": TOKEN_SHARE, "entropy/selected_frac": TOKEN_SHARE,
    "sampler/masked_seq_frac": SEQ_SHARE, "off_policy/masked_seq_frac": SEQ_SHARE,
}
# families of names: (prefix, suffix) -> kind; reward/<name>/errors counts, time/* and memory/* extremes
FAMILIES: dict[tuple[str, str], str] = {
    ("reward/", "/errors"): SUM, ("reward/", "/mean"): MEAN, ("reward/logged/", ""): MEAN,
    ("time/", ""): MAX, ("memory/", ""): MAX, ("pass_rate/", ""): MEAN, ("curriculum/", ""): MEAN,
    ("env/", ""): MEAN, ("code/", "_frac"): MEAN,
}


# the evaluation rows (evals.jsonl; rlvr/train/evaluation.py) the health rules and reports read: per split,
# strict and format-free accuracy, the format rate and the flips against the evaluation before training
EVAL_SPLITS = ("heldout", "ood")
EVALS: frozenset[str] = frozenset({"step", "train_seconds"} | {
    f"{split}_{stat}" for split in EVAL_SPLITS
    for stat in ("accuracy", "format", "lenient", "fixed", "broken", "kept", "never")})


class UnknownMetric(KeyError):
    """A metric name the schema does not know: a typo, or a new metric without its line here."""


def _family(name: str) -> str | None:
    for (prefix, suffix), k in FAMILIES.items():
        if name.startswith(prefix) and name.endswith(suffix):
            return k
    return None


def known(name: str) -> bool:
    """Whether the schema names `name` (a line of METRICS or a family)."""
    return name in METRICS or _family(name) is not None


def kind(name: str) -> str:
    """How `name` combines: its line in METRICS, else its family's (a reward function's own logged
    metrics are reward/logged/*). A name neither knows is an error, never a silent mean: a rule or a
    reduction reading a misspelt name would otherwise see nothing and say nothing."""
    found = METRICS.get(name) or _family(name)
    if found is None:
        raise UnknownMetric(f"metric {name!r} is not in rlvr/report/schema.py: add its line to METRICS (or FAMILIES)")
    return found


def names(*kinds: str) -> tuple[str, ...]:
    """The metrics of these kinds, in METRICS' order."""
    return tuple(n for n, k in METRICS.items() if k in kinds)


def across_ranks(name: str) -> str:
    """sum, min, max or mean: how combine_metrics merges `name` over ranks (the update's token means and
    shares are global already, so equal on every rank: mean keeps them)."""
    k = kind(name)
    return k if k in (SUM, MIN, MAX) else MEAN


def reward_metric(reward: str, stat: str = "mean") -> str:
    """reward/<name>/<stat>: a reward function's metric (stat: mean or errors)."""
    return f"reward/{reward}/{stat}"


def reward_of(metric: str, stat: str = "mean") -> str | None:
    """The reward function whose <stat> metric `metric` is (reward_metric's inverse), else None."""
    prefix, suffix = "reward/", f"/{stat}"
    if metric.startswith(prefix) and metric.endswith(suffix) and len(metric) > len(prefix) + len(suffix):
        return metric[len(prefix):-len(suffix)]
    return None
