"""Whole runs on tiny-random through the command line: the run-directory contract, determinism, bad input."""
import importlib
import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from rlvr.cli import main
from tests.conftest import read_jsonl

# The old demo's arithmetic task (tiny-random has a character tokenizer; no reasoning-gym needed).
ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
SMOKE = [ARITHMETIC, "--model.name=tiny-random", "--task.heldout_size=6", "--task.ood_size=4",
         "--rollout.prompts_per_step=2", "--rollout.group_size=3", "--rollout.max_new_tokens=6",
         "--eval.max_new_tokens=6", "--train.steps=2"]

METRIC_KEYS = {"step", "reward/mean", "reward/correctness/mean", "reward/format/mean", "completion/length_mean",
               "completion/truncated_frac", "loss", "kl", "grad_norm", "tokens/generated", "time/step_s",
               "time/rollout_s", "time/train_s", "memory/rollout_peak_gib", "memory/update_peak_gib",
               "memory/step_peak_gib"}


def run(tmp_path, name, *extra):
    out = tmp_path / name
    assert main(["train", *SMOKE, f"--train.out={out}", *extra]) == 0
    return out


@pytest.fixture
def smoke_run(trained):
    """The SMOKE run, once in the session (tests/e2e/conftest.py; test_health_runs reports a copy of it): its
    directory is checked, and a second run must repeat its metrics."""
    return trained(*SMOKE)


def test_two_steps_write_the_run_directory(smoke_run):
    out = smoke_run
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert METRIC_KEYS <= set(metrics[0])
    for m in metrics:  # on the CPU: the process's peak resident set in each phase, a few hundred MB here
        assert 0.05 < m["memory/rollout_peak_gib"] <= m["memory/step_peak_gib"] < 64
        assert m["memory/step_peak_gib"] == max(m["memory/rollout_peak_gib"], m["memory/update_peak_gib"])
    samples = read_jsonl(out / "samples.jsonl")
    assert len(samples) == 2 * 2 * 3
    assert {"prompt", "completion", "rewards", "step"} <= set(samples[0])
    assert set(samples[0]["rewards"]["correctness"]) == {"score", "reason"}
    summary = json.loads((out / "summary.json").read_text())
    for k in ("heldout_accuracy_before", "heldout_accuracy_after", "ood_accuracy_before", "ood_accuracy_after",
              "steps", "train_seconds", "wall_seconds"):
        assert k in summary
    assert summary["steps"] == 2
    for split, n in (("heldout", 6), ("ood", 4)):  # per-problem flips against the evaluation before training
        f = summary["flips"][split]
        assert f["n"] == n and f["fixed"] + f["broken"] + f["kept"] + f["never"] == n
        assert 0 <= summary[f"{split}_lenient_after"] <= 1
        assert summary["decomposition"][split]["text"].endswith(f"broken of {n})")
    evals = read_jsonl(out / "evals.jsonl")
    assert "heldout_lenient" in evals[0] and "heldout_broken" not in evals[0] and "heldout_broken" in evals[-1]
    after = read_jsonl(out / "eval_after.jsonl")
    assert {"lenient", "lenient_answer", "correct", "format"} <= set(after[0])
    assert "What changed, problem by problem" in (out / "report.html").read_text()
    assert "group_size: 3" in (out / "config.yaml").read_text()
    AutoModelForCausalLM.from_pretrained(out / "final")


def test_same_seed_same_metrics(smoke_run, tmp_path):
    a = read_jsonl(smoke_run / "metrics.jsonl")
    b = read_jsonl(run(tmp_path, "b") / "metrics.jsonl")
    strip = lambda ms: [{k: v for k, v in m.items() if not k.startswith(("time/", "memory/"))} for m in ms]
    assert strip(a) == strip(b)


def raising_reward(completions, **kw):
    raise ValueError("bad reward")


def raising_in_training(completions, trainer_state, **kw):
    """Runs in the preflight (its trainer_state has max_steps 0), raises on every training step."""
    if trainer_state.max_steps > 0:
        raise ValueError("bad reward")
    return [1.0] * len(completions)


CALLS = []


def flaky_reward(completions, **kw):
    """Raises on every other call: the step's batch call, then every other one-completion retry."""
    CALLS.append(len(completions))
    if len(CALLS) % 2:
        raise ValueError("flaky")
    return [1.0] * len(completions)


