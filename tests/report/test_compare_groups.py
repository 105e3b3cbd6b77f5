"""rlvr compare of seed groups and runs, on run directories written by hand (the files a run writes, with
grades chosen so that every figure can be worked out): each group's mean and seed spread, the difference
from the first with its interval and verdict, in the console, compare.html and compare.json."""
import json

import pytest
import yaml

from rlvr.cli import main
from rlvr.report.compare import load
from rlvr.report.noise import paired_bootstrap

QUESTIONS = [f"What is {i} + 1?" for i in range(8)]


def write_run(path, seed, heldout, ood=None, lr=1e-5):
    """A finished run's files: config.yaml, two steps of metrics, summary.json and eval_after.jsonl with the
    given 0/1 grades per problem (held-out on QUESTIONS, OOD on the first len(ood) of them)."""
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump({"algo": {"preset": "grpo"}, "train": {"seed": seed},
                                                      "optimizer": {"lr": lr}}))
    (path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward/mean": 0.1 * s, "time/step_s": 2.0})
                                                + "\n" for s in (1, 2)))
    records = [{"split": "heldout", "question": q, "correct": bool(g)} for q, g in zip(QUESTIONS, heldout)]
    records += [{"split": "ood", "question": q, "correct": bool(g)} for q, g in zip(QUESTIONS, ood or [])]
    (path / "eval_after.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {"steps": 2, "train_seconds": 4.0, "heldout_accuracy_before": 0.0,
               "heldout_accuracy_after": sum(heldout) / len(heldout)}
    if ood:
        summary["ood_accuracy_after"] = sum(ood) / len(ood)
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "evals.jsonl").write_text(json.dumps({"step": 2, "train_seconds": 4.0,
                                                  "heldout_accuracy": summary["heldout_accuracy_after"]}) + "\n")


def write_group(path, grades: dict[int, list[int]], ood: dict[int, list[int]] | None = None):
    """A group folder as rlvr train --seeds writes it: group.json and seed-N/ for each seed."""
    for seed, heldout in grades.items():
        write_run(path / f"seed-{seed}", seed, heldout, (ood or {}).get(seed))
    (path / "group.json").write_text(json.dumps({"kind": "rlvr seed group", "config": None, "overrides": [],
                                                 "seeds": list(grades), "runs": {}, "keep_weights": False}))


def test_two_groups_beyond_noise_and_within_it(tmp_path, capsys):
    # base: seeds right on 2 and 4 of 8 held-out problems; better: 7 and 8; same: 3 and 3
    write_group(tmp_path / "base", {0: [1, 1, 0, 0, 0, 0, 0, 0], 1: [1, 1, 1, 1, 0, 0, 0, 0]},
                ood={0: [0, 0, 0, 0], 1: [1, 0, 0, 0]})
    write_group(tmp_path / "better", {0: [1, 1, 1, 1, 1, 1, 1, 0], 1: [1] * 8}, ood={0: [1, 1, 0, 0], 1: [1, 0, 0, 0]})
    write_group(tmp_path / "same", {2: [1, 1, 1, 0, 0, 0, 0, 0], 3: [0, 1, 1, 1, 0, 0, 0, 0]})
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "base"), str(tmp_path / "better"), str(tmp_path / "same"),
                 f"--out={out}"]) == 0
    text = capsys.readouterr().out
    base = [[1, 1, 0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0]]
    better = paired_bootstrap(base, [[1, 1, 1, 1, 1, 1, 1, 0], [1] * 8])
    same = paired_bootstrap(base, [[1, 1, 1, 0, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0, 0, 0]])
    assert better.diff == pytest.approx(15 / 16 - 6 / 16) and better.beyond  # +56.2 points
    assert same.diff == 0.0 and not same.beyond
    assert (f"held-out, better against base: beyond seed noise: +56.2 points, 95% interval [{100 * better.low:+.1f}, "
            f"{100 * better.high:+.1f}] (paired bootstrap over 8 problems and 2 + 2 seeds)") in text
    assert (f"held-out, same against base: within seed noise: +0.0 points, 95% interval [{100 * same.low:+.1f}, "
            f"{100 * same.high:+.1f}]") in text
    # the accuracy table: each group's mean over seeds, sd and range of the seeds' accuracies (25% and 50%)
    row = next(line.split() for line in text.splitlines() if line.startswith("held-out") and " base " in line)
    assert row == ["held-out", "base", "2", "8", "37.5%", "17.7", "25.0-50.0%"]
    ood = next(line for line in text.splitlines() if line.startswith("OOD, better against base"))
    assert ood.startswith("OOD, better against base: within seed noise: +25.0 points")  # 4 problems, 1/8 vs 3/8
    assert "OOD: same: " in text and "no eval_after.jsonl" not in text  # same has no OOD grades: said so
    # the runs' table: a group's cells are means over its seeds
    first = next(line.split() for line in text.splitlines() if line.startswith("base "))
    assert first[:4] == ["base", "grpo", "2", "2"] and "37.5%" in first  # run, preset, seeds, steps
    page = (out / "compare.html").read_text()
    assert "beyond seed noise: +56.2 points" in page and page.count("<table>") == 2
    assert page.count("<polyline") == 4 * 6  # 4 charts x 6 seeds' runs
    data = json.loads((out / "compare.json").read_text())
    assert data["base"]["seeds"] == [0, 1] and data["base"]["accuracy"]["heldout"]["mean"] == 0.375
    against = data["better"]["accuracy"]["heldout"]["against"]
    assert against["beyond"] is True and against["difference"] == better.diff and against["low"] == better.low


