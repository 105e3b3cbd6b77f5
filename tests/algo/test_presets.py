"""Every preset builds into a valid config; the objective, sampler-correction and selection knobs are
checked when the config is built."""
import pytest

from rlvr.algo.presets import PRESETS
from rlvr.config import ConfigError, build_config
from rlvr.train.settings import update_settings


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_builds_and_sets_its_keys(name):
    cfg = build_config(None, [f"--algo.preset={name}"])
    for key, value in PRESETS[name].items():  # a dotted knob names its section (dapo: rewards.soft_overlong)
        section, _, field = key.rpartition(".")
        assert getattr(getattr(cfg, section or "algo"), field) == value, key


def test_the_seven_older_presets_keep_the_clipped_surrogate_and_no_sampler_change():
    for name in ("grpo", "dr_grpo", "dapo", "gspo", "rloo", "reinforce_pp", "ppo"):
        a = build_config(None, [f"--algo.preset={name}"]).algo
        assert (a.policy_loss, a.sampler_correction, a.top_entropy_quantile) == ("ppo", "auto", 1.0), name


@pytest.mark.parametrize("overrides,sampler", [
    ([], ("off", 0.0, None)),  # fp32 builtin engine: the sampler is the trainer
    (["--rollout.weights=int8"], ("token_truncate", 0.0, 2.0)),  # auto: rollout.tis_cap's default
    (["--rollout.tis_cap=4"], ("token_truncate", 0.0, 4.0)),  # the older key, as before
    (["--algo.sampler_correction=sequence_mask", "--algo.sampler_c_max=3"], ("sequence_mask", 0.0, 3.0)),
    (["--algo.sampler_correction=token_mask", "--algo.sampler_c_min=0.5"], ("token_mask", 0.5, 2.0)),  # IcePop
])
def test_sampler_correction_resolution(overrides, sampler):
    assert update_settings(build_config(None, overrides), pad_id=0, precision="no").sampler == sampler


@pytest.mark.parametrize("overrides,message", [
    (["--algo.policy_loss=grpo"], "algo.policy_loss 'grpo' is not one of"),
    (["--algo.policy_loss=gmpo", "--algo.ratio_level=sequence"], "set algo.ratio_level=token"),
    (["--algo.sampler_correction=token_mask", "--rollout.tis_cap=2"], "give the cap as algo.sampler_c_max"),
    (["--algo.sampler_correction=token"], "algo.sampler_correction 'token' is not one of"),
    (["--algo.sampler_c_min=3"], "algo.sampler_c_min must be >= 0 and below algo.sampler_c_max"),
    (["--algo.top_entropy_quantile=0"], "algo.top_entropy_quantile must be in (0, 1]"),
    (["--algo.policy_loss=vespo", "--algo.sampler_correction=sequence_mask"], "use algo.sampler_correction token"),
    (["--algo.adv_estimator=group_passk", "--algo.adv_scale=batch"], "algo.adv_scale must be group or none"),
])
def test_bad_objective_settings_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        build_config(None, overrides)