def test_a_reward_failing_now_and_then_is_counted_and_training_goes_on(tmp_path, capsys):
    calls = importlib.import_module("tests.e2e.test_tiny_run").CALLS  # the module rlvr loads the reward from
    calls.clear()
    out = run(tmp_path, "r", "--rewards.weights={correctness: 1.0, 'tests.e2e.test_tiny_run:flaky_reward': 1.0}")
    metrics = read_jsonl(out / "metrics.jsonl")
    # the preflight: call 1 (3 rows) raises, retries 2-4 one at a time, 3 raises (a warning, not a stop);
    # step 1: call 5 (6 completions) raises; retries 6-11, 7, 9 and 11 raise; step 2: call 12 passes
    assert calls == [3, 1, 1, 1, 6, 1, 1, 1, 1, 1, 1, 6]
    assert [m["reward/tests.e2e.test_tiny_run:flaky_reward/errors"] for m in metrics] == [3, 0]
    err = capsys.readouterr().err
    assert "warning: reward 'tests.e2e.test_tiny_run:flaky_reward' raised on 1 of 3 rows tried" in err
    assert "reward function 'tests.e2e.test_tiny_run:flaky_reward' (" in err  # named with its file and line
    assert "function flaky_reward) failed on \"What is" in err and ": raised ValueError: flaky;" in err


def test_a_reward_failing_on_every_row_stops_the_run_before_it_starts(tmp_path, capsys):
    args = ["--rewards.weights={correctness: 1.0, 'tests.e2e.test_tiny_run:raising_reward': 1.0}"]
    assert main(["train", *SMOKE, f"--train.out={tmp_path}/r", *args]) == 2
    err = capsys.readouterr().err
    assert "reward 'tests.e2e.test_tiny_run:raising_reward' raised on 3 of 3 rows tried" in err
    assert 'raise ValueError("bad reward")' in err and not (tmp_path / "r").exists()


def test_a_reward_failing_on_every_completion_stops_the_run(tmp_path, capsys):
    args = ["--rewards.weights={correctness: 1.0, 'tests.e2e.test_tiny_run:raising_in_training': 1.0}"]
    assert main(["train", *SMOKE, f"--train.out={tmp_path}/r", *args]) == 2
    err = capsys.readouterr().err
    assert "reward function 'tests.e2e.test_tiny_run:raising_in_training' (" in err
    assert "function raising_in_training) raised on every completion" in err
    assert 'raise ValueError("bad reward")' in err and "During handling" not in err


