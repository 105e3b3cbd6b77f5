"""Episode metrics on hand-made episodes, and their console rendering."""
import pytest

from rlvr.envs.episode_metrics import episode_metrics, episode_text, is_single_turn


def turn(source, text, tokens):
    return {"source": source, "role": "assistant" if source == "model" else "tool", "text": text, "tokens": tokens}


def episode(turns, calls=(), end="done", tool_truncated=0):
    return {"turns": list(turns), "calls": [{"name": n, "error": e} for n, e in calls], "end": end,
            "tool_truncated": tool_truncated}


# 3 model turns, 2 env turns; two calculator calls, the second failed; one tool result cut
TOOLS = episode([turn("model", "<tool_call>a</tool_call>", 20), turn("env", "1081", 4),
                 turn("model", "<tool_call>b</tool_call>", 10), turn("env", "error", 6),
                 turn("model", "Answer: 1081", 5)],
                calls=[("calculator", ""), ("calculator", "ZeroDivisionError")], tool_truncated=1)
# 2 model turns, 1 env turn; one malformed call (no name) and one search call; ran out of turns
MALFORMED = episode([turn("model", "<tool_call>{</tool_call>", 8), turn("env", "bad call", 3),
                     turn("model", "<tool_call>s</tool_call>", 7)],
                    calls=[("", "malformed tool call"), ("search", "")], end="max_turns")
# a plain answer: one model turn, no calls
PLAIN = episode([turn("model", "Answer: 3", 9)], end="turn_tokens")


def test_episode_metrics_hand_computed():
    m = episode_metrics([TOOLS, MALFORMED, PLAIN])
    assert m == pytest.approx({
        "env/turns_mean": (3 + 2 + 1) / 3,
        "env/tool_calls_mean": 4 / 3,
        "env/tool_calls/calculator": 2 / 3,
        "env/tool_calls/<malformed>": 1 / 3,
        "env/tool_calls/search": 1 / 3,
        "env/tool_errors_frac": 2 / 4,
        "env/tool_errors": 2.0,
        "env/tool_use_frac": 2 / 3,
        "env/tool_truncated": 1.0,
        "env/end/done_frac": 1 / 3,
        "env/end/turn_tokens_frac": 1 / 3,
        "env/end/max_turns_frac": 1 / 3,
        "env/end/episode_tokens_frac": 0.0,
        "env/end/env_error_frac": 0.0,
        "tokens/model_mean": (35 + 15 + 9) / 3,
        "tokens/env_mean": (10 + 3 + 0) / 3,
    }, rel=1e-12)
    assert all(type(v) is float for v in m.values())


def test_no_episodes_add_no_keys_and_one_turn_episodes_count():
    assert episode_metrics([]) == {}  # a single-turn task passes none
    m = episode_metrics([PLAIN, episode([turn("model", "x", 3)])])  # a tools run where no tool was called
    assert (m["env/tool_use_frac"], m["env/turns_mean"], m["env/tool_errors_frac"]) == (0.0, 1.0, 0.0)
    assert is_single_turn(PLAIN) and not is_single_turn(TOOLS)


def test_any_multi_turn_feature_makes_metrics():
    # one turn but a call, or one turn that ran out of the episode budget: not a single-turn episode
    called = episode([turn("model", "<tool_call>x</tool_call>", 4)], calls=[("calculator", "")])
    m = episode_metrics([called, PLAIN])
    assert m["env/tool_calls_mean"] == 0.5 and m["env/tool_errors_frac"] == 0.0 and m["env/tool_use_frac"] == 0.5
    budget = episode([turn("model", "x", 4)], end="episode_tokens")
    m = episode_metrics([budget, PLAIN])
    assert m["env/end/episode_tokens_frac"] == 0.5 and m["env/tool_errors_frac"] == 0.0
    assert m["env/tool_calls_mean"] == 0.0 and not any(k.startswith("env/tool_calls/") for k in m)


def test_unknown_end_reason_is_an_error():
    with pytest.raises(ValueError, match="'tool_output'"):
        episode_metrics([TOOLS, episode([turn("model", "x", 1)], end="tool_output")])


def test_episode_text():
    assert episode_text(MALFORMED) == ("[assistant] <tool_call>{</tool_call>\n[tool] bad call\n"
                                       "[assistant] <tool_call>s</tool_call>\n")
    two_lines = episode([turn("model", "23 * 47 = 1081\nAnswer: 1081\n", 14)])
    assert episode_text(two_lines) == "[assistant] 23 * 47 = 1081\nAnswer: 1081\n"
