"""The policy objectives of rlvr.algo.objectives through rlvr.algo.policy_loss, on tensors small enough to
work out by hand (each value is derived in its comment)."""
import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rlvr.algo import OBJECTIVE_DEFAULTS, OBJECTIVES, aggregate, policy_loss
from rlvr.algo.objectives import REGISTRY, knob_defaults
from rlvr.algo.presets import PRESETS
from rlvr.config import AlgoConfig, ConfigError, build_config, describe
from rlvr.train.update import UpdateSettings

ONE_ROW = torch.ones(1, 4)


def grad_of(loss, x):
    return torch.autograd.grad(loss, x)[0]


def test_cispo_clips_the_weight_but_every_token_keeps_its_gradient():
    logp = torch.tensor([[1.5, 0.5, 1.1, 0.9]]).log().requires_grad_()
    loss, m = policy_loss(logp, torch.zeros(1, 4), torch.tensor([1.0]), ONE_ROW, 0.2, 0.2, objective="cispo")
    # weights sg[clip(r, 0.8, 1.2)] = 1.2, 0.8, 1.1, 0.9; loss -w log r:
    # -1.2 ln 1.5 = -0.486558, -0.8 ln 0.5 = 0.554518, -1.1 ln 1.1 = -0.104841, -0.9 ln 0.9 = 0.094825:
    # sum 0.057943, token mean 0.014486
    expected = (-1.2 * math.log(1.5) - 0.8 * math.log(0.5) - 1.1 * math.log(1.1) - 0.9 * math.log(0.9)) / 4
    assert math.isclose(float(loss), expected, rel_tol=1e-6) and math.isclose(expected, 0.014486, abs_tol=1e-6)
    # d/d logp = -w A / 4: the clipped tokens 0 and 1 still move (the clipped surrogate gives them 0)
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[-0.3, -0.2, -0.275, -0.225]]))
    assert math.isclose(float(m["objective/clipped_frac"]), 0.5)


def test_sapo_gate_values_and_its_unit_slope_at_ratio_one():
    logp = torch.tensor([[1.5, 0.5]]).log()
    adv = torch.tensor([[1.0, -1.0]])
    loss, _ = policy_loss(logp, torch.zeros(1, 2), adv, torch.ones(1, 2), objective="sapo",
                          params={"sapo_tau_pos": 1.0, "sapo_tau_neg": 1.05})
    # A = 1, tau 1: -sigmoid(0.5) * 4 = -0.622459 * 4 = -2.489837
    # A = -1, tau 1.05: +sigmoid(1.05 * -0.5) * 4 / 1.05 = 0.371684 * 3.809524 = 1.415939; mean -0.536949
    pos = -4 / (1 + math.exp(-0.5))
    neg = 4 / 1.05 / (1 + math.exp(0.525))
    assert math.isclose(float(loss), (pos + neg) / 2, rel_tol=1e-6) and math.isclose((pos + neg) / 2, -0.536949,
                                                                                      abs_tol=1e-6)
    # at r = 1 the gate's slope is tau * 1/4 * 4 / tau = 1: the plain policy gradient -A / n per token
    logp = torch.zeros(1, 2, requires_grad=True)
    loss, _ = policy_loss(logp, torch.zeros(1, 2), adv, torch.ones(1, 2), objective="sapo")
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[-0.5, 0.5]]))


def test_gmpo_geometric_mean_with_its_log_space_clip():
    logp = torch.tensor([[0.5, -0.5, 0.1]], requires_grad=True)
    mask = torch.ones(1, 3)
    loss, m = policy_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), mask, 0.4, 0.4, objective="gmpo",
                          aggregation="seq-mean-token-mean")
    # A > 0: min(log r, clip(log r, -0.4, 0.4)) = 0.4, -0.5, 0.1 -> mean 0 -> ratio 1 -> loss -1
    assert math.isclose(float(loss), -1.0, rel_tol=1e-6)
    # d/d logp_t = -A * ratio / 3 where the clip did not bind: token 0 (clipped at 0.4) gets none
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[0.0, -1 / 3, -1 / 3]]))
    assert math.isclose(float(m["objective/clipped_frac"]), 2 / 3, rel_tol=1e-6)  # tokens 0 and 1 are outside the band
    loss, _ = policy_loss(logp, torch.zeros(1, 3), torch.tensor([-1.0]), mask, 0.4, 0.4, objective="gmpo",
                          aggregation="seq-mean-token-mean")
    # A < 0: max(log r, clip) = 0.5, -0.4, 0.1 -> mean 0.2 / 3 -> loss = exp(0.066667) = 1.068939
    assert math.isclose(float(loss), math.exp(0.2 / 3), rel_tol=1e-6)


