"""The README's Python API example runs as written (its run directory moved to a temporary one)."""
import re
from pathlib import Path

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
    assert env.reset(Problem("Guess it.", "42"))[-1]["content"].startswith("Guess it.\n\nFind the number")
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
    fns = [RewardFunction("trl", 1.0, namespace["accuracy"]),
           RewardFunction("verl", 0.5, from_compute_score(namespace["compute_score"]))]
    completions = [[{"role": "assistant", "content": "so 12"}], [{"role": "assistant", "content": "13"}]]
    s = score_batch(fns, completions, {"solution": ["12", "12"], "reward_model": [{"ground_truth": "12"}] * 2,
                                       "data_source": ["toy"] * 2, "extra_info": [{}, {}]})
    assert s.total == [1.5, 0.0] and s.reasons["verl"] == ["pred=12", "pred=13"]
