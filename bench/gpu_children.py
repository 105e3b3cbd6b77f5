"""The processes bench/gpu.py starts, one per framework and measurement, so each has the GPU to itself and
its peak memory is its own: `python bench/gpu_children.py JOB_JSON` prints `RESULT {json}` as its last line.

Kinds of job: build (random-weight models from the SmolLM2 configurations, saved with the tokenizer), rlvr
(GRPO steps through rlvr.train.grpo.train), trl (GRPOTrainer steps on the same work), generate (HF
`generate` decode tokens/s) and engine (rlvr's built-in engine, sampled through the engine's session the way
every rollout samples, decode tokens/s). Peak memory is torch.cuda.max_memory_allocated on a GPU, the
process's peak RSS (VmHWM) on the CPU.
"""
from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import torch

from same_work import rlvr_overrides, run_trl

# SmolLM2-135M: the config.json of the converted smollm2-135m-instruct (rlvr.models.prepare_smollm2);
# SmolLM2-1.7B: its published LlamaConfig. tiny: for --smoke on a CPU.
SHAPES = {
    "135m": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                 num_key_value_heads=3, head_dim=64, rope_theta=100000.0, vocab_size=49152),
    "1.7b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
                 num_key_value_heads=32, head_dim=64, rope_theta=130000.0, vocab_size=49152),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, rope_theta=10000.0, vocab_size=0),  # 0: the tokenizer's
}
NO_TOKEN = -1  # a stop id no token has: rows run to their cap through the same stop checks as a real one
OOM_TEXTS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED")


