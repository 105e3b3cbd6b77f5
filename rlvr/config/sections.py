"""The config sections: nested dataclasses whose attribute docstrings are the documentation."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from rlvr.config.algo import AlgoConfig
from rlvr.errors import RlvrError


class ConfigError(RlvrError):
    pass


@dataclass(kw_only=True)
class LoraConfig:
    r: int = 0
    """LoRA rank (PEFT); 0 trains every weight. With LoRA the reference is the base with adapters off."""
    alpha: int = 16
    """LoRA alpha (scale alpha / r)."""
    dropout: float = 0.0
    """LoRA dropout."""
    target_modules: Union[list[str], str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])
    """Linear layers that get adapters: their names, or all-linear (PEFT's and TRL's spelling: every linear
    layer of the model but its output head)."""


@dataclass(kw_only=True)
class ModelConfig:
    name: str = "smollm2-135m-instruct"
    """Built-in name (smollm2-135m-instruct, tiny-random), a local Hugging Face model directory, or a Hub id
    (org/name: read from the Hugging Face cache, downloaded when online)."""
    dtype: str = "float32"
    """Parameter dtype: float32, bfloat16, or auto (weights as users load them: the checkpoint's own dtype
    where it is bf16, and bf16 on CUDA; fp32 on the CPU for an fp32 or unstated one). With LoRA the base
    stays frozen in this dtype, with no fp32 copy anywhere: the reference is the base with adapters off
    and rollouts decode with the policy's own weights; the adapters and their optimizer state are fp32.
    Full fine-tuning in bf16 runs the forward and backward in bf16 and AdamW over fp32 master copies of
    the weights (4 bytes a weight, beside the moments; rlvr/train/optim.py), written back rounded to bf16:
    an update below half a bf16 ulp of a weight is kept in its master instead of lost."""
    quantize: str = "none"
    """none, or nf4: the frozen base's linear layers held in 4-bit NormalFloat (QLoRA; torchao's NF4Tensor,
    rlvr/nf4.py), dequantised to model.dtype in each product; the output projection and embeddings stay in
    model.dtype. Needs LoRA (model.lora.r > 0) and the builtin or hf engine, which decode with these very
    weights (as does the reference, the base with adapters off)."""
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass(kw_only=True)
class TaskConfig:
    name: str = "arithmetic"
    """Task source: arithmetic, reasoning_gym:<dataset>, a file (.jsonl, .json, .csv, each may be
    gzipped, .parquet, or a directory written by datasets' save_to_disk or laid out as a Hub dataset's,
    read with task.config and task.split), or a Hugging Face Hub dataset (org/name, e.g. openai/gsm8k,
    with task.config and task.split; from the Hugging Face cache, else downloaded)."""
    config: str = ""
    """Hub datasets: the config (subset), e.g. main for openai/gsm8k; empty when the dataset has one."""
    split: str = "train"
    """Hub datasets: the split that train (and a carved held-out) come from."""
    heldout_split: str = ""
    """Hub datasets: the split held-out comes from (e.g. test; task.heldout_size of its rows); empty carves
    held-out out of task.split."""
    params: dict[str, object] = field(default_factory=dict)
    """The task's own settings for train and held-out. arithmetic: digits (most per operand, 1), operands
    (2), operators (any of + - *, '+-*'), min_digits (fewest per operand; 0: digits, one level; below
    digits each digit count is a curriculum level d<k>-n<operands>); reasoning_gym: the dataset's own
    settings (e.g. {min_digits: 1, max_digits: 2}); pyfunc: the levels (e.g. {levels: [1, 2]}, of 1-4)."""
    ood_name: str = ""
    """OOD source: empty takes the same task at its harder setting (ood_params, ood_file);
    otherwise another task name, e.g. reasoning_gym:chain_sum."""
    ood_params: dict[str, object] = field(default_factory=dict)
    """The OOD split's settings (its harder difficulty). arithmetic: digits (2) and operands (2), the
    operators of task.params; reasoning_gym: the dataset's own; pyfunc: its levels (default [4])."""
    heldout_file: str = ""
    """File tasks: held-out rows; empty carves task.heldout_size rows out of the train file."""
    ood_file: str = ""
    """File tasks: out-of-distribution rows; empty leaves OOD empty unless task.ood_name is set."""
    columns: dict[str, str] = field(default_factory=dict)
    """File tasks: column mapping, e.g. {prompt: question, answer: final}; keys prompt, answer, tests,
    difficulty, solution; unmapped keys use the column of the same name when present (the gold answer:
    answer, else verl's reward_model.ground_truth); a dotted name reaches a nested field."""
    prompt_template: str = "{prompt}"
    """User turn built from the problem; {prompt} is the problem text."""
    heldout_size: Optional[int] = None
    """Problems in the held-out split (same difficulty as train, never trained on); null: 100, but a file
    task carved from a train file under 500 rows holds out a fifth of it (a note says so)."""
    ood_size: int = 100
    """Problems in the out-of-distribution split."""
    train_size: int = 0
    """Problems in the train split; 0 takes every remaining problem of the train difficulty."""
    few_shot: int = 0
    """Worked examples shown as earlier chat turns, only when asked (kept out of every split; file tasks
    take them from train rows that have a solution: a solution column is otherwise only a column)."""
    system_prompt: str = ""
    """System message; empty keeps the chat template's default."""
    seed: int = 0
    """Seed for drawing and splitting problems (independent of train.seed)."""


