"""A batch's tool calls run at once under a per-episode time budget; model-chosen tool names
never become metric keys."""
import json
import threading

import pytest

from rlvr.envs.base import ToolEnv
from rlvr.envs.episodes import EnvSpec, Limits, _step_all
from rlvr.envs.episode_metrics import episode_metrics
from rlvr.envs.python_tool import make_python_tool
from rlvr.envs.tools import Tool


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def barrier_tool(parties: int) -> Tool:
    """A stateless tool whose calls all wait for each other: run one after another, the first one
    times out and breaks the barrier for the rest."""
    barrier = threading.Barrier(parties, timeout=5.0)

    def meet(tag: str) -> str:
        """Wait for the others.

        Args:
            tag: Echoed back.
        """
        barrier.wait()
        return tag
    return Tool.from_function(meet, concurrent=True)


def test_a_turns_calls_run_at_once():
    env = ToolEnv([barrier_tool(4)], budget_s=20.0)
    reply = env.step("".join(call("meet", tag=t) for t in "abcd"))
    assert reply.text == "a\nb\nc\nd"
    assert [c["error"] for c in reply.calls] == [""] * 4


def test_the_batchs_episodes_step_at_once():
    meet = barrier_tool(3)
    envs = [ToolEnv([meet], budget_s=20.0) for _ in range(3)]
    spec = EnvSpec(make=None, render=None, limits=Limits(), multi_turn=True)
    replies = _step_all(spec, [(envs[0], call("meet", tag="x")), (envs[1], None), (envs[2], call("meet", tag="y")),
                               (ToolEnv([meet], budget_s=20.0), call("meet", tag="z"))])
    assert [r if r is None else r.text for r in replies] == ["x", None, "y", "z"]


@pytest.mark.slow  # waits out a wall clock
def test_python_calls_share_the_episodes_time_budget():
    sleepy = "import time\ntime.sleep({s})\nprint({s})"
    env = ToolEnv([make_python_tool()], budget_s=7.0)
    # four 2 s programs fit in 7 s only when they run at once (one after another they take 8 s and more);
    # the 5 s of slack is for starting four interpreters on a loaded two-core machine
    reply = env.step("".join(call("python", code=sleepy.format(s=2)) for _ in range(4)))
    assert reply.text == "2\n2\n2\n2"
    reply = env.step(call("python", code=sleepy.format(s=8)))   # longer than what is left
    budget = "Error: this episode's tool time budget (env.tool_budget_s) ran out; answer without further tool calls"
    assert reply.text == budget and env.spent_s >= 7.0
    assert env.step(call("python", code="print(1)")).text == budget   # spent: no call runs any more


def test_only_known_tools_get_metric_keys():
    env = ToolEnv([barrier_tool(1)], budget_s=5.0)
    reply = env.step(call("meet", tag="a") + call("\ud800") + call("eval\x1b[2J") + call("x" * 30))
    assert [c["name"] for c in reply.calls] == ["meet", "<unknown>", "<unknown>", "<unknown>"]
    assert "unknown tool '\\ud800'" in reply.text   # the model is told, escaped
    episode = {"turns": [], "calls": reply.calls + [{"name": "", "error": "no name"},
                                                  {"name": "not a name\ud800", "error": "x"}], "end": "done"}
    keys = {k: v for k, v in episode_metrics([episode]).items() if k.startswith("env/tool_calls/")}
    assert keys == {"env/tool_calls/meet": 1.0, "env/tool_calls/<unknown>": 4.0, "env/tool_calls/<malformed>": 1.0}


def test_a_tool_env_without_a_budget_runs_concurrent_calls():
    env = ToolEnv([barrier_tool(2)])   # the library default: no budget
    reply = env.step(call("meet", tag="a") + call("meet", tag="b"))
    assert reply.text == "a\nb"
    assert [c["error"] for c in reply.calls] == ["", ""]


def test_a_tool_env_without_a_budget_runs_the_python_tool():
    env = ToolEnv([make_python_tool()])
    assert env.step(call("python", code="print(6 * 7)")).text == "42"
