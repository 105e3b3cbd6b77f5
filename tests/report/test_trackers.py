"""Trackers (rlvr/report/trackers.py) as rlvr train starts them: one that cannot start is refused in one line
with the fix, before the run directory is written, and the directory is left as it was."""
import sys
import textwrap
from pathlib import Path

from rlvr.cli import main

SMOKE = str(Path(__file__).resolve().parents[2] / "configs" / "smoke.yaml")
QUICK = ["--train.steps=1", "--eval.before=false", "--eval.after=false", "--task.heldout_size=2", "--task.ood_size=0"]


def test_wandb_without_an_api_key_is_refused_with_the_fix_and_the_run_directory_untouched(tmp_path, monkeypatch,
                                                                                            capsys):
    """wandb installed without an API key raises UsageError at init (wandb 0.30: "No API key configured. Use
    `wandb login` to log in."), having made its folder in the run directory. The venv has no wandb: a package
    of that name whose init does what wandb's does stands in for it on sys.path."""
    package = tmp_path / "site" / "wandb"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent('''
        import os

        class UsageError(Exception):
            pass

        def init(project=None, config=None, dir=None):
            os.makedirs(os.path.join(dir, "wandb"), exist_ok=True)
            open(os.path.join(dir, "wandb", "debug.log"), "w").close()
            raise UsageError("No API key configured. Use `wandb login` to log in.")
    '''))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "wandb", raising=False)
    out = tmp_path / "run"
    assert main(["train", SMOKE, f"--train.out={out}", "--log.trackers=[wandb]", *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"rlvr: error: log.trackers: wandb could not start (UsageError: No API key configured. Use "
                       f"`wandb login` to log in.): set WANDB_API_KEY (or run `wandb login`), or log offline with "
                       f"WANDB_MODE=offline (`wandb sync` uploads it later), or leave wandb out of log.trackers; "
                       f"nothing in {out} was changed")
    assert not out.exists()  # no config.yaml left behind: the same command runs again once the key is set
    monkeypatch.delitem(sys.modules, "wandb", raising=False)


def test_a_tracker_that_cannot_start_leaves_an_earlier_run_as_it_was(tmp_path, capsys):
    """TensorBoard's writer cannot make its folder where a file of that name is: with train.overwrite the
    earlier run's records would have been cleared first; they are all still there, byte for byte."""
    out = tmp_path / "run"
    out.mkdir()
    earlier = {"config.yaml": "model: {name: tiny-random}\n", "metrics.jsonl": '{"step": 1}\n', "tensorboard": "x"}
    for name, text in earlier.items():
        (out / name).write_text(text)
    assert main(["train", SMOKE, f"--train.out={out}", "--log.trackers=[tensorboard]", "--train.overwrite=true",
                 *QUICK]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rlvr: error: log.trackers: tensorboard could not start (FileExistsError: ") and err.endswith(
        f"make the run directory writable, or leave tensorboard out of log.trackers; nothing in {out} was changed")
    assert {p.name: p.read_text() for p in out.iterdir()} == earlier
