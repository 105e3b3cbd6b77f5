"""Every algorithm preset runs end to end on tiny-random; presets resolve and yield to explicit keys."""
import json
from pathlib import Path

import pytest
import yaml

from rlvr.algo.presets import PRESETS
from rlvr.cli import main
from rlvr.config import ConfigError, build_config

from tests.e2e.test_tiny_run import ARITHMETIC, SMOKE


def test_preset_then_explicit_keys(tmp_path):
    cfg = build_config(None, ["--algo.preset=dapo"])
    assert (cfg.algo.clip_high, cfg.algo.aggregation, cfg.algo.dynamic_sampling) == (0.28, "token-mean", True)
    cfg = build_config(None, ["--algo.clip_high=0.3", "--algo.preset=dapo"])
    assert cfg.algo.clip_high == 0.3  # explicit keys win whatever their order
    p = tmp_path / "c.yaml"
    p.write_text("algo:\n  preset: gspo\n  clip_high: 0.001\n")
    cfg = build_config(p)
    assert (cfg.algo.ratio_level, cfg.algo.clip_high, cfg.algo.clip_low) == ("sequence", 0.001, 3e-4)
    with pytest.raises(ConfigError, match="unknown algo.preset 'grpoo'"):
        build_config(None, ["--algo.preset=grpoo"])


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_runs_end_to_end(tmp_path, preset):
    out = tmp_path / preset
    assert main(["train", *SMOKE, f"--train.out={out}", f"--algo.preset={preset}", "--algo.iterations=2",
                 "--eval.before=false", f"--algo.beta={PRESETS[preset]['beta']}"]) == 0
    config = yaml.safe_load((out / "config.yaml").read_text())
    explicit = yaml.safe_load(Path(ARITHMETIC).read_text())["algo"]  # the config SMOKE names
    explicit.pop("beta", None)  # given on the command line above
    for key, value in PRESETS[preset].items():  # a dotted knob names its section (rewards.soft_overlong)
        section, _, name = key.rpartition(".")
        assert config[section or "algo"][name] == (value if section else explicit.get(key, value)), key
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["skipped_updates"] == 0 for m in metrics)
    if preset == "ppo":
        assert all("value_loss" in m for m in metrics)
    if PRESETS[preset].get("kl_in") == "reward":
        assert all("kl_reward" in m for m in metrics)
    if preset == "dapo":
        assert all("dynamic/dropped_groups" in m for m in metrics)
        assert any(r["rewards"].get("length") for r in map(json.loads, (out / "samples.jsonl").read_text().splitlines()))


def test_eval_every_and_ref_sync(tmp_path):
    out = tmp_path / "e"
    assert main(["train", *SMOKE, f"--train.out={out}", "--train.steps=3", "--train.eval_every=1",
                 "--algo.beta=0.1", "--algo.ref_sync_every=1", "--algo.entropy_coef=0.01"]) == 0
    evals = [json.loads(line) for line in (out / "evals.jsonl").read_text().splitlines()]
    assert [e["step"] for e in evals] == [0, 1, 2, 3]
    assert "heldout_accuracy" in evals[1] and "ood_accuracy" in evals[-1]
    m = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("entropy" in x and x["kl"] is not None for x in m)
