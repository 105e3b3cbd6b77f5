import pytest

from rlvr.config import Config, ConfigError, build_config, describe, parse_override, to_yaml


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_and_overrides():
    cfg = build_config(None, ["--rollout.group_size=16", "--algo.lr=1e-4", "--train.out=x"])
    assert cfg.rollout.group_size == 16
    assert cfg.algo.lr == pytest.approx(1e-4)
    assert cfg.train.out == "x"
    assert cfg.task.digits == Config().task.digits


def test_yaml_then_override(tmp_path):
    p = write(tmp_path, "rollout:\n  group_size: 4\nalgo:\n  lr: 3\n")
    cfg = build_config(p, ["--rollout.group_size=6"])
    assert cfg.rollout.group_size == 6
    assert cfg.algo.lr == 3.0 and isinstance(cfg.algo.lr, float)  # int accepted for a float


def test_unknown_key_names_nearest(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'rollout.group_sise'.*'rollout.group_size'"):
        build_config(None, ["--rollout.group_sise=4"])
    p = write(tmp_path, "algo:\n  lrr: 1\n")
    with pytest.raises(ConfigError, match=r"c.yaml: unknown config key 'algo.lrr'.*'algo.lr'"):
        build_config(p)


def test_wrong_type_names_key_and_type():
    with pytest.raises(ConfigError, match=r"'rollout.group_size' must be int, got 'many'"):
        build_config(None, ["--rollout.group_size=many"])
    with pytest.raises(ConfigError, match=r"'eval.before' must be bool"):
        build_config(None, ["--eval.before=3"])


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = write(tmp_path, "rollout:\n  group_size: 4\n  bad: [1, 2\n")
    with pytest.raises(ConfigError, match=r"c.yaml, line \d+, column \d+: malformed YAML"):
        build_config(p)


def test_missing_file():
    with pytest.raises(ConfigError, match="config file not found: nope.yaml"):
        build_config("nope.yaml")


def test_dict_key_override():
    cfg = build_config(None, ["--rewards.weights.format=0.5"])
    assert cfg.rewards.weights == {"correctness": 1.0, "format": 0.5}
    with pytest.raises(ConfigError, match=r"rewards.weights.format"):
        build_config(None, ["--rewards.weights.format=high"])


def test_validation():
    with pytest.raises(ConfigError, match="group_size must be at least 2"):
        build_config(None, ["--rollout.group_size=1"])
    with pytest.raises(ConfigError, match="algo.aggregation"):
        build_config(None, ["--algo.aggregation=sum"])


def test_override_syntax():
    assert parse_override("--a.b=[1, 2]") == ("a.b", [1, 2])
    with pytest.raises(ConfigError, match="must look like --section.key=value"):
        parse_override("rollout.group_size")


def test_every_key_documented_and_yaml_round_trip(tmp_path):
    rows = describe()
    assert all(doc for _, _, doc in rows), [k for k, _, doc in rows if not doc]
    p = write(tmp_path, to_yaml(Config()))
    assert build_config(p) == Config()