def test_gpg_is_the_plain_policy_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = policy_loss(logp, logp.detach() + 5, torch.tensor([2.0]), torch.ones(1, 2), objective="gpg")
    # -A log pi = 2, 4 -> token mean 3, whatever the old policy; gradient -A / 2 = -1 per token
    assert math.isclose(float(loss), 3.0)
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[-1.0, -1.0]]))


def test_clip_cov_drops_the_high_covariance_tokens():
    logp = torch.tensor([[-1.0, -3.0, -2.0, -2.0]], requires_grad=True)
    adv = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    loss, m = policy_loss(logp, logp.detach(), adv, ONE_ROW, objective="clip_cov",
                          params={"cov_ratio": 0.5, "clip_cov_lb": 1.0, "clip_cov_ub": 5.0})
    # mean A 0, mean log pi -2: covariances 2*1, -2*-1, 0, 0 -> tokens 0 and 1 lie in (1, 5), and
    # max(1, int(0.5 * 4)) = 2 are dropped: both. Loss at r = 1: -A = 0, 0, -2, 2 -> mean 0
    assert float(loss) == 0.0
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[0.0, 0.0, -0.5, 0.5]]))
    assert math.isclose(float(m["objective/clipped_frac"]), 0.5)


def test_kl_cov_penalises_the_top_covariance_token():
    logp = torch.tensor([[-1.0, -3.5, -2.0, -1.5]], requires_grad=True)
    adv = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    loss, m = policy_loss(logp, logp.detach() - 0.1, adv, ONE_ROW, objective="kl_cov",
                          params={"cov_ratio": 0.25, "kl_cov_coef": 1.0})
    # mean A 0, mean log pi -2: covariances 2, 3, 0, -1; top max(1, int(0.25 * 4)) = 1: token 1 gets +|0.1|.
    # -A r with r = e^0.1 cancels over the four tokens: (0.1) / 4 = 0.025
    assert math.isclose(float(loss), 0.025, rel_tol=1e-5)
    r = math.exp(0.1)
    # gradient -A r / 4, plus sign(0.1) / 4 on token 1
    assert torch.allclose(grad_of(loss, logp), torch.tensor([[-2 * r, 2 * r + 1, -2 * r, 2 * r]]) / 4)
    assert math.isclose(float(m["objective/clipped_frac"]), 0.25)


def test_vespo_gamma_weight_of_the_sequence_ratio():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old = logp.detach() - torch.tensor([[0.1, 0.2]])
    loss, _ = policy_loss(logp, old, torch.tensor([1.0]), torch.ones(1, 2), objective="vespo")
    # w = e^0.3 = 1.349859; A >= 0: k 2, lambda 3: log phi = 3 + 2 * 0.3 - 3 * 1.349859 = -0.449576,
    # phi = 0.637898; loss -phi A log pi = 0.637898, 1.275797 -> mean 0.956847; gradient -phi / 2
    phi = math.exp(3 + 0.6 - 3 * math.exp(0.3))
    assert math.isclose(phi, 0.637898, abs_tol=1e-6)
    assert math.isclose(float(loss), 1.5 * phi, rel_tol=1e-6)
    assert torch.allclose(grad_of(loss, logp), torch.full((1, 2), -phi / 2))
    # phi(1) = e^(lambda - lambda) = 1: at the old policy VESPO is the plain policy gradient
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([-1.0]), torch.ones(1, 2), objective="vespo")
    assert math.isclose(float(loss), (-1.0 - 2.0) / 2, rel_tol=1e-6)


def test_seq_mean_token_sum_is_luspo_s_aggregation():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    # sequence sums 6 and 4 -> mean 5 (the masked 9s never count)
    assert float(aggregate(loss, mask, "seq-mean-token-sum")) == 5.0