@dataclass(kw_only=True)
class CurriculumConfig:
    mode: str = "none"
    """none (seeded epochs over all of train), schedule (only the level open at each step), or adaptive
    (open levels whose running pass rate is inside [band_low, band_high], half the prompts from the
    hardest open level; with 2 or more prompts a step, one reviews an earlier level outside the band, in
    turn, so a level whose rate falls back inside the band is trained again)."""
    levels: list[str] = field(default_factory=list)
    """Difficulty labels from easiest to hardest; empty sorts the train split's labels naturally."""
    schedule: list[int] = field(default_factory=list)
    """schedule: the step at which each level after the first starts, e.g. [10, 20] for three levels."""
    band_low: float = 0.1
    """adaptive: a level whose pass rate is below this is too hard for now: an earlier level fallen below
    it gets review prompts only, and the hardest open level none while another level is inside the band."""
    band_high: float = 0.9
    """adaptive: a level whose pass rate is above this is mastered; the next one opens."""
    smoothing: float = 0.5
    """adaptive: weight of the newest step in each level's running pass rate."""


@dataclass(kw_only=True)
class VllmConfig:
    """rollout.engine=vllm: vLLM colocated in the training process (a CUDA GPU or vLLM's CPU platform), or
    vLLM servers the user started (server_url). docs/vllm.md says which to use when."""
    gpu_memory_utilization: float = 0.3
    """Fraction of GPU memory vLLM may take (colocated with training), when kv_cache_gib is unset."""
    kv_cache_gib: Optional[float] = None
    """Colocated: the KV cache's size in GiB; null: gpu_memory_utilization's share of the GPU, and 1 GiB on
    vLLM's CPU platform (where gpu_memory_utilization would be a share of host memory)."""
    max_model_len: int = 0
    """Colocated: the longest prompt + completion vLLM is set up for (the KV cache must hold one); 0: the
    model's own maximum."""
    sleep: bool = True
    """Put vLLM to sleep (free its KV cache) while the trainer updates (GPU only: the CPU platform has no
    sleep mode)."""
    server_url: Union[str, list[str]] = ""
    """Sample from vLLM servers started by the user instead of a colocated engine: one URL
    (http://host:8000: the address alone, without the OpenAI base URL's /v1), several (a list, or one string
    separated by commas: prompts are spread over them), each started with VLLM_SERVER_DEV_MODE=1 and
    --logprobs-mode processed_logprobs (docs/vllm.md). The weights are pushed to every server after each
    update, before the next rollout."""
    weight_push: str = "disk"
    """Server mode: how the weights reach the servers after each update: disk (written under weights_dir,
    each server reloads them in place: the CPU platform, and GPUs sharing a filesystem), or nccl (vLLM's
    weight-transfer API, GPU to GPU; not tested by rlvr's suite: docs/vllm.md)."""
    sync: str = "auto"
    """What crosses to vLLM after each update with LoRA (model.lora.r > 0), colocated or servers: adapters (the
    LoRA adapter alone, in PEFT's format: vLLM holds the base once and each rollout request names the newest
    adapter; servers need --enable-lora, docs/vllm.md), merged (every weight with the adapters merged in), or
    auto: adapters wherever vLLM's LoRA serves them, merged where it cannot (LoRA on embeddings or the output
    head, DoRA, ranks above 512: a note says which) or where weight_push=nccl. With model.quantize=nf4 only
    adapters work (vLLM's base is the model in its own dtype). Without LoRA every weight is pushed."""
    weights_dir: str = ""
    """Server mode: where the pushed weights are written for the servers to load (a directory every server
    can read: shared storage across nodes); empty: <train.out>/vllm-weights, where only the newest version
    is kept (a killed run's too are removed at the next push); in a directory given here, each run removes
    its own older versions only."""
    timeout_s: float = 600.0
    """Server mode: the longest a request (a group's completions, a weight push) may take before the run
    stops with an error naming the server; the first contact with each server has 10 s at most (a wrong
    address is told in seconds)."""

    def urls(self) -> list[str]:
        """server_url as a list of URLs (trailing slashes dropped); empty: colocated."""
        given = self.server_url if isinstance(self.server_url, list) else self.server_url.split(",")
        return [u.strip().rstrip("/") for u in given if u.strip()]