def test_two_single_runs_say_there_is_no_seed_spread(tmp_path, capsys):
    write_run(tmp_path / "a", 0, [0, 0, 0, 0, 0, 0, 0, 0])
    write_run(tmp_path / "b", 0, [1, 1, 1, 1, 1, 1, 1, 1])
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), f"--out={tmp_path / 'cmp'}"]) == 0
    text = capsys.readouterr().out
    assert ("held-out, b against a: beyond problem noise: +100.0 points, 95% interval [+100.0, +100.0] (paired "
            "bootstrap over 8 problems and 1 + 1 seeds; no seed spread: one run on a side, so only the problems were "
            "resampled; --seeds measures it)") in text
    row = next(line.split() for line in text.splitlines() if line.startswith("held-out") and " a " in line)
    assert row == ["held-out", "a", "1", "8", "0.0%", "-", "-"]  # no sd, no range with one seed
    data = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert data["a"]["preset"] == "grpo" and data["a"]["steps"] == 2  # a single run's entry as it always was


def test_one_group_alone_shows_its_spread(tmp_path, capsys):
    write_group(tmp_path / "g", {0: [1, 1, 0, 0, 0, 0, 0, 0], 1: [1, 1, 1, 1, 0, 0, 0, 0]})
    assert main(["compare", str(tmp_path / "g"), f"--out={tmp_path / 'cmp'}"]) == 0
    assert "held-out, g: 37.5% (sd 17.7, 25.0-50.0%, 2 seeds, 8 problems)" in capsys.readouterr().out


def test_other_problems_are_not_paired(tmp_path, capsys):
    write_run(tmp_path / "a", 0, [1, 0, 1, 0, 1, 0, 1, 0])
    write_run(tmp_path / "b", 0, [1, 1, 1, 1, 1, 1, 1, 1])
    lines = (tmp_path / "b" / "eval_after.jsonl").read_text().splitlines()
    (tmp_path / "b" / "eval_after.jsonl").write_text("\n".join(lines[:6]) + "\n")  # 6 problems, not 8
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), f"--out={tmp_path / 'cmp'}"]) == 0
    text = capsys.readouterr().out
    assert "held-out: b against a: not compared, evaluated on other held-out problems (6 and 8" in text
    assert "against a: beyond" not in text and "against a: within" not in text


def test_a_run_without_its_final_evaluation_is_named(tmp_path, capsys):
    write_run(tmp_path / "a", 0, [1, 0, 1, 0, 1, 0, 1, 0])
    write_run(tmp_path / "b", 0, [1, 1, 1, 1, 1, 1, 1, 1])
    (tmp_path / "b" / "eval_after.jsonl").unlink()
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), f"--out={tmp_path / 'cmp'}"]) == 0
    assert (f"held-out: b: {tmp_path / 'b'}: no eval_after.jsonl (a run with eval.after=false, or stopped before its "
            "end)") in capsys.readouterr().out


def test_an_unfinished_seed_of_a_group_is_named(tmp_path, capsys):
    write_group(tmp_path / "g", {0: [1] * 8, 1: [0] * 8})
    (tmp_path / "g" / "seed-1" / "summary.json").unlink()
    assert main(["compare", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert f"seed 1 of the group {tmp_path / 'g'} has not finished" in err
    assert f"rlvr train --resume {tmp_path / 'g'}" in err
    (tmp_path / "g" / "group.json").write_text('{"kind": "something else"}')
    with pytest.raises(Exception, match="not a seed group's file"):
        load(tmp_path / "g")
