"""Command line: rlvr train [CONFIG.yaml] [--section.key=value ...], and audit, compare, report, eval, sft, tasks, plan.

Each command's parser and what it runs; how every command's arguments are read (config overrides apart from
the command's own) is rlvr/cli_args.py's."""
from __future__ import annotations

import argparse
import difflib
import os
import sys
import threading
import traceback
from pathlib import Path

from rlvr.cli_args import HelpParser, build_config, keys_epilog, parse
from rlvr.errors import ExitCalled, RlvrError

DEMO_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "demo.yaml"


def default_config(overrides: list[str], demo: Path = DEMO_CONFIG) -> Path | None:
    """The config of a command given none: the demo's (rlvr sft: configs/sft.yaml), unless --task.name names
    the user's own task, which then starts from the defaults (the demo's 24-token answers, held-out size
    and worked example belong to the demo's task)."""
    own_task = any(o.startswith("--task.name=") for o in overrides)
    return demo if demo.is_file() and not own_task else None

def train_parser() -> argparse.ArgumentParser:
    parser = HelpParser(
        prog="rlvr train", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train with GRPO. Any config key can be overridden as --section.key=value. "
        "A config file's algo keys belong to its preset: --algo.preset=X with another preset replaces the "
        "file's values for the keys X sets.",
        epilog_of=lambda: keys_epilog("config keys (the default, with the grpo preset applied: what a CONFIG "
                                       "file or --task.name without a CONFIG starts from; [demo.yaml: value]: what "
                                       "`rlvr train` with neither runs instead)", beside=DEMO_CONFIG))
    parser.add_argument("config", nargs="?", help="YAML config (default: configs/demo.yaml, or with --task.name "
                        "the defaults below)")
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue RUN_DIR from its newest checkpoint, "
                        "with its config.yaml (overrides still apply, e.g. --train.steps=40 to go further); a "
                        "seed group's folder (--seeds): its seeds that did not finish")
    parser.add_argument("--seeds", metavar="LIST", help="run the config once per seed (train.seed), e.g. 0,1,2 or "
                        "0-4, each in a process of its own, into train.out/seed-N with train.out/group.json; "
                        "`rlvr compare` then tells a change from seed noise")
    parser.add_argument("--keep-weights", action="store_true", help="with --seeds: keep each seed's checkpoints/ "
                        "and final/ (by default a finished seed keeps its records only; the same command with "
                        "--train.seed=N makes its weights again)")
    return parser


def train_seeds(path: Path | None, overrides: list[str], seeds_text: str, keep_weights: bool) -> int:
    """rlvr train --seeds: rlvr/train/seeds.py runs the group, each seed as a process of its own."""
    from rlvr.train.seeds import parse_seeds, run_group

    seeds = parse_seeds(seeds_text)
    given = [o for o in overrides if o.startswith("--train.seed=")]
    if given:
        raise RlvrError(f"give --seeds {seeds_text} or {given[0]}, not both: --seeds sets train.seed of each run")
    cfg = build_config(path, overrides)  # checked once here, before any seed starts
    from rlvr.train.rundir import check_run_dir

    out = Path(cfg.train.out)
    check_run_dir(out, cfg.train.overwrite)
    config = str(Path(path).resolve()) if path is not None else None
    return run_group(config, overrides, seeds, out, keep_weights=keep_weights)


def resume_seeds(group: Path, overrides: list[str]) -> int:
    from rlvr.report.group import read_group
    from rlvr.train.seeds import run_group

    if overrides:
        raise RlvrError(f"--resume {group} continues a seed group as it was started, with no overrides; extend one "
                        f"seed's run with rlvr train --resume {group}/seed-N {' '.join(overrides)}")
    g = read_group(group)
    return run_group(g["config"], g["overrides"], g["seeds"], group, keep_weights=bool(g.get("keep_weights")),
                     cwd=g.get("cwd"), resume=True)