@dataclass(kw_only=True)
class RolloutConfig:
    prompts_per_step: int = 8
    """Prompts sampled per training step."""
    group_size: int = 8
    """Completions sampled per prompt (G)."""
    max_new_tokens: int = 256
    """Longest completion; longer ones are cut and counted as truncated. Room to reason (TRL's default
    max_completion_length); the demo's one-line answers set 24."""
    temperature: float = 1.0
    """Sampling temperature (also applied to the training log-probabilities)."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 keeps all."""
    engine: str = "builtin"
    """Rollout engine: builtin (shared-prefix KV cache), hf (plain generate), vllm (colocated or on servers,
    rollout.vllm.*; rlvr[vllm] on a GPU, make vllm's .venv-vllm on a CPU: docs/vllm.md)."""
    weights: str = "auto"
    """Weights the builtin and hf engines sample with: fp32 (the policy itself, in model.dtype), or a copy
    re-quantised after every update: bf16 (bf16 linear layers), int8 (int8 weights per output row and
    activations per token, an integer matmul: fastest on a CPU, least exact; bench/rollout_weights.py).
    auto: bf16 on CUDA under bf16 mixed precision (the copy holds the very values autocast would cast the
    fp32 weights to, refreshed once per optimizer step, so decoding reads bf16 weights instead of casting
    every weight at every step), fp32 elsewhere (the CPU keeps sampling with the policy itself)."""
    compile: bool = False
    """Compile the builtin engine's decode step for a bf16/int8 rollout copy with torch.compile (needs a
    C++ compiler; 10-30 s at the first rollout, cached on disk for later runs): about 1.2x faster decoding
    on a CPU (rlvr/rollout/lean.py, bench/rollout_weights.py)."""
    cuda_graph: bool = True
    """On CUDA, decode through static buffers replayed as a CUDA graph (Llama, Mistral and Qwen2 models;
    rlvr/rollout/graphed.py): single-turn rollouts, evaluation and every turn of episodes; false keeps
    the eager loop. Ignored on the CPU."""
    tis_cap: Optional[float] = None
    """Truncated importance sampling when the sampler's weights differ from the trainer's (vLLM,
    rollout.weights bf16/int8): weight each token's policy-gradient term by min(pi_train / pi_sampler,
    cap); 0 disables; null: the sampling engine's default (rlvr.rollout.engines.tis_cap_of): 2.0 when it is
    not the trainer's own forward (rollout.engine=vllm, rollout.weights bf16/int8), else off."""
    overlap: str = "none"
    """none: each step samples from the policy its update then trains (on-policy). one_step_off: step
    k+1's rollouts are sampled and scored while step k's update runs, from the weights one update old
    (the builtin and hf engines sample from a snapshot of the policy refreshed before each rollout; vLLM
    from its own copy); the sampler correction (rollout.tis_cap, 2.0 by default here) weighs the staleness,
    and rollout/policy_lag says it (1 on every step but the first). A single process only."""
    vllm: VllmConfig = field(default_factory=VllmConfig)


