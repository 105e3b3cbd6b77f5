"""Multi-turn environments through the command line on tiny-random: the loop, the run directory, the
evaluations and `rlvr eval` all run episodes."""
import inspect
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


class ReadsANumber(CheckAgain):
    """Its step reads the model's turn as a bare number, so it raises on every turn."""

    def step(self, text):
        self.value = int(text)
        return Reply(done=True)


class ReadsAnAnswerLine(CheckAgain):
    """Its step reads the number after 'Answer:' and raises where there is none: the reference answers
    ('Answer: 5') have one, a random model's turns do not."""

    def step(self, text):
        self.value = int(text.rsplit("Answer:", 1)[1])
        return Reply(done=True)


def raising_line(cls) -> str:
    lines, start = inspect.getsourcelines(cls)
    return f"{__file__}, line {start + next(i for i, t in enumerate(lines) if 'self.value = ' in t)}, in step"


def test_an_environment_whose_step_raises_on_every_turn_stops_before_anything_is_written(tmp_path, capsys):
    """`rlvr train configs/arithmetic.yaml --env.name=my_envs:ReadsANumber`: the environment is reset and stepped
    on the first rows with their reference answers before the run directory is touched; every step raising,
    the run stops (exit 2) with the error, its file and line, and the traceback."""
    out = tmp_path / "run"
    assert main(["train", *SMALL, "--env.name=tests.e2e.test_env_run:ReadsANumber", f"--train.out={out}"]) == 2
    err = capsys.readouterr().err
    assert ("rlvr: error: the environment (env.name tests.e2e.test_env_run:ReadsANumber) was tried on the first rows "
            "of the data before training, and failed:\n  its step failed on 3 of 3 rows tried") in err
    assert ("ReadsANumber.step raised ValueError: invalid literal for int() with base 10: " in err
            and f"({raising_line(ReadsANumber)})" in err and "Traceback (most recent call last)" in err)
    assert not out.exists()


def stops_at_every_token(tiny, path: Path) -> Path:
    """tiny-random saved with every token an end of turn (its generation config's eos_token_id), so each model
    turn ends stopped and reaches the environment's step (tiny-random's own end token is 1 of its 100)."""
    model, tok = tiny
    model.generation_config.eos_token_id = list(range(len(tok)))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_every_episode_of_the_first_step_ending_in_an_environment_error_stops_the_run(tiny, tmp_path, capsys):
    """An environment that runs on the reference answers but on none of the model's turns passes the
    preflight; every episode of step 1 ends in env_error, and the health rule stops the run (exit 2) with the
    first error, leaving what step 1 wrote (metrics, samples, the finding) and nothing to resume from."""
    out, model = tmp_path / "run", stops_at_every_token(tiny, tmp_path / "model")
    assert main(["train", *SMALL, f"--model.name={model}", "--env.name=tests.e2e.test_env_run:ReadsAnAnswerLine",
                 "--train.steps=3", f"--train.out={out}"]) == 2
    err = capsys.readouterr().err
    first = f"ReadsAnAnswerLine.step raised IndexError: list index out of range ({raising_line(ReadsAnAnswerLine)})"
    assert ("rlvr: error: health [env_errors] at step 1: every episode of step 1 ended with an environment error "
            f"(env/end/env_error_frac 1.0), so the run stops: nothing would be learned. The first: {first}.") in err
    assert f"No step had finished: once that is fixed, start the run again with rlvr train --resume {out}" in err
    assert [(m["step"], m["env/end/env_error_frac"]) for m in read_jsonl(out / "metrics.jsonl")] == [(1, 1.0)]
    assert {s["episode"]["end"] for s in read_jsonl(out / "samples.jsonl")} == {"env_error"}
    (finding,) = read_jsonl(out / "health.jsonl")
    assert (finding["rule"], finding["step"], finding["stop"]) == ("env_errors", 1, True)
    assert not list((out / "checkpoints").glob("*.pt")) and not (out / "summary.json").exists()


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
