"""Environments and tools written as TRL teaches them (environment_factory classes, plain and async
tool functions), loaded from a .py file through the config as `rlvr train` loads them: whatever one of
them does is that episode's failure, never the run's."""
import json
import time

from rlvr.config import EnvConfig
from rlvr.envs.episodes import make_spec
from rlvr.tasks import Problem

TRL_ENV = '''
import asyncio
import threading

RELEASE = threading.Event()


class Shop:
    def reset(self, **row):
        self.bought = []

    def buy(self, item: str) -> str:
        """Buy one item.

        Args:
            item: what to buy.
        """
        self.bought.append(item)
        return f"bought {item}"

    def stall(self, item: str) -> str:
        """Never answers (until the test lets it).

        Args:
            item: ignored.
        """
        RELEASE.wait(60)
        return "late"

    async def price(self, item: str) -> dict:
        """The price of an item (async, as TRL takes tools).

        Args:
            item: what to price.
        """
        await asyncio.sleep(0)
        return {"item": item, "price": len(item)}


async def shout(word: str) -> str:
    """Upper-case a word.

    Args:
        word: the word.
    """
    await asyncio.sleep(0)
    return word.upper()
'''


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def shop_spec(tmp_path, tok, **env):
    (tmp_path / "shop.py").write_text(TRL_ENV)
    return make_spec(EnvConfig(name=f"{tmp_path / 'shop.py'}:Shop", tools=[f"{tmp_path / 'shop.py'}:shout"], **env),
                     tok, [])


def test_async_tools_are_awaited(tiny, tmp_path):
    """An async tool function and an async method answer with what they return (a coroutine's repr and
    a 'never awaited' warning before)."""
    _, tok = tiny
    env = shop_spec(tmp_path, tok).make()
    env.reset(Problem(question="q", answer="1"))
    reply = env.step(call("shout", word="hey") + call("price", item="tea"))
    assert reply.text == 'HEY\n{"item": "tea", "price": 3}'
    assert [c["error"] for c in reply.calls] == ["", ""]


def test_a_method_that_hangs_costs_its_episode_the_budget_only(tiny, tmp_path):
    """A TRL environment's own method that never returns: the turn answers within env.tool_budget_s, its
    later calls are refused (they would run beside the hung one), and the next turn's too. It blocked the
    episode, and so the whole batch, for ever."""
    import sys

    _, tok = tiny
    env = shop_spec(tmp_path, tok, tool_budget_s=1.0).make()
    env.reset(Problem(question="q", answer="1"))
    started = time.monotonic()
    reply = env.step(call("buy", item="a") + call("stall", item="b") + call("buy", item="c"))
    try:
        took = time.monotonic() - started
        late = "Error: this episode's tool time budget (env.tool_budget_s) ran out; answer without further tool calls"
        assert reply.text.split("\n") == ["bought a", late, late]
        assert 1.0 <= took < 10.0
        assert env.obj.bought == ["a"]   # "c" never ran beside the hung call
        assert env.step(call("buy", item="d")).text == late
    finally:
        sys.modules[type(env.obj).__module__].RELEASE.set()


PICKY = '''
class Picky:
    def reset(self, answer, **row):
        self.answer = answer

    def get_reward(self) -> float:
        if self.answer == "5":
            raise KeyError("no score for 5")
        return 0.5 if self.answer == "42" else "not a number"
'''


def test_a_get_reward_that_raises_fails_its_episode_only(tiny, tmp_path):
    """get_reward() raising (or giving no number) on some episodes: those score 0 under the env reward,
    marked failed with the reason; the others score as they said. It raised out of the rollout and
    ended the run."""
    from rlvr.envs.episodes import reward_inputs
    from rlvr.envs.episodes import run_episodes
    from rlvr.rewards import build_rewards, score_batch
    from rlvr.rollout.engines import builtin_engine
    from rlvr.rollout.sampling import SamplingSettings

    model, tok = tiny
    (tmp_path / "picky.py").write_text(PICKY)
    spec = make_spec(EnvConfig(name=f"{tmp_path / 'picky.py'}:Picky", tools=[], max_turns=2), tok, [])
    problems = [Problem(question="What is 2 + 3?", answer="5", row={"answer": "5"}),
                Problem(question="What is 7 * 6?", answer="42", row={"answer": "42"}),
                Problem(question="What is 1 + 1?", answer="2", row={"answer": "2"})]
    sampling = SamplingSettings(max_new_tokens=6, temperature=1.0, stop_ids=(tok.eos_token_id,),
                                pad_id=tok.pad_token_id)
    ep = run_episodes(builtin_engine(model), spec, problems, group_size=2, sampling=sampling, seeds=[3, 4, 5])
    completions, columns = reward_inputs(problems, ep, 2)
    scores = score_batch(build_rewards({"env": 1.0}), completions, columns)
    assert scores.per_function["env"] == [0.0, 0.0, 0.5, 0.5, 0.0, 0.0]
    assert scores.failed["env"] == [True, True, False, False, True, True]
    assert "Picky.get_reward() raised KeyError: 'no score for 5'" in scores.reasons["env"][0]
    assert "Picky.get_reward() raised ValueError: could not convert string to float" in scores.reasons["env"][4]
