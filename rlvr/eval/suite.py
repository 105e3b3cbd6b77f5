"""`rlvr eval`: one model on one or more tasks; a console table, eval.json and samples.jsonl.

eval.json holds the settings, one entry per task under `tasks` (keyed by task name), and, for
scripts that evaluate one task, the first task's metrics again at the top level:

    {"model": M, "loaded": "a full fine-tune, saved in float32: loaded in float32, unquantised",
     "split": "heldout", "k": 4, "samples": 4, "temperature": 1.0, "max_new_tokens": 24, "seed": 0,
     "task": T1, "pass@1": .., "pass@4": .., "maj@4": .., "n": 50,
     "per_difficulty": {"d1-n2": {"pass@1": .., "pass@4": .., "maj@4": .., "n": 50}},
     "tasks": {T1: {"pass@1": .., "pass@4": .., "maj@4": .., "n": 50, "per_difficulty": {..}}, T2: ..}}

`loaded` says how M was loaded: as it was saved (rlvr.saved_model.load_as_saved), in 4 bits only where
--model.quantize asks.

Every task is graded by the run's grader (rlvr.eval.grader: eval.grader, or the user's own correctness
reward when the config's rewards have one) when it is the config's own task, by the built-in checker
otherwise; each task's entry names it under "grader". pass@1 is greedy; `format-free@1` is the same greedy completion graded format-free (rlvr.eval.lenient);
pass@k and maj@k come from the sampled completions (rlvr.eval.estimators). With `--baseline B`, each
task's entry also holds "baseline": {"model": B, "loaded", "pass@1", "format-free@1", "pass@k", "maj@k", "n",
"per_difficulty", "grader", "change", "flips", "decomposition"}: B evaluated as the model was (the same
problems, samples and seed), `change` the model's figure minus B's per metric (did RL narrow pass@k?), and
the per-problem comparison of B's greedy completions with the model's (rlvr.eval.flips); B's records go to
baseline_samples.jsonl.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from rlvr.config import EnvConfig, TaskConfig
from rlvr.envs.episodes import make_spec
from rlvr.errors import RlvrError
from rlvr.eval.flips import decompose, describe, flips
from rlvr.eval.grader import Grader
from rlvr.eval.estimators import summarize_by_difficulty
from rlvr.eval.sampled import SampleSettings, evaluate_sampled
from rlvr.tasks import build_splits

SPLITS = ("train", "heldout", "ood")


def task_problems(task: TaskConfig, split: str, n: int | None):
    """The first n problems of a split (all when n is None) and the task's few-shot turns."""
    if split not in SPLITS:
        raise RlvrError(f"unknown split '{split}': one of {', '.join(SPLITS)}")
    if n is not None and n < 1:
        raise RlvrError(f"--n must be at least 1, got {n}")
    splits = build_splits(task)
    if split == "ood" and task.ood_name:  # the table and eval.json name the task; its OOD is another one
        print(f"{task.name}: --split ood is task.ood_name={task.ood_name}", file=sys.stderr)
    for note in splits.notes:  # with several --task each note names its task, once
        print(note if note.startswith(f"{task.name}: ") else f"{task.name}: {note}", file=sys.stderr)
    problems = getattr(splits, split)[:n] if n is not None else getattr(splits, split)
    if not problems:
        raise RlvrError(f"task '{task.name}' has no {split} problems"
                        + (" (file tasks need task.ood_file or task.ood_name for ood)" if split == "ood" else ""))
    return problems, splits.few_shot


def evaluate_tasks(policy, tok, stop_ids: list[int], tasks: dict[str, TaskConfig], split: str,
                   n: int | None, s: SampleSettings, env: EnvConfig = EnvConfig(),
                   graders: dict[str, Grader] | None = None,
                   problems_of: dict[str, tuple[list, list]] | None = None) -> dict[str, tuple[dict, list[dict]]]:
    """label -> (summary with per_difficulty and its grader's name, per-problem records), in the order
    given; each problem's greedy and sampled answers are the final answers of episodes in the environment
    `env`, graded by graders[label] (the built-in checker when absent). `problems_of`: each task's
    task_problems, read already (else read here)."""
    results = {}
    for label, task in tasks.items():
        problems, few_shot = (problems_of or {}).get(label) or task_problems(task, split, n)
        grader = (graders or {}).get(label, Grader())
        context = getattr(getattr(policy, "config", None), "max_position_embeddings", None)
        records = evaluate_sampled(policy, tok, problems, make_spec(env, tok, few_shot, task.system_prompt, context), s,
                                   stop_ids, grader)
        results[label] = ({**summarize_by_difficulty(records, s.k), "grader": grader.name}, records)
    return results


def task_graders(base: TaskConfig, tasks: dict[str, TaskConfig], grader: Grader) -> dict[str, Grader]:
    """The run's grader for the config's own task; the built-in checker for any other task (a user's
    reward reads its own data's columns)."""
    return {label: grader if task.name == base.name else Grader(why="another task than the config's")
            for label, task in tasks.items()}


