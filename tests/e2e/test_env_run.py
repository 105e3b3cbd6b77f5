"""Multi-turn environments through the command line on tiny-random: the loop, the run directory, the
evaluations and `rlvr eval` all run episodes."""
import json
from pathlib import Path

from rlvr.cli import main
from rlvr.envs.base import Reply
from rlvr.tasks import chat_messages
from tests.conftest import read_jsonl

ARITHMETIC = str(Path(__file__).resolve().parents[2] / "configs" / "arithmetic.yaml")
SMALL = [ARITHMETIC, "--model.name=tiny-random", "--task.heldout_size=4", "--task.ood_size=2",
         "--rollout.prompts_per_step=2", "--rollout.group_size=2", "--rollout.max_new_tokens=5",
         "--eval.max_new_tokens=5", "--train.steps=2"]


class CheckAgain:
    """An rlvr Environment: after the first answer it asks once more, then the episode is done."""

    def reset(self, problem):
        self.turns = 0
        return chat_messages(problem.question, [])

    def step(self, text):
        self.turns += 1
        return Reply(text="Check it and answer again.", role="user") if self.turns == 1 else Reply(done=True)

    def reward_columns(self):
        return {}


def test_a_multi_turn_run_logs_episodes(tmp_path):
    out = tmp_path / "run"
    assert main(["train", *SMALL, "--env.name=tests.e2e.test_env_run:CheckAgain", "--env.max_turns=3",
                 "--rollout.max_new_tokens=40", f"--train.out={out}"]) == 0
    metrics = read_jsonl(out / "metrics.jsonl")
    assert {"env/turns_mean", "env/tool_use_frac", "tokens/env_mean", "env/end/done_frac"} <= set(metrics[0])
    assert metrics[0]["env/tool_use_frac"] == 0.0 and metrics[0]["tokens/env_mean"] > 0
    samples = read_jsonl(out / "samples.jsonl")
    assert all("episode" in s for s in samples)
    two = [s for s in samples if s["episode"]["end"] == "done"]
    assert two and all([t["source"] for t in s["episode"]["turns"]] == ["model", "env", "model"] for s in two)
    assert all(s["completion"] == s["episode"]["turns"][-1]["text"] for s in samples)
    before = read_jsonl(out / "eval_before.jsonl")
    assert all("episode" in r for r in before)
    assert "Check it and answer again." in (out / "report.html").read_text()


def test_a_single_turn_run_logs_no_episodes(tmp_path):
    out = tmp_path / "plain"
    assert main(["train", *SMALL, f"--train.out={out}"]) == 0
    assert not any(k.startswith("env/") for k in read_jsonl(out / "metrics.jsonl")[0])
    assert not any("episode" in s for s in read_jsonl(out / "samples.jsonl"))


def test_rlvr_eval_runs_tool_episodes(tmp_path):
    out = tmp_path / "ev"
    assert main(["eval", "--model", "tiny-random", "--task", "arithmetic", "--n", "3", "--k", "2",
                 "--max-new-tokens", "5", "--env.name=tools", "--out", str(out)]) == 0
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(len(r["sampled"]) == 2 for r in records)
