"""`rlvr compare`: runs (or seed groups: rlvr/train/seeds.py) side by side, a table and plots of reward and
held-out accuracy against step and against training time, one line per run. The table holds strict and
format-free ("free") accuracy before and after, and the problems broken (rlvr.eval.flips), so it is an ablation
table; a group's cells are the mean over its seeds. Below it, the accuracy after training of each group (its
mean over seeds and their spread) and each against the first: the difference with a paired-bootstrap interval
over problems and seeds (rlvr/report/noise.py), and whether it is beyond seed noise, read from the per-problem
grades each run's final evaluation wrote (eval_after.jsonl)."""
from __future__ import annotations

import html
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.report.group import is_group, read_group, seed_dir
from rlvr.report.noise import Difference, Spread, describe_spread, paired_bootstrap, spread, verdict
from rlvr.report.plot import line_chart
from rlvr.io import atomic_write_json, atomic_write_text
from rlvr.report.sinks import jsonl_records


@dataclass(kw_only=True)
class RunData:
    name: str
    path: Path
    metrics: list[dict]
    evals: list[dict]
    summary: dict
    preset: str
    seed: int | None = None  # train.seed in its config.yaml


@dataclass(kw_only=True)
class Group:
    """A seed group (rlvr train --seeds), or a single run as a group of one."""

    name: str
    path: Path
    runs: list[RunData]

    @property
    def seeds(self) -> list[int | None]:
        return [r.seed for r in self.runs]


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    lines = list(jsonl_records(path))
    for n, _, record in lines[:-1]:
        if record is None:
            raise RlvrError(f"{path}, line {n}: not a JSON object in UTF-8") from None
    return [record for _, _, record in lines if record is not None]  # a last line a crash cut short is left out


def load_run(path: str | Path, name: str | None = None) -> RunData:
    path = Path(path)
    if not (path / "metrics.jsonl").is_file():
        raise RlvrError(f"{path} is not a run directory (no metrics.jsonl)")
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else {}
    config = {}
    if (path / "config.yaml").is_file():
        import yaml

        config = yaml.safe_load((path / "config.yaml").read_text()) or {}
    return RunData(name=name or path.name, path=path, metrics=_jsonl(path / "metrics.jsonl"),
                   evals=_jsonl(path / "evals.jsonl"), summary=summary,
                   preset=config.get("algo", {}).get("preset", ""), seed=config.get("train", {}).get("seed"))


def load(path: str | Path, name: str | None = None) -> Group:
    """A seed group's folder (its group.json: every seed's run) or a run directory (a group of one)."""
    path = Path(path)
    if not is_group(path):
        return Group(name=name or path.name, path=path, runs=[load_run(path, name)])
    group = read_group(path)
    runs = []
    for seed in group["seeds"]:
        run = seed_dir(path, seed)
        loaded = load_run(run) if (run / "metrics.jsonl").is_file() else None
        if loaded is None or not loaded.summary or loaded.summary.get("interrupted"):
            raise RlvrError(f"{run}: seed {seed} of the group {path} has not finished ("
                            + ("no summary.json" if loaded is None or not loaded.summary else "it was stopped")
                            + f"): continue the group with `rlvr train --resume {path}`")
        runs.append(loaded)
    return Group(name=name or path.name, path=path, runs=runs)


def _train_time(metrics: list[dict]) -> list[float]:
    return list(itertools.accumulate(m.get("time/step_s", 0.0) for m in metrics))


COLUMNS = ["run", "preset", "seeds", "steps", "train s", "s/step", "reward first", "reward last", "held-out before",
           "held-out after", "free before", "free after", "broken", "OOD before", "OOD after", "OOD free before",
           "OOD free after", "OOD broken"]


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def table_rows(groups: list[Group]) -> list[list[str]]:
    """One row of COLUMNS per group (a run is a group of one), as text; a group's cells are means over its seeds."""
    rows = []
    for g in groups:
        mean = lambda f: _mean([f(r) for r in g.runs])
        pct = lambda k: f"{100 * v:.1f}%" if (v := mean(lambda r: r.summary.get(k))) is not None else "-"
        count = lambda v: "-" if v is None else f"{v:g}" if v == int(v) else f"{v:.1f}"
        broken = lambda split: count(mean(lambda r: r.summary["flips"][split]["broken"]
                                          if split in r.summary.get("flips", {}) else None))
        steps = mean(lambda r: len(r.metrics)) or 0
        train_s = mean(lambda r: r.summary.get("train_seconds", sum(x.get("time/step_s", 0) for x in r.metrics)))
        reward = lambda at: f"{v:.3f}" if (v := mean(lambda r: r.metrics[at]["reward/mean"] if r.metrics else None)
                                           ) is not None else "-"
        rows.append([g.name, ", ".join(sorted({r.preset for r in g.runs})), str(len(g.runs)), count(steps),
                     f"{train_s:.0f}", f"{train_s / max(steps, 1):.1f}", reward(0), reward(-1),
                     pct("heldout_accuracy_before"), pct("heldout_accuracy_after"), pct("heldout_lenient_before"),
                     pct("heldout_lenient_after"), broken("heldout"), pct("ood_accuracy_before"),
                     pct("ood_accuracy_after"), pct("ood_lenient_before"), pct("ood_lenient_after"), broken("ood")])
    return rows