def cmd_train(argv: list[str]) -> int:
    args, overrides = parse(train_parser(), argv)
    path = args.config
    if args.keep_weights and not args.seeds:
        raise RlvrError("--keep-weights goes with --seeds (a single run keeps its weights)")
    if args.resume:
        from rlvr.report.group import is_group

        if path is not None:
            raise RlvrError("give either a config or --resume RUN_DIR, not both")
        if args.seeds:
            raise RlvrError(f"--resume {args.resume} continues the seeds it was started with; give no --seeds")
        if is_group(Path(args.resume)):
            return resume_seeds(Path(args.resume), overrides)
        path = Path(args.resume) / "config.yaml"
        if not path.is_file():
            raise RlvrError(f"--resume {args.resume}: no config.yaml there; give a run directory that "
                            "rlvr train wrote")
        overrides = [*overrides, f"--train.out={args.resume}"]
    elif path is None:
        path = default_config(overrides)
    if args.seeds:
        return train_seeds(path, overrides, args.seeds, args.keep_weights)
    cfg = build_config(path, overrides)
    from rlvr.train.grpo import train  # heavy imports only once the config is known to be good

    train(cfg, resume=bool(args.resume))
    return 0


def audit_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr audit", description="Scan a task for leaks and run reward hacks against its rewards. "
        "Exits 1 when a reward function is weak (pays an attack), cannot be judged (it pays no reference solution, "
        "or no sandbox can start) or raises.")
    parser.add_argument("config", nargs="?", help="YAML config (default: configs/demo.yaml, or with "
                        "--task.name the defaults)")
    parser.add_argument("--n", type=int, default=20, help="problems to attack (default 20)")
    return parser


def cmd_audit(argv: list[str]) -> int:
    args, overrides = parse(audit_parser(), argv)
    cfg = build_config(args.config or default_config(overrides), overrides)
    from rlvr.report.console import terminal_safe
    from rlvr.rewards import rewards_of
    from rlvr.rewards.audit import audit, format_report
    from rlvr.tasks import build_splits

    from rlvr.rewards.preflight import check_gold_answers

    splits, rewards = build_splits(cfg.task), rewards_of(cfg.rewards, cfg.rollout.max_new_tokens)  # the rewards training optimises
    for warning in check_gold_answers(rewards, splits, cfg.task.columns):  # as rlvr train stops, with the same error
        print(f"task: {warning}")
    report = audit(splits, rewards, args.n)
    print(terminal_safe(format_report(report)))  # it quotes the dataset's prompts and tests
    return 1 if report.weak or report.unjudged or report.errors else 0


def compare_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr compare", description="Run each config (or read existing run directories) and write a "
        "table and plots of reward and held-out accuracy against step and training time. "
        "--section.key=value overrides apply to every config that is run.")
    parser.add_argument("runs", nargs="+", help="YAML configs to run, or run directories or seed groups "
                        "(rlvr train --seeds) to read; each is compared with the first")
    parser.add_argument("--out", default="runs/compare", help="where runs and compare.html go")
    parser.add_argument("--seeds", metavar="LIST", help="run each config once per seed, as rlvr train --seeds "
                        "(e.g. 0,1,2): the accuracies then carry their seed spread")
    return parser


def cmd_compare(argv: list[str]) -> int:
    args, overrides = parse(compare_parser(), argv)
    from rlvr.report.compare import load, table, write_comparison

    loaded = []
    for item in args.runs:
        path = Path(item)
        if path.is_dir():
            loaded.append(load(path))
            continue
        name = path.stem
        runs = [*overrides, f"--train.out={Path(args.out) / name}"]
        if args.seeds:
            print(f"== {name}: seeds {args.seeds}", file=sys.stderr)
            code = train_seeds(path, runs, args.seeds, keep_weights=False)
            if code:
                return code
            loaded.append(load(Path(args.out) / name, name))
            continue
        cfg = build_config(path, runs)
        from rlvr.train.grpo import train

        print(f"== {name}: algo.preset={cfg.algo.preset}", file=sys.stderr)
        train(cfg)
        loaded.append(load(cfg.train.out, name))
    page = write_comparison(loaded, args.out)
    print(table(loaded))
    print(f"wrote {page}")
    return 0


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr report", description="Write RUN_DIR/report.html.")
    parser.add_argument("run_dir")
    return parser


def cmd_report(argv: list[str]) -> int:
    args, overrides = parse(report_parser(), argv)
    if overrides:
        raise RlvrError(f"rlvr report takes no config overrides, got {' '.join(overrides)}")
    from rlvr.report.html import write_report

    print(write_report(args.run_dir))
    return 0


def eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr eval", description="Greedy pass@1, pass@k (unbiased estimator of Chen et al. 2021) and "
        "maj@k (majority vote of k sampled answers) per task and difficulty; writes OUT/eval.json and "
        "OUT/samples.jsonl. Task settings come from CONFIG and --section.key=value overrides.")
    parser.add_argument("config", nargs="?", help="YAML config, e.g. RUN_DIR/config.yaml (default: none)")
    parser.add_argument("--model", help="built-in name, Hub name or model directory, e.g. runs/demo/final, "
                        "a LoRA run's runs/demo/final/adapter (loaded on its base as it was trained on), "
                        "or a run's checkpoint, runs/demo/checkpoints/step_000010.pt (default: model.name)")
    parser.add_argument("--task", action="append", help="task name (default: task.name); give several "
                        "for a transfer table")
    parser.add_argument("--split", default="heldout", choices=("train", "heldout", "ood"))
    parser.add_argument("--n", type=int, help="evaluate only the first N problems of the split")
    parser.add_argument("--k", type=int, default=4, help="k of pass@k and maj@k (default 4)")
    parser.add_argument("--samples", type=int, help="sampled completions per problem, >= k (default: k)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default 1.0)")
    parser.add_argument("--max-new-tokens", type=int, help="default: eval.max_new_tokens")
    parser.add_argument("--batch-size", type=int, help="problems per generation batch (default: eval.batch_size)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--out", default="runs/eval", help="where eval.json goes (default runs/eval)")
    parser.add_argument("--baseline", metavar="MODEL", help="also evaluate MODEL (e.g. the base model) as the "
                        "model is evaluated, on the same problems with the same samples and seed: its pass@1, "
                        "pass@k and maj@k beside the model's with the change, and which problems the model fixed "
                        "and broke against it. Each model loads as it was saved (a run's final/ as its "
                        "rlvr_model.json says, another in model.dtype), unquantised unless --model.quantize=nf4 "
                        "is given here")
    return parser


def cmd_eval(argv: list[str]) -> int:
    args, overrides = parse(eval_parser(), argv)  # --task=NAME is this command's; --task.params.digits=2 a config key
    # --model.quantize here is how to evaluate, not a run's base: kept from the config's checks for training
    # (nf4 trains LoRA adapters only), and asked of every model evaluated
    quantize = [o.split("=", 1)[1].strip("'\"") for o in overrides if o.startswith("--model.quantize=")]
    cfg = build_config(args.config, [o for o in overrides if not o.startswith("--model.quantize=")])
    if quantize and quantize[-1] not in ("none", "nf4"):
        raise RlvrError(f"--model.quantize={quantize[-1]}: one of none, nf4")
    from rlvr.eval.sampled import SampleSettings
    from rlvr.eval.suite import run_eval

    given = lambda value, default: default if value is None else value
    s = SampleSettings(k=args.k, samples=given(args.samples, args.k), temperature=args.temperature,
                       max_new_tokens=given(args.max_new_tokens, cfg.eval.max_new_tokens),
                       batch_size=given(args.batch_size, cfg.eval.batch_size), seed=args.seed)
    s.check()
    asked = {"dtype": cfg.model.dtype} if any(o.startswith("--model.dtype=") for o in overrides) else {}
    if quantize:
        asked["quantize"] = quantize[-1]
    path = run_eval(cfg, args.model or cfg.model.name, args.task or [cfg.task.name], args.split, args.n, s,
                    args.out, args.baseline, asked)
    print(f"wrote {path}")
    return 0


def plan_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr plan", description="The peak memory of an rlvr train run's rollout and update (not of rlvr sft's), by component (weights, "
        "gradients, optimizer state, activations, logits, KV cache), from the model's config alone: no weights "
        "are read. model.name may be a local model directory, a Hub name whose config.json is in the Hugging Face "
        "cache (`hf download ORG/NAME config.json` fetches it alone), a built-in, or a shipped shape, named "
        "alone or as the random:SHAPE a run trains (llama-3.1-8b, qwen2.5-32b, qwen3-1.7b, smollm2-135m); "
        "mixture-of-experts models are refused. With "
        "--memory it says whether the run fits and which settings would make it fit (exit 1 when it does not).")
    parser.add_argument("config", nargs="?", help="YAML config (default: configs/demo.yaml, or with --task.name "
                        "the defaults)")
    parser.add_argument("--memory", help="the card's memory, e.g. 24GiB or 80GB")
    parser.add_argument("--device", choices=("cuda", "cpu"), help="plan for this device (default: train.device; "
                        "auto is cuda where torch sees a GPU or --memory is given, else cpu)")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="longest prompt in tokens (default 128)")
    return parser


