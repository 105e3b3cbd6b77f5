"""Episodes in a batch: the rollout of every task, single-turn or multi-turn, through one function.

    run_episodes(engine, spec, problems, group_size=G, sampling=SamplingSettings(...), seeds=...) -> Episodes

Each of the P * G rows is an episode with its own environment: the engine's session samples a model turn
for every open row, each environment answers, the answers are appended as tokens (rlvr/envs/render.py),
and the rows that go on sample again; rows finish independently. The result is a Rollout whose
completion is everything after the prompt, model and environment tokens in order, with completion_mask
on the model's tokens only (the loss) and env_mask on the environment's (context, never loss), plus
the final model turn's text (what reward functions score) and a record of every turn.
"""
from __future__ import annotations

import importlib
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from rlvr.envs.base import Environment, Reply, SingleTurn, ToolEnv
from rlvr.envs.render import TurnRender
from rlvr.envs.tools import Tool, parse_tool_calls, template_supports_tools
from rlvr.errors import RlvrError
from rlvr.io import load_callable
from rlvr.rewards.call import dataset_columns
from rlvr.rollout.decoding import Rollout
from rlvr.rollout.sampling import SamplingSettings
from rlvr.tasks.base import Problem

ENDS = ("done", "turn_tokens", "max_turns", "episode_tokens", "env_error")
_STEP_THREADS = 64   # environments answering at once; their tool calls share rlvr.envs.tools' pool


@dataclass(kw_only=True)
class Limits:
    max_turns: int = 1  # model turns per episode
    max_tool_tokens: int = 64  # tokens of one environment message's content
    max_episode_tokens: int = 1 << 30  # tokens after the prompt, model and environment
    context: int | None = None  # the model's positions: prompt and episode together stay within them

    def room(self, prompt_tokens: int) -> int:
        """Tokens an episode may take after a prompt of prompt_tokens: max_episode_tokens, or less where
        the model's context ends first (positions past it are garbage, or an engine's error)."""
        return min(self.max_episode_tokens, self.context - prompt_tokens) if self.context else self.max_episode_tokens


@dataclass(kw_only=True)
class EnvSpec:
    """How to run a run's episodes: a fresh environment per episode, the turn renderer, the limits."""

    make: object  # () -> Environment
    render: TurnRender
    limits: Limits
    multi_turn: bool

    def prompt(self, problem: Problem) -> list[int]:
        """The token ids of a problem's prompt (a throwaway environment's reset)."""
        return self.render.prompt(self.make().reset(problem))


def builtin_tools(names: list[str]) -> list[Tool]:
    from rlvr.envs.calculator import calculator

    tools = []
    for name in names:
        if name == "calculator":
            tools.append(Tool.from_function(calculator, concurrent=True))   # a pure function
        elif name == "python":
            from rlvr.envs.python_tool import make_python_tool

            tools.append(make_python_tool())
        elif ":" in name:  # a plain function, as TRL's GRPOTrainer(tools=[fn]) takes it
            try:
                tools.append(Tool.from_function(load_callable(name, "tool")))
            except ValueError as e:   # a parameter without a type hint, *args, ...: named with file and line
                raise RlvrError(f"env.tools '{name}': {e}") from None
        else:
            raise RlvrError(f"env.tools: unknown tool '{name}'; built-in tools are calculator, python; "
                            "or give 'module:function'")
    return tools


def load_class(path: str):
    """'module:Class', or 'path/to/file.py:Class' (as rewards and tools take a file; config.yaml holds it
    absolute)."""
    if path.rpartition(":")[0].endswith(".py"):
        try:
            return load_callable(path, "class")
        except RlvrError as e:
            raise RlvrError(f"env.name '{path}': {e}") from None
    module, _, name = path.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise RlvrError(f"env.name '{path}': cannot import {name} from {module}: {e}") from None