@dataclass(kw_only=True)
class EnvConfig:
    name: str = "single"
    """single: the task's prompt, one answer, done (every task as it always was); tools: between turns the
    model may call env.tools by writing <tool_call>{"name": ..., "arguments": {...}}</tool_call>; or
    'module:Class' (or 'path/to/file.py:Class'): an rlvr Environment (reset(problem), step(text), reward_columns(); rlvr/envs/base.py),
    or a TRL-style environment class (reset(**row), public methods as tools, optional get_reward() scored
    by the `env` reward)."""
    tools: list[str] = field(default_factory=lambda: ["calculator"])
    """Tools offered with env.name tools (or beside a class's own): calculator (exact arithmetic, parsed,
    never evaluated as code), python (runs in the verifier's sandbox), or 'module:function' (a plain
    function, as TRL's tools=[fn]: its schema from the signature and docstring)."""
    max_turns: int = 4
    """Model turns per episode at most."""
    max_tool_tokens: int = 64
    """Tokens of one tool result at most; longer results are cut (counted in env/tool_truncated)."""
    max_episode_tokens: int = 512
    """Tokens after the prompt per episode (model and environment turns) at most; an episode also ends
    where prompt and episode reach the model's context (env/end/episode_tokens_frac counts both)."""
    tool_budget_s: float = 30.0
    """Wall-clock seconds an episode may wait on its tool calls in all. A turn's calls of built-in tools
    run at once (a class's own methods in order), and the batch's episodes step at once; a call still
    running when the budget is out answers with an error, as does every later one."""
    example: list[dict[str, str]] = field(default_factory=list)
    """Worked turns shown before the question, as chat messages {role, content}: e.g. one question, the
    tool call, the tool's result and the final answer (configs/tools.yaml)."""


@dataclass(kw_only=True)
class RewardsConfig:
    weights: dict[str, float] = field(default_factory=lambda: {"correctness": 1.0, "format": 0.2})
    """Reward functions and their weights: a built-in name (correctness, format, code_tests, env, length),
    'module:function' written for TRL's GRPOTrainer (called by keyword: prompts, completions,
    completion_ids, every dataset column, trainer_state; async, numpy and None returns accepted), or
    'verl:module:compute_score' (verl's one-sample scorer; a module may be a .py file's path)."""
    soft_overlong: bool = False
    """Add the length reward (DAPO's soft overlong punishment) with weight 1 when rewards.weights lacks it."""
    overlong_buffer: int = 8
    """length reward: tokens before rollout.max_new_tokens where the penalty starts."""
    overlong_penalty: float = 1.0
    """length reward: the penalty at rollout.max_new_tokens (it falls linearly over the buffer)."""
    timeout_s: float = 300.0
    """The most seconds one call of a user's reward function (a 'module:function' or a Python function
    given to rlvr.fit) may take, on a batch or, retried, on one row; 0: no limit. In the trainer's process a
    call past it stops the run naming the reward and the row; with rewards.isolate it is killed and scored
    as a failure. rlvr's built-ins have limits of their own."""
    isolate: bool = False
    """Run user reward functions in a worker process of their own: a hang past rewards.timeout_s, os._exit
    or a crash costs that call (its completions score 0, counted in reward/<name>/errors), never the run.
    The function must be importable there: a 'module:function' or .py file, or a module-level function."""