def cmd_plan(argv: list[str]) -> int:
    args, overrides = parse(plan_parser(), argv)
    cfg = build_config(args.config or default_config(overrides), overrides)
    from rlvr.plan import plan_of, parse_size, report, unplanned

    budget = parse_size(args.memory) if args.memory else None
    device = args.device or plan_device(cfg.train.device, budget is not None)
    plan = plan_of(cfg, device, args.prompt_tokens)
    print(report(plan, budget) + unplanned(cfg, device))
    return 1 if budget is not None and plan.peak > budget else 0


def plan_device(spec: str, for_a_card: bool) -> str:
    """train.device as rlvr plan reads it: cuda or cpu."""
    if spec.startswith("cuda") or spec == "cpu":
        return "cpu" if spec == "cpu" else "cuda"
    import torch

    return "cuda" if for_a_card or torch.cuda.is_available() else "cpu"


SFT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "sft.yaml"


def sft_parser() -> argparse.ArgumentParser:
    from rlvr.train.sft import reads

    parser = HelpParser(
        prog="rlvr sft", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Supervised fine-tuning on the task's worked solutions (train problems with a "
        "non-empty solution): cross-entropy on the solution tokens only. Start GRPO from the result with "
        "rlvr train --model.name=RUN_DIR/final (the end of the run prints the command). The keys below are used, "
        "with sft.batch_size as the examples per step and optimizer.micro_batch_prompts as the examples per "
        "forward pass; other keys are accepted and ignored.",
        epilog_of=lambda: keys_epilog("config keys used (the default: what a CONFIG file or --task.name without "
                                       "a CONFIG starts from, as for rlvr train; [sft.yaml: value]: what `rlvr sft` "
                                       "with neither runs instead)", reads, beside=SFT_CONFIG))
    parser.add_argument("config", nargs="?", help="YAML config (default: configs/sft.yaml, or with --task.name "
                        "the defaults below)")
    return parser


# What a GRPO run started from an SFT model keeps of the SFT command line: the task and how it is prompted
# and graded (the SFT run's own steps, optimizer and run directory are its own).
SAME_TASK = ("--task.", "--eval.", "--rewards.", "--env.", "--rollout.", "--curriculum.")


def grpo_command(path: Path | str | None, overrides: list[str], final: Path) -> str:
    """The `rlvr train` command that starts GRPO from an SFT run's final/ on the same task: the user's own
    config and task overrides; configs/sft.yaml's task is configs/arithmetic.yaml's."""
    import os
    import shlex

    if path is not None and Path(path).resolve() == SFT_CONFIG:
        arithmetic = SFT_CONFIG.parent / "arithmetic.yaml"
        path = rel if not (rel := os.path.relpath(arithmetic)).startswith("..") else arithmetic
    same = [o for o in overrides if o.startswith(SAME_TASK)]
    return shlex.join(["rlvr", "train", *([str(path)] if path is not None else []), *same, f"--model.name={final}"])


def cmd_sft(argv: list[str]) -> int:
    args, overrides = parse(sft_parser(), argv)
    path = args.config or default_config(overrides, SFT_CONFIG)  # --task.name: the defaults, as rlvr train
    cfg = build_config(path, overrides, command="sft")
    from rlvr.train.sft import sft

    sft(cfg, then=grpo_command(path, overrides, Path(cfg.train.out) / "final"))
    return 0


def tasks_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rlvr tasks", description="List the task sources task.name takes, and reasoning-gym's datasets "
        "(reasoning_gym:<name>) with their settings (task.params) and defaults.")
    parser.add_argument("match", nargs="?", default="", help="only the datasets whose name contains this")
    return parser


def cmd_tasks(argv: list[str]) -> int:
    args, _ = parse(tasks_parser(), argv)
    from rlvr.tasks import TASKS
    from rlvr.tasks.gym import PREFIX, gym_datasets

    if not args.match:
        print("task.name takes: " + ", ".join(TASKS))
    found = {n: p for n, p in gym_datasets().items() if args.match in n}
    print(f"reasoning-gym datasets ({len(found)}), as task.name={PREFIX}<name> with task.params:")
    width = max((len(n) for n in found), default=0)
    for name, params in found.items():
        print(f"  {name:{width}}  " + " ".join(f"{k}={v!r}" for k, v in params.items()))
    return 0


