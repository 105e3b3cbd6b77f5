"""verl 0.9.1's and TRL 1.16.0's own loss code, loaded from the directory `make peers` installs them in
(pip --no-deps --target $(VENV)/peers; RLVR_PEERS overrides it), for the parity tests. They are not rlvr
dependencies, and a missing or different peer fails these tests (it never skips them).

verl: `verl/__init__.py` imports its whole runtime (ray, the DataProto protocol), so the package is made a
bare namespace over its directory and only `verl.trainer.ppo.core_algos` and `rollout_corr_helper` are
imported, with their own imports (omegaconf, installed beside it; transformers, from the venv). Four
modules those imports name at load time and that no loss, advantage or correction function calls are
stand-ins here: ray, tensordict (type hints and TensorDict helpers), codetiming (the profiler's timer),
orjson (a logger). TRL: trl.trainer.grpo_trainer imports as is; its loss is the method
GRPOTrainer._compute_loss, called on a stand-in for the trainer's state (`trl_loss`)."""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import os
import sys
import types
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest
import torch

VERSIONS = {"verl": "0.9.1", "trl": "1.16.0"}
STAND_INS = ("ray", "tensordict", "codetiming", "orjson")


def peers_dir() -> Path:
    return Path(os.environ.get("RLVR_PEERS") or Path(sys.prefix) / "peers")


def _check_installed() -> Path:
    where = peers_dir()
    for name, version in VERSIONS.items():
        found = [d.version for d in importlib.metadata.distributions(path=[str(where)]) if d.name == name]
        if found != [version]:
            pytest.fail(f"{name}=={version} is not in {where} (found {found or 'none'}): run `make peers` "
                        f"(pip install --no-deps --target {where} verl==0.9.1 trl==1.16.0 omegaconf==2.3.0 "
                        f"antlr4-python3-runtime==4.9.3) or point RLVR_PEERS at such a directory")
    return where


class _StandIn(types.ModuleType):
    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})


class _StandInFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STAND_INS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandIn(spec.name)

    def exec_module(self, module):
        module.__path__ = []


@cache
def verl() -> types.SimpleNamespace:
    """verl's core_algos and rollout_corr_helper modules, ActorConfig and PolicyLossConfig."""
    where = _check_installed()
    finder = _StandInFinder()
    sys.path.insert(0, str(where))
    sys.meta_path.insert(0, finder)
    try:
        if "verl" not in sys.modules:
            package = types.ModuleType("verl")
            package.__path__ = [str(where / "verl")]
            sys.modules["verl"] = package
        core = importlib.import_module("verl.trainer.ppo.core_algos")
        corr = importlib.import_module("verl.trainer.ppo.rollout_corr_helper")
        from verl.workers.config import ActorConfig, PolicyLossConfig
    finally:
        sys.meta_path.remove(finder)
        sys.path.remove(str(where))
        for name in [n for n in sys.modules if n.split(".")[0] in STAND_INS]:
            del sys.modules[name]  # the rest of the session imports the real ones, or none
    return types.SimpleNamespace(core=core, corr=corr, ActorConfig=ActorConfig, PolicyLossConfig=PolicyLossConfig)


def verl_actor(**kw):
    """A verl ActorConfig with the clip range and loss knobs of kw (the rest are verl's defaults)."""
    v = verl()
    loss_keys = ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")
    policy = v.PolicyLossConfig(**{k: kw.pop(k) for k in loss_keys if k in kw})
    return v.ActorConfig(strategy="fsdp", rollout_n=2, ppo_micro_batch_size_per_gpu=1, ppo_mini_batch_size=1,
                         use_dynamic_bsz=False, policy_loss=policy, **kw)


@cache
def trl_trainer():
    """TRL's GRPOTrainer class."""
    where = _check_installed()
    sys.path.insert(0, str(where))
    try:
        return importlib.import_module("trl.trainer.grpo_trainer").GRPOTrainer
    finally:
        sys.path.remove(str(where))


class _OneProcess:
    """What GRPOTrainer asks of accelerate's Accelerator, for one process."""

    num_processes = 1
    sync_gradients = True

    @staticmethod
    def gather(x, **kw):
        return x

    gather_for_metrics = reduce = gather

    @staticmethod
    def pad_across_processes(x, **kw):
        return x


def trl_state(loss_type: str, **args) -> types.SimpleNamespace:
    """A stand-in for a GRPOTrainer's state with GRPOConfig's defaults for the loss, overridden by args."""
    a = dict(delta=None, sapo_temperature_pos=1.0, sapo_temperature_neg=1.05, vespo_k_pos=2.0, vespo_lambda_pos=3.0,
             vespo_k_neg=3.0, vespo_lambda_neg=2.0, use_bias_correction_kl=False, steps_per_generation=1,
             entropy_target=0.2, entropy_coef_delta=0.005, entropy_coef_min=0.0, entropy_coef_max=1.0,
             epsilon=0.2, epsilon_high=None, importance_sampling_level="token", top_entropy_quantile=1.0,
             off_policy_mask_threshold=None, beta=0.0, use_vllm=False, max_completion_length=None, entropy_coef=0.0)
    a.update(args)
    return types.SimpleNamespace(
        args=types.SimpleNamespace(**a), loss_type=loss_type, beta=a["beta"], epsilon_low=a["epsilon"],
        epsilon_high=a["epsilon_high"] if a["epsilon_high"] is not None else a["epsilon"],
        importance_sampling_level=a["importance_sampling_level"], top_entropy_quantile=a["top_entropy_quantile"],
        off_policy_mask_threshold=a["off_policy_mask_threshold"], use_vllm=a["use_vllm"],
        vllm_importance_sampling_correction=a["use_vllm"], max_completion_length=a["max_completion_length"],
        entropy_coef=a["entropy_coef"], use_adaptive_entropy=False, _entropy_bonus_enabled=a["entropy_coef"] != 0,
        aux_loss_enabled=False, current_gradient_accumulation_steps=1, accelerator=_OneProcess(),
        model=types.SimpleNamespace(training=True), _metrics=defaultdict(lambda: defaultdict(list)))


def trl_loss(state, logp: torch.Tensor, entropy: torch.Tensor, inputs: dict) -> torch.Tensor:
    """GRPOTrainer._compute_loss on `state`, its forward replaced by (logp [B, T], entropy [B, T])."""
    cls = trl_trainer()
    state._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropy, None)
    state.get_high_entropy_mask = types.MethodType(cls.get_high_entropy_mask, state)
    state.get_off_policy_mask, state.get_gamma_weights = cls.get_off_policy_mask, cls.get_gamma_weights
    b, t = logp.shape
    full = {"prompt_ids": torch.zeros(b, 1, dtype=torch.long), "prompt_mask": torch.ones(b, 1, dtype=torch.long),
            "completion_ids": torch.zeros(b, t, dtype=torch.long), **inputs}
    full["num_items_in_batch"] = full["completion_mask"].sum()
    return cls._compute_loss(state, None, full)
