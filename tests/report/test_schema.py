"""The metric schema (rlvr/report/schema.py) is what the update, the cross-rank reduction and the health
rules read: every metric a step writes is in it, and combine_metrics merges each as it says."""
import ast
from pathlib import Path

import pytest

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


def read_names(source: str, rows: set[str] | None = None) -> set[str]:
    """The names `source` reads from a row: row["name"], row.get("name"), _recent(history, "name"), and
    f"{split}_name" (an evaluation row's per-split names, both splits); only from the receivers in `rows`
    (their text, e.g. "m", "m[-1]") when given."""
    read = set()
    for node in ast.walk(ast.parse(source)):
        key, receiver = None, None
        if isinstance(node, ast.Subscript):
            key, receiver = node.slice, node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
            key, receiver = node.args[0], node.func.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_recent":
            key, receiver = node.args[1], None
        if key is None or (rows is not None and (receiver is None or ast.unparse(receiver) not in rows)):
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            read.add(key.value)
        elif isinstance(key, ast.JoinedStr) and [type(v) for v in key.values] == [ast.FormattedValue, ast.Constant]:
            read |= {f"{split}{key.values[1].value}" for split in schema.EVAL_SPLITS}
    return read


def unknown(names: set[str]) -> list[str]:
    return sorted(n for n in names if not schema.known(n) and n not in schema.EVALS)


def test_every_name_the_health_rules_read_is_in_the_schema():
    """Every key health.py reads from a metrics or evaluation row: a misspelt one ("kll") would switch its
    rule off, the row never having it."""
    read = read_names((ROOT / "rlvr/report/health.py").read_text())
    assert {"kl", "entropy", "skipped_updates", "reward/std", "heldout_accuracy", "ood_lenient"} <= read
    assert unknown(read) == []


def test_every_metric_name_the_reports_and_the_loop_read_is_in_the_schema():
    rows = {"m", "m[0]", "m[-1]", "e", "metrics"}  # their names for a metrics row and an evaluation row
    read = {path: read_names((ROOT / path).read_text(), rows) for path in
            ("rlvr/report/console.py", "rlvr/report/compare.py", "rlvr/report/html.py", "rlvr/train/grpo.py")}
    assert {"reward/mean", "time/step_s", "entropy/watched_mean", "kl"} <= set().union(*read.values())
    assert {path: unknown(names) for path, names in read.items() if unknown(names)} == {}


def test_a_misspelt_name_is_found():
    assert unknown(read_names('def r(history, evals):\n    h = history[-1]\n    return h.get("kll") or '
                              '_recent(history, "entropy", 3) or [e[f"{s}_acuracy"] for e in evals]')) \
        == ["heldout_acuracy", "kll", "ood_acuracy"]


def test_an_unknown_name_is_an_error_not_a_mean():
    assert schema.kind("kl") == schema.TOKEN_MEAN and schema.kind("reward/logged/mine") == schema.MEAN
    with pytest.raises(schema.UnknownMetric, match="'kll' is not in rlvr/report/schema.py"):
        schema.kind("kll")
    with pytest.raises(schema.UnknownMetric):
        combine_metrics([{"kll": 1.0}, {"kll": 2.0}], [1.0, 1.0])


def test_the_update_metrics_are_in_the_schema():
    from rlvr.models import tiny_random
    from tests.train.test_update import make_batch, one_step

    model, tok = tiny_random()
    batch = make_batch(model, tok)
    ref = tiny_random()[0]
    for keys in ({}, {"top_entropy_quantile": 0.5, "off_policy_mask_threshold": 0.5, "entropy_coef": 0.01}):
        _, m = one_step(model, tok, batch, ref=ref, beta=0.1, **keys)
        assert [k for k in m if not schema.known(k)] == []
