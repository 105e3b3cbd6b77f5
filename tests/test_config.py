import re
from pathlib import Path

import pytest

from rlvr.config import (Config, ConfigError, TrainConfig, VllmConfig, build_config, describe, field_docs,
                         parse_override, to_yaml, valid_keys)


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_defaults_and_overrides():
    cfg = build_config(None, ["--rollout.group_size=16", "--optimizer.lr=1e-4", "--train.out=x"])
    assert cfg.rollout.group_size == 16
    assert cfg.optimizer.lr == pytest.approx(1e-4)
    assert cfg.train.out == "x"
    assert cfg.task.params == Config().task.params == {}


def test_yaml_then_override(tmp_path):
    p = write(tmp_path, "rollout:\n  group_size: 4\noptimizer:\n  weight_decay: 3\n")
    cfg = build_config(p, ["--rollout.group_size=6"])
    assert cfg.rollout.group_size == 6
    assert cfg.optimizer.weight_decay == 3.0 and isinstance(cfg.optimizer.weight_decay, float)  # int accepted for a float


def test_unknown_key_names_nearest(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config key 'rollout.group_sise'.*'rollout.group_size'"):
        build_config(None, ["--rollout.group_sise=4"])
    p = write(tmp_path, "optimizer:\n  lrr: 1\n")
    with pytest.raises(ConfigError, match=r"c.yaml, line 2: unknown config key 'optimizer.lrr'.*'optimizer.lr'"):
        build_config(p)
    with pytest.raises(ConfigError, match=r"unknown config key 'algo.lrr'.*did you mean 'optimizer.lr'"):
        build_config(None, ["--algo.lrr=1"])   # near a moved key: the key it moved to


def test_other_trainers_names_point_to_rlvr_keys(tmp_path):
    # a config written from TRL's / verl's habits: the nearest spelling would be another setting
    # (learning_rate -> rewards.isolate, rollout.max_completion_length -> rollout.vllm.max_model_len)
    p = write(tmp_path, "model:\n  name: tiny-random\nlearning_rate: 1.0e-6\n")
    with pytest.raises(ConfigError, match=r"c.yaml, line 3: unknown config key 'learning_rate': "
                                          r"TRL's 'learning_rate' is rlvr's 'optimizer.lr'$"):
        build_config(p)
    p = write(tmp_path, "rollout:\n  max_completion_length: 64\n")
    with pytest.raises(ConfigError, match=r"'rollout.max_completion_length': TRL's 'max_completion_length' "
                                          r"is rlvr's 'rollout.max_new_tokens'$"):
        build_config(p)
    with pytest.raises(ConfigError, match=r"command line: unknown config key 'rollout.num_generations': "
                                          r"TRL's 'num_generations' is rlvr's 'rollout.group_size'$"):
        build_config(None, ["--rollout.num_generations=4"])
    with pytest.raises(ConfigError, match=r"'algo.kl_loss_coef': verl's 'kl_loss_coef' is rlvr's 'algo.beta'$"):
        build_config(None, ["--algo.kl_loss_coef=0.01"])
    # where the meaning differs, the message says how
    with pytest.raises(ConfigError, match=r"is rlvr's 'rollout.prompts_per_step' \(TRL counts completions, "
                                          r"rlvr prompts: a step samples rollout.prompts_per_step x rollout.group_size"):
        build_config(None, ["--train.per_device_train_batch_size=8"])


def test_float16_is_refused_saying_why():
    with pytest.raises(ConfigError, match=r"^model.dtype 'float16' is not one of float32, bfloat16, auto; float16 "
                                          r"is not trained in: its range needs loss scaling, which bfloat16 does not$"):
        build_config(None, ["--model.dtype=float16"])
    with pytest.raises(ConfigError, match=r"^model.dtype 'bf16' is not one of float32, bfloat16, auto$"):
        build_config(None, ["--model.dtype=bf16"])


def test_every_bad_key_of_a_file_is_named_at_once(tmp_path):
    # a TRL config brought over: one run per key to find them all, before
    p = write(tmp_path, "model:\n  name: tiny-random\nlearning_rate: 1.0e-6\nnum_generations: 4\n"
                        "rollout:\n  group_size: many\n")
    with pytest.raises(ConfigError) as e:
        build_config(p)
    assert str(e.value) == (
        f"3 keys of {p} cannot be used:\n"
        f"  {p}, line 3: unknown config key 'learning_rate': TRL's 'learning_rate' is rlvr's 'optimizer.lr'\n"
        f"  {p}, line 4: unknown config key 'num_generations': TRL's 'num_generations' is rlvr's 'rollout.group_size'\n"
        f"  {p}, line 6: 'rollout.group_size' must be int, got 'many'")


def test_a_verl_config_is_refused_leaf_by_leaf_with_the_rlvr_keys(tmp_path):
    """verl nests its keys (actor_rollout_ref.rollout.n): each leaf is named at its line with the rlvr key it
    means, not the nested block as one unknown key with an unrelated nearest spelling."""
    p = write(tmp_path, "data:\n  train_batch_size: 16\nactor_rollout_ref:\n  model:\n    path: Qwen/Qwen2.5-0.5B\n"
                        "  rollout:\n    n: 8\n  actor:\n    optim:\n      lr: 1.0e-6\n")
    with pytest.raises(ConfigError) as e:
        build_config(p)
    assert str(e.value).splitlines()[1:] == [
        f"  {p}, line 2: unknown config key 'data.train_batch_size': verl's 'train_batch_size' is rlvr's "
        "'rollout.prompts_per_step'",
        f"  {p}, line 5: unknown config key 'actor_rollout_ref.model.path': verl's 'model.path' is rlvr's 'model.name'",
        f"  {p}, line 7: unknown config key 'actor_rollout_ref.rollout.n': verl's 'rollout.n' is rlvr's "
        "'rollout.group_size'",
        f"  {p}, line 10: unknown config key 'actor_rollout_ref.actor.optim.lr': verl's 'optim.lr' is rlvr's "
        "'optimizer.lr'"]
    from rlvr.config.names import FOREIGN
    keys = valid_keys()  # every rlvr key FOREIGN names exists (task.columns.prompt: a key of task.columns)
    assert [name for name, (ours, _, _) in FOREIGN.items()
            if ours and ours not in keys and ours.rsplit(".", 1)[0] != "task.columns"] == []


def test_other_trainers_bare_flags_are_named(capsys):
    from rlvr.cli import main

    assert main(["train", "--num_generations=4", "--max_prompt_length=512"]) == 2
    err = capsys.readouterr().err
    assert ("unrecognised arguments: --num_generations=4 --max_prompt_length=512; did you mean "
            "--rollout.group_size=... (TRL's 'num_generations' is rlvr's 'rollout.group_size')?; "
            "TRL and verl's 'max_prompt_length' has no rlvr key (rlvr does not cut prompts") in err


def test_wrong_type_names_key_and_type():
    with pytest.raises(ConfigError, match=r"'rollout.group_size' must be int, got 'many'"):
        build_config(None, ["--rollout.group_size=many"])
    with pytest.raises(ConfigError, match=r"'eval.before' must be bool"):
        build_config(None, ["--eval.before=3"])


def test_a_files_bad_key_or_value_names_its_line(tmp_path):
    p = write(tmp_path, "# my run\nmodel: {name: tiny-random}\nrollout:\n  prompts_per_step: 2\n\n  group_size: many\n")
    with pytest.raises(ConfigError, match=r"c.yaml, line 6: 'rollout.group_size' must be int, got 'many'$"):
        build_config(p)
    p = write(tmp_path, "train:\n  steps: 2\nrollout:\n  vllm:\n    sleeep: true\n")  # deeper: its section's line
    with pytest.raises(ConfigError, match=r"c.yaml, line 4: unknown config key 'rollout.vllm.sleeep'"):
        build_config(p)
    p = write(tmp_path, "steps: 3\n")  # not in a section
    with pytest.raises(ConfigError, match=r"c.yaml, line 1: unknown config key 'steps'"):
        build_config(p)


def test_malformed_yaml_names_file_and_line(tmp_path):
    p = write(tmp_path, "rollout:\n  group_size: 4\n  bad: [1, 2\n")
    with pytest.raises(ConfigError, match=r"c.yaml, line \d+, column \d+: malformed YAML"):
        build_config(p)


def test_missing_file(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="^config file not found: nope.yaml$"):
        build_config("nope.yaml")
    # the README's `rlvr train configs/...` from another directory: the error says where the shipped one is
    monkeypatch.chdir(tmp_path)
    shipped = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"
    with pytest.raises(ConfigError, match=f"^config file not found: configs/smoke.yaml; the shipped config of that "
                                          f"name is {re.escape(str(shipped))}$"):
        build_config("configs/smoke.yaml")


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
    cfg = Config()
    cfg.train.out = "runs/somewhere"
    assert build_config(write(tmp_path, to_yaml(cfg))) == cfg


def test_build_config_names_the_run_directory_after_the_config_file(tmp_path):
    """Configs without train.out do not share one directory: runs/<file name>, runs/run without a file."""
    mine = tmp_path / "my_task.yaml"
    mine.write_text("rollout: {group_size: 4}\n")
    assert build_config(mine).train.out == "runs/my_task"
    assert build_config(mine, ["--train.out=elsewhere"]).train.out == "elsewhere"
    assert build_config(None).train.out == "runs/run"
    assert build_config(DEMO).train.out == "runs/demo"


# ---------------------------------------------------------------- presets against a config file

DEMO = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"


def test_command_line_preset_replaces_the_files_pins(capsys):
    cfg = build_config(DEMO, ["--algo.preset=rloo"])  # demo.yaml pins beta 0.0 for grpo
    assert (cfg.algo.beta, cfg.algo.kl_in, cfg.algo.kl_estimator) == (0.05, "reward", "k1")
    assert cfg.optimizer.lr == 2e-5  # a file key the preset does not set still holds
    assert "algo.beta=0.0" in capsys.readouterr().err
    assert build_config(DEMO, ["--algo.preset=ppo"]).algo.beta == 0.05
    assert build_config(DEMO, ["--algo.preset=rloo", "--algo.beta=0.0"]).algo.beta == 0.0  # the command line wins


def test_files_pins_hold_with_its_own_preset(tmp_path, capsys):
    assert build_config(DEMO).algo.beta == 0.0
    assert build_config(DEMO, ["--algo.preset=grpo"]).algo.beta == 0.0
    p = write(tmp_path, "algo:\n  beta: 0.1\n")  # no preset named: written for the default, grpo
    assert build_config(p, ["--algo.preset=grpo"]).algo.beta == 0.1
    assert build_config(p, ["--algo.preset=reinforce_pp"]).algo.beta == 0.01
    assert build_config(None).algo.beta == 0.04
    p = write(tmp_path, "algo:\n  preset: rloo\n  iterations: 2\n")  # nothing pinned: no note
    capsys.readouterr()
    assert build_config(p, ["--algo.preset=grpo"]).algo.beta == 0.04
    assert capsys.readouterr().err == ""


def test_describe_shows_defaults_after_the_preset():
    rows = {k: d for k, d, _ in describe()}
    assert (rows["algo.beta"], rows["algo.preset"]) == ("0.04", "'grpo'")
    rows = {k: d for k, d, _ in describe(build_config(None, ["--algo.preset=dapo"]))}
    assert (rows["algo.clip_high"], rows["algo.dynamic_sampling"]) == ("0.28", "True")


# ---------------------------------------------------------------- keys moved to the section that reads them

def test_moved_keys_still_work_with_a_note_naming_the_new_key(tmp_path, capsys):
    p = write(tmp_path, "algo:\n  lr: 3.0e-4\n  micro_batch_prompts: 2\n  soft_overlong: true\n"
                        "task:\n  digits: 2\n  ood_operands: 3\n")
    cfg = build_config(p, ["--algo.max_grad_norm=0.5", "--task.operators=+"])
    o = cfg.optimizer
    assert (o.lr, o.micro_batch_prompts, o.max_grad_norm) == (3e-4, 2, 0.5)
    assert cfg.rewards.soft_overlong is True
    assert (cfg.task.params, cfg.task.ood_params) == ({"digits": 2, "operators": "+"}, {"operands": 3})
    err = capsys.readouterr().err
    for old, new in (("algo.lr", "optimizer.lr"), ("algo.soft_overlong", "rewards.soft_overlong"),
                     ("task.digits", "task.params.digits"), ("task.ood_operands", "task.ood_params.operands"),
                     ("algo.max_grad_norm", "optimizer.max_grad_norm")):
        assert f"'{old}' is now '{new}'" in err
    assert f"{p}, line 2: 'algo.lr'" in err and "command line: 'task.operators'" in err


def test_dapo_sets_the_reward_switch_and_a_file_written_for_grpo_loses_it(tmp_path, capsys):
    assert build_config(None, ["--algo.preset=dapo"]).rewards.soft_overlong is True
    assert build_config(None).rewards.soft_overlong is False
    p = write(tmp_path, "algo:\n  soft_overlong: false\n")   # the old key, in a file written for grpo
    assert build_config(p, ["--algo.preset=dapo"]).rewards.soft_overlong is True
    assert "replaces algo.soft_overlong=False" in capsys.readouterr().err
    p = write(tmp_path, "algo:\n  preset: dapo\nrewards:\n  soft_overlong: false\n")   # its own preset: kept
    assert build_config(p).rewards.soft_overlong is False


# ---------------------------------------------------------------- docstrings and validation

def test_server_urls_one_or_several():
    cfg = build_config(None, ["--rollout.engine=vllm", "--rollout.vllm.server_url=http://a:8000/, http://b:8001"])
    assert cfg.rollout.vllm.urls() == ["http://a:8000", "http://b:8001"]
    cfg = build_config(None, ["--rollout.engine=vllm", "--rollout.vllm.server_url=[http://a:8000]"])
    assert cfg.rollout.vllm.urls() == ["http://a:8000"]
    assert build_config(None, []).rollout.vllm.urls() == []
    with pytest.raises(ConfigError, match="rollout.vllm.server_url 'a:8000' must start with http://"):
        build_config(None, ["--rollout.engine=vllm", "--rollout.vllm.server_url=a:8000"])
    # the OpenAI base URL's /v1: every route rlvr adds would answer 404, with a hint about the server's flags
    with pytest.raises(ConfigError, match="rollout.vllm.server_url 'http://a:8000/v1' must be the server's address "
                                          "alone, without a path: http://a:8000 "):
        build_config(None, ["--rollout.engine=vllm", "--rollout.vllm.server_url=http://a:8000/v1"])
    with pytest.raises(ConfigError, match="rollout.vllm.server_url 'http://a:80000': Port out of range"):
        build_config(None, ["--rollout.engine=vllm", "--rollout.vllm.server_url=http://a:80000"])
    with pytest.raises(ConfigError, match="rollout.vllm.server_url 'http://:8000' names no host"):
        build_config(None, ["--rollout.engine=vllm", "--rollout.vllm.server_url=http://:8000"])


def test_docstrings_say_what_the_code_does():
    parallel = field_docs(TrainConfig)["parallel"]
    assert "all-reduce (sum) per step" in parallel and "ddp (DistributedDataParallel)" not in parallel
    assert "serve-rollouts" not in field_docs(VllmConfig)["server_url"]


@pytest.mark.parametrize("override, key", [
    ("--rollout.vllm.server_url=http://localhost:8000", "rollout.vllm.server_url"),  # without rollout.engine=vllm
    ("--rollout.vllm.kv_cache_gib=0", "rollout.vllm.kv_cache_gib"),
    ("--rollout.vllm.weight_push=ssh", "rollout.vllm.weight_push"),
    ("--rollout.vllm.timeout_s=0", "rollout.vllm.timeout_s"),
    ("--rollout.vllm.gpu_memory_utilization=1.5", "rollout.vllm.gpu_memory_utilization"),
    ("--rollout.top_k=-1", "rollout.top_k"),
    ("--algo.beta=-0.1", "algo.beta"),
    ("--algo.clip_low=-0.1", "algo.clip_low"),
    ("--algo.clip_high=-0.2", "algo.clip_high"),
    ("--algo.dual_clip=0.5", "algo.dual_clip"),
    ("--optimizer.lr=-1e-5", "optimizer.lr"),
    ("--algo.gamma=1.5", "algo.gamma"),
    ("--algo.lam=-0.1", "algo.lam"),
    ("--optimizer.micro_batch_tokens=-1", "optimizer.micro_batch_tokens"),
    ("--train.save_every=-1", "train.save_every"),
    ("--task.heldout_size=-1", "task.heldout_size"),
    ("--curriculum.smoothing=0", "curriculum.smoothing"),
    ("--eval.batch_size=0", "eval.batch_size"),
    ("--eval.max_new_tokens=0", "eval.max_new_tokens"),
])
def test_validation_names_the_key(override, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        build_config(None, [override])


# ---------------------------------------------------------------- rollout.weights and the TIS cap

@pytest.mark.parametrize("override, key", [
    ("--rollout.weights=int4", "rollout.weights"),
    ("--rollout.tis_cap=-1", "rollout.tis_cap"),
])
def test_rollout_weights_validation_names_the_key(override, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        build_config(None, [override])


def test_rollout_weights_needs_a_local_engine():
    with pytest.raises(ConfigError, match="rollout.weights=int8 is for the builtin and hf engines"):
        build_config(None, ["--rollout.engine=vllm", "--rollout.weights=int8"])


def test_the_old_tis_cap_key_is_an_error_naming_the_new_one(tmp_path):
    # one name per setting: rollout.vllm.tis_cap was a second name for rollout.tis_cap
    with pytest.raises(ConfigError, match=re.escape("command line: 'rollout.vllm.tis_cap' is now 'rollout.tis_cap'")):
        build_config(None, ["--rollout.vllm.tis_cap=3"])
    p = write(tmp_path, "rollout:\n  vllm:\n    tis_cap: 2.5\n")
    with pytest.raises(ConfigError, match=re.escape(f"{p}, line 2: 'rollout.vllm.tis_cap' is now 'rollout.tis_cap'")) as e:
        build_config(p)
    assert "set rollout.tis_cap=2.5 instead" in str(e.value)
    old_run = write(tmp_path, "rollout:\n  vllm:\n    tis_cap: 0.0\n    sleep: false\n")  # written before the rename
    cfg = build_config(old_run)  # the old default means "unset": an old run directory still resumes
    assert cfg.rollout.tis_cap is None and cfg.rollout.vllm.sleep is False


@pytest.mark.parametrize("overrides, cap", [
    ([], 0.0),  # fp32 rollouts: the sampler is the trainer, no correction
    (["--rollout.weights=int8"], 2.0),  # a quantised sampler: on by default
    (["--rollout.weights=bf16"], 2.0),
    (["--rollout.weights=int8", "--rollout.tis_cap=0"], 0.0),  # switched off explicitly
    (["--rollout.weights=int8", "--rollout.tis_cap=5"], 5.0),
    (["--rollout.engine=vllm"], 2.0),  # vLLM's kernels are not the trainer's: off-policy too
    (["--rollout.engine=vllm", "--rollout.tis_cap=0"], 0.0),
    (["--rollout.tis_cap=4"], 4.0),
])
def test_tis_cap_resolution(overrides, cap):
    from rlvr.rollout.engines import tis_cap_of

    assert tis_cap_of(build_config(None, overrides).rollout) == cap


def test_a_written_config_round_trips_its_tis_cap(tmp_path):
    cfg = build_config(None, ["--rollout.tis_cap=2.5"])
    assert "tis_cap" not in to_yaml(cfg).split("vllm:")[1]  # one name, under rollout only
    assert build_config(write(tmp_path, to_yaml(cfg))).rollout.tis_cap == 2.5


def test_anchored_makes_the_paths_that_exist_absolute(tmp_path, monkeypatch):
    """What config.yaml saves: task files, reward and tool .py files and a local model by absolute path;
    names that are not paths here (built-ins, Hub names, modules) as written."""
    from rlvr.config.paths import anchored
    from rlvr.rewards.base import short_name

    monkeypatch.chdir(tmp_path)
    for name in ("data.jsonl", "held.jsonl", "my_rewards.py", "tools.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "model").mkdir()
    cfg = build_config(None, ["--task.name=data.jsonl", "--task.heldout_file=held.jsonl", "--model.name=model",
                              "--rewards.weights={my_rewards.py:f: 1.0, verl:my_rewards.py:g: 0.5, mypkg.r:h: 0.1, "
                              "format: 0.2, missing.py:k: 1.0}", "--env.tools=[calculator, tools.py:add]"])
    got = anchored(cfg)
    assert (got.task.name, got.task.heldout_file, got.model.name) == (
        str(tmp_path / "data.jsonl"), str(tmp_path / "held.jsonl"), str(tmp_path / "model"))
    assert got.rewards.weights == {f"{tmp_path}/my_rewards.py:f": 1.0, f"verl:{tmp_path}/my_rewards.py:g": 0.5,
                                   "mypkg.r:h": 0.1, "format": 0.2, "missing.py:k": 1.0}
    assert got.env.tools == ["calculator", f"{tmp_path}/tools.py:add"]
    assert cfg.task.name == "data.jsonl"  # a copy: the config given is left as it is
    assert anchored(build_config(None, ["--model.name=Qwen/Qwen2.5-0.5B-Instruct"])).model.name == \
        "Qwen/Qwen2.5-0.5B-Instruct"
    assert [short_name(k) for k in got.rewards.weights] == ["my_rewards.py:f", "verl:my_rewards.py:g", "mypkg.r:h",
                                                            "format", "missing.py:k"]


def test_yaml_words_that_version_1_1_reads_as_booleans_stay_strings(tmp_path):
    # train.mixed_precision is a string setting whose values include "no": PyYAML's YAML 1.1 rules would
    # turn `no` into False and refuse it; only true/false are booleans, in files and on the command line
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  name: tiny-random\ntrain:\n  mixed_precision: no\n  gradient_checkpointing: true\n")
    cfg = build_config(path, [])
    assert cfg.train.mixed_precision == "no" and cfg.train.gradient_checkpointing is True
    cfg = build_config(None, ["--model.name=tiny-random", "--train.mixed_precision=no",
                              "--train.gradient_checkpointing=false"])
    assert cfg.train.mixed_precision == "no" and cfg.train.gradient_checkpointing is False
    with pytest.raises(ConfigError, match="train.gradient_checkpointing"):
        build_config(None, ["--model.name=tiny-random", "--train.gradient_checkpointing=off"])


@pytest.mark.parametrize("override, said", [
    ("--rewards.weights={correctness: .nan}", "rewards.weights: the weight of 'correctness' must be a finite number, got nan"),
    ("--rewards.weights={correctness: .inf, format: 0.2}", "the weight of 'correctness' must be a finite number, got inf"),
    ("--algo.adv_eps=0", "algo.adv_eps must be > 0"),
    ("--optimizer.lr=1e38", "optimizer.lr must be in [0, 1), got 1e+38"),
    ("--optimizer.lr=.inf", "optimizer.lr must be a finite number, got inf"),
    ("--optimizer.lr=.nan", "optimizer.lr must be a finite number, got nan"),
    ("--algo.clip_high=.nan", "algo.clip_high must be a finite number, got nan"),
    ("--rewards.timeout_s=-1", "rewards.timeout_s must be >= 0"),
])
def test_numbers_that_cannot_work_are_refused_by_key(override, said):
    with pytest.raises(ConfigError) as got:
        build_config(None, [override])
    assert said in str(got.value)


@pytest.mark.parametrize("override", ["--rewards.weights={correctness: 1, format: -0.5}", "--algo.adv_eps=1e-8",
                                      "--optimizer.lr=0.5", "--optimizer.lr=0", "--rewards.timeout_s=0"])
def test_the_honest_numbers_beside_them_still_build(override):
    build_config(None, [override])


def test_lora_keys_without_a_rank_get_a_note(tmp_path, capsys):
    # model.lora.r is 0 by default: a config shaping adapters without a rank fine-tunes every weight
    p = write(tmp_path, "model:\n  lora:\n    alpha: 32\n    target_modules: all-linear\n")
    build_config(p)
    assert capsys.readouterr().err == ("note: model.lora.alpha, model.lora.target_modules set, but model.lora.r is 0: "
                                       "every weight is trained, no LoRA adapters; set model.lora.r > 0 for LoRA\n")
    build_config(p, ["--model.lora.r=8"])
    build_config(None)  # the defaults, as a run's config.yaml holds them: nothing to say
    assert capsys.readouterr().err == ""


def test_every_shipped_config_builds_and_the_readme_names_it():
    """Each file in configs/ is one a newcomer copies: it builds (sft.yaml as rlvr sft reads it) and the
    README's list of them names it; ppo.yaml differs from arithmetic.yaml in the algorithm alone, as said."""
    from rlvr.config import to_dict

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    listed = readme.split("The shipped configs (`configs/`)")[1].split("\n\n")[0]
    for path in sorted((root / "configs").glob("*.yaml")):
        build_config(path, command="sft" if path.stem == "sft" else "train")
        assert f"`{path.name}`" in listed, path.name

    def knobs(name):
        return {(s, k): v for s, keys in to_dict(build_config(root / "configs" / name)).items() for k, v in keys.items()}
    arithmetic, ppo = knobs("arithmetic.yaml"), knobs("ppo.yaml")
    assert {s for s, k in arithmetic if arithmetic[s, k] != ppo[s, k] and (s, k) not in
            {("task", "heldout_size"), ("train", "out")}} == {"algo"}  # heldout_size null: 100 for a generated task


def test_the_readmes_override_examples_build_as_said():
    """README: 'Overrides are dotted and parsed as YAML values' and its examples, each built as written."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    said = readme.split("Overrides are dotted and parsed as YAML values: ")[1].split("\n\n")[0]
    examples = re.findall(r"`(--[a-z_.]+=[^`]+)`", said.split("An unknown key")[0])
    assert len(examples) == 4, examples
    built = [build_config(None, [e.replace('"', "")]) for e in examples]  # the shell drops the quotes
    assert built[0].rollout.group_size == 16 and built[1].algo.beta == 0.04
    assert built[2].rewards.weights == {"correctness": 1.0, "format": 0.5}
    assert built[3].rewards.weights == {"correctness": 1.0, "mypkg.rewards:brevity": 0.1}
