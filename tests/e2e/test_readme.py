"""The README's examples run as written: the your-data walk, the Python API (its run directory moved to a
temporary one), the environment, the TRL and verl rewards."""
import json
import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_python_api_example_runs(tmp_path, monkeypatch, capsys):
    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## Python API\n\n```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    exec(code.replace("runs/api", str(tmp_path / "api")), namespace)
    assert namespace["summary"]["steps"] == 2 and (tmp_path / "api" / "summary.json").is_file()
    assert namespace["adv"].shape == (1, 4) and float(namespace["adv"][0, 0]) > 0


def test_custom_environment_example_runs():
    """The README's ten-line environment, run as rlvr runs it: a ToolEnv around an instance."""
    from rlvr.envs.base import ToolEnv
    from rlvr.tasks import Problem

    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## Environments and tools\n.*?```python\n(.*?)```", readme, re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    namespace: dict = {}
    exec(code, namespace)
    env = ToolEnv([], namespace["Guess"]())
    assert env.reset(Problem(question="Guess it.",
                             answer="42"))[-1]["content"].startswith("Guess it.\n\nFind the number")
    call = '<tool_call>{"name": "guess", "arguments": {"n": %d}}</tool_call>'
    assert env.step(call % 50).text == "lower" and env.step(call % 40).text == "higher"
    assert env.reward_columns() == {"env_reward": 0.0}
    assert env.step(call % 42).text == "right" and env.step("Answer: 42").done
    assert env.reward_columns() == {"env_reward": 1.0}


def test_trl_and_verl_examples_run_unchanged():
    """The README's TRL reward and verl compute_score, scored as rlvr scores them."""
    from rlvr.rewards.base import RewardFunction, score_batch
    from rlvr.rewards.verl import from_compute_score

    readme = (ROOT / "README.md").read_text()
    code = re.search(r"## TRL and verl code, unchanged\n\n```python\n(.*?)```", readme, re.S).group(1)
    namespace: dict = {}
    exec(code, namespace)
    fns = [RewardFunction(name="trl", weight=1.0, fn=namespace["accuracy"]),
           RewardFunction(name="verl", weight=0.5, fn=from_compute_score(namespace["compute_score"]))]
    completions = [[{"role": "assistant", "content": "so 12"}], [{"role": "assistant", "content": "13"}]]
    s = score_batch(fns, completions, {"solution": ["12", "12"], "reward_model": [{"ground_truth": "12"}] * 2,
                                       "data_source": ["toy"] * 2, "extra_info": [{}, {}]})
    assert s.total == [1.5, 0.0] and s.reasons["verl"] == ["pred=12", "pred=13"]


def block(readme: str, after: str, lang: str) -> str:
    """The first ```lang block after the line that starts with `after`."""
    return re.search(re.escape(after) + r".*?```" + lang + r"\n(.*?)```", readme, re.S).group(1)


def test_your_data_your_reward_walk_runs_as_written(tmp_path, monkeypatch, capsys):
    """The README's walk: its GSM8K-style rows (two as shown, 28 more like them), its my_rewards.py and
    mine.yaml as written, then its train, eval and report commands, on tiny-random and a few tokens."""
    from rlvr.cli import main

    readme = (ROOT / "README.md").read_text()
    shown = [json.loads(line) for line in block(readme, "**1. Problems.**", "jsonl").splitlines()]
    more = [{"question": f"Sam has {i} apples and buys {i + 3} more. How many apples does he have?",
             "answer": f"He has {i} + {i + 3} = <<{i}+{i + 3}={2 * i + 3}>>{2 * i + 3} apples.\n#### {2 * i + 3}"}
            for i in range(28)]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in shown + more))
    (tmp_path / "my_rewards.py").write_text(block(readme, "**2. Rewards**", "python"))
    (tmp_path / "mine.yaml").write_text(block(readme, "**3. A config**", "yaml"))
    namespace: dict = {}
    exec(block(readme, "**2. Rewards**", "python"), namespace)
    assert namespace["accuracy"](["so #### 72", "#### 71", "72"], [shown[0]["answer"]] * 3) == [1.0, 0.0, 0.0]
    assert namespace["compute_score"]("toy", "She earned #### $10", shown[1]["answer"]) == {"score": 1.0, "pred": "10"}
    assert namespace["compute_score"]("toy", "#### 9", shown[1]["answer"])["score"] == 0.1
    # verl's parquet holds the bare ground truth: an answer-less completion scored 1.0 there and the right
    # one 0.1 (final_number of a bare '72' is None, equal to the answer-less completion's None)
    assert [namespace["compute_score"]("openai/gsm8k", c, "72")["score"] for c in ("no answer", "#### 72", "#### 7")] \
        == [0.0, 1.0, 0.1]
    assert namespace["accuracy"](["#### 72", "72", "#### 7"], ["72"] * 3) == [1.0, 0.0, 0.0]
    monkeypatch.chdir(tmp_path)
    small = {"train": ["--model.name=tiny-random", "--train.steps=1", "--rollout.prompts_per_step=2",
                       "--rollout.group_size=2", "--rollout.max_new_tokens=8", "--eval.max_new_tokens=8"],
             "eval": ["--n", "2", "--k", "1", "--max-new-tokens", "8", "--out", str(tmp_path / "ev")], "report": []}
    for line in block(readme, "**4. Train, evaluate", "sh").splitlines():
        argv = shlex.split(line.split("  #")[0].replace("Qwen/Qwen2.5-0.5B-Instruct", "tiny-random"))
        assert argv[0] == "rlvr" and main([*argv[1:], *small[argv[1]]]) == 0, line
    saved = yaml.safe_load((tmp_path / "runs" / "mine" / "config.yaml").read_text())
    assert saved["rewards"]["weights"] == {f"{tmp_path / 'my_rewards.py'}:accuracy": 1.0,
                                           f"verl:{tmp_path / 'my_rewards.py'}:compute_score": 0.5}
    assert saved["task"]["heldout_size"] is None and (tmp_path / "runs" / "mine" / "report.html").is_file()
    assert len((tmp_path / "runs" / "mine" / "eval_before.jsonl").read_text().splitlines()) == 6  # a fifth of 30
    assert json.loads((tmp_path / "ev" / "eval.json").read_text())["tasks"]
    # "Your rewards, attacked": rlvr audit flags both rewards for the one attack the README names
    capsys.readouterr()
    assert main(["audit", "mine.yaml", "--n", "5"]) == 1
    weak = [line for line in capsys.readouterr().out.splitlines() if line.startswith("WEAK")]
    assert weak == [f"WEAK: reward '{name}' rewarded 1 attacks: GSM8K mark and an answer line"
                    for name in ("my_rewards.py:accuracy", "verl:my_rewards.py:compute_score")]