def task_configs(base: TaskConfig, names: list[str]) -> dict[str, TaskConfig]:
    """One task config per name, each the base config with task.name replaced; a task other than the
    base's own leaves out the base's settings (params) and OOD source (ood_name, ood_params, ood_file),
    which belong to the base task (configs/code.yaml's OOD is humaneval: `--task humaneval` must not take
    it twice; chain_sum's params are not arithmetic's)."""
    seen = set()
    for name in names:
        if name in seen:
            raise RlvrError(f"task '{name}' is given twice")
        seen.add(name)
    other = dict(params={}, ood_name="", ood_params={}, ood_file="")
    return {name: dataclasses.replace(base, name=name, **({} if name == base.name else other)) for name in names}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def format_table(summaries: dict[str, dict], k: int) -> str:
    """One row per task (the transfer table); under a task with several difficulties, one row each."""
    cols = ["pass@1"] + (["format-free@1"] if all("format-free@1" in s for s in summaries.values()) else [])
    cols = list(dict.fromkeys(cols + [f"pass@{k}", f"maj@{k}"]))  # k = 1: pass@1 once
    rows = []
    for label, summary in summaries.items():
        rows.append([label, str(summary["n"])] + [_pct(summary[c]) for c in cols])
        if len(summary["per_difficulty"]) > 1:
            for d, sub in summary["per_difficulty"].items():
                rows.append(["  " + (d or "(none)"), str(sub["n"])] + [_pct(sub[c]) for c in cols])
    header = ["task", "n"] + cols
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])


def greedy_records(records: list[dict]) -> list[dict]:
    """evaluate_sampled's records in the form rlvr.eval.flips reads (the greedy completion's grades)."""
    return [{"question": r["question"], "answer": r["answer"], "completion": r["greedy"],
             "correct": r["greedy_correct"], "lenient": r["greedy_lenient"]} for r in records]


def compare_to_baseline(policy, tok, stop_ids: list[int], model: str, tasks: dict[str, TaskConfig], split: str,
                        n: int | None, s: SampleSettings, results: dict, env: EnvConfig = EnvConfig(),
                        graders: dict[str, Grader] | None = None,
                        problems_of: dict[str, tuple[list, list]] | None = None) -> dict[str, tuple[dict, list[dict]]]:
    """label -> (the baseline model's summary, its records): evaluated as evaluate_tasks evaluated the model
    (the same problems, sampling settings and seed, graders), so its pass@1, format-free@1, pass@k and maj@k
    stand beside the model's; with `change` (the model's minus the baseline's, per metric) and the per-problem
    flips and decomposition of the greedy completions from the baseline to the model (results of evaluate_tasks)."""
    base = evaluate_tasks(policy, tok, stop_ids, tasks, split, n, s, env, graders, problems_of)
    out = {}
    for label, (summary, records) in base.items():
        ours = results[label][0]
        before, after = greedy_records(records), greedy_records(results[label][1])
        d = decompose(before, after)
        change = {m: None if summary[m] is None or ours.get(m) is None else ours[m] - summary[m]
                  for m in metric_names(s.k) if m in summary}
        out[label] = ({"model": model, **summary, "change": change, "flips": flips(before, after),
                       "decomposition": {**d, "text": describe(d)}}, records)
    return out


def metric_names(k: int) -> list[str]:
    """The metrics of a summary, in the table's order (pass@1 once when k is 1)."""
    return list(dict.fromkeys(["pass@1", "format-free@1", f"pass@{k}", f"maj@{k}"]))


def _points(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def baseline_lines(label: str, summary: dict, base: dict) -> list[str]:
    """The baseline beside the model, metric by metric with the change in points, then the flips."""
    f = base["flips"]
    names = [m for m in base["change"]]
    rows = [[m, _pct(base[m]), _pct(summary[m]), _points(base["change"][m])] for m in names]
    widths = [max(len(r[i]) for r in rows + [["", "baseline", "model", "change"]]) for i in range(4)]
    line = lambda r: "  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return ([f"{label}: baseline {base['model']} -> this model",
             line(["", "baseline", "model", "change"])] + [line(r) for r in rows] +
            [f"  problems (format-free): {f['fixed']} fixed, {f['broken']} broken, {f['kept']} kept, "
             f"{f['never']} never right, of {f['n']}",
             f"  {base['decomposition']['text']}"])


def eval_json(model: str, loaded: str, split: str, s: SampleSettings, summaries: dict[str, dict]) -> dict:
    """The eval.json document (structure in the module docstring)."""
    first = next(iter(summaries))
    return {"model": model, "loaded": loaded, "split": split, "k": s.k, "samples": s.samples,
            "temperature": s.temperature, "max_new_tokens": s.max_new_tokens, "seed": s.seed, "task": first,
            **summaries[first], "tasks": summaries}