def test_sampler_weights_and_keep_multiply_the_token_losses():
    logp = torch.zeros(1, 2)
    loss, _ = policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), objective="ppo",
                          sampler_w=torch.tensor([[2.0, 0.5]]), keep=torch.tensor([[1.0, 0.0]]))
    # ratio 1: -A = -1 per token, times 2 and 0.5, times keep 1 and 0 -> (-2 + 0) / 2
    assert float(loss) == -1.0


def test_the_sequence_ratio_composes_only_with_the_objectives_that_define_it():
    x = torch.zeros(1, 2)
    for objective in ("gmpo", "gpg", "clip_cov", "kl_cov", "vespo"):
        with pytest.raises(ValueError, match="set algo.ratio_level=token"):
            policy_loss(x, x, torch.tensor([1.0]), torch.ones(1, 2), ratio_level="sequence", objective=objective)
    with pytest.raises(ValueError, match="algo.policy_loss must be one of"):
        policy_loss(x, x, torch.tensor([1.0]), torch.ones(1, 2), objective="grpo")


# --- the registry: one entry per objective, read by the config, the presets, the update and the validation ---

# a valid value other than the default for each knob (each within the others' defaults' bounds)
OTHER_VALUE = {"sapo_tau_pos": 2.0, "sapo_tau_neg": 0.5, "cov_ratio": 0.5, "clip_cov_lb": -1.0, "clip_cov_ub": 1.5,
               "kl_cov_coef": 0.1, "vespo_k_pos": 1.0, "vespo_lambda_pos": 1.5, "vespo_k_neg": 1.0,
               "vespo_lambda_neg": 4.0}


def knobs_of_each_objective():
    return [(name, f.name) for name, entry in REGISTRY.items() for f in dataclasses.fields(entry.knobs)]


def test_every_knob_has_an_other_value_here_and_a_help_line():
    assert set(OTHER_VALUE) == set(OBJECTIVE_DEFAULTS)
    help_text = {key: doc for key, _, doc in describe()}
    for name, knob in knobs_of_each_objective():
        assert help_text[f"algo.{knob}"], knob
    # the objective key's own help and docs/algorithms.md name every objective
    algorithms_md = (Path(__file__).resolve().parents[2] / "docs" / "algorithms.md").read_text()
    for name in REGISTRY:
        assert name in help_text["algo.policy_loss"] and f"policy_loss={name}" in algorithms_md, name


@pytest.mark.parametrize("name,knob", knobs_of_each_objective())
def test_each_knob_set_in_the_config_reaches_the_update_and_changes_the_loss(name, knob):
    """The value a user sets is the one the update passes to the loss (never a default), and it matters."""
    cfg = build_config(None, [f"--algo.policy_loss={name}", f"--algo.{knob}={OTHER_VALUE[knob]}"])
    knobs = UpdateSettings.of(cfg, pad_id=0, precision="no").objective_knobs
    assert type(knobs) is REGISTRY[name].knobs and getattr(knobs, knob) == OTHER_VALUE[knob]
    others = {f.name for f in dataclasses.fields(knobs)} - {knob}
    assert all(getattr(knobs, k) == OBJECTIVE_DEFAULTS[k] for k in others)

    g = torch.Generator().manual_seed(0)
    logp = (-torch.rand(4, 6, generator=g) * 3).requires_grad_()
    old = logp.detach() + torch.randn(4, 6, generator=g) * 0.3
    adv = torch.randn(4, 6, generator=g) * 2
    mask = torch.ones(4, 6)

    def loss_and_grad(params):
        loss, m = policy_loss(logp, old, adv, mask, objective=name, params=params,
                              generator=torch.Generator().manual_seed(1))
        return float(loss), grad_of(loss, logp), float(m["objective/clipped_frac"])

    default, changed = loss_and_grad(REGISTRY[name].knobs()), loss_and_grad(knobs)
    assert default[0] != changed[0] or not torch.equal(default[1], changed[1]) or default[2] != changed[2]