@pytest.mark.parametrize("args, message", [
    (["--rollout.group_sise=4"], "unknown config key 'rollout.group_sise'; did you mean 'rollout.group_size'?"),
    (["--rollout.group_size=x"], "'rollout.group_size' must be int"),
    (["--model.name=./no/such/dir"], "model directory not found: ./no/such/dir"),
    (["--rewards.weights={'nomod:f': 1.0}"], "cannot load reward function 'nomod:f'"),
])
def test_bad_input_is_one_clear_message(tmp_path, capsys, args, message):
    assert main(["train", *SMOKE, f"--train.out={tmp_path}/x", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_malformed_yaml(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  steps: [2\n")
    assert main(["train", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.yaml, line" in err and "malformed YAML" in err


def test_schedule_curriculum_moves_up_a_level_and_logs_it(tmp_path):
    out = run(tmp_path, "c", "--task.params.min_digits=1", "--task.params.digits=2", "--curriculum.mode=schedule",
              "--curriculum.schedule=[3]", "--train.steps=4")
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["curriculum/level"] for m in metrics] == [0, 0, 1, 1]
    assert {"curriculum/pass_rate/d1-n2", "curriculum/pass_rate/d2-n2"} <= set(metrics[-1])
    digits = lambda q: max(len(t) for t in q.split("?")[0].split() if t.isdigit())
    by_step = {}
    for rec in read_jsonl(out / "samples.jsonl"):
        by_step.setdefault(rec["step"], set()).add(digits(rec["prompt"]))
    assert by_step[1] | by_step[2] == {1} and by_step[3] | by_step[4] == {2}


def varied_reward(completions, **kw):
    """Differs within every group on a random model, so there is a gradient."""
    return [len(set(c)) / 10 for c in completions]


def test_lora_run_trains_adapters_keeps_the_base_as_reference_and_saves_both(tmp_path):
    pytest.importorskip("peft")
    out = run(tmp_path, "lora", "--model.lora.r=4", "--model.lora.target_modules=[q_proj, v_proj]",
              "--algo.beta=0.04", "--train.steps=3", "--optimizer.lr=1e-2",
              "--rewards.weights={'tests.e2e.test_tiny_run:varied_reward': 1.0}")
    metrics = read_jsonl(out / "metrics.jsonl")
    assert metrics[0]["kl"] == 0.0 and metrics[-1]["kl"] > 0  # the base is the reference
    assert (out / "final" / "adapter" / "adapter_config.json").is_file()
    AutoModelForCausalLM.from_pretrained(out / "final")  # the merged model loads without peft
    assert main(["train", "--resume", str(out), "--train.steps=4"]) == 0
    assert [m["step"] for m in read_jsonl(out / "metrics.jsonl")] == [1, 2, 3, 4]


def test_optimizer_section_reaches_the_update(tmp_path):
    """optimizer.max_grad_norm and optimizer.micro_batch_prompts change the run: the same first rollout
    and gradient, then a clipped step that moves the weights less (so a different second step), in
    one micro-batch per prompt."""
    varied = ["--optimizer.lr=1e-2", "--rewards.weights={'tests.e2e.test_tiny_run:varied_reward': 1.0}"]
    plain = run(tmp_path, "plain", *varied)
    clipped = run(tmp_path, "clipped", *varied, "--optimizer.max_grad_norm=0.000001",
                  "--optimizer.micro_batch_prompts=1")
    a, b = read_jsonl(plain / "metrics.jsonl"), read_jsonl(clipped / "metrics.jsonl")
    assert [m["micro_batches"] for m in a] == [1, 1] and [m["micro_batches"] for m in b] == [2, 2]
    assert a[0]["grad_norm"] > 1e-3 and b[0]["grad_norm"] == pytest.approx(a[0]["grad_norm"], rel=1e-5)  # before the clip
    assert b[0]["reward/mean"] == a[0]["reward/mean"]
    assert b[1]["loss"] != a[1]["loss"] and b[1]["grad_norm"] != a[1]["grad_norm"]
    moved = lambda out: sum(float((p - q).abs().sum()) for p, q in zip(
        AutoModelForCausalLM.from_pretrained(out / "final").parameters(), initial().parameters()))
    # AdamW's step is lr * g / (|g| + eps): a gradient clipped to a norm of 1e-6 is near eps, so it moves less
    assert moved(clipped) < 0.5 * moved(plain)


def initial():
    from rlvr.models import load_model

    return load_model("tiny-random")[0]


def test_memory_options_run_together(tmp_path):
    out = run(tmp_path, "mem", "--train.gradient_checkpointing=true", "--train.mixed_precision=bf16",
              "--optimizer.micro_batch_tokens=40")
    metrics = read_jsonl(out / "metrics.jsonl")
    assert all(m["skipped_updates"] == 0 for m in metrics)
    assert all(m["micro_batches"] == 2 for m in metrics)  # the two groups exceed 40 tokens together
    assert "rollout/logp_mismatch_mean_abs" in metrics[0]


def test_hf_generate_engine_runs_the_loop(tmp_path):
    metrics = read_jsonl(run(tmp_path, "hf", "--rollout.engine=hf") / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    assert metrics[0]["rollout/logp_mismatch_mean_abs"] < 1e-4  # its log-probs match the training forward


def test_vllm_engine_without_vllm_is_a_clear_error(tmp_path, capsys):
    try:
        import vllm  # noqa: F401
        pytest.skip("vllm is installed")
    except ImportError:
        pass
    assert main(["train", *SMOKE, f"--train.out={tmp_path / 'v'}", "--rollout.engine=vllm"]) == 2
    assert "pip install 'rlvr[vllm]'" in capsys.readouterr().err


def test_bf16_training_holds_a_bf16_reference_whose_kl_starts_at_zero(tmp_path):
    """Under bf16 autocast the reference is a bf16 copy (rlvr.train.forward.Reference); at the first
    step the policy is still the reference, and the KL is exactly 0, as with an fp32 copy."""
    out = run(tmp_path, "bf16", "--train.mixed_precision=bf16", "--algo.beta=0.04")
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["kl"] for m in metrics] == [0.0, 0.0]


def test_every_completion_truncated_under_mask_truncated_trains_nothing_and_says_so(tmp_path):
    """The user's command: with 2 new tokens every completion of step 1 is cut, algo.mask_truncated leaves
    them all out, and the run completes (it raised 'element 0 of tensors does not require grad' at the
    backward): that step's micro-batches are counted as untrained and nothing moves."""
    out = tmp_path / "cut"
    assert main(["train", "--model.name=tiny-random", "--rollout.max_new_tokens=2", "--train.steps=2",
                 "--algo.mask_truncated=true", f"--train.out={out}"]) == 0
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2] and metrics[0]["completion/truncated_frac"] == 1.0
    for m in metrics:
        all_cut = m["completion/truncated_frac"] == 1.0
        assert (m["untrained_micro_batches"] == m["micro_batches"]) == all_cut and m["skipped_updates"] == 0
        assert (m["loss"] == 0.0 and m["grad_norm"] == 0.0) or not all_cut


@pytest.mark.slow
def test_a_run_raises_no_future_warning(tmp_path):
    """`python -W error::FutureWarning -m rlvr train configs/smoke.yaml`: no deprecated transformers API is
    read on the way (is_gradient_checkpointing was, on every step)."""
    import os
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-W", "error::FutureWarning", "-m", "rlvr", "train", "configs/smoke.yaml",
                           "--train.steps=1", f"--train.out={tmp_path / 'run'}"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FutureWarning" not in done.stderr