def llama_config(shape: str, tok):
    from transformers import LlamaConfig

    s = dict(SHAPES[shape])
    theta, vocab = s.pop("rope_theta"), s.pop("vocab_size") or len(tok)
    if len(tok) > vocab:
        raise SystemExit(f"the tokenizer has {len(tok)} tokens, more than the {shape} shape's vocabulary {vocab}")
    return LlamaConfig(**s, vocab_size=vocab, max_position_embeddings=8192, rms_norm_eps=1e-5,
                       rope_parameters={"rope_type": "default", "rope_theta": theta}, tie_word_embeddings=True,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def model_config(shape: str, tok):
    """SHAPES' Llama configurations, or a public config rlvr ships (rlvr/shapes/NAME.json) with the tokenizer's
    special tokens."""
    if shape in SHAPES:
        return llama_config(shape, tok)
    from transformers import AutoConfig

    from rlvr.plan import SHAPES as SHIPPED

    values = json.loads((SHIPPED / f"{shape}.json").read_text())
    values.update(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return AutoConfig.for_model(values.pop("model_type"), **values)


def build(job: dict) -> dict:
    """Random weights (seed 0, initialised on the device: seconds rather than a minute on the CPU for
    1.7B), saved in bf16 with the tokenizer as a model directory each framework loads as a user would."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.models import tiny_tokenizer

    tok = AutoTokenizer.from_pretrained(job["tokenizer"]) if job["tokenizer"] else tiny_tokenizer()
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    import transformers

    gpu = torch.cuda.get_device_name() if job["device"].startswith("cuda") else "-"
    versions = {"torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
                "python": sys.version.split()[0], "gpu": gpu}
    print(versions, flush=True)
    seconds = {}
    for shape, target in job["models"].items():
        t = time.perf_counter()
        torch.manual_seed(0)
        with torch.device(job["device"]):
            model = AutoModelForCausalLM.from_config(model_config(shape, tok), dtype=torch.bfloat16)
        model.save_pretrained(target)
        tok.save_pretrained(target)
        seconds[shape] = time.perf_counter() - t
        print(f"{shape}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters in {target}", flush=True)
        del model
    return {"build_s": seconds, **versions}


def peak_gib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**30
    kib = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmHWM:"))
    return kib / 2**20


def process_peak(device: str, *phase_lists) -> float:
    """The whole process's peak: the allocator's peak since its last reset, or a phase's, if higher. Both
    frameworks' steps reset the allocator's peak between phases (rlvr's loop and same_work.run_trl), so its
    reading at the end covers only the last phase."""
    return max([peak_gib(device)] + [v for phases in phase_lists for v in phases if v is not None])


def is_oom(e: BaseException) -> bool:
    return isinstance(e, torch.OutOfMemoryError) or (isinstance(e, RuntimeError) and any(t in str(e) for t in OOM_TEXTS))


def rlvr_steps(job: dict) -> dict:
    """GRPO steps through rlvr's public entry on the shared work, on the product's defaults plus the job's
    overrides; figures from the run's metrics.jsonl, the warm-up steps dropped."""
    from rlvr.cli import DEMO_CONFIG
    from rlvr.config import build_config
    from rlvr.train import grpo

    out = Path(job["work"]) / f"run-{job['name']}"
    p, g, t = job["shape"]
    overrides = [*rlvr_overrides(Path(job["task_file"]), job["model_dir"], p, g, t, job["lr"],
                                 job["warmup"] + job["steps"], job["seed"], out),
                 f"--train.device={job['device']}", "--train.save_every=0", *shlex.split(job["overrides"])]
    cfg = build_config(DEMO_CONFIG, overrides)
    limit_memory(job)
    plan = plan_by_phase(cfg, job)
    # The end-of-run checkpoint and final model (about 27 GB with Adam's state at 1.7B) take no part in a
    # step; writing them would spend the run's time budget and the machine's disk on nothing measured here.
    grpo.try_checkpoint = grpo.save_final = lambda *a, **k: None
    try:
        grpo.train(cfg)
    except Exception as e:
        if is_oom(e):
            return {"oom": True, "error": str(e)[:300], "peak_gib": peak_gib(job["device"]), "plan": plan}
        raise
    every = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = every[job["warmup"]:]
    col = lambda key: [r.get(key) for r in rows]
    peak = process_peak(job["device"], [r.get("memory/step_peak_gib") for r in every])
    return {"step_s": col("time/step_s"), "rollout_s": col("time/rollout_s"), "reward_s": col("time/reward_s"),
            "update_s": col("time/train_s"), "tokens": col("tokens/generated"),
            "logp_mismatch": col("rollout/logp_mismatch_mean_abs"), "rollout_peak_gib": col("memory/rollout_peak_gib"),
            "update_peak_gib": col("memory/update_peak_gib"), "peak_gib": peak,
            "overrides": job["overrides"], "plan": plan}


def limit_memory(job: dict) -> None:
    """A smaller card on this one (job["memory_gib"]): the caching allocator refuses past that share."""
    if job.get("memory_gib") and job["device"].startswith("cuda"):
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, job["memory_gib"] * 2**30 / total))


def plan_by_phase(cfg, job: dict) -> dict:
    """rlvr plan's peak of each phase in GiB for this run (its prompts' longest, as the engine tokenizes them)."""
    from transformers import AutoTokenizer

    from rlvr.models import RANDOM, TINY, tiny_tokenizer
    from rlvr.plan import GIB, plan_of
    from rlvr.tasks import encode_prompt

    name = cfg.model.name  # random shapes and tiny-random speak the character tokenizer
    tok = tiny_tokenizer() if name.startswith(RANDOM) or name == TINY else AutoTokenizer.from_pretrained(name)
    rows = [json.loads(line) for line in Path(job["task_file"]).read_text().splitlines()]
    longest = max(len(encode_prompt(tok, r["prompt"], [], cfg.task.system_prompt)) for r in rows)
    p = plan_of(cfg, "cuda" if job["device"].startswith("cuda") else "cpu", longest)
    return {"rollout": sum(p.rollout.values()) / GIB, "update": sum(p.update.values()) / GIB}


def trl_steps(job: dict) -> dict:
    """GRPOTrainer steps on the shared work, the model loaded in fp32 as rlvr loads it (bf16 is autocast),
    straight onto the device; job["micro_prompts"]: rlvr's micro-batching (run_trl), or null for all rows
    at once."""
    import trl

    from rlvr.models import load_model

    limit_memory(job)
    # LoRA rows load the base as users do, in bf16; the full fine-tuning rows in fp32, as rlvr trains them
    model, tok = load_model(job["model_dir"], "bfloat16" if job.get("lora_r") else "float32", job["device"])
    p, g, t = job["shape"]
    try:
        r = run_trl(model, tok, Path(job["task_file"]), prompts=p, group_size=g, max_new_tokens=t, lr=job["lr"],
                    steps=job["warmup"] + job["steps"], seed=job["seed"], use_cpu=job["device"] == "cpu",
                    precision=job["precision"], micro_prompts=job.get("micro_prompts"), lora_r=job.get("lora_r", 0))
    except Exception as e:
        if is_oom(e):
            return {"oom": True, "error": str(e)[:300], "peak_gib": peak_gib(job["device"]), "trl": trl.__version__}
        raise
    w = job["warmup"]
    peak = process_peak(job["device"], r.get("rollout_peak_gib", []), r.get("update_peak_gib", []))
    return {**{k: v[w:] for k, v in r.items()}, "peak_gib": peak, "trl": trl.__version__}


def decode_prompts(job: dict, tok, n: int) -> list[list[int]]:
    from rlvr.tasks import encode_prompt

    rows = [json.loads(line) for line in Path(job["task_file"]).read_text().splitlines()]
    return [encode_prompt(tok, r["prompt"], [], "") for r in (rows * (n // len(rows) + 1))[:n]]


def timed(fn, device: str) -> tuple[float, int]:
    """(seconds, tokens) of fn() -> tokens, the GPU's queued work included."""
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t = time.perf_counter()
    tokens = fn()
    sync()
    return time.perf_counter() - t, tokens


def decode(job: dict) -> dict:
    """Decode tokens/s at each batch size (distinct prompts, temperature 1, no stop token so every row is
    `new_tokens` long): one untimed run per batch size (allocator, autotuning, the engine's CUDA graphs),
    then one timed; the peak memory is the timed run's."""
    n = job["new_tokens"]
    tok, run = hf_generate(job) if job["kind"] == "generate" else engine_sample(job)
    # generate runs eagerly, a few tokens warm it; the engine may capture per-shape state, so it runs in full
    warm = min(n, 8) if job["kind"] == "generate" else n
    out = {}
    for b in job["batches"]:
        prompts = decode_prompts(job, tok, b)
        try:
            timed(lambda: run(prompts, warm), job["device"])
            if job["device"].startswith("cuda"):
                torch.cuda.reset_peak_memory_stats()
            seconds, tokens = timed(lambda: run(prompts, n), job["device"])
        except Exception as e:
            if not is_oom(e):
                raise
            out[str(b)] = {"oom": True, "error": str(e)[:300]}
            continue
        out[str(b)] = {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                       "peak_gib": peak_gib(job["device"])}
        print(f"batch {b}: {tokens / seconds:.0f} tokens/s", flush=True)
    return {"batches": out}


def hf_generate(job: dict):
    """HF `generate` on bf16 weights (the baseline for rollout.cuda_graph), sampling, every row forced
    to n new tokens."""
    from rlvr.models import load_model

    model, tok = load_model(job["model_dir"], "bfloat16", job["device"])
    model.eval()
    tok.padding_side = "left"

    def run(prompts: list[list[int]], n: int) -> int:
        batch = tok.pad({"input_ids": prompts}, return_tensors="pt").to(job["device"])
        with torch.no_grad():
            out = model.generate(**batch, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=n,
                                 min_new_tokens=n, pad_token_id=tok.pad_token_id)
        return int((out.shape[1] - batch["input_ids"].shape[1]) * out.shape[0])
    return tok, run


def engine_sample(job: dict):
    """rlvr's rollout as a GRPO step runs it on the defaults (plus --decode-overrides): the policy in
    model.dtype on train.device, the engine rollout.engine and rollout.weights make, sampled through its
    session (as run_episodes does) under the sampling autocast of the resolved precision."""
    from rlvr.cli import DEMO_CONFIG
    from rlvr.config import build_config
    from rlvr.device import resolve_device, resolve_precision, sampling_autocast
    from rlvr.models import load_model
    from rlvr.rollout.engines import make_engine, rollout_weights, trains_fp32
    from rlvr.train.settings import engine_settings

    cfg = build_config(DEMO_CONFIG, [f"--model.name={job['model_dir']}", f"--train.device={job['device']}",
                                     *shlex.split(job["overrides"])])
    device = resolve_device(cfg.train.device)
    precision = resolve_precision(cfg.train.mixed_precision, device)
    model, tok = load_model(cfg.model.name, cfg.model.dtype, device)
    engine = make_engine(engine_settings(cfg), model.eval(), Path(job["work"]), precision)
    weights = rollout_weights(cfg.rollout.weights, device, precision, trains_fp32(model))
    print(f"engine: model.dtype {cfg.model.dtype}, precision {precision}, rollout.weights {cfg.rollout.weights} "
          f"({weights})", flush=True)

    def run(prompts: list[list[int]], n: int) -> int:
        rows = list(range(len(prompts)))
        with sampling_autocast(device, precision):
            session = engine.session(prompts, seeds=rows, group_size=1, temperature=1.0, top_p=1.0, top_k=0,
                                     stop_ids=[NO_TOKEN], pad_id=tok.pad_token_id)
            turns = session.sample(rows, [n] * len(rows), keep=False)
        return sum(len(turn.tokens) for turn in turns)
    return tok, run


def probe(job: dict) -> dict:
    """Whether the running torch and transformers can run rlvr at all, in seconds on the CPU, before any
    job spends the budget: a tiny random Llama samples through rlvr's engine (prefill, the cache handed
    between forwards, decode), the trainer scores the same tokens with gradient checkpointing on, and
    the two log-probs must agree (fp32, so to float rounding)."""
    import transformers

    from rlvr.models import enable_gradient_checkpointing, tiny_random
    from rlvr.rollout.builtin import generate
    from rlvr.train.forward import completion_logprobs

    model, tok = tiny_random()
    prompts = [tok.encode("What is 2 + 2?"), tok.encode("What is 3 + 5? Answer:")]
    r = generate(model.eval(), prompts, group_size=2, max_new_tokens=4, temperature=1.0, stop_ids=[NO_TOKEN],
                 pad_id=tok.pad_token_id, seeds=[0, 1])
    mismatch = []
    for checkpointing in (False, True):
        if checkpointing:
            enable_gradient_checkpointing(model)
        model.train()
        logp = completion_logprobs(model, r.prompt_ids, r.completion_ids, r.completion_mask, 2, tok.pad_token_id)
        logp.sum().backward()
        mismatch.append(float((logp.detach() - r.sampler_logp).abs().max()))
    if max(mismatch) > 1e-4:
        raise SystemExit(f"sampler and trainer log-probs differ by {max(mismatch):.2g} on the probe model")
    return {"torch": torch.__version__, "transformers": transformers.__version__, "mismatch": mismatch}


def cuda_tests(job: dict) -> dict:
    """The tests that need a GPU (the captured decode graph against the eager loop, CPU against CUDA), run
    first so that a failure there is seen before the budget goes to the benchmarks."""
    import pytest

    class Count:
        def __init__(self):
            self.outcomes: dict[str, int] = {}
            self.failed: list[str] = []

        def pytest_runtest_logreport(self, report):
            if report.when == "call" or report.outcome != "passed":
                self.outcomes[report.outcome] = self.outcomes.get(report.outcome, 0) + 1
                if report.outcome == "failed":
                    self.failed.append(report.nodeid)

    count = Count()
    code = pytest.main(["-q", "-p", "no:cacheprovider", *job["files"]],
                       plugins=[count])
    return {"exit": int(code), **count.outcomes, "failed_tests": count.failed}


def sync_files(job: dict) -> dict:
    """One vLLM push's files for job["shape"] with LoRA r=job["rank"] on every linear layer of a bf16 base on the
    device: the adapters alone (write_adapter) and the merged weights (policy_weight_items, write_weights), each
    written once (bytes, seconds; the adapters first, so the merged write finds safetensors loaded)."""
    import shutil

    from rlvr.config import LoraConfig
    from rlvr.models import apply_lora, random_shape, tiny_random
    from rlvr.rollout.vllm_server import write_weights
    from rlvr.rollout.weights import dir_bytes, policy_weight_items, write_adapter

    device = torch.device(job["device"])
    model = tiny_random()[0].to(device) if job["shape"] == "tiny-random" else \
        random_shape(job["shape"], "bfloat16", device)[0]
    policy = apply_lora(model, LoraConfig(r=job["rank"], target_modules="all-linear"))
    work = Path(job["work"]) / "sync"
    out = {}
    for kind, write in (("adapters", lambda d: write_adapter(policy, d)),
                        ("merged", lambda d: write_weights(policy_weight_items(policy), d))):
        t0 = time.perf_counter()
        written = write(work / kind)
        out[kind] = {"s": time.perf_counter() - t0, "bytes": dir_bytes(written)}
        shutil.rmtree(written)
    return out


KINDS = {"sync": sync_files, "probe": probe, "tests": cuda_tests, "build": build, "rlvr": rlvr_steps, "trl": trl_steps,
         "generate": decode, "engine": decode}

if __name__ == "__main__":
    job = json.loads(sys.argv[1])
    result = KINDS[job["kind"]](job)
    print("RESULT " + json.dumps(result), flush=True)
