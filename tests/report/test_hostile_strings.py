"""Every writer of a run survives any string a model writes, and the console shows terminal
escape sequences as text, never acts on them."""
import json

import pytest

from rlvr.report.console import format_samples, say
from rlvr.report.html import write_report
from rlvr.io import atomic_write_text
from rlvr.report.sinks import JsonlWriter

HOSTILE = "\ud800 \x1b]0;owned\x07 \x1b[2J \x1b]52;c;ZXZpbA==\x07 \r\u202e"
ESCAPED = "\\ud800 \\x1b]0;owned\\x07 \\x1b[2J \\x1b]52;c;ZXZpbA==\\x07 \\r\\u202e"


def test_say_escapes_control_sequences_and_keeps_newlines(capsys):
    say(f"[tool] {HOSTILE}\nnext line")
    assert capsys.readouterr().err == f"[tool] {ESCAPED}\nnext line\n"


def test_multi_turn_samples_reach_the_console_escaped(capsys):
    episode = {"turns": [{"source": "model", "role": "assistant", "text": "call", "tokens": 1},
                         {"source": "env", "role": "tool", "text": HOSTILE, "tokens": 1}],
               "calls": [{"name": "python", "error": ""}], "end": "done"}
    sample = {"prompt": "Q\x1b[2J", "episode": episode, "rewards": {"correctness": {"score": 0.0, "reason": "r"}}}
    say(format_samples(3, [sample], group_size=1))
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\r" not in err and "\ud800" not in err
    assert f"[tool] {ESCAPED}\n" in err and "Q: Q\\x1b[2J\n" in err


def test_jsonl_and_text_files_take_a_lone_surrogate(tmp_path):
    with JsonlWriter(tmp_path / "s.jsonl") as w:
        w.write({"name\ud800": "text\ud800"})
    assert json.loads((tmp_path / "s.jsonl").read_text()) == {"name\ud800": "text\ud800"}
    atomic_write_text(tmp_path / "t.html", "a\ud800b")
    assert (tmp_path / "t.html").read_text(encoding="utf-8") == "a\\ud800b"


def test_report_html_is_written_for_samples_with_a_lone_surrogate(tmp_path):
    rows = [{"step": 1, "reward/mean": 0.5, "env/tool_calls/<unknown>": 1.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    episode = {"turns": [{"source": "model", "role": "assistant", "text": "x\ud800", "tokens": 1},
                         {"source": "env", "role": "tool", "text": HOSTILE, "tokens": 1}],
               "calls": [{"name": "\ud800", "error": "unknown tool '\\ud800'"}], "end": "done"}
    sample = {"step": 1, "prompt": "p", "completion": "c\ud800", "reward": 0.0, "episode": episode,
              "rewards": {"r": {"score": 0.0, "reason": "why\ud800"}}}
    (tmp_path / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    page = write_report(tmp_path).read_text(encoding="utf-8")
    # written (before: UnicodeEncodeError, no report), each lone surrogate as its escape
    assert "<pre>x\\ud800</pre>" in page and "tool call 1 of 1 (\\ud800) failed" in page


def test_tensorboard_takes_any_metric_key(tmp_path):
    pytest.importorskip("tensorboard")
    from rlvr.report.trackers import TensorBoard

    tb = TensorBoard(tmp_path, "p", {})
    tb.log(1, {"env/tool_calls/\ud800\x1b": 1.0, "reward/mean": 0.5})
    tb.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["env/tool_calls/\\ud800\\x1b", "reward/mean"]


def test_format_samples_is_terminal_safe_whoever_prints_it():
    episode = {"turns": [{"source": "env", "role": "tool", "text": HOSTILE, "tokens": 1}],
               "calls": [], "end": "done"}
    samples = [{"prompt": "Q\x1b[2J", "episode": episode, "rewards": {"r": {"score": 1.0, "reason": "ok\x07"}}},
               {"prompt": "P\x1b]0;x\x07", "completion": "A\x1b[31m", "rewards": {"r": {"score": 0.0, "reason": "\r"}}}]
    text = format_samples(1, samples, group_size=1)
    assert text.isprintable() or all(line.isprintable() for line in text.split("\n"))
    assert f"[tool] {ESCAPED}" in text and "Q: Q\\x1b[2J" in text and "Q: P\\x1b]0;x\\x07" in text
    assert "r=1 (ok\\x07)" in text and "r=0 (\\r)" in text


def test_an_evaluation_reaches_tensorboard_with_its_flips(tmp_path):
    """What `--log.trackers=[tensorboard]` shows of one evaluation: its evals.jsonl row, read back from the
    event file (strict, format and format-free accuracy, flips), at the evaluation's step."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlvr.report.trackers import TensorBoard
    from rlvr.train.grpo import Outputs

    out = Outputs(metrics=None, samples=None, evals=None, health=None, trackers=[TensorBoard(tmp_path, "p", {})])
    out.track_eval({"step": 6, "train_seconds": 12.5, "heldout_accuracy": 0.25, "heldout_format": 0.75,
                    "heldout_lenient": 0.5, "heldout_fixed": 3, "heldout_broken": 1, "ood_accuracy": 0.125})
    out.trackers[0].close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert {k: [(e.step, e.value) for e in acc.Scalars(k)] for k in acc.Tags()["scalars"]} == {
        "eval/heldout_accuracy": [(6, 0.25)], "eval/heldout_format": [(6, 0.75)], "eval/heldout_lenient": [(6, 0.5)],
        "eval/heldout_fixed": [(6, 3.0)], "eval/heldout_broken": [(6, 1.0)], "eval/ood_accuracy": [(6, 0.125)]}
