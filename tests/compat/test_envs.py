"""TRL environments whose reset() draws its own problem: each episode its own instance and its own prompt."""
import random

import torch

from rlvr.config import EnvConfig
from rlvr.envs.episodes import make_spec, reward_inputs, run_episodes
from rlvr.rewards import build_rewards, score_batch
from rlvr.rollout.engines import builtin_engine
from rlvr.rollout.sampling import SamplingSettings
from rlvr.rollout.builtin import RecomputeSession, generate
from rlvr.tasks import Problem
from rlvr.train.forward import completion_logprobs

PROBLEMS = [Problem(question="Solve it.", answer="", messages=({"role": "user", "content": "Solve it."},)),
            Problem(question="Solve this one.", answer="", messages=({"role": "user", "content": "Solve this one."},))]


def episodes(model, tok, engine=None, g=2):
    random.seed(1)  # the environment draws from the global generator
    spec = make_spec(EnvConfig(name="tests.compat.conventions:DrawsItsOwnProblem", tools=[], max_turns=2), tok, [])
    sampling = SamplingSettings(max_new_tokens=6, temperature=1.0, stop_ids=(tok.eos_token_id,), pad_id=tok.pad_token_id)
    return run_episodes(engine or builtin_engine(model), spec, PROBLEMS, group_size=g, sampling=sampling, seeds=[3, 4])


def test_each_episode_answers_its_own_draw(tiny):
    model, tok = tiny
    ep = episodes(model, tok)
    envs = ep.columns["environments"]
    draws = [(e.a, e.b) for e in envs]
    assert len(set(draws)) == 4  # four instances, four problems
    for b, (env, prompt) in enumerate(zip(envs, ep.prompts)):
        base = PROBLEMS[b // 2].question
        assert prompt == [{"role": "user", "content": f"{base}\n\nWhat is {env.a} + {env.b}?"}]
        assert ep.records[b]["reset"] == f"What is {env.a} + {env.b}?"
        # the group's prompt is the shared start; this episode's own part comes first, as context
        r = ep.rollout
        own = int(r.env_mask[b].cumprod(0).sum())
        assert own > 0 and r.completion_mask[b, :own].sum() == 0
        text = tok.decode(r.prompt_ids[b // 2] + r.completion_ids[b, :own].tolist())
        assert text.endswith(f"{base}\n\nWhat is {env.a} + {env.b}?<|im_end|>\n<|im_start|>assistant\n")
    # what the sampler drew each token from is what training computes over prompt + own part + turns
    train = completion_logprobs(model, ep.rollout.prompt_ids, ep.rollout.completion_ids, ep.rollout.completion_mask,
                                2, tok.pad_token_id, env_mask=ep.rollout.env_mask)
    assert ep.rollout.completion_mask.sum() > 8
    assert torch.allclose(ep.rollout.sampler_logp, train, atol=1e-4, rtol=0)


def test_recompute_engines_see_each_episodes_own_prompt(tiny):
    model, tok = tiny

    class Recompute:  # an engine that samples through generate, as HF and vLLM do
        def session(self, prompts, **kw):
            return RecomputeSession(lambda *a, **k: generate(model, *a, **k), prompts, **kw)

    ep = episodes(model, tok, Recompute())
    train = completion_logprobs(model, ep.rollout.prompt_ids, ep.rollout.completion_ids, ep.rollout.completion_mask,
                                2, tok.pad_token_id, env_mask=ep.rollout.env_mask)
    assert torch.allclose(ep.rollout.sampler_logp, train, atol=1e-4, rtol=0)


def test_rewards_see_the_environments_and_the_whole_episode(tiny):
    model, tok = tiny
    ep = episodes(model, tok)
    completions, columns = reward_inputs(PROBLEMS, ep, 2)
    assert columns["prompts"] == ep.prompts and len(columns["completion_ids"]) == 4
    # conversational data: each completion is the episode's messages, the last one the final model turn
    assert all(c[0]["role"] == "assistant" and c[-1]["content"] == t for c, t in zip(completions, ep.texts))
    for env in columns["environments"]:  # a solved episode, as the tool would have seen it
        env.submit(str(env.a + env.b))
    columns["environments"][1].answered = "nonsense"
    s = score_batch(build_rewards({"tests.compat.conventions:solved_reward": 1.0}), completions, columns)
    assert s.total == [1.0, 0.0, 1.0, 1.0]


def test_completion_messages_carry_tool_calls_and_results():
    from rlvr.envs.episodes import completion_messages

    call = '<tool_call>{"name": "submit", "arguments": {"answer": "12"}}</tool_call>'
    turns = [{"source": "model", "role": "assistant", "text": call, "tokens": 9},
             {"source": "env", "role": "tool", "text": "correct", "tokens": 3},
             {"source": "model", "role": "assistant", "text": "Answer: 12", "tokens": 4}]
    assert completion_messages(turns) == [
        {"role": "assistant", "content": call,
         "tool_calls": [{"type": "function", "function": {"name": "submit", "arguments": {"answer": "12"}}}]},
        {"role": "tool", "content": "correct"},
        {"role": "assistant", "content": "Answer: 12"}]


def test_plain_functions_are_tools_by_name(tiny):
    from rlvr.envs.base import ToolEnv
    from rlvr.envs.episodes import builtin_tools

    env = ToolEnv(builtin_tools(["calculator", "tests.compat.conventions:word_count"]))
    reply = env.step('<tool_call>{"name": "word_count", "arguments": {"text": "a b c"}}</tool_call>')
    assert reply.text == "3" and reply.calls == [{"name": "word_count", "error": ""}]


def test_a_trl_environment_with_a_tool_named_step_is_run_as_trl_runs_it(tiny):
    _, tok = tiny
    spec = make_spec(EnvConfig(name="tests.compat.conventions:GymStyleEnv", tools=[], max_turns=3), tok, [])
    env = spec.make()
    messages = env.reset(PROBLEMS[0])  # TRL's reset(**row), its text added to the user turn
    assert messages[-1] == {"role": "user", "content": "Solve it.\n\nReach 3."}
    reply = env.step('<tool_call>{"name": "step", "arguments": {"action": 2}}</tool_call>')
    assert (reply.text, reply.role, reply.calls) == ("at 2", "tool", [{"name": "step", "error": ""}])