@dataclass(kw_only=True)
class OptimizerConfig:
    """AdamW, its warm-up and gradient accumulation: the same for rlvr train and rlvr sft."""

    lr: float = 2e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_steps: int = 3
    """Linear learning-rate warm-up steps."""
    max_grad_norm: float = 1.0
    """Gradient-norm clip; 0 disables."""
    micro_batch_prompts: int = 4
    """Prompts (whole groups; rlvr sft: examples) per forward/backward pass; gradients accumulate over the
    step."""
    micro_batch_tokens: int = 0
    """rlvr train: if > 0, micro-batches are filled by this token budget (whole groups) instead of by
    prompt count."""
    state: str = "fp32"
    """Where AdamW keeps its moments (8 bytes a trained weight in fp32): fp32 (beside the weights), 8bit
    (torchao's AdamW8bit: block-quantised moments, about 2 bytes a weight; tensors under 4096 values stay
    fp32; needs torchao), or offload (fp32 master weights, gradients and moments in host memory, the step
    run there: 16 bytes a weight off the GPU, a host copy each way per step). bf16 trained weights
    (model.dtype) add fp32 masters beside fp32 or 8bit moments. rlvr/train/optim.py."""


@dataclass(kw_only=True)
class TrainConfig:
    steps: int = 20
    """Training steps (one rollout batch each)."""
    seed: int = 0
    """Seed for sampling and prompt order."""
    out: str = ""
    """Run directory; empty: runs/<the config file's name without .yaml> (runs/run without a file); rlvr sft:
    runs/<name>-sft (runs/sft)."""
    overwrite: bool = False
    """Replace what the run directory holds (records, checkpoints, final/) once the new run has loaded its
    config, data and model; false refuses a directory that holds anything."""
    samples_every: int = 5
    """Print a few samples every this many steps (0: never); all go to samples.jsonl."""
    eval_every: int = 0
    """Evaluate held-out accuracy every this many steps into evals.jsonl (0: only before and after)."""
    device: str = "auto"
    """Where the models, rollouts and updates run: auto (the GPU when torch sees one, else the CPU), cpu,
    cuda, or cuda:N; under torchrun, auto and cuda give each process the GPU of its LOCAL_RANK."""
    threads: int = 0
    """torch CPU threads; 0 keeps torch's default (the machine's cores). On the CPU a run repeats bit for bit
    at the same thread count: fix it to compare runs across machines."""
    deterministic: str = "auto"
    """auto (on for the CPU, off on CUDA), on, or off. On: torch's deterministic algorithms, and on CUDA a
    fixed cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG), cuDNN deterministic with benchmark off, NCCL's
    all-reduce pinned (NCCL_ALGO=Ring, NCCL_PROTO=Simple), flash-attention's deterministic backward and
    vLLM's batch-invariant mode (VLLM_BATCH_INVARIANT=1): the same config and seed then give the same run on
    the same GPUs, at the cost of slower kernels. A variable already set is kept. rlvr/device.py."""
    save_every: int = 10
    """Checkpoint every this many steps, at the last step and on SIGINT/SIGTERM (0: never, as TRL's
    save_strategy="no": no checkpoint at all, so the run cannot be resumed; final/ is still written)."""
    keep_checkpoints: int = 2
    """Checkpoints kept in RUN_DIR/checkpoints; older ones are deleted."""
    parallel: str = "ddp"
    """Under torchrun: ddp (each rank holds the whole model, a plain module, not torch's
    DistributedDataParallel: weights are broadcast from rank 0 at the start, then gradients get one
    all-reduce (sum) per step after the last micro-batch; see rlvr/train/distributed.py) or fsdp
    (FSDP2 fully_shard: parameters sharded, gradients reduce-scattered as sums)."""
    join_timeout_s: float = 300
    """Under torchrun: seconds each process waits for all the others to join before it stops with a
    message. A process on another node that fails at its start ends its own torchrun only; without this
    bound the other nodes' processes would wait torch's collective timeout (30 minutes with gloo)."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass to save memory."""
    mixed_precision: str = "auto"
    """auto (bf16 on CUDA, no on the CPU), no, or bf16: autocast the training forward (and, on CUDA, the
    rollout) to bfloat16 over fp32 weights, which are themselves AdamW's fp32 master weights (bf16
    weights, model.dtype, get fp32 masters in the optimizer instead)."""
    lm_head: str = "auto"
    """How the update's forward scores tokens: fused (one autograd function over chunks of tokens that keeps
    no [tokens, vocabulary] tensor for the backward pass and recomputes each chunk's logits there: the same
    log-probs, gradients equal within rounding), chunked (the chunks' log-softmax kept for the backward
    pass on the CPU, recomputed by activation checkpointing on CUDA), or auto (fused on CUDA; chunked on
    the CPU, which keeps the default run's gradients bit for bit: bench/lm_head.py measured the two alike in
    time there at SmolLM2's vocabulary, the fused one at 0.78x the memory)."""
    packed: bool = False
    """Run the update's forwards (the policy's, the old policy's and the reference's) padding-free: each
    micro-batch as one row of real tokens, no pad anywhere (rlvr/train/packed.py). With sdpa or eager
    attention each group's prompt runs once with its completions after it under a 4D mask; with other
    attention (flash-attention) each row's prompt + completion, position ids restarting at 0 per row, which
    transformers reads as block-diagonal causal attention. The same log-probs within rounding; refused at
    the start for a model whose attention does not keep packed rows apart (checked by running it). On the
    CPU (SmolLM2-135M, 2 prompts x 8 completions of 5-32 tokens, bench/train_forward.py) the update's forward
    + backward took 0.67x the default's time with bare prompts and 0.58x with chat-template prompts; off by
    default so that the default run learns bit for bit as before; on CUDA unmeasured (bench/gpu.py)."""


