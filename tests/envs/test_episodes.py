"""Episodes end to end on the tiny model: environments, rendering, limits, masks."""
import pytest
import torch

from rlvr.config import EnvConfig
from rlvr.envs.base import Reply, SingleTurn, ToolEnv
from rlvr.envs.episodes import EnvSpec, Limits, make_spec, model_token_lists, run_episodes
from rlvr.rollout.sampling import SamplingSettings
from rlvr.envs.render import TurnRender
from rlvr.envs.tools import Tool
from rlvr.envs.calculator import calculator
from rlvr.rollout.builtin import generate
from rlvr.rollout.engines import builtin_engine
from rlvr.tasks import Problem, encode_prompt

PROBLEMS = [Problem(question="What is 2 + 3?", answer="5"), Problem(question="What is 7 * 6?", answer="42")]


class Scripted:
    """Answers every model turn with 'ok <n>' (role user) and ends after `turns` model turns."""

    def __init__(self, turns: int):
        self.turns, self.seen = turns, []

    def reset(self, problem):
        return [{"role": "user", "content": problem.question}]

    def step(self, text):
        self.seen.append(text)
        if len(self.seen) >= self.turns:
            return Reply(done=True)
        return Reply(text=f"ok {len(self.seen)}", role="user")

    def reward_columns(self):
        return {"turns_seen": len(self.seen)}


def spec_of(tok, make, **limits):
    return EnvSpec(make=make, render=TurnRender(tok), limits=Limits(**limits), multi_turn=True)


def run(model, tok, spec, g=2, **kw):
    kw = dict(max_new_tokens=6, temperature=1.0, stop_ids=[tok.eos_token_id], pad_id=tok.pad_token_id,
              seeds=[3, 4]) | kw
    seeds, kw["stop_ids"] = kw.pop("seeds"), tuple(kw["stop_ids"])
    return run_episodes(builtin_engine(model), spec, PROBLEMS, group_size=g, sampling=SamplingSettings(**kw),
                        seeds=seeds)


def test_single_turn_episodes_are_todays_rollout(tiny):
    model, tok = tiny
    few = [("What is 1 + 1?", "Answer: 2")]
    spec = make_spec(EnvConfig(), tok, few, "Be brief.")
    assert not spec.multi_turn
    ep = run(model, tok, spec, g=3, seeds=[5, 6], max_new_tokens=8)
    prompts = [encode_prompt(tok, p.question, few, "Be brief.") for p in PROBLEMS]
    r = generate(model, prompts, group_size=3, max_new_tokens=8, temperature=1.0, stop_ids=[tok.eos_token_id],
                 pad_id=tok.pad_token_id, seeds=[5, 6])
    assert ep.rollout.prompt_ids == prompts
    assert torch.equal(ep.rollout.completion_ids, r.completion_ids)
    assert torch.equal(ep.rollout.completion_mask, r.completion_mask)
    assert torch.equal(ep.rollout.truncated, r.truncated)
    assert float(ep.rollout.env_mask.sum()) == 0
    assert ep.texts == tok.batch_decode(r.completion_token_lists(), skip_special_tokens=True)
    assert all(len(rec["turns"]) == 1 and rec["end"] in ("done", "turn_tokens") for rec in ep.records)


