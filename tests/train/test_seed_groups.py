"""rlvr train --seeds before any seed runs: the list read, and what cannot go with it refused with nothing written.
(Real groups, their runs and rlvr compare of them: tests/e2e/test_seeds.py.)"""
import json
from pathlib import Path

import pytest

from rlvr.cli import main
from rlvr.errors import RlvrError
from rlvr.train.seeds import parse_seeds

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")


@pytest.mark.parametrize("text, seeds", [("0,1,2", [0, 1, 2]), ("0-4", [0, 1, 2, 3, 4]), ("7", [7]),
                                         ("3, 5-6", [3, 5, 6])])
def test_seed_lists(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text, message", [("a", "'a' is not a seed"), ("1,,2", "'' is not a seed"),
                                           ("-1", "'-1' is not a seed"), ("4-2", "'4-2' is an empty range"),
                                           ("1,2,1", "seed 1 is given twice")])
def test_bad_seed_lists_are_named(text, message):
    with pytest.raises(RlvrError, match=message):
        parse_seeds(text)


def test_what_cannot_go_with_seeds_is_refused(tmp_path, capsys):
    out = tmp_path / "g"
    assert main(["train", SMOKE, "--seeds", "0,1", "--train.seed=3", f"--train.out={out}"]) == 2
    assert "give --seeds 0,1 or --train.seed=3, not both" in capsys.readouterr().err
    assert main(["train", SMOKE, "--keep-weights", f"--train.out={out}"]) == 2
    assert "--keep-weights goes with --seeds" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--seeds", "0"]) == 2
    assert "give no --seeds" in capsys.readouterr().err
    assert not out.exists()


def test_a_group_folder_that_holds_files_is_refused_before_any_seed_runs(tmp_path, capsys):
    out = tmp_path / "g"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["train", SMOKE, "--seeds", "0,1", f"--train.out={out}"]) == 2
    assert f"{out} already holds files (notes.txt)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_group_resumes_as_it_was_started(tmp_path, capsys):
    out = tmp_path / "g"
    out.mkdir()
    (out / "group.json").write_text(json.dumps({"kind": "rlvr seed group", "config": SMOKE, "overrides": [],
                                                "seeds": [0], "runs": {"0": "seed-0"}, "keep_weights": False}))
    assert main(["train", "--resume", str(out), "--train.steps=8"]) == 2
    assert f"--resume {out} continues a seed group as it was started, with no overrides" in capsys.readouterr().err
    (out / "group.json").write_text(json.dumps({"kind": "rlvr seed group", "seeds": ["zero"]}))
    assert main(["train", "--resume", str(out)]) == 2
    assert "not a seed group's file" in capsys.readouterr().err
