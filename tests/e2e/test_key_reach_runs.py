"""The keys whose effect only a whole run shows (files, steps, checkpoints, evaluations, the process):
two short tiny-random runs through the command line, one at the defaults and one with all of these
changed, each key judged by an observable no other key of the changed run moves. The rest of the keys
are checked phase by phase in tests/key_reach/ (tests/key_reach/test_every_key.py: every key has one check)."""
import json

import torch

from rlvr.cli import main
from tests.conftest import read_jsonl

BASE = ["--model.name=tiny-random", "--task.heldout_size=4", "--task.ood_size=4", "--rollout.prompts_per_step=2",
        "--rollout.group_size=2", "--rollout.max_new_tokens=6", "--eval.max_new_tokens=6", "--train.steps=2"]

# key -> (the changed run's value, what shows it: a check of (base run directory, changed run directory,
# the changed run's console output))
RUN = {
    "model.name": ("tiny-random", "final/config.json is tiny-random's (the default is SmolLM2's)"),
    "train.out": ("<tmp>/changed", "the records are written there"),
    "train.steps": (3, "metrics.jsonl has 3 rows"),
    "train.save_every": (1, "a checkpoint of step 1 is kept"),
    "train.keep_checkpoints": (3, "3 checkpoints are kept"),
    "train.eval_every": (1, "evals.jsonl has a row of step 1"),
    "train.samples_every": (1, "the console shows step 1's samples"),
    "train.threads": (1, "torch runs on 1 thread after the run"),
    "train.deterministic": ("off", "summary.json: deterministic false (auto, on the CPU: true)"),
    "eval.before": (False, "no eval_before.jsonl"),
    "eval.max_new_tokens": (2, "eval_after.jsonl's completions are at most 2 tokens"),
    "log.trackers": (["tensorboard"], "tensorboard/ holds event files"),
    "rollout.overlap": ("one_step_off", "step 2 trains on rollouts of the weights one update old"),
    "train.overwrite": (True, "a second run into the changed directory replaces it instead of refusing"),
    "eval.after": (False, "the second run writes no eval_after.jsonl"),
    "train.device": ("cuda", "a run on a machine without CUDA is refused naming train.device"),
}


def _arg(key, value):
    return f"--{key}={json.dumps(value) if not isinstance(value, str) else value}"


def test_run_keys_reach_the_run(tmp_path, capsys):
    threads = torch.get_num_threads()
    base, changed = tmp_path / "base", tmp_path / "changed"
    first = [k for k in RUN if k not in ("model.name", "train.out", "train.overwrite", "eval.after", "train.device")]
    torch.set_num_threads(2)  # whatever an earlier test in this process left: the base run keeps it
    try:
        assert main(["train", *BASE, f"--train.out={base}"]) == 0
        capsys.readouterr()
        assert torch.get_num_threads() == 2
        assert main(["train", *BASE, f"--train.out={changed}", *(_arg(k, RUN[k][0]) for k in first)]) == 0
        console = capsys.readouterr()
        assert torch.get_num_threads() == 1  # train.threads
    finally:
        torch.set_num_threads(threads)
    tiny = json.loads((base / "final" / "config.json").read_text())
    assert tiny["hidden_size"] == 64  # model.name: tiny-random (SmolLM2-135M has 576)
    assert (changed / "metrics.jsonl").is_file()  # train.out
    assert [m["step"] for m in read_jsonl(base / "metrics.jsonl")] == [1, 2]
    summary = lambda out: json.loads((out / "summary.json").read_text())
    assert summary(base)["deterministic"] is True and summary(changed)["deterministic"] is False
    assert [m["step"] for m in read_jsonl(changed / "metrics.jsonl")] == [1, 2, 3]  # train.steps
    kept = sorted(p.name for p in (changed / "checkpoints").glob("*.pt"))
    assert sorted(p.name for p in (base / "checkpoints").glob("*.pt")) == ["step_000002.pt"]
    assert kept == ["step_000001.pt", "step_000002.pt", "step_000003.pt"]  # train.save_every, keep_checkpoints
    assert [e["step"] for e in read_jsonl(base / "evals.jsonl")] == [0, 2]
    assert [e["step"] for e in read_jsonl(changed / "evals.jsonl")] == [1, 2, 3]  # train.eval_every, eval.before
    assert (base / "eval_before.jsonl").is_file() and not (changed / "eval_before.jsonl").exists()
    assert "samples at step 1" in console.err + console.out  # train.samples_every: the base's first is step 5
    assert max(len(r["completion"]) for r in read_jsonl(base / "eval_after.jsonl")) > 2
    assert max(len(r["completion"]) for r in read_jsonl(changed / "eval_after.jsonl")) <= 2  # eval.max_new_tokens
    assert not (base / "tensorboard").exists() and any((changed / "tensorboard").iterdir())  # log.trackers
    lag = lambda out: [m["rollout/policy_lag"] for m in read_jsonl(out / "metrics.jsonl")][:2]
    assert lag(base) == [0, 0] and lag(changed) == [0, 1]  # rollout.overlap

    assert main(["train", *BASE, f"--train.out={changed}"]) == 2  # taken: refused
    assert main(["train", *BASE, f"--train.out={changed}", "--train.overwrite=true", "--eval.after=false"]) == 0
    assert [m["step"] for m in read_jsonl(changed / "metrics.jsonl")] == [1, 2]  # train.overwrite
    assert not (changed / "eval_after.jsonl").exists()  # eval.after
    capsys.readouterr()

    if not torch.cuda.is_available():
        assert main(["train", *BASE, f"--train.out={tmp_path / 'gpu'}", "--train.device=cuda"]) == 2
        assert "train.device" in capsys.readouterr().err