PARSERS = {"train": train_parser, "audit": audit_parser, "compare": compare_parser, "report": report_parser,
           "eval": eval_parser, "sft": sft_parser, "tasks": tasks_parser, "plan": plan_parser}
COMMANDS = {"train": cmd_train, "audit": cmd_audit, "compare": cmd_compare, "report": cmd_report,
            "eval": cmd_eval, "sft": cmd_sft, "tasks": cmd_tasks, "plan": cmd_plan}
# what `rlvr --help` says of each command, in the README's order: a newcomer's first look at what is here
SUMMARIES = {
    "train": "train with GRPO (or another algo.preset); no CONFIG: configs/demo.yaml; --resume RUN_DIR continues",
    "sft": "supervised fine-tuning on the task's worked solutions, a baseline and a warm start for train",
    "audit": "scan a task for leaks and run reward hacks against its rewards (exit 1: one is weak or unjudged)",
    "compare": "run configs, or read run directories and seed groups, side by side: a table, seed noise, compare.html",
    "report": "write RUN_DIR/report.html (train writes it at the end)",
    "tasks": "list the task sources and reasoning-gym's datasets with their task.params",
    "eval": "greedy pass@1, pass@k and maj@k of a model on tasks, beside a --baseline model",
    "plan": "the peak memory of a run's rollout and update, from the config alone; --memory: does it fit",
}


def usage() -> str:
    width = max(map(len, SUMMARIES))
    return ("usage: rlvr COMMAND [ARGS ...]   (rlvr COMMAND --help: its arguments; rlvr train --help: every "
            "config key; rlvr --version)\n\ncommands:\n" + "".join(f"  {name:<{width}}  {SUMMARIES[name]}\n" for name in SUMMARIES))


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. Called as the program (no `argv`: the `rlvr` script and
    `python -m rlvr`), it does not wait at exit for threads that code it loaded left running (a reward
    module's non-daemon thread would otherwise keep a finished `rlvr train` alive)."""
    if argv is not None:
        return _command(list(argv))
    working_directory_importable()
    try:
        code = _command(sys.argv[1:])
    except SystemExit as e:  # argparse's --help and usage errors
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - a bug's traceback, as the interpreter would print it
        traceback.print_exc()
        code = 1
    exit_leaving_threads(code)
    return code


def working_directory_importable() -> None:
    """`python -m rlvr` has the working directory on sys.path, the `rlvr` script only its own bin folder: a
    reward, tool or environment named `my_rewards:accuracy` after a file here loads under either. Added
    last (as an absolute path, which a reward's os.chdir does not move), so no file here shadows a package
    rlvr imports; the isolated reward worker inherits sys.path."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


def exit_leaving_threads(code: int) -> None:
    """Exit now, as interpreter shutdown would but without joining non-daemon threads, when any is left."""
    tools = sys.modules.get("rlvr.envs.tools")
    if tools is not None:  # rlvr's own tool-call pool: its idle threads are nobody's leftovers
        tools.release_idle_threads()
    left = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not left:
        return
    names = ", ".join(sorted({t.name for t in left}))
    print(f"rlvr: exiting without waiting for {len(left)} thread(s) left running by loaded code ({names})",
          file=sys.stderr)
    import atexit

    atexit._run_exitfuncs()  # what shutdown runs (trackers' handlers), then the exit it would make
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _end_progress_bars() -> None:
    """Close a progress bar an error left open, so that the error starts a line of its own."""
    tqdm = sys.modules.get("tqdm")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):
        bar.close()


def _command(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):  # asked for: to stdout, so that `rlvr --help | less` shows it
        print(usage(), end="")
        return 0
    if argv and argv[0] in ("-V", "--version"):  # what a bug report needs first
        from rlvr import __version__

        print(f"rlvr {__version__}")
        return 0
    if not argv or argv[0] not in COMMANDS:
        if argv:
            near = difflib.get_close_matches(argv[0], COMMANDS, n=1)
            print(f"rlvr: unknown command '{argv[0]}'" + (f"; did you mean '{near[0]}'?" if near else ""),
                  file=sys.stderr)
        print(usage(), end="", file=sys.stderr)
        return 2
    try:
        return COMMANDS[argv[0]](argv[1:])
    except (RlvrError, ExitCalled) as e:
        _end_progress_bars()
        print(f"rlvr: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlvr: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
