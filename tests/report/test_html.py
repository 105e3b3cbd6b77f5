"""report.html from a hand-made run directory: flips with examples, best and worst samples of distinct prompts."""
import json

from rlvr.report.html import write_report


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def sample(prompt, reward, completion):
    return {"step": 3, "prompt": prompt, "completion": completion, "reward": reward,
            "rewards": {"correctness": {"score": reward, "reason": "r"}}}


def test_report_shows_flips_and_distinct_samples(tmp_path):
    write_jsonl(tmp_path / "metrics.jsonl", [{"step": 3, "reward/mean": 0.5}])
    # one prompt's group fills the top four by reward; the best list must still show other prompts
    samples = [sample("P1", 1.0, f"p1 c{i}") for i in range(4)] + [sample("P2", 0.9, "p2"), sample("P3", 0.1, "p3"),
                                                                    sample("P4", 0.0, "p4 a"), sample("P4", 0.0, "p4 b")]
    write_jsonl(tmp_path / "samples.jsonl", samples)
    ex = {"question": "What is 4 * 7?", "answer": "28", "before": "4 * 7 = 28", "after": "4 * 7 = 32\nAnswer: 32"}
    summary = {"heldout_accuracy_before": 0.41, "heldout_accuracy_after": 0.65,
               "heldout_lenient_before": 0.79, "heldout_lenient_after": 0.65,
               "flips": {"heldout": {"fixed": 4, "broken": 18, "kept": 61, "never": 17, "n": 100,
                                     "examples": {"fixed": [], "broken": [ex]}}},
               "decomposition": {"heldout": {"text": "+24.0 points strict: +38.0 from right answers now in the "
                                             "required form, -14.0 from the answers themselves"}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    page = write_report(tmp_path).read_text()
    assert "<td>18</td>" in page and "What is 4 * 7?" in page and "after: 4 * 7 = 32" in page
    assert "+38.0 from right answers now in the required form" in page
    assert "held-out format-free</td><td>79.0%</td><td>65.0%</td><td>-14.0</td>" in page
    best = page.split("<h3>Best (last steps)</h3>")[1].split("<h3>Worst")[0]
    worst = page.split("<h3>Worst (last steps)</h3>")[1]
    assert best.count("p1 c") == 1 and best.count("<div class='sample'>") == 4
    assert worst.count("p4 ") == 1 and "p3" in worst


def turn(source, text, tokens):
    return {"source": source, "role": "assistant" if source == "model" else "tool", "text": text, "tokens": tokens}


TOOL_EPISODE = {"turns": [turn("model", '<tool_call>{"expr": "23 * 47"}</tool_call>', 21), turn("env", "1081", 9),
                          turn("model", '<tool_call>{"expr": "1/0"}</tool_call>', 18),
                          turn("env", "error: division by zero", 6),
                          turn("model", "23 * 47 = 1081\nAnswer: 1081", 14)],
                "calls": [{"name": "calculator", "error": ""},
                          {"name": "calculator", "error": "ZeroDivisionError <x>"}],
                "end": "done", "tool_truncated": 1}


def test_report_shows_an_episode_turn_by_turn(tmp_path):
    write_jsonl(tmp_path / "metrics.jsonl", [{"step": s, "reward/mean": 0.5, "env/tool_use_frac": 0.5,
                                              "env/tool_errors_frac": 0.25, "env/turns_mean": 2.5,
                                              "env/tool_calls_mean": 1.5} for s in (1, 2, 3)])
    write_jsonl(tmp_path / "samples.jsonl", [{**sample("What is 23 * 47?", 1.0, "joined"), "episode": TOOL_EPISODE}])
    page = write_report(tmp_path).read_text()
    shown = page.split("<h3>Best (last steps)</h3>")[1].split("<h3>Worst")[0]
    texts = ["&lt;tool_call&gt;{&quot;expr&quot;: &quot;23 * 47&quot;}&lt;/tool_call&gt;", "1081",
             "&lt;tool_call&gt;{&quot;expr&quot;: &quot;1/0&quot;}&lt;/tool_call&gt;", "error: division by zero",
             "23 * 47 = 1081\nAnswer: 1081"]
    at = [shown.index(f"<pre>{t}</pre>") for t in texts]
    assert at == sorted(at) and "<tool_call>" not in page and "joined" not in shown
    assert shown.count("<div class='turn env'><span class='role'>tool</span>") == 2
    assert shown.count("<div class='turn model'><span class='role'>assistant</span>") == 3
    assert "tool call 2 of 2 (calculator) failed: ZeroDivisionError &lt;x&gt;" in shown
    assert "2 tool calls; 1 tool result cut to env.max_tool_tokens; ended: done (the environment ended it)" in shown
    assert ".turn.env pre{" in page  # the episode styles come with episodes
    assert page.count("<svg") == 8 and "Tool use</text>" in page and "Turns per episode</text>" in page


# The page as it was before episodes existed, for one sample of the fixture below (captured from that code).
SINGLE_TURN_SAMPLE = ("<h3>Best (last steps)</h3><div class='sample'><b>step 3, reward 1</b> &mdash; correctness = 1 "
                      "(r)<pre>P1 &lt;x&gt;</pre><pre>a &lt; b</pre></div><h3>Worst (last steps)</h3>")


def test_single_turn_report_is_unchanged(tmp_path):
    one_turn = {"turns": [turn("model", "a < b", 3)], "calls": [], "end": "done", "tool_truncated": 0}
    pages = []
    for name, extra in (("plain", {}), ("episode", {"episode": one_turn})):
        run = tmp_path / name / "run"
        run.mkdir(parents=True)
        write_jsonl(run / "metrics.jsonl", [{"step": 3, "reward/mean": 0.5, "completion/length_mean": 3.0}])
        write_jsonl(run / "samples.jsonl", [{**sample("P1 <x>", 1.0, "a < b"), **extra}])
        pages.append(write_report(run).read_text().replace(str(run), "RUN"))
    assert pages[0] == pages[1]
    assert SINGLE_TURN_SAMPLE in pages[0] and "turn" not in pages[0] and pages[0].count("<svg") == 6


def test_a_null_reward_in_the_records_is_shown_not_a_crash(tmp_path):
    """JSON writes a non-finite number as null: a run directory written before rlvr refused inf scores holds
    them, and `rlvr report` of it must still write the page (a null reward ranks lowest)."""
    from rlvr.cli import main

    write_jsonl(tmp_path / "metrics.jsonl", [{"step": 3, "reward/mean": None, "reward/r.py:f/mean": None}])
    nulls = [sample("P1", None, "p1 null"), sample("P2", 0.5, "p2 half"), sample("P3", 1.0, "p3 one")]
    write_jsonl(tmp_path / "samples.jsonl", nulls)
    assert main(["report", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    worst = page.split("<h3>Worst (last steps)</h3>")[1]
    assert "step 3, reward none</b> &mdash; correctness = none (r)" in worst
    assert worst.index("p1 null") < worst.index("p2 half") < worst.index("p3 one")
    write_jsonl(tmp_path / "samples.jsonl", nulls[1:])  # the honest records: as before
    assert main(["report", str(tmp_path)]) == 0 and "reward none" not in (tmp_path / "report.html").read_text()


def test_report_and_summary_are_readable_by_others_as_any_file_the_user_writes(tmp_path):
    """`rlvr report RUN_DIR` (and every whole-file write of a run: summary.json, config.yaml, final/) gets the
    mode a plain open gives under the umask, 0644 under 022, not the temp file's 0600."""
    import os

    from rlvr.cli import main
    from rlvr.models import tiny_random
    from rlvr.report.sinks import atomic_save_model, atomic_write_json

    old = os.umask(0o022)
    try:
        write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "reward/mean": 0.5}])
        atomic_write_json(tmp_path / "summary.json", {"steps": 1})
        assert main(["report", str(tmp_path)]) == 0
        model, tok = tiny_random(seed=0)
        atomic_save_model(model, tok, tmp_path / "final")
    finally:
        os.umask(old)
    assert oct((tmp_path / "report.html").stat().st_mode & 0o777) == oct(0o644)
    assert oct((tmp_path / "summary.json").stat().st_mode & 0o777) == oct(0o644)
    assert oct((tmp_path / "final").stat().st_mode & 0o777) == oct(0o755)


def test_charts_count_steps_in_whole_numbers_and_draw_no_flat_kl_line_at_beta_0(tmp_path):
    """`rlvr report RUN_DIR` of a 2-step run at algo.beta 0 (kl null, the KL to the old policy 0 with one
    update per batch): the step axis reads 1 and 2, never 1.25, and the KL chart says why it is empty."""
    import re

    from rlvr.report.plot import line_chart

    write_jsonl(tmp_path / "metrics.jsonl", [{"step": s, "reward/mean": 0.5 * s, "kl": None, "approx_kl_old": 0.0,
                                              "entropy": 1.0} for s in (1, 2)])
    page = write_report(tmp_path).read_text()
    kl = page.split(">KL</text>")[1].split("</svg>")[0]
    assert "none: no KL term (algo.beta 0) and one update per batch" in kl and "<polyline" not in kl
    reward = page.split(">Reward</text>")[1].split("</svg>")[0]
    x_labels = re.findall(r'text-anchor="middle">([^<]*)</text>', reward)
    assert x_labels[:2] == ["1", "2"] and x_labels[2] == "step"
    seconds = line_chart({"a": [(0.0, 1.0), (2.5, 2.0)]}, "t", "training seconds", "y")
    assert re.findall(r'text-anchor="middle">([^<]*)</text>', seconds)[:5] == ["0", "0.625", "1.25", "1.88", "2.5"]


def test_rlvr_report_reads_a_run_whose_last_line_a_crash_cut_short(tmp_path, capsys):
    """A killed run's metrics.jsonl may end in half a line, or bytes that are not UTF-8: that last line
    is left out; a bad line before the end is named."""
    from rlvr.cli import main

    write_jsonl(tmp_path / "metrics.jsonl", [{"step": 1, "reward/mean": 0.5}, {"step": 2, "reward/mean": 0.25}])
    with open(tmp_path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 3, "reward/mean": \xff\xfe')
    assert main(["report", str(tmp_path)]) == 0
    assert "2 steps" in (tmp_path / "report.html").read_text()
    with open(tmp_path / "metrics.jsonl", "ab") as f:
        f.write(b'\n{"step": 4}\n')
    assert main(["report", str(tmp_path)]) == 2
    assert f"rlvr: error: {tmp_path / 'metrics.jsonl'}, line 3: not a JSON object in UTF-8" in capsys.readouterr().err
