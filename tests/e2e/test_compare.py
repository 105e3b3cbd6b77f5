import json

from rlvr.cli import main
from rlvr.report.plot import line_chart

TINY = """model: {name: tiny-random}
task: {heldout_size: 6, ood_size: 4}
rollout: {prompts_per_step: 2, group_size: 3, max_new_tokens: 6}
eval: {max_new_tokens: 6}
train: {steps: 2, eval_every: 1}
algo: {preset: %s}
"""


def test_compare_runs_configs_and_reads_run_dirs(tmp_path, capsys):
    for preset in ("grpo", "ppo"):
        (tmp_path / f"{preset}.yaml").write_text(TINY % preset)
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "grpo.yaml"), str(tmp_path / "ppo.yaml"), f"--out={out}"]) == 0
    text = capsys.readouterr().out
    assert "grpo" in text and "ppo" in text and "held-out after" in text
    page = (out / "compare.html").read_text()
    assert page.count("<svg") == 4 and page.count("<polyline") == 8  # 4 charts x 2 runs
    # an HTML table whose headers wrap (a 1400 px window shows it whole; checked in headless Chromium), not
    # one <pre> line of 17 columns, about 1650 px wide
    runs_table = page.split("</table>")[0]
    assert "<pre>" not in page and runs_table.count("<th>") == 18 and runs_table.count("<tr>") == 3
    assert "<th>held-out after</th>" in page and "<td>grpo</td><td>grpo</td><td>1</td><td>2</td>" in page
    # then accuracy after training, each run's and ppo's against grpo: one seed each, so over problems only
    assert "ppo against grpo: " in text and "no seed spread: one run on a side" in text
    assert "ppo against grpo: " in page and page.count("<table>") == 2
    data = json.loads((out / "compare.json").read_text())
    assert data["ppo"]["preset"] == "ppo" and data["grpo"]["steps"] == 2
    # existing run directories are read, not run again
    assert main(["compare", str(out / "grpo"), str(out / "ppo"), f"--out={tmp_path / 'again'}"]) == 0


def test_compare_rejects_a_non_run(tmp_path, capsys):
    assert main(["compare", str(tmp_path)]) == 2
    assert "is not a run directory" in capsys.readouterr().err


def test_line_chart_scales_points():
    svg = line_chart({"a": [(0, 0.0), (10, 1.0)]}, "t", "x", "y", width=300, height=200)
    # plot area: left 60, right margin 150 -> width 90; top 30, bottom margin 45 -> height 125
    assert 'points="60.0,155.0 150.0,30.0"' in svg
    assert "no data" in line_chart({"a": []}, "t", "x", "y")