def make_spec(env_cfg, tok, few_shot: list[tuple[str, str]], system_prompt: str = "",
              context: int | None = None) -> EnvSpec:
    """The EnvSpec of an env config section (rlvr.config.EnvConfig) for this tokenizer and task. A
    'module:Class' with step and reward_columns methods is an rlvr Environment, made with no arguments
    per episode (it builds its own messages); any other class is a TRL-style environment run by ToolEnv.
    context: the model's positions, which end an episode where they end before env.max_episode_tokens."""
    if env_cfg.name == "single":
        return EnvSpec(make=lambda: SingleTurn(few_shot, system_prompt), render=TurnRender(tok), limits=Limits(),
                       multi_turn=False)
    cls = load_class(env_cfg.name) if env_cfg.name != "tools" else None
    limits = Limits(max_turns=env_cfg.max_turns, max_tool_tokens=env_cfg.max_tool_tokens,
                    max_episode_tokens=env_cfg.max_episode_tokens, context=context)
    # an rlvr Environment (rlvr/envs/base.py) has step and reward_columns; a TRL environment may well
    # have a tool named step (a gym-style action) but never reward_columns
    if cls is not None and all(callable(getattr(cls, m, None)) for m in ("step", "reward_columns")):
        return EnvSpec(make=cls, render=TurnRender(tok), limits=limits, multi_turn=True)
    tools = builtin_tools(env_cfg.tools)
    try:
        probe = ToolEnv(tools, cls() if cls else None)
    except ValueError as e:   # one of the class's methods cannot be a tool: named with file and line
        raise RlvrError(f"env.name '{env_cfg.name}': {e} (its public methods are tools; start a helper's "
                        "name with _)") from None
    native = template_supports_tools(tok)
    render = TurnRender(tok, [t.schema() for t in probe.tools.values()] if native else None)
    make = lambda: ToolEnv(tools, cls() if cls else None, system_prompt, not native, env_cfg.example, few_shot,
                           env_cfg.tool_budget_s)
    return EnvSpec(make=make, render=render, limits=limits, multi_turn=True)


@dataclass(kw_only=True)
class Episodes:
    rollout: Rollout  # completion_mask: model tokens; env_mask: environment tokens
    texts: list[str]  # each row's final model turn, decoded: what reward functions score
    records: list[dict]  # each row's turns, tool calls and end (rlvr/envs/episode_metrics.py reads them)
    columns: dict[str, list]  # reward-function columns from the environments (one value per row)
    prompts: list = field(default_factory=list)  # each row's prompt as TRL's `prompts` (text or messages)

    @property
    def messages(self) -> list[list[dict]]:
        """Each row's episode as chat messages (TRL's conversational `completions`)."""
        return [completion_messages(r["turns"]) for r in self.records]


def model_token_lists(r: Rollout) -> list[list[int]]:
    """Each row's model tokens, every turn's in order (the environment's left out)."""
    return [[t for t, m in zip(ids, mask) if m] for ids, mask in zip(r.completion_ids.tolist(), r.completion_mask.tolist())]


