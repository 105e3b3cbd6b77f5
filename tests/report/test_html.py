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
