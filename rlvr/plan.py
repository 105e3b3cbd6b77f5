"""rlvr plan: the peak memory of a run's rollout and update, by component, from the model's config alone.

No weights are read: the architecture numbers come from a local model directory's config.json (transformers'
AutoConfig), a Hub name's config.json in the Hugging Face cache, a shape shipped in rlvr/shapes/ (public configs: llama-3.1-8b, qwen2.5-32b, qwen3-1.7b), or a
built-in model. Each phase's peak is the sum of what it holds at its peak:

    rollout  weights (+ a bf16 rollout copy, + a reference copy)  + gradients and optimizer state (still held)
             (+ on the CPU, what the process holds beyond tensors: CPU_PROCESS)
             + KV cache (rows x (prompt + completion) positions x layers x 2 x kv heads x head dim)
             + logits (each decode step's [rows, vocab] fp32 scores and the sampler's working copies)
    update   weights + optimizer state (the moments, and the fp32 master copies of bf16 trained weights)
             + activations (one micro-batch's tokens x layers x what a decoder layer keeps for its backward;
               with gradient checkpointing, each layer's input and one layer's in full; train.packed adds
               each group's [tokens, tokens] mask)
             + logits (the log-prob head: fp32 [tokens, vocab] pieces, chunked, and their gradient)
             + gradients, which exist beside a micro-batch's activations from the second micro-batch on; with
               one micro-batch the peak is the larger of the forward's end (activations, logits) and the
               backward's end (gradients, one layer's activations), and the table shows that moment's parts

What a layer keeps per token is counted from its tensors (ACTIVATION_TERMS); the constants that are not
shapes (LOGIT_COPIES, ...) were read off measured peaks on a CPU (bench/plan_check.py, tests/test_plan.py:
within 15% of the process's allocations in each phase) and are to be checked on a GPU by bench/gpu.py,
which prints the plan beside every measured phase.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.hub import cached_config, hf_cache_dir, is_hub_name
from rlvr.models.tiny import SHAPES

GIB = 2**30
BYTES = {"float32": 4, "bfloat16": 2}
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)  # 4-bit codes, an int8 absmax per 64, an fp32 scale per 256 absmaxes
STATE_8BIT = 2 + 2 * 4 / 256  # two int8 moments and an fp32 scale per 256 values (tensors of >= 4096 values)
# Per token per decoder layer, in elements: what the backward keeps. Attention: the normed input (H, for q, k
# and v), q, k, v after rotary (H + 2 KV), the attention output (H), its softmax's statistics, the residual
# (H) and the second norm's input and output (2H). MLP: gate, up, act(gate), act(gate) * up (4 I). Norms
# keep an fp32 copy of their input; under LoRA the adapters' inputs are the same tensors, counted once.
ACTIVATION_TERMS = {"hidden": 8, "kv": 4, "intermediate": 4}
# [n, vocab] fp32 tensors alive at once: the decode step's logits, softmax and sampling copy; on the CPU the
# update keeps each chunk's log-softmax for the backward; on CUDA one chunk's logits, log-softmax and grads
LOGIT_COPIES = {"rollout": 3, "update_cpu": 1, "update_cuda": 4}
CHUNK = 256  # rows of the log-prob head per piece on CUDA (rlvr/train/head.py token_logprobs)
# On the CPU the measure is the process's resident set, which from the first step on also holds what is no
# tensor the plan counts: the allocator's arenas of small blocks, Python objects, the tokenizer's caches. Read
# off bench/plan_check.py's runs (resident set between steps less the weights and optimizer state held: 0.10
# GiB at SmolLM2-135M's shape, LoRA on an NF4 base). On CUDA the allocator counts tensors alone: none there.
CPU_PROCESS = 0.1 * 2**30


ALL_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # Shape.linear's layers


@dataclass(kw_only=True, frozen=True)
class Shape:
    """A decoder-only transformer's numbers (Llama, Qwen2, Qwen3, Mistral families)."""

    name: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool

    def linear(self) -> dict[str, tuple[int, int]]:
        """Each decoder layer's linear layers: name -> (in, out)."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return dict(zip(ALL_LINEAR, ((h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h))))

    @property
    def linear_params(self) -> int:
        return self.layers * sum(a * b for a, b in self.linear().values())

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied else 2)  # input embedding (+ an untied head)

    @property
    def params(self) -> int:
        return self.linear_params + self.embed_params + (2 * self.layers + 1) * self.hidden


@dataclass(kw_only=True, frozen=True)
class PlanSettings:
    """What of a run's config sizes its memory, resolved for its device."""

    device: str = "cuda"  # cuda or cpu
    dtype: str = "bfloat16"  # model.dtype resolved
    quantize: str = "none"
    lora_r: int = 0
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    precision: str = "bf16"  # train.mixed_precision resolved: bf16 autocast or no
    # the engine's copy of the weights (rlvr.rollout.engines.engine_weights): fp32 none, bf16 / int8 a rollout copy,
    # snapshot one step off's copy of the policy in its own dtype, vllm vLLM's own (not counted here)
    rollout_copy: str = "fp32"
    named_copy: bool = False  # rollout.weights names bf16 or int8: the copy is made whatever the policy's dtype
    reference: str = "none"  # none, adapters_off, copy, bf16_copy
    optimizer_state: str = "fp32"
    prompts: int = 8
    group: int = 8
    prompt_tokens: int = 128
    new_tokens: int = 256
    micro_batch_prompts: int = 4
    checkpointing: bool = False
    packed: bool = False  # train.packed: a row per group, its prompt once, under its [tokens, tokens] mask (sdpa)
    vllm: str = "none"  # colocated vLLM's copy: none, merged (the whole model) or adapters (its base, and a LoRA slot)
    vllm_dtype: str = "bfloat16"  # the dtype vLLM holds its base in (the model's own under nf4)
    vllm_kv: float = 0.0  # colocated vLLM's KV cache in bytes where a setting sizes it (kv_cache_gib, 1 GiB on a CPU)
    vllm_sleeps: bool = True  # freed while the trainer updates (sleep mode: GPU only)

    @staticmethod
    def of(cfg, device: str, stored_dtype: str | None = None, prompt_tokens: int = 128) -> "PlanSettings":
        """The settings of a rlvr Config on `device` (cuda or cpu); `stored_dtype`: the checkpoint's."""
        import torch

        from rlvr.device import resolve_precision
        from rlvr.models.dtypes import weight_dtype
        from rlvr.rollout.engines import engine_weights
        from rlvr.train.forward import reference_in_bf16

        dev = torch.device(device)
        dtype = str(weight_dtype(cfg.model.dtype, stored_dtype, dev)).removeprefix("torch.")
        precision = resolve_precision(cfg.train.mixed_precision, dev)
        lora = cfg.model.lora.r > 0
        copy = engine_weights(cfg.rollout, dev, precision, dtype == "float32" and cfg.model.quantize == "none")
        ref = "none" if cfg.algo.beta <= 0 else "adapters_off" if lora else (
            "bf16_copy" if reference_in_bf16(cfg.algo, precision) else "copy")
        v = cfg.rollout.vllm
        colocated = cfg.rollout.engine == "vllm" and not v.server_url
        targets = ALL_LINEAR if cfg.model.lora.target_modules == "all-linear" else cfg.model.lora.target_modules
        # as rollout.vllm.sync resolves (rlvr/rollout/weights.py): adapters unless merged is asked for, or the
        # adapters sit on the head or the embeddings
        adapters = lora and v.sync != "merged" and not {"lm_head", "embed_tokens"} & set(targets)
        kv = v.kv_cache_gib * GIB if v.kv_cache_gib else (GIB if device == "cpu" else 0.0)
        return PlanSettings(vllm=("adapters" if adapters else "merged") if colocated else "none",
                        vllm_dtype="bfloat16" if precision == "bf16" else dtype, vllm_kv=kv,
                        vllm_sleeps=v.sleep and device == "cuda",
                        device=device, dtype=dtype, quantize=cfg.model.quantize, lora_r=cfg.model.lora.r,
                        lora_targets=tuple(ALL_LINEAR if cfg.model.lora.target_modules == "all-linear"
                                           else cfg.model.lora.target_modules), precision=precision, rollout_copy=copy,
                        named_copy=copy in ("bf16", "int8") and cfg.rollout.weights != "auto",
                        reference=ref, optimizer_state=cfg.optimizer.state, prompts=cfg.rollout.prompts_per_step,
                        group=cfg.rollout.group_size, prompt_tokens=prompt_tokens,
                        new_tokens=cfg.rollout.max_new_tokens, micro_batch_prompts=cfg.optimizer.micro_batch_prompts,
                        checkpointing=cfg.train.gradient_checkpointing, packed=cfg.train.packed)