def reward_inputs(problems: list[Problem], ep: Episodes, g: int) -> tuple[list, dict[str, list]]:
    """What the reward functions get, as TRL passes it: the completions (the final model turn's text; for
    a conversational dataset the episode's messages, tool calls and results included) and the keyword
    columns, one value per episode: `prompts` (with what each reset added), `completion_ids`, every
    dataset column under its own name, rlvr's `answer`, and the environments' columns."""
    columns = dataset_columns(problems, g)
    columns["prompts"] = ep.prompts
    columns["completion_ids"] = model_token_lists(ep.rollout)  # the model's own tokens (single-turn: all of them)
    columns.update(ep.columns)
    messages = ep.messages if any(p.messages for p in problems) else []
    completions = [messages[b] if problems[b // g].messages else t for b, t in enumerate(ep.texts)]
    return completions, columns


class _Row:
    def __init__(self):
        self.pieces: list[tuple[list[int], list[float] | None]] = []  # (tokens, logp) or (tokens, None): env
        self.turns: list[dict] = []
        self.calls: list[dict] = []
        self.end, self.used, self.cut, self.final = "", 0, 0, ""
        self.error = ""  # why the environment failed (end env_error)
        self.room = 1 << 30  # tokens the episode may take after its prompt (Limits.room)


def _common(lists: list[list[int]]) -> int:
    n = min(len(x) for x in lists)
    return next((i for i in range(n) if any(x[i] != lists[0][i] for x in lists)), n)


def _prompts(spec: EnvSpec, envs: list[Environment], problems: list[Problem], g: int):
    """Each group's prompt tokens and each row's own tokens after it. A TRL environment whose reset
    draws its own problem gives the episodes of one row different prompts: the group's prompt is then
    their common token prefix, and each row's remainder enters its episode as environment tokens
    (attended, never trained on) before the first model turn. Otherwise the remainders are empty."""
    messages = [env.reset(problems[b // g]) for b, env in enumerate(envs)]
    prompts, rests = [], []
    for i in range(len(problems)):
        own = messages[i * g:(i + 1) * g]
        if all(m == own[0] for m in own):
            prompts.append(spec.render.prompt(own[0]))
            rests += [[] for _ in own]
            continue
        tokens = [spec.render.prompt(m) for m in own]
        n = _common(tokens)
        if n == 0:
            raise RlvrError("the episodes of one problem start with different first tokens; an environment's "
                            "reset may change the question, not the chat's start")
        prompts.append(tokens[0][:n])
        rests += [t[n:] for t in tokens]
    return prompts, rests


def _episode_prompts(envs: list[Environment], problems: list[Problem], g: int) -> list:
    """TRL's `prompts`: each episode's prompt as the dataset gave it, with what its reset added."""
    return [getattr(env, "prompt", None) or problems[b // g].prompt for b, env in enumerate(envs)]


def completion_messages(turns: list[dict]) -> list[dict]:
    """An episode as TRL's conversational `completions` hold it: the assistant turns (with the tool calls
    they made) and the environment's answers, in order."""
    out = []
    for t in turns:
        if t["source"] != "model":
            out.append({"role": t["role"], "content": t["text"]})
            continue
        calls = [{"type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                 for c in parse_tool_calls(t["text"]) if not c.error]
        out.append({"role": "assistant", "content": t["text"], **({"tool_calls": calls} if calls else {})})
    return out


def run_episodes(engine, spec: EnvSpec, problems: list[Problem], *, group_size: int, sampling: SamplingSettings,
                 seeds: list[int] | None = None, generator: torch.Generator | None = None) -> Episodes:
    """group_size episodes of each problem (module docstring); sampling.max_new_tokens caps each model turn."""
    tok, lim, max_new_tokens = spec.render.tok, spec.limits, sampling.max_new_tokens
    envs = [spec.make() for _ in range(len(problems) * group_size)]
    prompts, rests = _prompts(spec, envs, problems, group_size)
    extra = {"generator": generator} if generator is not None else {}
    session = engine.session(prompts, seeds=seeds, group_size=group_size, **sampling.engine_args(), **extra)
    rows = [_Row() for _ in envs]
    for b, row in enumerate(rows):
        row.room = lim.room(len(prompts[b // group_size]))
    own = [b for b, rest in enumerate(rests) if rest]
    if own:  # each episode's own part of its prompt, before its first turn
        session.extend(own, [rests[b] for b in own])
        for b in own:
            rows[b].pieces.append((rests[b], None))
            rows[b].used += len(rests[b])
    active = list(range(len(rows)))
    for turn in range(lim.max_turns if spec.multi_turn else 1):
        last = turn == lim.max_turns - 1 or not spec.multi_turn
        caps = [max(1, min(max_new_tokens, rows[b].room - rows[b].used)) for b in active]
        turns = list(zip(active, session.sample(active, caps, keep=not last), caps))
        texts = [_record(spec, rows[b], t, cap < max_new_tokens) for b, t, cap in turns]
        replies = _step_all(spec, [(envs[b], text) for (b, _, _), text in zip(turns, texts)])
        go, feeds = [], []
        for (b, t, _), reply in zip(turns, replies):
            feed = None if reply is None else _answer(spec, rows[b], t, reply, last)
            if feed is not None:
                go.append(b)
                feeds.append(feed)
        if not go:
            break
        session.extend(go, feeds)
        active = go
    episodes = _assemble(prompts, rows, envs, group_size, sampling.pad_id, tok)
    episodes.prompts = _episode_prompts(envs, problems, group_size)
    for record, env in zip(episodes.records, envs):
        if getattr(env, "added", ""):  # what a TRL reset added to this episode's question (samples.jsonl)
            record["reset"] = env.added
    return episodes


def _record(spec: EnvSpec, row: _Row, t, budget_cap: bool) -> str | None:
    """Record a model turn; its text when the environment is to answer it, None when it ended the episode."""
    text = spec.render.tok.decode(t.tokens, skip_special_tokens=True)
    row.pieces.append((t.tokens, t.logp))
    row.used += len(t.tokens)
    row.turns.append({"source": "model", "role": "assistant", "text": text, "tokens": len(t.tokens)})
    row.final = text
    if not t.stopped:
        row.end = "episode_tokens" if budget_cap else "turn_tokens"
        return None
    return text


def _step_all(spec: EnvSpec, pending: list[tuple[Environment, str | None]]) -> list:
    """env.step(text) for every row that has a text (None for the others). Multi-turn episodes step at
    once, each its own environment: a batch's tool calls wait together, not one after another."""
    if not spec.multi_turn or sum(text is not None for _, text in pending) < 2:
        return [None if text is None else _step(env, text) for env, text in pending]
    with ThreadPoolExecutor(max_workers=min(_STEP_THREADS, len(pending)), thread_name_prefix="env-step") as pool:
        futures = [None if text is None else pool.submit(_step, env, text) for env, text in pending]
        return [None if f is None else f.result() for f in futures]


def _step(env: Environment, text: str) -> Reply:
    """env.step(text), where a step that raises on the model's text, or answers with anything but a Reply
    of text, ends that episode alone (end env_error, the error in its record), never the run."""
    try:
        reply = env.step(text)
    except Exception as e:  # noqa: BLE001 - what the model's text makes the environment do is this episode's
        return Reply(done=True, error=step_error(env, e))
    wrong = step_error(env, reply=reply)
    return Reply(done=True, error=wrong) if wrong else reply


def step_error(env: Environment, error: BaseException | None = None, reply=None) -> str:
    """What went wrong with a step of `env`: it raised `error` (said with the file and line it was raised
    at), or answered with `reply`, which is not a Reply of text; "" when neither."""
    name = type(env).__name__
    if error is not None:
        return f"{name}.step raised {type(error).__name__}: {error} ({raised_in(error, env)})"
    if not isinstance(reply, Reply) or not isinstance(reply.text, str):
        what = type(reply.text if isinstance(reply, Reply) else reply).__name__
        return f"{name}.step answered with {what}, not a Reply of text"
    return ""


def raised_in(error: BaseException, env) -> str:
    """'FILE, line N, in FUNCTION' of the innermost frame of `error` in the environment's own file (a TRL-style
    class's, run by ToolEnv): where its code made the call that raised inside a library or rlvr (a Reply
    built wrongly), else (or with no environment) where it was raised."""
    owner = getattr(env, "obj", None) or env
    home = getattr(sys.modules.get(type(owner).__module__), "__file__", None) if env is not None else None
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "no traceback"
    f = ([f for f in frames if f.filename == home] or frames)[-1]
    return f"{f.filename}, line {f.lineno}, in {f.name}"


def _answer(spec: EnvSpec, row: _Row, t, reply, last: bool) -> list[int] | None:
    """The environment's answer to a model turn: its tokens if the episode goes on, else None."""
    row.calls += reply.calls
    if reply.error:
        row.end, row.error = "env_error", reply.error
        return None
    if reply.done:
        row.end = "done"
        return None
    if last:
        row.end = "max_turns"
        return None
    content, cut = spec.render.cap(reply.text, spec.limits.max_tool_tokens)
    tokens = spec.render.env_tokens(t.tokens[-1], reply.role, content)
    if row.used + len(tokens) + 1 > row.room:  # no room left for an answer
        row.end = "episode_tokens"
        return None
    row.cut += cut
    row.pieces.append((tokens, None))
    row.used += len(tokens)
    row.turns.append({"source": "env", "role": reply.role, "text": content, "tokens": len(tokens)})
    return tokens


def _assemble(prompts, rows: list[_Row], envs, group_size: int, pad_id: int, tok) -> Episodes:
    width = max(r.used for r in rows)
    n = len(rows)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    model_mask, env_mask, logp = torch.zeros((n, width)), torch.zeros((n, width)), torch.zeros((n, width))
    for b, r in enumerate(rows):
        at = 0
        for tokens, lp in r.pieces:
            span = slice(at, at + len(tokens))
            ids[b, span] = torch.tensor(tokens, dtype=torch.long)
            if lp is None:
                env_mask[b, span] = 1.0
            else:
                model_mask[b, span] = 1.0
                logp[b, span] = torch.tensor(lp)
            at += len(tokens)
    truncated = torch.tensor([r.end != "done" for r in rows])
    rollout = Rollout(prompt_ids=[list(p) for p in prompts], completion_ids=ids, completion_mask=model_mask,
                      sampler_logp=logp, truncated=truncated, group_size=group_size, env_mask=env_mask)
    records = [{"turns": r.turns, "calls": r.calls, "end": r.end, "tool_truncated": r.cut,
                **({"error": r.error} if r.error else {})} for r in rows]
    reward_cols = [env.reward_columns() for env in envs]
    keys = sorted({k for c in reward_cols for k in c})
    columns = {k: [c.get(k) for c in reward_cols] for k in keys}
    if any(isinstance(env, ToolEnv) and env.obj is not None for env in envs):
        columns["environments"] = [env.obj for env in envs]  # TRL passes its reward functions the environments
    return Episodes(rollout=rollout, texts=[r.final for r in rows], records=records, columns=columns)
