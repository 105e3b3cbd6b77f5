"""The golden trace: the per-step metrics of a few fixed short runs, kept in tests/golden/trace.json and
compared bit for bit by tests/golden/test_golden.py (the way torchtitan's CI holds its loss curve).

    python -m tests.golden.runs           prints the trace these runs make now (JSON)
    python -m tests.golden.runs --write   writes it to tests/golden/trace.json (make golden)

The runs: the default objective and one objective of each family in rlvr/algo/objectives.py's REGISTRY
(through its preset, rlvr/algo/presets.py), each a few steps of tiny-random, and one run of a SmolLM2-shaped
model with random weights (random:smollm2-135m: tensors large enough to take torch's multi-threaded kernels).
All in this one process, on THREADS threads (train.threads), so the figures do not depend on the machine's
core count, and in a process started with torch's and MKL's kernels pinned to one instruction set
(PINNED_ENV: the module starts itself again under it), so a machine with wider vector units takes the same
code paths as the one that wrote the trace.
"""
import json
import os
import sys
import tempfile
from pathlib import Path

TRACE = Path(__file__).with_name("trace.json")
THREADS = 2
# torch's own kernels and MKL's both choose code by the processor: pinned to AVX2, the trace's machine
PINNED_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
SHORT = ["--task.heldout_size=2", "--task.ood_size=2", "--eval.before=false", "--eval.after=false",
         "--train.eval_every=0", "--train.samples_every=0", "--train.save_every=0", f"--train.threads={THREADS}",
         "--rewards.weights={'tests.golden.runs:varied': 1.0}", "--optimizer.warmup_steps=0"]
TINY = [ARITHMETIC, "--model.name=tiny-random", "--rollout.prompts_per_step=2", "--rollout.group_size=4",
        "--rollout.max_new_tokens=8", "--eval.max_new_tokens=8", "--train.steps=3", "--optimizer.lr=1e-2", *SHORT]
# Clip-Cov's band wide enough that it drops tokens at random (its draws are the update's seeded generator's)
WIDE_COV = ["--algo.clip_cov_lb=-100", "--algo.clip_cov_ub=100", "--algo.cov_ratio=0.3"]
RUNS = {
    "tiny-grpo": TINY,  # the default objective (the grpo preset's clipped surrogate)
    "tiny-cispo": [*TINY, "--algo.preset=cispo"],  # a clipped importance weight on the log-prob
    "tiny-sapo": [*TINY, "--algo.preset=sapo"],  # a soft gate in place of the clip
    "tiny-gmpo": [*TINY, "--algo.preset=gmpo"],  # a sequence's geometric mean ratio
    "tiny-gpg": [*TINY, "--algo.preset=gpg"],  # the plain policy gradient, no ratio
    "tiny-clip_cov": [*TINY, "--algo.preset=clip_cov", *WIDE_COV],  # covariance-selected tokens (random picks)
    "tiny-vespo": [*TINY, "--algo.preset=vespo"],  # variational sequence weights
    # one prompt of ~60 tokens and its 4 completions: the prompt's keys (4 x 3 heads x ~60 x 64) pass the
    # 32768 elements past which torch's CPU kernels run on several threads
    "smollm2-shaped": [ARITHMETIC, "--model.name=random:smollm2-135m", "--rollout.prompts_per_step=1",
                       "--rollout.group_size=4", "--rollout.max_new_tokens=4", "--eval.max_new_tokens=4",
                       "--task.few_shot=0", "--train.steps=2", "--optimizer.lr=1e-3", *SHORT],
}


def varied(completions, completion_ids, **kw):
    """A reward that differs within every group of a random model, so every update moves the weights: by
    token ids (a SmolLM2-shaped model samples ids the tiny tokenizer decodes to nothing)."""
    return [sum(ids) % 10 / 10 for ids in completion_ids]


def untimed(row: dict) -> dict:
    """A metrics row less what depends on the clock or the machine's memory."""
    return {k: v for k, v in row.items() if not k.startswith(("time/", "memory/"))}


def trace() -> dict:
    """{run name: {"args": the rlvr train arguments, "steps": each step's metrics (untimed)}}."""
    import torch

    from rlvr.cli import main

    threads = torch.get_num_threads()
    out = {}
    try:
        with tempfile.TemporaryDirectory(prefix="rlvr-golden-") as tmp:
            for name, args in RUNS.items():
                run_dir = Path(tmp) / name
                if main(["train", *args, f"--train.out={run_dir}"]) != 0:
                    raise SystemExit(f"golden run {name} failed")
                rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
                out[name] = {"args": args[1:], "steps": [untimed(r) for r in rows]}
    finally:
        torch.set_num_threads(threads)
    return out


if __name__ == "__main__":
    if any(os.environ.get(k) != v for k, v in PINNED_ENV.items()):  # read as torch loads: start again pinned
        os.execve(sys.executable, [sys.executable, "-m", "tests.golden.runs", *sys.argv[1:]],
                  {**os.environ, **PINNED_ENV})
    made = trace()
    text = json.dumps(made, indent=1, sort_keys=True) + "\n"
    if "--write" in sys.argv[1:]:
        TRACE.write_text(text)
        print(f"wrote {TRACE} ({len(made)} runs)", file=sys.stderr)
    else:
        sys.stdout.write(text)
