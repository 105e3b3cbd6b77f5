"""Per-step metrics and a console rendering of multi-turn episodes (model turns alternating with tool
results or follow-ups).

An episode is the plain dict the training loop writes to samples.jsonl under "episode":
{"turns": [{"source": "model" | "env", "role", "text", "tokens"}, ...],
 "calls": [{"name", "error"}, ...], "end": one of END_REASONS, "tool_truncated": int}.
"""
from __future__ import annotations

import statistics

# Why an episode ended, in words (the report shows them). A cut tool result never ends an episode.
END_REASONS: dict[str, str] = {
    "done": "the environment ended it",
    "turn_tokens": "a model turn hit rollout.max_new_tokens",
    "max_turns": "env.max_turns model turns were used and the environment wanted more",
    "episode_tokens": "the episode's token budget (env.max_episode_tokens, or the model's context) ran out",
    "env_error": "the environment's step raised or answered with no Reply (its error is the record's 'error')",
}
MALFORMED = "<malformed>"  # the tool name a call is counted under when the model gave none
UNKNOWN = "<unknown>"      # ... when it named no tool of the environment's
_MAX_NAME = 64


def _metric_name(name) -> str:
    """A call's name as a metric key part: model-chosen strings must never mint keys (a model could
    flood the metrics with names), so
    a name that could not be a tool's (not an identifier, too long) counts as unknown. ToolEnv
    already records unknown tools' calls as UNKNOWN; this holds for any environment's records."""
    if not name:
        return MALFORMED
    ok = isinstance(name, str) and name.isidentifier() and name.isascii() and len(name) <= _MAX_NAME
    return name if ok or name == UNKNOWN else UNKNOWN


def is_single_turn(episode: dict) -> bool:
    """True for the episode a single-turn task makes: one turn, no tool call, ended by the model."""
    return (len(episode["turns"]) <= 1 and not episode.get("calls")
            and episode.get("end") in ("done", "turn_tokens"))


def episode_metrics(episodes: list[dict]) -> dict[str, float]:
    """The step's env/* and tokens/* metrics, means over the step's episodes (one per completion).

    Returns {} for no episodes: the loop passes none for single-turn tasks (env.name single), whose
    metrics.jsonl, charts and health rules are then what they were before environments existed. A
    tools run always logs them, tool use 0 included (the sign that tool use collapsed).
    """
    if not episodes:
        return {}
    n = len(episodes)
    for e in episodes:
        if e.get("end") not in END_REASONS:
            raise ValueError(f"episode end {e.get('end')!r} is not one of {sorted(END_REASONS)}")
    calls = [c for e in episodes for c in e.get("calls", [])]
    errors = sum(1 for c in calls if c.get("error"))
    m = {"env/turns_mean": statistics.fmean(_count(e, "model") for e in episodes),
         "env/tool_calls_mean": len(calls) / n}
    names = [_metric_name(c.get("name")) for c in calls]
    for name in sorted(set(names)):
        m[f"env/tool_calls/{name}"] = names.count(name) / n
    m.update({"env/tool_errors_frac": errors / len(calls) if calls else 0.0,
              "env/tool_errors": float(errors),
              "env/tool_use_frac": sum(1 for e in episodes if e.get("calls")) / n,
              "env/tool_truncated": float(sum(e.get("tool_truncated", 0) for e in episodes))})
    for reason in END_REASONS:
        m[f"env/end/{reason}_frac"] = sum(1 for e in episodes if e["end"] == reason) / n
    m["tokens/model_mean"] = statistics.fmean(_tokens(e, "model") for e in episodes)
    m["tokens/env_mean"] = statistics.fmean(_tokens(e, "env") for e in episodes)
    return m


def first_error(episodes: list[dict]) -> str | None:
    """The first environment error of a step's episodes (an env_error episode's "error"), None for none."""
    return next((ep["error"] for ep in episodes if ep.get("error")), None)


def _count(episode: dict, source: str) -> int:
    return sum(1 for t in episode["turns"] if t["source"] == source)


def _tokens(episode: dict, source: str) -> int:
    return sum(t["tokens"] for t in episode["turns"] if t["source"] == source)


def episode_text(episode: dict) -> str:
    """The episode turn by turn for the console, one "[role] text" block per turn, each ending in a
    newline; surrounding whitespace of a turn is dropped so the blocks stay compact. The console's
    writer escapes control characters (rlvr.report.console.say)."""
    return "".join(f"[{t['role']}] {t['text'].strip()}\n" for t in episode["turns"])
