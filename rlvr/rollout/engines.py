"""The rollout engine protocol: what the training loop samples through, whatever does the sampling.

    engine.generate(prompts, seeds=..., **sampling) -> Rollout   G completions per prompt
    engine.session(prompts, seeds=..., **sampling) -> Session    the same rows, turn by turn (episodes)
    engine.sleep()                                                free memory while the trainer updates
    engine.sync_weights(policy)                                   sample from the updated policy next (vLLM:
                                                                  merged weights, or LoRA adapters alone)

The built-in engine (rollout.engine=builtin, rlvr/rollout/builtin.py; its decode loop in decoding.py)
and plain Hugging Face generate (hf, rlvr/rollout/hf_engine.py) run the training policy itself, so sleep and sync have nothing to do;
vLLM (rlvr/rollout/vllm_engine.py) holds its own copy of the weights and implements both. With
rollout.weights bf16 or int8 the local engines sample from a copy in that format (QuantizedEngine,
rlvr/rollout/quant.py), which sync_weights re-quantises from the policy. Sessions
(rlvr/rollout/builtin.py): the built-in engine keeps each row's KV cache across turns; the others
run `generate` on each row's history (RecomputeSession). Every rollout of a run, single-turn or
multi-turn, is driven from rlvr/envs/episodes.py (`run_episodes`), which opens a session per batch.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import torch

from rlvr.device import of_model
from rlvr.errors import RlvrError
from rlvr.nf4 import is_nf4
from rlvr.rollout import graphed
from rlvr.rollout.builtin import BuiltinSession, RecomputeSession, Turn, generate
from rlvr.rollout.decoding import Rollout
from rlvr.rollout.lean import compile_decode
from rlvr.rollout.quant import refresh, rollout_copy

log = logging.getLogger(__name__)


class Session(Protocol):
    def sample(self, rows: list[int], caps: list[int], keep: bool = True) -> list[Turn]:
        """One model turn for each row (at most caps[i] tokens); keep=False: no later turn for them."""

    def extend(self, rows: list[int], tokens: list[list[int]]) -> None:
        """Append tokens (an environment's turn) to each row's context."""


class RolloutEngine(Protocol):
    def generate(self, prompts: list[list[int]], *, seeds: list[int] | None, group_size: int, max_new_tokens: int,
                 temperature: float, top_p: float, top_k: int, stop_ids: list[int], pad_id: int) -> Rollout:
        """group_size completions of each token-id prompt; prompt i's draws come from seeds[i]."""

    def session(self, prompts: list[list[int]], *, seeds: list[int] | None, group_size: int, temperature: float,
                top_p: float, top_k: int, stop_ids: list[int], pad_id: int) -> Session:
        """group_size rows per prompt, sampled turn by turn; a single turn samples what generate would."""

    def sleep(self) -> None:
        """Free what the engine holds (KV cache, weights) while the trainer updates."""

    def sync_weights(self, policy: torch.nn.Module) -> int | None:
        """Make the next generate sample from the policy's current weights; the bytes that crossed to an engine
        holding weights of its own (vLLM: rollout/sync_bytes), None for one sampling with the policy itself."""


class PolicyEngine:
    """An engine that samples with the training policy itself (builtin, hf): nothing to sync; sleep frees
    the static decode loop's captures and buffers (rlvr/rollout/graphed.py) while the trainer updates."""

    def __init__(self, policy: torch.nn.Module, generate: Callable[..., Rollout], keeps_cache: bool = False):
        self.policy, self._generate, self.keeps_cache = policy, generate, keeps_cache

    def generate(self, prompts: list[list[int]], **sampling) -> Rollout:
        with torch.no_grad():
            return self._generate(self.policy, prompts, **sampling)

    def session(self, prompts: list[list[int]], **sampling) -> Session:
        if self.keeps_cache:  # the built-in engine
            return BuiltinSession(self.policy, prompts, **sampling)
        return RecomputeSession(self.generate, prompts, **sampling)

    def sleep(self) -> None:
        from rlvr.rollout import graphed

        graphed.release(self.policy)

    def sync_weights(self, policy: torch.nn.Module) -> None:
        pass


class QuantizedEngine(PolicyEngine):
    """A local engine (builtin, hf) sampling with a rollout copy of the policy in a smaller weight format
    (rollout.weights bf16 or int8, rlvr/rollout/quant.py); sessions sample from the copy too.
    sync_weights re-quantises the copy from the policy in place. compile: decode through compiled layers
    (rollout.compile, rlvr.rollout.lean.compile_decode)."""

    def __init__(self, policy: torch.nn.Module, weights: str, generate: Callable[..., Rollout],
                 keeps_cache: bool = False, compile: bool = False):
        super().__init__(rollout_copy(policy, weights), generate, keeps_cache)
        self.weights = weights
        if compile and not compile_decode(self.policy):
            log.warning("rollout.compile: this model's decode step has no compiled form (rlvr/rollout/lean.py: a "
                        "Llama, Mistral or Qwen2 model with a SiLU MLP); decoding uncompiled")

    def sync_weights(self, policy: torch.nn.Module) -> None:
        refresh(self.policy, policy)


@dataclass(frozen=True, kw_only=True)
class EngineSettings:
    """What building a rollout engine reads (rlvr.train.settings.engine_settings makes it from the config)."""

    rollout: object  # the rollout section (rlvr.config.RolloutConfig, its vllm keys included)
    model_name: str  # model.name: what vLLM loads before the trainer's weights are pushed
    model_dtype: str  # model.dtype: vLLM's dtype without bf16 autocast
    model_quantize: str = "none"  # model.quantize: vLLM's adapter sync needs the unquantised base (nf4)
    seed: int  # train.seed: vLLM's sampling seed


def make_engine(s: EngineSettings, policy: torch.nn.Module, workdir: Path, precision: str = "no") -> RolloutEngine:
    """The engine rollout.engine names, sampling from `policy`, or from a copy in rollout.weights' format
    when that is not fp32; copies are made on the policy's device. `precision`: train.mixed_precision
    resolved ("bf16": vLLM samples in bf16)."""
    r = s.rollout
    check_device(r, of_model(policy))
    if r.engine == "vllm" and r.vllm.server_url:  # vLLM servers the user started (HTTP only: no vllm here)
        from rlvr.rollout.vllm_server import make_server_engine

        return make_server_engine(s, policy, workdir)
    if r.engine == "vllm":
        from rlvr.rollout.vllm_engine import make_vllm_engine

        return make_vllm_engine(s, policy, workdir, precision)
    engine = _local_engine(r, policy, engine_weights(r, of_model(policy), precision, trains_fp32(policy)))
    if r.engine == "builtin":
        graph_decode(r, policy, engine.policy)  # greedy evaluation samples with the policy itself
    return engine


def graph_decode(r, *models: torch.nn.Module) -> None:
    """Give each model the static, CUDA-graphed decode loop when rollout section r asks for it
    (rollout.cuda_graph) and the model is on a GPU; a model without a static decode step decodes eagerly,
    with a warning."""
    on_gpu = [m for m in dict.fromkeys(models) if r.cuda_graph and of_model(m).type == "cuda"]
    if not all([graphed.enable(m) for m in on_gpu]):
        log.warning("rollout.cuda_graph: this model has no static decode step (rlvr/rollout/lean.py: Llama, "
                    "Mistral or Qwen2 with full attention); decoding eagerly")


def engine_weights(r, device: torch.device, precision: str, fp32_policy: bool = True) -> str:
    """The weights the engine of rollout section `r` samples from, on `device` under `precision`: "fp32" (the
    policy itself: no copy), "bf16" or "int8" (a rollout copy in that format), "snapshot" (rollout.overlap
    one_step_off over the policy's own format: a copy of its weights in their dtype, since the update
    changes the policy while the next rollout samples), or "vllm" (vLLM holds its own). make_engine builds
    this engine and rlvr plan counts this copy: one rule for both."""
    if r.engine == "vllm":
        return "vllm"
    weights = rollout_weights(r.weights, device, precision, fp32_policy)
    return "snapshot" if weights == "fp32" and r.overlap != "none" else weights


def rollout_weights(weights: str, device: torch.device, precision: str, fp32_policy: bool = True) -> str:
    """rollout.weights resolved for a policy on `device` trained at `precision` ("bf16" or "no"): auto is
    bf16 on CUDA under bf16 autocast over an fp32 policy (a persistent copy, refreshed once per optimizer
    step, in place of autocast re-casting every fp32 weight at every decode step), else fp32, the policy
    itself: a policy whose base is already bf16 or 4-bit (`fp32_policy` False) decodes with its own
    weights, so no second copy of them is made."""
    if weights != "auto":
        return weights
    return "bf16" if device.type == "cuda" and precision == "bf16" and fp32_policy else "fp32"


def trains_fp32(policy: torch.nn.Module) -> bool:
    """True when the policy's largest weights (its linear layers' and embedding's, frozen or not) are
    fp32: what the auto rollout format asks before it makes a bf16 copy of them."""
    largest = max(policy.parameters(), key=lambda p: p.numel())
    return largest.dtype == torch.float32 and not is_nf4(largest)  # an NF4 weight reports its dequantised dtype


def _local_engine(r, policy: torch.nn.Module, weights: str) -> PolicyEngine:
    """The builtin or hf engine of rollout section r, on the policy or a rollout copy of it in `weights`."""
    if r.engine == "hf":
        from rlvr.rollout.hf_engine import hf_generate

        if weights != "fp32":
            return QuantizedEngine(policy, weights, hf_generate)
        return PolicyEngine(policy, hf_generate)
    if weights == "fp32":
        return builtin_engine(policy)
    return QuantizedEngine(policy, weights, generate, keeps_cache=True, compile=r.compile)


def check_device(r, device: torch.device) -> None:
    """Refuse rollout settings (r: rlvr.config.RolloutConfig) that do not work on `device`, saying why."""
    if device.type == "cuda" and r.weights == "int8":
        raise RlvrError("rollout.weights=int8 is a CPU format: its integer GEMM (torch._int_mm, with every "
                        "activation row quantised) needs more than 16 rows and shapes in multiples of 8 on CUDA, "
                        "and bf16 is as fast there; on a GPU use rollout.weights=bf16, or fp32 (with "
                        "train.mixed_precision bf16, rollouts then decode under bf16 autocast)")
    if device.type == "cuda" and r.compile:
        raise RlvrError("rollout.compile compiles the CPU decode step (rlvr/rollout/lean.py); on a GPU set "
                        "rollout.compile=false")


OFF_POLICY_TIS_CAP = 2.0  # the usual TIS cap (Yao et al. 2025's example value; quantised-rollout recipes use it)


def tis_cap_of(r) -> float:
    """The truncated importance sampling cap for a rollout section (rlvr.config.RolloutConfig): rollout.tis_cap
    when set, else the default of the engine make_engine builds from it: 2.0 when that engine does not sample
    with the trainer's own forward, so is off-policy on every token (a bf16/int8 rollout copy: int8 on
    SmolLM2-135M differs by ~0.06 nats a token, bench/rollout_weights.py; vLLM's kernels by ~0.06-0.1), else
    0 (off). rollout.overlap=one_step_off samples from weights one update old: 2.0 too.
    rollout.weights=auto samples from the trainer's forward: fp32 weights where it resolves to fp32,
    and under bf16 autocast a bf16 copy whose products are the ones autocast computes (Bf16Linear)."""
    if r.tis_cap is not None:
        return r.tis_cap
    off_policy = r.engine == "vllm" or r.weights not in ("auto", "fp32") or r.overlap != "none"
    return OFF_POLICY_TIS_CAP if off_policy else 0.0


def builtin_engine(policy: torch.nn.Module) -> PolicyEngine:
    """The built-in engine on `policy` (evaluation samples with it whatever rollout.engine is)."""
    return PolicyEngine(policy, generate, keeps_cache=True)