def test_a_name_missing_from_the_registry_is_an_error_never_a_default():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="unknown objective knob sapo_tau: one of sapo_tau_pos"):
        policy_loss(x, x, torch.tensor([1.0]), torch.ones(1, 2), objective="sapo", params={"sapo_tau": 2.0})
    with pytest.raises(ValueError, match="algo.policy_loss must be one of ppo, cispo"):
        policy_loss(x, x, torch.tensor([1.0]), torch.ones(1, 2), objective="sapo_v2")
    with pytest.raises(ConfigError, match="algo.policy_loss 'sapo_v2' is not one of ppo, cispo"):
        build_config(None, ["--algo.policy_loss=sapo_v2"])
    # the update reads each knob from its source by name: a source without one fails, it is not defaulted
    with pytest.raises(AttributeError, match="sapo_tau_neg"):
        REGISTRY["sapo"].knobs_from(SimpleNamespace(sapo_tau_pos=2.0))


def test_the_config_section_the_presets_and_validation_come_from_the_registry():
    algo_keys = {f.name for f in dataclasses.fields(AlgoConfig)}
    assert set(OBJECTIVE_DEFAULTS) <= algo_keys and OBJECTIVES == tuple(REGISTRY)
    for name, values in PRESETS.items():  # a preset of an objective sets its knobs at the registry's defaults
        objective_name = values.get("policy_loss", "ppo")
        for knob, default in knob_defaults(objective_name).items():
            assert values[knob] == default, (name, knob)
    # each knob class's own checks are the config's
    with pytest.raises(ConfigError, match=r"algo.clip_cov_lb must be below algo.clip_cov_ub"):
        build_config(None, ["--algo.clip_cov_lb=6"])
    with pytest.raises(ConfigError, match=r"algo.cov_ratio must be in \(0, 1\]"):
        build_config(None, ["--algo.cov_ratio=0"])
    with pytest.raises(ConfigError, match="algo.sapo_tau_pos and algo.sapo_tau_neg must be > 0"):
        build_config(None, ["--algo.sapo_tau_neg=0"])


def test_an_objective_added_to_the_registry_alone_is_in_the_help_the_presets_the_checks_and_a_run(monkeypatch, tmp_path):
    """Adding an objective touches one place: its REGISTRY entry. --help lists it with its words, it has its
    preset, the config checks read what it composes with, and a run trains with its loss."""
    import json

    from rlvr.algo.objectives import Objective, Terms
    from rlvr.algo.presets import presets
    from rlvr.cli import main

    calls = []

    def toy(x, k):  # REINFORCE on the token log-probs: -A log pi
        calls.append(x.logp.shape)
        return Terms(-x.advantages * x.logp)

    monkeypatch.setitem(REGISTRY, "toy", Objective(loss=toy, sequence_correction=False, help="a toy -A log pi",
                                                   preset={"aggregation": "token-mean", "beta": 0.0}))
    docs = {key: doc for key, _, doc in describe()}
    assert "toy (a toy -A log pi)" in docs["algo.policy_loss"] and ", toy, in rlvr/algo/presets.py" in docs["algo.preset"]
    assert "toy" not in docs["algo.ratio_level"]  # no sequence ratio
    assert presets()["toy"] == {"policy_loss": "toy", "aggregation": "token-mean", "beta": 0.0}
    a = build_config(None, ["--algo.preset=toy"]).algo
    assert (a.policy_loss, a.aggregation, a.beta) == ("toy", "token-mean", 0.0)
    with pytest.raises(ConfigError, match="algo.policy_loss toy folds per-token sampler weights"):
        build_config(None, ["--algo.policy_loss=toy", "--algo.sampler_correction=sequence_mask"])
    with pytest.raises(ConfigError, match="composes with algo.policy_loss ppo, cispo, sapo, not toy"):
        build_config(None, ["--algo.policy_loss=toy", "--algo.ratio_level=sequence"])
    out = tmp_path / "run"
    assert main(["train", "configs/smoke.yaml", "--algo.preset=toy", "--train.steps=1", "--eval.before=false",
                 "--eval.after=false", "--train.save_every=0", f"--train.out={out}"]) == 0
    assert calls and yaml_value(out / "config.yaml", "policy_loss") == "toy"
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1 and json.loads(
        (out / "metrics.jsonl").read_text())["step"] == 1


def yaml_value(path: Path, key: str):
    import yaml

    return yaml.safe_load(path.read_text())["algo"][key]
