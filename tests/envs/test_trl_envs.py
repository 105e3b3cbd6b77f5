"""Environments and tools written as TRL teaches them (environment_factory classes, plain and async
tool functions), loaded from a .py file through the config as `rlvr train` loads them: whatever one of
them does is that episode's failure, never the run's."""
import json
from pathlib import Path

from rlvr.config import EnvConfig
from rlvr.envs.episodes import make_spec
from rlvr.tasks import Problem

TRL_ENV = '''
import asyncio
import threading

RELEASE = threading.Event()
STALLING = threading.Event()   # set once stall() is running
STALLED = []   # what stall() did once RELEASE let it go


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
        STALLING.set()
        STALLED.append("released" if RELEASE.wait(60) else "waited 60 s")
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
    _, tok = tiny
    env = shop_spec(tmp_path, tok, tool_budget_s=1.0).make()
    env.reset(Problem(question="q", answer="1"))
    shop = type(env.obj).stall.__globals__   # the module the class was loaded in (sys.modules may hold another)
    reply = env.step(call("buy", item="a") + call("stall", item="b") + call("buy", item="c"))
    try:
        late = "Error: this episode's tool time budget (env.tool_budget_s) ran out; answer without further tool calls"
        assert reply.text.split("\n") == ["bought a", late, late]
        # the turn answered while the hung call was still inside stall(): the budget cut it, not its return
        assert shop["STALLING"].is_set() and shop["STALLED"] == []
        assert env.obj.bought == ["a"]   # "c" never ran beside the hung call
        assert env.step(call("buy", item="d")).text == late
    finally:
        shop["RELEASE"].set()


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


def test_a_tool_that_cannot_be_described_is_a_config_error_naming_file_and_line(tiny, tmp_path):
    """A tool function or an environment method without a type hint (TRL's schema needs them too) stops
    `rlvr train` with an RlvrError naming the config key, the function, its file and line; it was a
    ValueError's traceback."""
    import pytest

    from rlvr.errors import RlvrError

    _, tok = tiny
    source = tmp_path / "loose.py"
    source.write_text("def shout(word):\n    return word\n\n\nclass Loose:\n    def reset(self, **row):\n"
                      "        pass\n\n    def helper(self, x):\n        return x\n")
    with pytest.raises(RlvrError, match=rf"^env.tools '{source}:shout': parameter 'word' of tool function "
                                        rf"shout \({source}:1\) has no type hint"):
        make_spec(EnvConfig(name="tools", tools=[f"{source}:shout"]), tok, [])
    with pytest.raises(RlvrError, match=rf"^env.name '{source}:Loose': parameter 'x' of tool function "
                                        rf"Loose.helper \({source}:9\) has no type hint.*start a helper's name with _"):
        make_spec(EnvConfig(name=f"{source}:Loose", tools=[]), tok, [])


class Spill:
    """An rlvr Environment whose answer is what a careless tool gives: bytes decoded with
    surrogateescape (a lone surrogate) and megabytes of output."""

    def reset(self, problem):
        return [{"role": "user", "content": problem.question}]

    def step(self, text):
        from rlvr.envs.base import Reply

        return Reply(text="ok \udcff" + "x" * 5_000_000, role="tool")

    def reward_columns(self):
        return {}


def test_surrogates_and_megabytes_of_tool_output_are_cut_to_the_limit(tiny):
    """The environment's answer enters the episode cut to max_tool_tokens with the surrogate escaped; the
    tokenizer refused the surrogate (TypeError out of the rollout), and 5 MB took seconds to tokenize."""
    from rlvr.envs.episodes import EnvSpec, Limits, run_episodes
    from rlvr.envs.render import TurnRender
    from rlvr.rollout.engines import builtin_engine
    from rlvr.rollout.sampling import SamplingSettings

    model, tok = tiny
    spec = EnvSpec(make=Spill, render=TurnRender(tok), limits=Limits(max_turns=2, max_tool_tokens=8), multi_turn=True)
    # any token stops a turn: every episode's first turn ends and the environment answers it
    sampling = SamplingSettings(max_new_tokens=4, temperature=1.0, stop_ids=tuple(range(len(tok))),
                                pad_id=tok.pad_token_id)
    ep = run_episodes(builtin_engine(model), spec, [Problem(question="q", answer="1")], group_size=2,
                      sampling=sampling, seeds=[1])
    for record in ep.records:
        env_turns = [t for t in record["turns"] if t["source"] == "env"]
        assert [t["text"] for t in env_turns] == ["ok \\udcf ...[cut]"]   # 8 characters, one token each
        assert record["tool_truncated"] == 1 and record["end"] == "max_turns"


class Chatty:
    """An rlvr Environment that never ends its episode: every model turn gets a follow-up."""

    def reset(self, problem):
        return [{"role": "user", "content": problem.question}]

    def step(self, text):
        from rlvr.envs.base import Reply

        return Reply(text="go on", role="user")

    def reward_columns(self):
        return {}


def test_an_episode_stops_where_the_models_context_ends(tiny):
    """An environment that never says done, max_episode_tokens past the model's context: each episode
    ends (end 'episode_tokens') with prompt and episode within the context; they ran past it."""
    from rlvr.envs.episodes import run_episodes
    from rlvr.rollout.engines import builtin_engine
    from rlvr.rollout.sampling import SamplingSettings

    model, tok = tiny
    problem = Problem(question="What is 2 + 3?", answer="5")
    open_spec = make_spec(EnvConfig(name="tests.envs.test_trl_envs:Chatty", max_turns=50, max_episode_tokens=10_000),
                          tok, [])
    prompt = len(open_spec.prompt(problem))
    spec = make_spec(EnvConfig(name="tests.envs.test_trl_envs:Chatty", max_turns=50, max_episode_tokens=10_000),
                     tok, [], context=prompt + 40)
    sampling = SamplingSettings(max_new_tokens=6, temperature=1.0, stop_ids=tuple(range(len(tok))),
                                pad_id=tok.pad_token_id)   # every turn stops at its first token
    ep = run_episodes(builtin_engine(model), spec, [problem], group_size=2, sampling=sampling, seeds=[1])
    r = ep.rollout
    assert [rec["end"] for rec in ep.records] == ["episode_tokens", "episode_tokens"]
    # one token a model turn and 26 for a follow-up: turn, follow-up, turn (28); a second follow-up and a
    # turn after it would need 55 of the 40
    follow_up = len(spec.render.env_tokens(ep.rollout.completion_ids[0, 0].item(), "user", "go on"))
    assert follow_up == 26
    assert (r.completion_mask + r.env_mask).sum(dim=1).tolist() == [28.0, 28.0]
    assert open_spec.limits.room(prompt) == 10_000 and spec.limits.room(prompt) == 40


class Fragile:
    """An rlvr Environment that breaks on what the model wrote: raises for one problem, answers with a
    bare string for another, and behaves for the third."""

    def reset(self, problem):
        self.answer = problem.answer
        return [{"role": "user", "content": problem.question}]

    def step(self, text):
        from rlvr.envs.base import Reply

        if self.answer == "5":
            raise ValueError("cannot parse \x1b[2J" + text[:0])
        return "not a reply" if self.answer == "42" else Reply(done=True)

    def reward_columns(self):
        return {}


def test_an_environment_step_that_raises_ends_its_episode_only(tiny):
    """step() raising, or answering with no Reply: that episode ends (end env_error, the error in its
    record, counted in env/end/env_error_frac); the others run as before. It raised out of the rollout."""
    from rlvr.envs.episode_metrics import episode_metrics
    from rlvr.envs.episodes import run_episodes
    from rlvr.rollout.engines import builtin_engine
    from rlvr.rollout.sampling import SamplingSettings

    model, tok = tiny
    spec = make_spec(EnvConfig(name="tests.envs.test_trl_envs:Fragile", max_turns=3), tok, [])
    problems = [Problem(question="What is 2 + 3?", answer="5"), Problem(question="What is 7 * 6?", answer="42"),
                Problem(question="What is 1 + 1?", answer="2")]
    sampling = SamplingSettings(max_new_tokens=6, temperature=1.0, stop_ids=tuple(range(len(tok))),
                                pad_id=tok.pad_token_id)   # every turn stops at its first token
    ep = run_episodes(builtin_engine(model), spec, problems, group_size=1, sampling=sampling, seeds=[1, 2, 3])
    assert [rec["end"] for rec in ep.records] == ["env_error", "env_error", "done"]
    line = next(n for n, text in enumerate(Path(__file__).read_text().splitlines(), 1) if 'raise ValueError("cannot parse' in text)
    raised = f"({__file__}, line {line}, in step)"   # where the step raised
    assert [rec.get("error") for rec in ep.records] == [f"Fragile.step raised ValueError: cannot parse \x1b[2J {raised}",
                                                        "Fragile.step answered with str, not a Reply of text", None]
    assert episode_metrics(ep.records)["env/end/env_error_frac"] == 2 / 3
    from rlvr.report.html import _episode_html

    page = _episode_html(ep.records[0])
    assert "ended: env_error (the environment&#x27;s step raised" in page
    assert f": Fragile.step raised ValueError: cannot parse \x1b[2J {raised}</div>" in page


BROKEN_TOOLS = '''
import sys