def aligned(cols: list[str], rows: list[list[str]]) -> str:
    """A table as aligned text: the first column to the left, the others to the right."""
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    fmt = lambda row: "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


# ---------------------------------------------------------------- accuracy after training, against seed noise

SPLITS = (("heldout", "held-out"), ("ood", "OOD"))


@dataclass(kw_only=True)
class SplitAccuracy:
    """One split's accuracy after training: each group's spread over seeds, and each group's difference from
    the first group (paired over the same problems); notes say why a group or a difference is missing."""

    split: str
    label: str
    spreads: dict[str, Spread]
    differences: dict[str, Difference]
    notes: list[str]


def final_grades(run: RunData) -> dict[str, tuple[list[str], list[float]]]:
    """The final evaluation's per-problem strict grades of each split: (questions, 0/1 grades), in order."""
    out: dict[str, tuple[list[str], list[float]]] = {}
    for rec in _jsonl(run.path / "eval_after.jsonl"):
        questions, correct = out.setdefault(rec.get("split", ""), ([], []))
        questions.append(rec.get("question"))
        correct.append(float(bool(rec.get("correct"))))
    return out


def group_grades(g: Group, split: str, label: str) -> tuple[list[str], list[list[float]]] | str:
    """(the problems, [seeds][problems] grades) of a group on a split, or why there are none."""
    per_run = [final_grades(r) for r in g.runs]
    missing = [r.path for r, grades in zip(g.runs, per_run) if split not in grades]
    if missing:
        why = ("no eval_after.jsonl (a run with eval.after=false, or stopped before its end)"
               if not (missing[0] / "eval_after.jsonl").is_file() else f"no {label} problems in its eval_after.jsonl")
        return f"{missing[0]}: {why}"
    questions = per_run[0][split][0]
    for r, grades in zip(g.runs[1:], per_run[1:]):
        if grades[split][0] != questions:
            return f"{g.runs[0].path} and {r.path} were evaluated on different {label} problems"
    return questions, [grades[split][1] for grades in per_run]


def accuracy(groups: list[Group]) -> list[SplitAccuracy]:
    """Each split's SplitAccuracy (those that no group was evaluated on left out)."""
    out = []
    for split, label in SPLITS:
        found = {g.name: group_grades(g, split, label) for g in groups}
        if all(isinstance(v, str) for v in found.values()):
            continue
        notes = [f"{name}: {v}" for name, v in found.items() if isinstance(v, str)]
        spreads = {name: spread(v[1]) for name, v in found.items() if not isinstance(v, str)}
        differences = {}
        first = groups[0].name
        if not isinstance(found[first], str):
            questions, base = found[first]
            for g in groups[1:]:
                v = found[g.name]
                if isinstance(v, str):
                    continue
                if v[0] != questions:
                    notes.append(f"{g.name} against {first}: not compared, evaluated on other {label} problems "
                                 f"({len(v[0])} and {len(questions)}; the same task settings give the same ones)")
                    continue
                differences[g.name] = paired_bootstrap(base, v[1])
        out.append(SplitAccuracy(split=split, label=label, spreads=spreads, differences=differences, notes=notes))
    return out


ACCURACY_COLUMNS = ["split", "run", "seeds", "problems", "mean", "sd", "range", "difference", "95% interval"]


def accuracy_rows(table: list[SplitAccuracy], first: str) -> list[list[str]]:
    rows = []
    for a in table:
        for name, s in a.spreads.items():
            d = a.differences.get(name)
            rows.append([a.label, name, str(s.seeds), str(s.problems), f"{100 * s.mean:.1f}%",
                         "-" if s.sd is None else f"{100 * s.sd:.1f}",
                         "-" if s.sd is None else f"{100 * s.low:.1f}-{100 * s.high:.1f}%",
                         "" if d is None else f"{100 * d.diff:+.1f} points",
                         "" if d is None else f"[{100 * d.low:+.1f}, {100 * d.high:+.1f}]"])
    return rows