@dataclass(kw_only=True)
class Plan:
    shape: Shape
    settings: PlanSettings
    rollout: dict[str, float] = field(default_factory=dict)  # component -> bytes
    update: dict[str, float] = field(default_factory=dict)

    @property
    def peak(self) -> float:
        return max(sum(self.rollout.values()), sum(self.update.values()))


def estimate(shape: Shape, s: PlanSettings) -> Plan:
    """The plan of `shape` under `s` (module docstring)."""
    w = BYTES[s.dtype]
    linear = shape.linear_params * (NF4_BYTES if s.quantize == "nf4" else w)
    others = (shape.embed_params + (2 * shape.layers + 1) * shape.hidden) * w
    adapters = shape.layers * sum(s.lora_r * (a + b) for n, (a, b) in shape.linear().items() if n in s.lora_targets)
    weights = linear + others + adapters * 4  # PEFT keeps adapters in fp32
    if s.rollout_copy in ("bf16", "int8", "snapshot"):  # the copy's linear layers and head (bf16, int8 counted as
        # bf16; a snapshot in the policy's dtype, LoRA merged), the rest as the policy's
        weights += (shape.linear_params + shape.vocab * shape.hidden) * (w if s.rollout_copy == "snapshot" else 2) + others
    if s.reference in ("copy", "bf16_copy"):
        weights += (shape.linear_params + shape.vocab * shape.hidden) * (2 if s.reference == "bf16_copy" else w) + others
    trainable = adapters if s.lora_r > 0 else shape.params
    grad_bytes = 4 if s.lora_r > 0 else w
    state = {"fp32": 8.0, "offload": 0.0, "8bit": STATE_8BIT}[s.optimizer_state] * trainable
    if s.lora_r == 0 and w < 4 and s.optimizer_state != "offload":
        state += 4 * trainable  # the fp32 master copy of each bf16 trained weight (rlvr/train/optim.py MasterAdamW)
    held = {"weights": weights, "gradients": 0.0, "optimizer": state}  # gradients are freed after each step
    if s.device == "cpu":
        held["process"] = CPU_PROCESS
    compute = 2 if s.precision == "bf16" or s.dtype == "bfloat16" else 4
    rows = s.prompts * s.group
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * rows * (s.prompt_tokens + s.new_tokens) * compute
    logits = LOGIT_COPIES["rollout"] * rows * shape.vocab * 4
    plan = Plan(shape=shape, settings=s)
    vllm = vllm_bytes(shape, s)
    if s.vllm != "none":  # vLLM samples with its own cache and logits; the trainer's engine holds neither
        kv, logits = 0.0, 0.0
    plan.rollout = {**held, "kv_cache": kv, "logits": logits, "activations": 0.0, **vllm}
    # the update: one micro-batch's forward and backward on top of what is held
    mb = min(s.micro_batch_prompts, s.prompts)
    # without checkpointing a group's prompt runs once; with it, once per row unless packed (rlvr/train/packed.py)
    tokens = mb * (s.group * s.new_tokens + (s.group if s.checkpointing and not s.packed else 1) * s.prompt_tokens)
    per_layer = sum(ACTIVATION_TERMS[k] * v for k, v in
                    (("hidden", shape.hidden), ("kv", shape.kv_heads * shape.head_dim), ("intermediate", shape.intermediate)))
    if s.checkpointing:
        activations = tokens * (shape.layers * shape.hidden + per_layer) * compute
    else:
        activations = tokens * shape.layers * per_layer * compute
    mask = tokens * tokens // mb if s.packed else 0  # each group's packed row's mask, a byte a pair, held to the end
    activations += mask
    scored = mb * s.group * s.new_tokens  # completion tokens reach the head
    if s.device == "cuda":
        head = LOGIT_COPIES["update_cuda"] * min(scored, CHUNK) * shape.vocab * 4 + scored * shape.hidden * compute
    else:
        head = LOGIT_COPIES["update_cpu"] * scored * shape.vocab * 4
    grads, layer = trainable * grad_bytes, tokens * per_layer * compute + mask
    if -(-s.prompts // mb) > 1 or grads + layer > activations + head:
        # from the second micro-batch on the gradients are held beside its activations; with one micro-batch
        # the peak is the larger of the forward's end and the backward's end (gradients, a layer's activations)
        parts = {"gradients": grads, "activations": activations, "logits": head} if -(-s.prompts // mb) > 1 else \
            {"gradients": grads, "activations": layer, "logits": 0.0}
    else:
        parts = {"gradients": 0.0, "activations": activations, "logits": head}
    plan.update = {**held, **parts, "kv_cache": 0.0,
                   **({k: 0.0 for k in vllm} if s.vllm_sleeps else vllm)}  # asleep: its GPU memory is freed
    return plan


def vllm_bytes(shape: Shape, s: PlanSettings) -> dict[str, float]:
    """Colocated vLLM's memory: its copy of the model (merged: every weight; adapters: the base once, in the model's
    own dtype even where the trainer's is nf4, and one LoRA slot of vLLM's max_lora_rank), and its KV cache where a
    setting sizes it; empty without colocated vLLM."""
    if s.vllm == "none":
        return {}
    w = BYTES[s.vllm_dtype]
    weights = shape.params * w
    if s.vllm == "adapters":
        from rlvr.rollout.weights import vllm_lora_rank

        rank = vllm_lora_rank(s.lora_r)
        weights += shape.layers * sum(rank * (a + b) for n, (a, b) in shape.linear().items() if n in s.lora_targets) * w
    return {"vllm_weights": weights, "vllm_kv": s.vllm_kv}


def plan_of(cfg, device: str, prompt_tokens: int = 128) -> Plan:
    """The plan of a rlvr Config's run on `device` (cuda or cpu), from model.name's config alone."""
    return estimate(shape_of(cfg.model.name), PlanSettings.of(cfg, device, stored_dtype(cfg.model.name), prompt_tokens))


def unplanned(cfg, device: str = "cuda") -> str:
    """A line saying what of the run the plan leaves out, where something is: colocated vLLM's KV cache on a GPU
    when rollout.vllm.kv_cache_gib does not size it (vLLM then takes gpu_memory_utilization's share of the card,
    its weights included); else empty. Its copy of the weights, and a cache a setting sizes, are counted."""
    v = cfg.rollout.vllm
    if cfg.rollout.engine != "vllm" or v.server_url or v.kv_cache_gib or device == "cpu":
        return ""
    return (f"\nnot counted: colocated vLLM's KV cache: vLLM takes rollout.vllm.gpu_memory_utilization="
            f"{v.gpu_memory_utilization} of the card for its weights and cache (set rollout.vllm.kv_cache_gib to "
            "size the cache, and the plan counts it)")


def first_lines(cfg, device: str, questions: list[str], card: float | None = None) -> str:
    """What rlvr train says first: on CUDA the run's plan as a table, with `card` (the GPU's memory in
    bytes) whether it fits and what would make it fit; on the CPU, where memory is seldom what stops a run,
    one line with the peak. The prompts' length is estimated from their text (about four characters a
    token, plus the chat template and system prompt). Where no plan can be made, why."""
    longest = max(map(len, questions), default=0) + len(cfg.task.system_prompt or "")
    try:
        plan = plan_of(cfg, device, longest // 4 + 32)
    except RlvrError as e:  # a Hub name not in the cache, a model family it does not know: the run goes on
        return f"memory plan: none ({e})"
    if device == "cuda":
        return report(plan, card) + unplanned(cfg, device)
    phases = {phase: sum(parts.values()) for phase, parts in (("rollout", plan.rollout), ("update", plan.update))}
    return (f"memory plan: peak {size(plan.peak)} on the CPU (rollout {size(phases['rollout'])}, update "
            f"{size(phases['update'])}); by component: rlvr plan CONFIG, with this run's config and overrides"
            + unplanned(cfg, device))


def size(n: float) -> str:
    """Bytes as GiB from 1 GiB up, else MiB."""
    return f"{n / GIB:.2f} GiB" if n >= GIB else f"{n / 2**20:.1f} MiB"


def stored_dtype(name: str) -> str | None:
    """The dtype model.name's checkpoint is stored in, where its config says (model.dtype auto reads it)."""
    from rlvr.models.dtypes import checkpoint_dtype
    from rlvr.models.tiny import RANDOM

    name = name.removeprefix(RANDOM)  # random:SHAPE loads as the shipped shape's config says
    shipped = SHAPES / f"{name.lower()}.json"
    if shipped.is_file():
        return json.loads(shipped.read_text()).get("torch_dtype")
    path = Path(name).expanduser()
    if _run_model(path):
        return stored_dtype(_run_model(path))
    if not path.is_dir() and is_hub_name(name):
        path = getattr(cached_config(name), "parent", path)
    return checkpoint_dtype(path) if path.is_dir() else None


# ---------------------------------------------------------------------------------------------- shapes


def _run_model(path: Path) -> str | None:
    """model.name of the run whose checkpoint `path` is (RUN_DIR/checkpoints/step_N.pt), else None."""
    config = path.parent.parent / "config.yaml"
    if path.suffix != ".pt" or not path.is_file() or not config.is_file():
        return None
    from rlvr.config import build_config

    return build_config(config).model.name


def shape_of(name: str) -> Shape:
    """The shape of model.name (a shipped shape, a built-in, or a local directory's config.json), or of a
    shipped shape's name (rlvr/shapes/NAME.json), with or without random: (its random weights have its shape)."""
    from rlvr.models.gguf import SMOLLM2
    from rlvr.models.loading import BUILTINS
    from rlvr.models.tiny import RANDOM, TINY

    name = name.removeprefix(RANDOM)
    shipped = SHAPES / f"{name.lower()}.json"
    if shipped.is_file():
        return _from_config(json.loads(shipped.read_text()), name)
    if name == TINY:
        from rlvr.models.tiny import tiny_config

        return _from_config(tiny_config().to_dict(), name)
    if name == SMOLLM2:  # its public config, the same numbers as the converted model's
        return _from_config(json.loads((SHAPES / "smollm2-135m.json").read_text()), name)
    path = Path(name).expanduser()
    if (path / "config.json").is_file():
        return _from_config(json.loads((path / "config.json").read_text()), str(path))
    if _run_model(path):  # a run's checkpoint: the shape of the model its run trained
        return shape_of(_run_model(path))
    if is_hub_name(name):  # org/name: its config.json from the Hugging Face cache, which the run would load from
        config = cached_config(name)
        if config is None:
            raise RlvrError(f"rlvr plan: '{name}' is not in the Hugging Face cache ({hf_cache_dir()}); the plan needs "
                            f"its config.json alone: `hf download {name} config.json`; offline, plan a shipped shape "
                            f"({', '.join('--model.name=' + RANDOM + s for s in shipped_shapes())}) or "
                            f"a directory holding a config.json written from the model card ({', '.join(CONFIG_KEYS)}; "
                            f"torch_dtype): --model.name=DIR")
        return _from_config(json.loads(config.read_text()), name)
    raise RlvrError(f"rlvr plan: no config for '{name}': give a local model directory (its config.json), a built-in "
                    f"({', '.join(BUILTINS)}) or a shipped shape ({', '.join(shipped_shapes())})")


def shipped_shapes() -> list[str]:
    """The public architectures rlvr ships (rlvr/shapes/NAME.json), each plannable and trainable as random:NAME."""
    return sorted(p.stem for p in SHAPES.glob("*.json"))


# what _from_config reads of a config.json: what a hand-written one needs (head_dim and num_key_value_heads
# default to hidden_size / heads and heads)
CONFIG_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "tie_word_embeddings")


# config keys that give a mixture-of-experts model's experts (Qwen2/3-MoE, Mixtral, DeepSeek): its MLP is
# many experts, not the one intermediate_size MLP a Shape counts
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")


def _from_config(c: dict, name: str) -> Shape:
    c = {**c, **c.get("text_config", {})}  # multimodal configs nest the language model's
    experts = next((k for k in EXPERT_KEYS if isinstance(c.get(k), int) and c[k] > 1), None)
    if experts:  # counted as dense, Qwen3-30B-A3B would be 3.3B parameters and "fit" a card it cannot
        raise RlvrError(f"rlvr plan: {name} is a mixture-of-experts model ({experts}={c[experts]}): the plan "
                        f"counts dense decoder layers only, and would undercount its experts' weights; no plan")
    try:
        heads = c["num_attention_heads"]
        return Shape(name=name, vocab=c["vocab_size"], hidden=c["hidden_size"], layers=c["num_hidden_layers"],
                     heads=heads, kv_heads=c.get("num_key_value_heads") or heads,
                     head_dim=c.get("head_dim") or c["hidden_size"] // heads, intermediate=c["intermediate_size"],
                     tied=bool(c.get("tie_word_embeddings", False)))
    except KeyError as e:
        raise RlvrError(f"rlvr plan: {name}'s config has no {e.args[0]}: not a decoder-only transformer it knows")


def parse_size(text: str) -> float:
    """'24GiB', '24GB', '80 GiB', '512MiB', '24' -> bytes; GB is read as GiB (as cards are sold), a bare number as GiB."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(?:([KMGT])i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise RlvrError(f"--memory {text!r}: expected a size such as 24GiB or 80GB")
    return float(m[1]) * 2 ** (10 * "KMGT".index((m[2] or "G").upper()) + 10)


# ---------------------------------------------------------------------------------------------- fitting


def _changes(s: PlanSettings) -> list[tuple[str, object]]:
    """The settings a user can change to save memory, most effective first: (override, PlanSettings -> PlanSettings)."""
    ref = lambda t: "adapters_off" if t.reference != "none" else "none"
    # adapters drop a rollout copy made for an fp32 policy (as the plan has long counted); one step off's snapshot stays
    copy = lambda t: "snapshot" if t.rollout_copy == "snapshot" else "fp32"
    out = []
    if s.dtype == "float32":  # model.dtype float32 (the default) holds an fp32 copy of a bf16 checkpoint
        # on CUDA auto is bf16 for every checkpoint; on the CPU only for a bf16 one, so the advice names the dtype.
        # A bf16 policy samples with its own weights: no bf16 rollout copy unless rollout.weights names one.
        out.append(("--model.dtype=" + ("auto" if s.device == "cuda" else "bfloat16"),
                    lambda t: replace(t, dtype="bfloat16", rollout_copy=(
                        t.rollout_copy if t.named_copy or t.rollout_copy == "snapshot" else "fp32"))))
    if s.lora_r == 0:
        out.append(("--model.lora.r=16", lambda t: replace(t, lora_r=16, reference=ref(t), rollout_copy=copy(t))))
    if s.quantize == "none":  # the 4-bit base trains adapters only: advice a run accepts names the rank too
        out.append(("--model.quantize=nf4" + ("" if s.lora_r else " --model.lora.r=16"),
                    lambda t: replace(t, quantize="nf4", lora_r=t.lora_r or 16, reference=ref(t), rollout_copy=copy(t))))
    if not s.checkpointing:
        out.append(("--train.gradient_checkpointing=true", lambda t: replace(t, checkpointing=True)))
    if s.optimizer_state == "fp32" and s.lora_r == 0:
        out.append(("--optimizer.state=8bit", lambda t: replace(t, optimizer_state="8bit")))
    mb = s.micro_batch_prompts
    while mb > 1:
        mb //= 2
        out.append((f"--optimizer.micro_batch_prompts={mb}", lambda t, mb=mb: replace(t, micro_batch_prompts=mb)))
    n = s.new_tokens
    while n > 64:
        n //= 2
        out.append((f"--rollout.max_new_tokens={n}", lambda t, n=n: replace(t, new_tokens=n)))
    return out


def fixes(shape: Shape, s: PlanSettings, budget: float) -> list[tuple[str, Plan]]:
    """Changes that bring the peak within `budget`: each one that does alone, or else the shortest run of
    them, in _changes' order, that does together, less any of it the rest fits without; [] when none does.
    A run without the 4-bit base comes first where one fits (bf16 weights keep the model as trained; 4 bits
    round every frozen weight), then the 4-bit one where it differs."""
    changes = _changes(s)
    four = lambda label: label.startswith("--model.quantize")
    alone = [(label, p) for label, change in changes for p in [estimate(shape, change(s))] if p.peak <= budget]
    whole = [a for a in alone if not four(a[0])] or [f for f in [_together(shape, s, budget, [
        c for c in changes if not four(c[0])])] if f]
    quantized = [a for a in alone if four(a[0])] or ([] if alone else [f for f in [_together(shape, s, budget, changes)]
                                                                      if f and f[0] not in [w[0] for w in whole]])
    return whole + quantized


def _together(shape: Shape, s: PlanSettings, budget: float, changes: list) -> tuple[str, Plan] | None:
    """The shortest run of `changes`, in order, that brings the peak within `budget`, less any of it the rest
    fits without; None when all of them together do not."""
    def together(chosen):
        t = s
        for _, change in chosen:
            t = change(t)
        return estimate(shape, t)

    chosen = []
    for label, change in changes:
        if label.startswith("--model.lora.r") and any(x.startswith("--model.quantize") for x, _ in changes):
            continue  # the 4-bit base brings LoRA with it
        key = label.split("=", 1)[0]  # a key given again (micro_batch_prompts 2, then 1): only its last value
        chosen = [c for c in chosen if c[0].split("=", 1)[0] != key] + [(label, change)]
        if together(chosen).peak <= budget:
            for c in list(chosen):  # a change the others fit without is advice the user need not take
                rest = [x for x in chosen if x is not c]
                if together(rest).peak <= budget:
                    chosen = rest
            return " ".join(label for label, _ in chosen), together(chosen)
    return None


def report(plan: Plan, budget: float | None = None) -> str:
    """The plan as a table, and with a budget whether it fits and what would make it fit."""
    s, shape = plan.settings, plan.shape
    comps = ["weights", "gradients", "optimizer", "activations", "logits", "kv_cache"]
    comps += ["process"] if "process" in plan.rollout else []  # the CPU's resident set beyond tensors
    comps += ["vllm_weights", "vllm_kv"] if "vllm_weights" in plan.rollout else []  # colocated vLLM
    size = f"{shape.params / 1e9:.2f}B" if shape.params >= 1e9 else f"{shape.params / 1e6:.1f}M"
    lines = [f"memory plan: {shape.name} ({size} parameters) on {s.device}, weights "
             f"{'nf4' if s.quantize == 'nf4' else s.dtype}, " + (f"LoRA r={s.lora_r}" if s.lora_r else "full fine-tuning")
             + f", {s.prompts}x{s.group}x{s.new_tokens} (prompts {s.prompt_tokens} tokens), micro-batch "
             f"{s.micro_batch_prompts}, checkpointing {'on' if s.checkpointing else 'off'}, optimizer {s.optimizer_state}",
             f"{'GiB':<9}" + "".join(f"{c:>12}" for c in comps) + f"{'peak':>10}"]
    for phase, parts in (("rollout", plan.rollout), ("update", plan.update)):
        lines.append(f"{phase:<9}" + "".join(f"{parts.get(c, 0) / GIB:>12.2f}" for c in comps)
                     + f"{sum(parts.values()) / GIB:>10.2f}")
    if budget is not None:
        if plan.peak <= budget:
            lines.append(f"fits in {budget / GIB:.1f} GiB (peak {plan.peak / GIB:.2f} GiB)")
        else:
            found = fixes(shape, s, budget)
            lines.append(f"does not fit in {budget / GIB:.1f} GiB (peak {plan.peak / GIB:.2f} GiB); "
                         + ("these would fit:" if found else "no change rlvr offers brings it within that"))
            lines += [f"  {label}: peak {p.peak / GIB:.2f} GiB" for label, p in found]
    return "\n".join(lines)
