"""The command line: a command's own flags in both spellings, dotted config overrides, help text."""
import json
from pathlib import Path

import pytest
import yaml

import rlvr.cli as cli
from rlvr.cli import main
from rlvr.config import build_config, to_yaml

SMOKE = str(Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml")


def both(flag, value):
    """The two spellings of an option with a value: ['--flag=value'] and ['--flag', 'value']."""
    return [[f"{flag}={value}"], [flag, str(value)]]


def test_no_command_flag_has_a_dot():  # a dotted --key=value is always a config override
    for name, make in cli.PARSERS.items():
        flags = [s for action in make()._actions for s in action.option_strings]
        assert flags and not [s for s in flags if "." in s], name


@pytest.fixture
def captured_train(monkeypatch):
    import rlvr.train.grpo

    calls = []
    monkeypatch.setattr(rlvr.train.grpo, "train", lambda cfg, resume=False: calls.append((cfg, resume)))
    return calls


@pytest.mark.parametrize("spelling", [0, 1])
def test_train_resume_both_spellings(tmp_path, captured_train, spelling):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(build_config(SMOKE, ["--train.steps=3"])))
    assert main(["train", *both("--resume", run)[spelling], "--train.steps=5"]) == 0
    (cfg, resume), = captured_train
    assert resume and cfg.train.out == str(run) and cfg.train.steps == 5 and cfg.model.name == "tiny-random"


@pytest.mark.parametrize("spelling", [0, 1])
def test_train_resume_without_a_run_directory(tmp_path, captured_train, capsys, spelling):
    assert main(["train", *both("--resume", tmp_path)[spelling]]) == 2
    err = capsys.readouterr().err
    assert f"--resume {tmp_path}: no config.yaml there" in err and "unknown config key" not in err
    assert captured_train == []


def test_train_without_config_keeps_the_presets_knobs(captured_train):
    assert main(["train", "--algo.preset=rloo"]) == 0  # configs/demo.yaml pins beta 0.0 for grpo only
    (cfg, resume), = captured_train
    assert (cfg.algo.beta, cfg.algo.kl_in, resume) == (0.05, "reward", False)


def test_unknown_flag_names_the_config_key(capsys):
    assert main(["train", SMOKE, "--steps=40"]) == 2
    assert "--steps=40" in capsys.readouterr().err
    assert main(["train", SMOKE, "--algo.preset", "rloo"]) == 2
    assert "--algo.preset=VALUE" in capsys.readouterr().err


@pytest.mark.parametrize("command, first", [("train", "--algo.beta=0.04"), ("sft", "--optimizer.lr=2e-05")])
def test_help_prints_defaults_after_the_preset(capsys, command, first):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert first in out and "--algo.beta=0.0\n" not in out


@pytest.mark.parametrize("spelling", [0, 1])
def test_audit_n_both_spellings(monkeypatch, spelling):
    import rlvr.rewards.audit as audit

    seen = []
    monkeypatch.setattr(audit, "audit", lambda splits, rewards, n: seen.append(n) or audit.AuditReport())
    assert main(["audit", SMOKE, *both("--n", 2)[spelling], "--task.heldout_size=4"]) == 0
    assert seen == [2]


@pytest.mark.parametrize("spelling", [0, 1])
def test_compare_out_both_spellings(tmp_path, monkeypatch, spelling):
    import rlvr.report.compare as compare

    written = []
    monkeypatch.setattr(compare, "load", lambda path, name=None: path)
    monkeypatch.setattr(compare, "table", lambda runs: "table")
    monkeypatch.setattr(compare, "write_comparison", lambda runs, out: written.append((runs, out)) or "page")
    assert main(["compare", str(tmp_path), *both("--out", tmp_path / "cmp")[spelling]]) == 0
    assert written == [([tmp_path], str(tmp_path / "cmp"))]