def accuracy_lines(table: list[SplitAccuracy], first: str) -> list[str]:
    """The verdicts in words, one per split and group against the first; then the notes."""
    lines = []
    for a in table:
        if len(a.spreads) == 1 and not a.differences:
            (name, s), = a.spreads.items()
            lines.append(f"{a.label}, {name}: {describe_spread(s)}")
        for name, d in a.differences.items():
            how = f"paired bootstrap over {d.problems} problems and {d.seeds_b} + {d.seeds_a} seeds"
            lines.append(f"{a.label}, {name} against {first}: {verdict(d, how)}")
        lines += [f"{a.label}: {note}" for note in a.notes]
    return lines


def accuracy_title(first: str, n: int) -> str:
    return ("accuracy after training (greedy, strict): each run's mean over its seeds, their spread (sd and range of "
            "the seeds' accuracies)" + (f", and its difference from {first}" if n > 1 else ""))


def table(groups: list[Group]) -> str:
    """The tables as aligned text (the console): the runs, then accuracy after training against seed noise."""
    text = aligned(COLUMNS, table_rows(groups))
    acc = accuracy(groups)
    if acc:
        first = groups[0].name
        text += ("\n\n" + accuracy_title(first, len(groups)) + ":\n" + aligned(ACCURACY_COLUMNS, accuracy_rows(acc, first))
                 + "\n" + "\n".join(accuracy_lines(acc, first)))
    return text


def charts(groups: list[Group]) -> list[str]:
    """One line per run; a group's seeds as `NAME seed N`."""
    runs = [(g.name if len(g.runs) == 1 else f"{g.name} seed {r.seed}", r) for g in groups for r in g.runs]
    reward_step = {n: [(m["step"], m["reward/mean"]) for m in r.metrics] for n, r in runs}
    reward_time = {n: list(zip(_train_time(r.metrics), (m["reward/mean"] for m in r.metrics))) for n, r in runs}
    acc_step = {n: [(e["step"], e.get("heldout_accuracy")) for e in r.evals] for n, r in runs}
    acc_time = {n: [(e["train_seconds"], e.get("heldout_accuracy")) for e in r.evals] for n, r in runs}
    return [line_chart(reward_step, "Training reward", "step", "mean reward"),
            line_chart(reward_time, "Training reward", "training seconds", "mean reward"),
            line_chart(acc_step, "Held-out accuracy (greedy)", "step", "accuracy"),
            line_chart(acc_time, "Held-out accuracy (greedy)", "training seconds", "accuracy")]


# An HTML table whose headers wrap: the 18 columns as one line of monospace text were about 1650 px wide,
# cut off in a window of 1400; a page too narrow even so scrolls the table, never the whole page.
CSS = """body{font-family:sans-serif;margin:2em}.charts div{display:inline-block}.wide{overflow-x:auto}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{vertical-align:bottom;max-width:5.5em}td{white-space:nowrap}th:first-child,td:first-child{text-align:left}"""


def html_table(cols: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"


def _entry(g: Group, acc: list[SplitAccuracy]) -> dict:
    """compare.json's entry of a group: a single run's as it always was (path, preset and its summary); a
    group's path, seeds and each seed's summary; both with `accuracy` (spread, and difference from the first)."""
    entry = ({"path": str(g.path), "preset": g.runs[0].preset, **g.runs[0].summary} if len(g.runs) == 1 else
             {"path": str(g.path), "preset": g.runs[0].preset, "seeds": g.seeds,
              "runs": {str(r.seed): r.summary for r in g.runs}})
    entry["accuracy"] = {}
    for a in acc:
        if g.name in a.spreads:
            d = a.differences.get(g.name)
            entry["accuracy"][a.split] = {**a.spreads[g.name].__dict__, **({"against": {
                "difference": d.diff, "low": d.low, "high": d.high, "level": d.level, "beyond": d.beyond,
                "words": verdict(d)}} if d is not None else {})}
    return entry


def write_comparison(groups: list[Group], out: str | Path) -> Path:
    out = Path(out)
    acc = accuracy(groups)
    first = groups[0].name
    noise = "" if not acc else (
        f"<h2>{html.escape(accuracy_title(first, len(groups)))}</h2>"
        + html_table(ACCURACY_COLUMNS, accuracy_rows(acc, first))
        + "".join(f"<p>{html.escape(line)}</p>" for line in accuracy_lines(acc, first)))
    body = "\n".join(f"<div>{c}</div>" for c in charts(groups))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>rlvr compare</title>"
            f"<style>{CSS}</style></head><body>"
            f"<h1>rlvr compare</h1>{html_table(COLUMNS, table_rows(groups))}{noise}"
            f"<div class='charts'>{body}</div></body></html>")
    atomic_write_text(out / "compare.html", page)
    atomic_write_json(out / "compare.json", {g.name: _entry(g, acc) for g in groups})
    return out / "compare.html"