def write_outputs(out: str | Path, doc: dict, records: dict[str, list[dict]],
                  baseline: dict[str, list[dict]] | None = None) -> Path:
    """Write eval.json and samples.jsonl (one line per problem, with its task) into `out`, and the
    baseline's records as baseline_samples.jsonl when there is one (else an earlier one there is removed:
    it would pair with another eval.json). Each file whole or not at all (rlvr.io.atomic_write_text)."""
    from rlvr.io import atomic_write_json, atomic_write_text

    out = Path(out)
    jsonl = lambda recs_of: "".join(json.dumps({"task": label, **r}) + "\n" for label, recs in recs_of.items()
                                    for r in recs)
    atomic_write_text(out / "samples.jsonl", jsonl(records))
    if baseline:
        atomic_write_text(out / "baseline_samples.jsonl", jsonl(baseline))
    else:
        (out / "baseline_samples.jsonl").unlink(missing_ok=True)
    atomic_write_json(out / "eval.json", doc)
    return out / "eval.json"


def run_eval(cfg, model: str, task_names: list[str], split: str, n: int | None, s: SampleSettings, out: str | Path,
             baseline: str | None = None, asked: dict[str, str] | None = None) -> Path:
    """rlvr eval: `model` on each task of `task_names` (cfg's task settings, graded as a run of cfg grades), the
    table printed, and with `baseline` that model evaluated alike beside it; returns the eval.json written
    into `out`. Each model loads as it was saved (rlvr.saved_model.load_as_saved: a run's final/ in its stored
    dtype, never quantised again; any other in model.dtype, unquantised); `asked`: model.dtype and
    model.quantize where the command line gives them ("dtype", "quantize"), which then apply to both models."""
    from rlvr.device import resolve_device, resolve_precision, sampling_autocast
    from rlvr.eval.grader import choose_grader
    from rlvr.models.loading import stop_token_ids
    from rlvr.rewards import rewards_of
    from rlvr.rollout.engines import graph_decode
    from rlvr.saved_model import check_saved_name, is_adapter_dir, load_as_saved, read_record

    asked = asked or {}
    for name in (model, baseline) if baseline else (model,):  # the models named before the data is read
        check_saved_name(name)
    tasks = task_configs(cfg.task, task_names)
    # every task's problems before any model loads: a bad row or split of the last task stops in seconds,
    # not after the first tasks were evaluated
    problems_of = {label: task_problems(task, split, n) for label, task in tasks.items()}
    grader = choose_grader(rewards_of(cfg.rewards, cfg.rollout.max_new_tokens), cfg.eval.grader, cfg.eval.grader_threshold)  # as the run graded
    graders = task_graders(cfg.task, tasks, grader)
    if grader.user:  # the built-in checker is what rlvr eval always used
        print(f"{cfg.task.name}: {grader.line()}", file=sys.stderr)
    if cfg.model.quantize != "none" and "quantize" not in asked:
        # a run's config.yaml says how its base was held in training; a model is evaluated as it was saved
        print(f"note: the config's model.quantize={cfg.model.quantize} is not applied: each model loads as it was "
              f"saved (a run's final/ is unquantised); --model.quantize={cfg.model.quantize} evaluates them in 4 bits",
              file=sys.stderr)
    device = resolve_device(cfg.train.device)
    sampling = sampling_autocast(device, resolve_precision(cfg.train.mixed_precision, device))  # as training samples

    def loaded(name: str):
        model, tok, how = load_as_saved(name, device, dtype=asked.get("dtype"), quantize=asked.get("quantize"),
                                        default_dtype=cfg.model.dtype)
        if asked or is_adapter_dir(name) or read_record(name):  # else loaded as it always was: nothing to say
            print(f"{name}: {how}", file=sys.stderr)
        graph_decode(cfg.rollout, model)
        return model, tok, how

    policy, tok, how = loaded(model)
    with sampling:
        results = evaluate_tasks(policy, tok, stop_token_ids(policy, tok), tasks, split, n, s, cfg.env,
                                 graders, problems_of)
    summaries = {label: summary for label, (summary, _) in results.items()}
    print(format_table(summaries, s.k))
    records = {label: recs for label, (_, recs) in results.items()}
    # the model's figures are written before the baseline runs: a baseline that cannot load, fails or is
    # stopped loses none of them (eval.json is written again with the baseline's beside them)
    path = write_outputs(out, eval_json(model, how, split, s, summaries), records)
    if not baseline:
        return path
    del policy  # one model in memory at a time
    try:
        base_policy, base_tok, base_how = loaded(baseline)
        with sampling:
            compared = compare_to_baseline(base_policy, base_tok, stop_token_ids(base_policy, base_tok),
                                           baseline, tasks, split, n, s, results, cfg.env, graders, problems_of)
    except RlvrError as e:
        raise RlvrError(f"baseline {baseline}: {e} (this model's results are written: {path})") from None
    for label, (base, _) in compared.items():
        summaries[label]["baseline"] = {**base, "loaded": base_how}
        print("\n".join(baseline_lines(label, summaries[label], base)))
    return write_outputs(out, eval_json(model, how, split, s, summaries), records,
                         {label: recs for label, (_, recs) in compared.items()})