@pytest.mark.parametrize("spelling", [0, 1])
def test_eval_flags_both_spellings(tmp_path, spelling):
    flags = {"--model": "tiny-random", "--task": "arithmetic", "--split": "ood", "--n": 2, "--k": 2,
             "--samples": 3, "--temperature": 0.5, "--max-new-tokens": 4, "--batch-size": 2, "--seed": 1,
             "--out": tmp_path, "--baseline": "tiny-random"}
    argv = [a for flag, value in flags.items() for a in both(flag, value)[spelling]]
    assert main(["eval", *argv, "--task.ood_params.operands=3"]) == 0
    doc = json.loads((tmp_path / "eval.json").read_text())
    assert {k: doc[k] for k in ("model", "split", "k", "samples", "temperature", "max_new_tokens", "seed", "n")} \
        == {"model": "tiny-random", "split": "ood", "k": 2, "samples": 3, "temperature": 0.5, "max_new_tokens": 4,
            "seed": 1, "n": 2}
    assert list(doc["per_difficulty"]) == ["d2-n3"] and "baseline" in doc["tasks"]["arithmetic"]
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(len(r["sampled"]) == 3 for r in rows)


def test_report_takes_no_overrides(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--train.steps=3"]) == 2
    assert "rlvr report takes no config overrides" in capsys.readouterr().err


def test_written_config_round_trips(tmp_path):  # what --resume reads back
    cfg = build_config(SMOKE, ["--algo.preset=dapo"])
    p = tmp_path / "config.yaml"
    p.write_text(to_yaml(cfg))
    assert yaml.safe_load(p.read_text())["algo"]["preset"] == "dapo" and build_config(p) == cfg


def test_train_help_shows_the_defaults_and_what_a_config_less_run_takes_from_the_demo(capsys):
    from rlvr.cli import DEMO_CONFIG, default_config

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "  --rollout.max_new_tokens=256   [demo.yaml: 24]\n" in out
    assert "  --task.name='arithmetic'   [demo.yaml: 'reasoning_gym:chain_sum']\n" in out
    assert "  --task.few_shot=0   [demo.yaml: 1]\n" in out and "  --algo.beta=0.04   [demo.yaml: 0.0]\n" in out
    assert "  --optimizer.lr=2e-05\n" in out  # the same in both: no bracket
    assert default_config([]) == DEMO_CONFIG and default_config(["--train.steps=3"]) == DEMO_CONFIG
    assert default_config(["--task.name=mine.jsonl"]) is None  # the user's own task starts from the defaults


def test_help_and_commands_that_read_runs_load_neither_torch_nor_transformers(tmp_path):
    """`rlvr --help`, `rlvr report` and `rlvr compare` of run directories start in well under a second: the
    CLI imports the config (which loads torch) only for a command that reads one, and reading a run's
    records needs no model code (torch and transformers were about 7 s of each such start)."""
    import subprocess
    import sys

    code = ("import sys\nfrom rlvr.cli import main\n"
            "codes = [main(['--help']), main(['report', sys.argv[1] + '/missing']), main(['compare', sys.argv[1]])]\n"
            "print(codes, sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "[0, 2, 2] []"  # --help, then two refusals that read the directory
    assert "is not a run directory" in done.stderr


def test_the_rlvr_script_loads_a_reward_module_from_the_working_directory(tmp_path):
    """`rlvr audit --rewards.weights={'my_rewards:accuracy': 1}` in the folder holding my_rewards.py, through
    the `rlvr` script pip writes (whose sys.path has its bin folder, not the working directory, unlike
    `python -m rlvr`): the module loads, as the README's `my_rewards:accuracy` and `--env.name=guess:Guess`
    say; it said "No module named 'my_rewards'"."""
    import os
    import subprocess
    import sys

    (tmp_path / "bin").mkdir()
    (tmp_path / "work").mkdir()
    script = tmp_path / "bin" / "rlvr"  # what pip writes for [project.scripts] rlvr = "rlvr.cli:main"
    script.write_text("import sys\nfrom rlvr.cli import main\nif __name__ == '__main__':\n    sys.exit(main())\n")
    (tmp_path / "work" / "my_rewards.py").write_text(
        "def accuracy(completions, answer, **kwargs):\n"
        "    return [float(c.strip() == f'Answer: {a}') for c, a in zip(completions, answer)]\n")
    (tmp_path / "work" / "data.jsonl").write_text(
        "".join(json.dumps({"prompt": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n" for i in range(10)))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, str(script), "audit", "--task.name=data.jsonl", "--task.heldout_size=2",
                           "--n=3", "--rewards.weights={'my_rewards:accuracy': 1.0}"],
                          cwd=tmp_path / "work", env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "control (mean score of the reference solutions): my_rewards:accuracy 1\n" in done.stdout


def test_rlvr_help_lists_every_command_on_stdout(capsys):
    """`rlvr --help` is a newcomer's first command: every command with what it does, on stdout (a pager or
    grep sees it), exit 0; no command or a misspelt one is a usage error on stderr naming the nearest."""
    assert main(["--help"]) == 0
    out, err = capsys.readouterr()
    listed = [line.split()[0] for line in out.split("commands:\n")[1].splitlines()]
    assert sorted(listed) == sorted(cli.COMMANDS) and err == ""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Command line\n\n```\n")[1].split("```")[0]
    assert sorted({line.split()[1] for line in block.splitlines()}) == sorted(cli.COMMANDS)
    assert main([]) == 2 and "commands:" in capsys.readouterr().err
    assert main(["trian"]) == 2
    assert "unknown command 'trian'; did you mean 'train'?" in capsys.readouterr().err
    # rlvr audit exits 1 for a weak, an unjudged and a raising reward (cmd_audit), and its help says all three
    assert "weak (pays an attack), cannot be judged" in " ".join(cli.audit_parser().description.split())


def test_the_readme_command_lines_flags_are_the_commands_own():
    """Each line of the README's command-line block uses only flags its command's parser has (a --section.key
    is a config override, which every command that reads a config takes)."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Command line\n\n```\n")[1].split("```")[0]
    for line in block.splitlines():
        command = line.split()[1]
        own = {s for action in cli.PARSERS[command]()._actions for s in action.option_strings}
        flags = {f for f in re.findall(r"(?<![\w-])(--[a-z][\w-]*)(?![\w.])", line.split("#")[0])}
        assert flags <= own, (line, flags - own)


def test_other_trainers_command_line_habits_get_the_rlvr_spelling(capsys):
    """verl is run Hydra's way (key=value, no dashes; +key=value), TRL with --config FILE: each is refused
    with the rlvr spelling (the config file positional, --section.key=value, the rlvr key a verl name means)."""
    def error(argv):
        assert main(argv) == 2
        return capsys.readouterr().err

    assert ("unrecognised arguments: rollout.group_size=8; did you mean --rollout.group_size=8?"
            in error(["train", "rollout.group_size=8"]))  # not 'config file not found: rollout.group_size=8'
    assert ("unrecognised arguments: actor_rollout_ref.rollout.n=8 +data.max_prompt_length=512; did you mean "
            "--rollout.group_size=... (verl's 'rollout.n' is rlvr's 'rollout.group_size')?; TRL and verl's "
            "'max_prompt_length' has no rlvr key" in error(["train", SMOKE, "actor_rollout_ref.rollout.n=8",
                                                            "+data.max_prompt_length=512"]))
    assert ("unrecognised arguments: --config; did you mean rlvr train FILE.yaml (the config file is the first "
            "argument, not a flag)?" in error(["train", "--config", SMOKE]))
    assert "did you mean rlvr eval FILE.yaml" in error(["eval", "--config-name=ppo_trainer"])
    assert ("rlvr compare: unrecognised arguments: rollout.group_size=4; did you mean --rollout.group_size=4?"
            in error(["compare", SMOKE, "rollout.group_size=4"]))


def test_rlvr_version_is_the_packages(capsys):
    import re

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    version = re.search(r'^version = "(.+)"$', pyproject, re.M).group(1)
    assert main(["--version"]) == 0 and capsys.readouterr().out == f"rlvr {version}\n"