@dataclass(kw_only=True)
class EvalConfig:
    max_new_tokens: int = 256
    """Longest greedy completion in evaluation."""
    batch_size: int = 50
    """Prompts per greedy generation batch."""
    before: bool = True
    """Evaluate before training."""
    after: bool = True
    """Evaluate after training."""
    grader: str = ""
    """What evaluation counts as correct (held-out/OOD accuracy, flips, the skill rules, rlvr eval): a
    rewards.weights key (your TRL function or verl compute_score), or builtin (the answer checker). Empty:
    the built-in checker when rewards.weights has correctness or code_tests, else your reward marked as
    a correctness check (a verl scorer, or a function with checks_correctness = True), else your reward
    of the highest weight; the choice and its reason are printed at the start."""
    grader_threshold: float = 1.0
    """A user grader's score at or above this counts as correct."""


@dataclass
class LogConfig:
    trackers: list[str] = field(default_factory=list)
    """Optional trackers mirroring metrics.jsonl: tensorboard, wandb, trackio (each an extra)."""
    project: str = "rlvr"
    """Project name given to wandb / trackio."""


@dataclass
class SftConfig:
    batch_size: int = 8
    """rlvr sft: examples per optimizer step (optimizer.micro_batch_prompts of them per forward pass)."""


@dataclass(kw_only=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rewards: RewardsConfig = field(default_factory=RewardsConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)
    sft: SftConfig = field(default_factory=SftConfig)
