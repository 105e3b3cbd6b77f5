"""`rlvr compare`: runs side by side, a table and plots of reward and held-out accuracy against
step and against training time, one line per run. The table holds strict and format-free ("free")
accuracy before and after, and the problems broken (rlvr.eval.flips), so it is an ablation table."""
from __future__ import annotations

import html
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from rlvr.errors import RlvrError
from rlvr.report.plot import line_chart
from rlvr.report.sinks import atomic_write_json, atomic_write_text, jsonl_records


@dataclass(kw_only=True)
class RunData:
    name: str
    path: Path
    metrics: list[dict]
    evals: list[dict]
    summary: dict
    preset: str


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
    preset = ""
    if (path / "config.yaml").is_file():
        import yaml

        preset = (yaml.safe_load((path / "config.yaml").read_text()) or {}).get("algo", {}).get("preset", "")
    return RunData(name=name or path.name, path=path, metrics=_jsonl(path / "metrics.jsonl"),
                   evals=_jsonl(path / "evals.jsonl"),
                   summary=summary, preset=preset)


def _train_time(metrics: list[dict]) -> list[float]:
    return list(itertools.accumulate(m.get("time/step_s", 0.0) for m in metrics))


COLUMNS = ["run", "preset", "steps", "train s", "s/step", "reward first", "reward last", "held-out before",
            "held-out after", "free before", "free after", "broken", "OOD before", "OOD after", "OOD free before",
            "OOD free after", "OOD broken"]


def table_rows(runs: list[RunData]) -> list[list[str]]:
    """One row of COLUMNS per run, as text."""
    rows = []
    for r in runs:
        s, m = r.summary, r.metrics
        pct = lambda k: f"{100 * s[k]:.1f}%" if s.get(k) is not None else "-"
        broken = lambda split: str(s["flips"][split]["broken"]) if split in s.get("flips", {}) else "-"
        steps = len(m)
        train_s = s.get("train_seconds", sum(x.get("time/step_s", 0) for x in m))
        rows.append([r.name, r.preset, str(steps), f"{train_s:.0f}", f"{train_s / max(steps, 1):.1f}",
                     f"{m[0]['reward/mean']:.3f}" if m else "-", f"{m[-1]['reward/mean']:.3f}" if m else "-",
                     pct("heldout_accuracy_before"), pct("heldout_accuracy_after"), pct("heldout_lenient_before"),
                     pct("heldout_lenient_after"), broken("heldout"), pct("ood_accuracy_before"),
                     pct("ood_accuracy_after"), pct("ood_lenient_before"), pct("ood_lenient_after"), broken("ood")])
    return rows


def table(runs: list[RunData]) -> str:
    """The table as aligned text (the console)."""
    cols, rows = COLUMNS, table_rows(runs)
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(cols)]
    fmt = lambda row: "  ".join(v.rjust(w) if i else v.ljust(w) for i, (v, w) in enumerate(zip(row, widths)))
    return "\n".join([fmt(cols), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows])


def charts(runs: list[RunData]) -> list[str]:
    reward_step = {r.name: [(m["step"], m["reward/mean"]) for m in r.metrics] for r in runs}
    reward_time = {r.name: list(zip(_train_time(r.metrics), (m["reward/mean"] for m in r.metrics))) for r in runs}
    acc_step = {r.name: [(e["step"], e.get("heldout_accuracy")) for e in r.evals] for r in runs}
    acc_time = {r.name: [(e["train_seconds"], e.get("heldout_accuracy")) for e in r.evals] for r in runs}
    return [line_chart(reward_step, "Training reward", "step", "mean reward"),
            line_chart(reward_time, "Training reward", "training seconds", "mean reward"),
            line_chart(acc_step, "Held-out accuracy (greedy)", "step", "accuracy"),
            line_chart(acc_time, "Held-out accuracy (greedy)", "training seconds", "accuracy")]


# An HTML table whose headers wrap: the 17 columns as one line of monospace text were about 1650 px wide,
# cut off in a window of 1400; a page too narrow even so scrolls the table, never the whole page.
CSS = """body{font-family:sans-serif;margin:2em}.charts div{display:inline-block}.wide{overflow-x:auto}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{vertical-align:bottom;max-width:5.5em}td{white-space:nowrap}th:first-child,td:first-child{text-align:left}"""


def html_table(runs: list[RunData]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(v)}</td>" for v in row) + "</tr>" for row in table_rows(runs))
    return f"<div class='wide'><table><tr>{head}</tr>{body}</table></div>"


def write_comparison(runs: list[RunData], out: str | Path) -> Path:
    out = Path(out)
    body = "\n".join(f"<div>{c}</div>" for c in charts(runs))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>rlvr compare</title>"
            f"<style>{CSS}</style></head><body>"
            f"<h1>rlvr compare</h1>{html_table(runs)}<div class='charts'>{body}</div></body></html>")
    atomic_write_text(out / "compare.html", page)
    atomic_write_json(out / "compare.json", {r.name: {"path": str(r.path), "preset": r.preset, **r.summary}
                                             for r in runs})
    return out / "compare.html"