def test_multi_turn_masks_tokens_and_text(tiny):
    model, tok = tiny
    # a stop token the random model draws often enough, so turns end and the environment answers
    stops = [tok.eos_token_id] + tok("aeiou")["input_ids"]
    ep = run(model, tok, spec_of(tok, lambda: Scripted(3), max_turns=3), stop_ids=stops, max_new_tokens=10)
    r = ep.rollout
    assert torch.all(r.completion_mask * r.env_mask == 0)  # a token is the model's or the environment's
    for b, rec in enumerate(ep.records):
        model_turns = [t for t in rec["turns"] if t["source"] == "model"]
        env_turns = [t for t in rec["turns"] if t["source"] == "env"]
        assert int(r.completion_mask[b].sum()) == sum(t["tokens"] for t in model_turns)
        assert int(r.env_mask[b].sum()) == sum(t["tokens"] for t in env_turns)
        assert ep.texts[b] == model_turns[-1]["text"]
        assert len(model_turns) == len(env_turns) + 1  # the episode ends after a model turn
        if rec["end"] == "done":
            assert len(model_turns) == 3 and ep.columns["turns_seen"][b] == 3
        for e, text in zip(env_turns, ("ok 1", "ok 2")):
            assert (e["role"], e["text"]) == ("user", text)
    assert {rec["end"] for rec in ep.records} <= {"done", "turn_tokens"}
    assert any(len(rec["turns"]) > 1 for rec in ep.records)
    # the decoded sequence of a row is the chat template's rendering of its conversation
    b = next(i for i, rec in enumerate(ep.records) if len(rec["turns"]) > 2)
    ids = r.prompt_ids[b // 2] + r.completion_ids[b, :int((r.completion_mask[b] + r.env_mask[b]).sum())].tolist()
    first_env = next(t for t in ep.records[b]["turns"] if t["source"] == "env")
    assert "<|im_end|>\n<|im_start|>user\nok 1<|im_end|>\n<|im_start|>assistant\n" in tok.decode(ids)
    assert first_env["text"] == "ok 1"
    assert model_token_lists(r)[b] == [t for t, m in zip(r.completion_ids[b].tolist(), r.completion_mask[b]) if m]


def test_limits_end_episodes(tiny):
    model, tok = tiny
    stops = [tok.eos_token_id] + tok("aeiou")["input_ids"]
    ep = run(model, tok, spec_of(tok, lambda: Scripted(99), max_turns=2), stop_ids=stops, max_new_tokens=10)
    assert {rec["end"] for rec in ep.records} <= {"max_turns", "turn_tokens"}
    assert all(len([t for t in rec["turns"] if t["source"] == "model"]) <= 2 for rec in ep.records)
    tight = run(model, tok, spec_of(tok, lambda: Scripted(99), max_turns=9, max_episode_tokens=14), stop_ids=stops,
                max_new_tokens=10)
    for b, rec in enumerate(tight.records):
        assert (tight.rollout.completion_mask[b] + tight.rollout.env_mask[b]).sum() <= 14
    assert "episode_tokens" in {rec["end"] for rec in tight.records}


class Counter:
    """A TRL-style environment: reset(**row), public methods as tools, get_reward()."""

    def reset(self, **row):
        self.answer, self.calls = row["answer"], 0
        return "You have a counter tool."

    def bump(self, by: int) -> str:
        """Add to the counter.

        Args:
            by: how much to add.
        """
        self.calls += by
        return f"counter is {self.calls}"

    def get_reward(self) -> float:
        return float(self.calls)


def test_tool_env_runs_calls_and_reports_errors():
    env = ToolEnv([Tool.from_function(calculator)], Counter(), describe=True)
    messages = env.reset(Problem(question="What is 2 + 3?", answer="5"))
    assert messages[0]["role"] == "system" and '"name": "bump"' in messages[0]["content"]
    assert '"name": "calculator"' in messages[0]["content"]
    assert messages[-1] == {"role": "user", "content": "What is 2 + 3?\n\nYou have a counter tool."}
    reply = env.step('<tool_call>{"name": "calculator", "arguments": {"expression": "23*47"}}</tool_call>'
                     '<tool_call>{"name": "bump", "arguments": {"by": 2}}</tool_call>'
                     '<tool_call>{"name": "nope", "arguments": {}}</tool_call><tool_call>{bad</tool_call>')
    lines = reply.text.split("\n")
    assert (reply.done, reply.role, lines[:2]) == (False, "tool", ["1081", "counter is 2"])
    assert lines[2].startswith("Error: unknown tool 'nope'") and lines[3].startswith("Error: tool call is not valid")
    assert [c["name"] for c in reply.calls] == ["calculator", "bump", "<unknown>", ""]   # no model-chosen names
    assert [bool(c["error"]) for c in reply.calls] == [False, False, True, True]
    assert env.step("The answer is 5.").done
    assert env.reward_columns() == {"env_reward": 2.0}


def test_tools_spec_from_config_on_a_template_without_tools(tiny):
    model, tok = tiny
    example = [{"role": "user", "content": "What is 2 * 3?"},
               {"role": "assistant", "content": '<tool_call>{"name": "calculator", "arguments": {"expression": "2*3"}}</tool_call>'},
               {"role": "tool", "content": "6"}, {"role": "assistant", "content": "Answer: 6"}]
    spec = make_spec(EnvConfig(name="tools", max_turns=3, example=example), tok, [], "Be brief.")
    text = tok.decode(spec.prompt(PROBLEMS[0]))
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou may call one or more tools")
    assert "<|im_start|>tool\n6<|im_end|>" in text and text.endswith("What is 2 + 3?<|im_end|>\n<|im_start|>assistant\n")
    ep = run(model, tok, spec)
    assert len(ep.records) == 4 and all(rec["end"] in ("done", "turn_tokens") for rec in ep.records)


def test_render_cuts_long_tool_output(tiny):
    _, tok = tiny
    render = TurnRender(tok)
    content, cut = render.cap("x" * 50, 10)
    assert cut and content == "x" * 10 + " ...[cut]"
    assert render.cap("short", 10) == ("short", False)
    ids = render.env_tokens(tok.eos_token_id, "tool", "42")
    assert tok.decode(ids) == "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"


def test_unknown_tool_and_class_are_clear_errors(tiny):
    _, tok = tiny
    from rlvr.errors import RlvrError

    with pytest.raises(RlvrError, match="unknown tool 'abacus'"):
        make_spec(EnvConfig(name="tools", tools=["abacus"]), tok, [])
    with pytest.raises(RlvrError, match="cannot import Nope from tests.envs.test_episodes"):
        make_spec(EnvConfig(name="tests.envs.test_episodes:Nope"), tok, [])
    spec = make_spec(EnvConfig(name="tests.envs.test_episodes:Counter", tools=[]), tok, [])
    assert spec.multi_turn and "bump" in tok.decode(spec.prompt(PROBLEMS[0]))


GUESS = """class Guess:
    def reset(self, answer, **row):
        self.secret = int(answer)
        return "Find the number: call guess."
    def guess(self, n: int) -> str:
        \"\"\"Compare your guess n with the secret number.\"\"\"
        return "right" if n == self.secret else ("higher" if n < self.secret else "lower")
"""


def test_an_environment_class_in_a_py_file(tiny, tmp_path):
    """`--env.name=guess.py:Guess`, a file as rewards and tools take one (and as config.yaml writes it,
    absolute): the class loads and its method is a tool; it said "No module named 'guess'". A file without
    the class names the file."""
    _, tok = tiny
    from rlvr.errors import RlvrError

    (tmp_path / "guess.py").write_text(GUESS)
    spec = make_spec(EnvConfig(name=f"{tmp_path / 'guess.py'}:Guess", tools=[]), tok, [])
    prompt = tok.decode(spec.prompt(Problem(question="q", answer="7", row={"answer": "7"})))
    assert spec.multi_turn and "Compare your guess n with the secret number." in prompt
    with pytest.raises(RlvrError, match=r"env.name '.*guess.py:Nope': cannot load class '.*guess.py:Nope': .*Nope"):
        make_spec(EnvConfig(name=f"{tmp_path / 'guess.py'}:Nope", tools=[]), tok, [])


def test_single_turn_env_is_the_task_prompt():
    env = SingleTurn([("q1", "a1")], "sys")
    assert env.reset(Problem(question="q2", answer="x")) == [{"role": "system", "content": "sys"},
                                                             {"role": "user", "content": "q1"},
                                              {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    assert env.step("anything").done and env.reward_columns() == {}
