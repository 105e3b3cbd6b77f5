"""The metric schema (rlvr/report/schema.py) is what the update, the cross-rank reduction and the health
rules read: every metric a step writes is in it, and combine_metrics merges each as it says."""
import ast
from pathlib import Path

from rlvr.report import schema
from rlvr.train.distributed import combine_metrics

ROOT = Path(__file__).resolve().parents[2]


def test_combine_metrics_follows_the_schema():
    ranks = [{"completions": 4, "micro_batches": 2, "ratio/min": 0.9, "ratio/max": 1.1, "time/step_s": 1.0,
              "reward/c/errors": 1, "reward/c/mean": 1.0, "rollout/nonfinite_logp_tokens": 2, "code/timeout_frac": 0.5},
             {"completions": 12, "micro_batches": 1, "ratio/min": 0.8, "ratio/max": 1.3, "time/step_s": 3.0,
              "reward/c/errors": 0, "reward/c/mean": 0.0, "rollout/nonfinite_logp_tokens": 1, "code/timeout_frac": 0.0}]
    m = combine_metrics(ranks, [4.0, 12.0])
    assert (m["completions"], m["micro_batches"], m["reward/c/errors"], m["rollout/nonfinite_logp_tokens"]) == (16, 3, 1, 3)
    assert (m["ratio/min"], m["ratio/max"], m["time/step_s"]) == (0.8, 1.3, 3.0)
    assert m["reward/c/mean"] == 0.25 and m["code/timeout_frac"] == 0.125  # weighted by completions


def test_every_name_the_health_rules_read_is_in_the_schema():
    read = set()  # the metric-like string constants of health.py
    for node in ast.walk(ast.parse((ROOT / "rlvr/report/health.py").read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "/" in node.value \
                and " " not in node.value and node.value.replace("/", "").replace("_", "").isalnum():
            read.add(node.value)
    assert read and [n for n in sorted(read) if not schema.known(n)] == []


def test_the_update_metrics_are_in_the_schema():
    from rlvr.models import tiny_random
    from tests.train.test_update import make_batch, one_step

    model, tok = tiny_random()
    batch = make_batch(model, tok)
    ref = tiny_random()[0]
    for keys in ({}, {"top_entropy_quantile": 0.5, "off_policy_mask_threshold": 0.5, "entropy_coef": 0.01}):
        _, m = one_step(model, tok, batch, ref=ref, beta=0.1, **keys)
        assert [k for k in m if not schema.known(k)] == []