class Opaque:
    def __str__(self):
        raise RuntimeError("no text")


def opaque(x: int) -> str:
    """A result that cannot be written as text."""
    return Opaque()


def loop(x: int) -> dict:
    """A dict that holds itself."""
    d = {}
    d["self"] = d
    return d


def leave(x: int) -> str:
    """Calls sys.exit."""
    sys.exit(3)
'''


def test_tool_results_that_cannot_be_text_and_sys_exit_are_the_calls_errors(tiny, tmp_path):
    """A result whose __str__ raises, a dict that holds itself, a tool that calls sys.exit(): each call
    answers with its error and the episode goes on; they raised out of the turn and ended the run."""
    _, tok = tiny
    source = tmp_path / "broken.py"
    source.write_text(BROKEN_TOOLS)
    spec = make_spec(EnvConfig(name="tools", tools=[f"{source}:{n}" for n in ("opaque", "loop", "leave")]), tok, [])
    env = spec.make()
    env.reset(Problem(question="q", answer="1"))
    reply = env.step(call("opaque", x=1) + call("loop", x=1) + call("leave", x=1))
    assert reply.text.split("\n") == ["Error: tool 'opaque' raised RuntimeError: no text",
                                      "Error: tool 'loop' raised ValueError: Circular reference detected",
                                      "Error: tool 'leave' raised SystemExit: 3"]
    assert not reply.done and [bool(c["error"]) for c in reply.calls] == [True, True, True]


def test_a_reset_that_raises_names_its_class_file_line_and_row(tiny, tmp_path):
    """A TRL environment's reset(**row) raising (no model text has reached it: the class's bug) stops
    with an RlvrError naming the class, the error, the file and line and the row; it was a traceback."""
    import pytest

    from rlvr.errors import RlvrError

    _, tok = tiny
    source = tmp_path / "strict.py"
    source.write_text("class Strict:\n    def reset(self, answer, **row):\n        return int(answer) // 0\n")
    env = make_spec(EnvConfig(name=f"{source}:Strict", tools=[]), tok, []).make()
    with pytest.raises(RlvrError, match=rf"^Strict.reset raised ZeroDivisionError: integer division or modulo by "
                                        rf"zero \({source}:3\) on data.jsonl line 4$"):
        env.reset(Problem(question="q", answer="1", origin="data.jsonl line 4"))
