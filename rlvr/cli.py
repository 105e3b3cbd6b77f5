"""Command line: rlvr train [CONFIG.yaml] [--section.key=value ...]."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlvr.config import build_config, describe
from rlvr.errors import RlvrError

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo.yaml"


def _split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    overrides = [a for a in argv if a.startswith("--") and "=" in a]
    rest = [a for a in argv if a not in overrides]
    return rest, overrides


def cmd_train(argv: list[str]) -> int:
    rest, overrides = _split_args(argv)
    parser = argparse.ArgumentParser(
        prog="rlvr train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train with GRPO. Any config key can be overridden as --section.key=value.",
        epilog="config keys (default):\n" + "\n".join(
            f"  --{k}={d}\n      {doc}" for k, d, doc in describe()))
    parser.add_argument("config", nargs="?", help="YAML config (default: configs/demo.yaml)")
    args = parser.parse_args(rest)
    path = args.config
    if path is None and DEMO_CONFIG.is_file():
        path = DEMO_CONFIG
    cfg = build_config(path, overrides)
    from rlvr.train.grpo import train  # heavy imports only once the config is known to be good

    train(cfg)
    return 0


def cmd_audit(argv: list[str]) -> int:
    rest, overrides = _split_args(argv)
    parser = argparse.ArgumentParser(
        prog="rlvr audit", description="Scan a task for leaks and run reward hacks against its rewards. "
        "Exits 1 when a reward function is weak.")
    parser.add_argument("config", nargs="?", help="YAML config (default: configs/demo.yaml)")
    parser.add_argument("--n", type=int, default=20, help="problems to attack (default 20)")
    args = parser.parse_args(rest)
    cfg = build_config(args.config or (DEMO_CONFIG if DEMO_CONFIG.is_file() else None), overrides)
    from rlvr.rewards import build_rewards
    from rlvr.rewards.audit import audit, format_report
    from rlvr.tasks import build_splits

    rewards = build_rewards(cfg.rewards.weights, cfg.rollout.max_new_tokens, cfg.rewards.overlong_buffer,
                            cfg.rewards.overlong_penalty)
    report = audit(build_splits(cfg.task), rewards, args.n)
    print(format_report(report))
    return 1 if report.weak else 0


def cmd_compare(argv: list[str]) -> int:
    rest, overrides = _split_args(argv)
    rest += [a for a in overrides if a.startswith("--out=")]
    overrides = [a for a in overrides if not a.startswith("--out=")]
    parser = argparse.ArgumentParser(
        prog="rlvr compare", description="Run each config (or read existing run directories) and write a "
        "table and plots of reward and held-out accuracy against step and training time. "
        "--section.key=value overrides apply to every config that is run.")
    parser.add_argument("runs", nargs="+", help="YAML configs to run, or run directories to read")
    parser.add_argument("--out", default="runs/compare", help="where runs and compare.html go")
    args = parser.parse_args(rest)
    from rlvr.report.compare import load_run, table, write_comparison

    loaded = []
    for item in args.runs:
        path = Path(item)
        if path.is_dir():
            loaded.append(load_run(path))
            continue
        name = path.stem
        cfg = build_config(path, [*overrides, f"--train.out={Path(args.out) / name}"])
        from rlvr.train.grpo import train

        print(f"== {name}: algo.preset={cfg.algo.preset}", file=sys.stderr)
        train(cfg)
        loaded.append(load_run(cfg.train.out, name))
    page = write_comparison(loaded, args.out)
    print(table(loaded))
    print(f"wrote {page}")
    return 0


def cmd_report(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="rlvr report", description="Write RUN_DIR/report.html.")
    parser.add_argument("run_dir")
    args = parser.parse_args(argv)
    from rlvr.report.html import write_report

    print(write_report(args.run_dir))
    return 0


COMMANDS = {"train": cmd_train, "audit": cmd_audit, "compare": cmd_compare, "report": cmd_report}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        if argv and argv[0] not in ("-h", "--help"):
            print(f"rlvr: unknown command '{argv[0]}'", file=sys.stderr)
        print("usage: rlvr {" + ",".join(COMMANDS) + "} ...   (rlvr train --help lists config keys)",
              file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except RlvrError as e:
        print(f"rlvr: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlvr: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
