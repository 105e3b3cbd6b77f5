"""`rlvr report RUN_DIR`: one self-contained report.html (plots inline as SVG) from a run directory."""
from __future__ import annotations

import html
import math
import json
from pathlib import Path

from rlvr.envs.episode_metrics import END_REASONS
from rlvr.errors import RlvrError
from rlvr.report.compare import _jsonl
from rlvr.report.console import ROWS, overlap_line, verdict_text
from rlvr.report.plot import line_chart
from rlvr.io import atomic_write_text

CSS = """body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
h1{margin-bottom:0}.sub{color:#666}.charts div{display:inline-block}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}
th:first-child,td:first-child{text-align:left}.finding{background:#fff3cd;border-left:4px solid #e0a800;
padding:8px 12px;margin:8px 0}.ok{background:#e8f5e9;border-left:4px solid #43a047;padding:8px 12px}
pre{white-space:pre-wrap;background:#f6f6f6;padding:6px;margin:4px 0}.sample{margin-bottom:12px}"""
# Only pages that show a multi-turn episode carry these, so a single-turn run's page stays as it was.
EPISODE_CSS = """
.turn{margin:4px 0}.turn .role{font-size:smaller;font-weight:bold;color:#555}
.turn.env pre{background:#e8f0fe;border-left:4px solid #1f77b4;font-size:smaller}
.callerr{color:#b00020}.end{color:#666;font-size:smaller}"""


def _series(metrics: list[dict], key: str) -> list[tuple[float, float]]:
    return [(m["step"], m[key]) for m in metrics if m.get(key) is not None]


def _moving(series: dict[str, list[tuple[float, float]]]) -> dict[str, list[tuple[float, float]]]:
    """The series with a value other than 0: at algo.beta 0 there is no KL to a reference (null), and with
    one update per batch the KL to the old policy is 0 at every step; a flat line at 0 would say nothing."""
    return {name: s for name, s in series.items() if any(y for _, y in s)}


def _charts(metrics: list[dict], evals: list[dict]) -> list[str]:
    reward_keys = sorted(k for k in (metrics[0] if metrics else {}) if k.startswith("reward/") and k.endswith("/mean") and k != "reward/mean")
    acc = {split: [(e["step"], e.get(f"{split}_accuracy")) for e in evals if e.get(f"{split}_accuracy") is not None]
           for split in ("heldout", "ood")}
    return [
        line_chart({"total": _series(metrics, "reward/mean"),
                    **{k.split("/")[1]: _series(metrics, k) for k in reward_keys}}, "Reward", "step", "mean"),
        line_chart({"held-out": acc["heldout"], "OOD": acc["ood"]}, "Greedy accuracy", "step", "accuracy"),
        line_chart({"mean": _series(metrics, "completion/length_mean"),
                    "p90": _series(metrics, "completion/length_p90")}, "Completion length", "step", "tokens"),
        line_chart({"truncated": _series(metrics, "completion/truncated_frac"),
                    "zero-variance groups": _series(metrics, "frac_zero_std_groups")},
                   "Truncation and learning signal", "step", "fraction"),
        line_chart(_moving({"KL to reference": _series(metrics, "kl"), "approx KL to old": _series(metrics, "approx_kl_old")}),
                   "KL", "step", "nats / token", empty="none: no KL term (algo.beta 0) and one update per batch"),
        line_chart({"entropy": _series(metrics, "entropy")}, "Policy entropy", "step", "nats / token"),
    ] + _env_charts(metrics) + _overlap_charts(metrics) + _custom_charts(metrics)


def _overlap_charts(metrics: list[dict]) -> list[str]:
    """One step off (rollout.overlap): the batch's lag and how much of its collection the update hid."""
    if not any(m.get("time/overlap_frac") is not None for m in metrics):
        return []
    return [line_chart({"overlap fraction": _series(metrics, "time/overlap_frac"),
                        "policy lag (updates)": _series(metrics, "rollout/policy_lag")},
                       "One step off", "step", "fraction / updates")]


def _custom_charts(metrics: list[dict]) -> list[str]:
    """Metrics a callback added under custom/ (rlvr.fit(callbacks=...)), one chart."""
    keys = sorted({k for m in metrics for k in m if k.startswith("custom/")})
    return [line_chart({k.removeprefix("custom/"): _series(metrics, k) for k in keys}, "Your metrics (custom/)",
                       "step", "value")] if keys else []


def _env_charts(metrics: list[dict]) -> list[str]:
    """Tool use and turns per episode, only for runs that logged them (multi-turn environments)."""
    has = lambda key: any(m.get(key) is not None for m in metrics)
    charts = []
    if has("env/tool_use_frac"):
        charts.append(line_chart({"episodes with a tool call": _series(metrics, "env/tool_use_frac"),
                                  "tool calls failing": _series(metrics, "env/tool_errors_frac")},
                                 "Tool use", "step", "fraction"))
    if has("env/turns_mean"):
        charts.append(line_chart({"model turns": _series(metrics, "env/turns_mean"),
                                  "tool calls": _series(metrics, "env/tool_calls_mean")},
                                 "Turns per episode", "step", "mean"))
    return charts


def _before_after(summary: dict) -> str:
    """Before / after table; a run started from an SFT model also shows the base model before SFT, and
    'before' is then the SFT baseline."""
    sft = summary.get("sft")
    cell = lambda v: "<td>-</td>" if v is None else f"<td>{100 * v:.1f}%</td>"
    rows = []
    for label, key in ROWS:
        b, a = summary.get(f"{key}_before"), summary.get(f"{key}_after")
        if b is None and a is None:
            continue
        change = "-" if a is None or b is None else f"{100 * (a - b):+.1f}"
        base = cell(sft.get(f"base_{key}")) if sft else ""
        rows.append(f"<tr><td>{label}</td>{base}{cell(b)}{cell(a)}<td>{change}</td></tr>")
    head = ("<th>base model (before SFT)</th><th>SFT baseline</th>" if sft else "<th>before</th>")
    note = (f"<p class='sub'>Started from the SFT model of {html.escape(str(sft['run']))}; "
            "the change is what RL added on top of SFT.</p>" if sft else "")
    return (f"{note}<table><tr><th></th>{head}<th>after</th><th>change</th></tr>" + "".join(rows) + "</table>")


def _flips(summary: dict) -> str:
    """Per split: the strict change in words, the flip counts, and examples of fixed and broken problems."""
    parts = []
    for split, label in (("heldout", "Held-out"), ("ood", "OOD")):
        f, d = summary.get("flips", {}).get(split), summary.get("decomposition", {}).get(split)
        if not f:
            continue
        parts.append(f"<h3>{label}</h3><p>{html.escape(d['text']) if d else ''}</p><table><tr>"
                     + "".join(f"<th>{k}</th>" for k in ("fixed", "broken", "kept", "never", "n")) + "</tr><tr>"
                     + "".join(f"<td>{f[k]}</td>" for k in ("fixed", "broken", "kept", "never", "n")) + "</tr></table>")
        for kind in ("broken", "fixed"):
            for ex in f["examples"].get(kind, []):
                parts.append(f"<div class='sample'><b>{kind}</b>: {html.escape(ex['question'])} (gold "
                             f"{html.escape(str(ex['answer']))})<pre>before: {html.escape(ex['before'])}</pre>"
                             f"<pre>after: {html.escape(ex['after'])}</pre></div>")
    if not parts:
        return "<p>No per-problem comparison (no evaluation before and after training).</p>"
    return ("<p class='sub'>A problem is right when its answer is right format-free; fixed: wrong before "
            "training, right after; broken: right before, wrong after.</p>" + "".join(parts))


def _multi_turn(s: dict) -> bool:
    """A sample shown turn by turn; one with no episode or a one-turn episode shows its completion."""
    return len(s.get("episode", {}).get("turns", [])) > 1


def _sample_html(s: dict) -> str:
    verdicts = "; ".join(html.escape(verdict_text(n, v, " = ")) for n, v in s.get("rewards", {}).items())
    body = _episode_html(s["episode"]) if _multi_turn(s) else f"<pre>{html.escape(s['completion'])}</pre>"
    reward = "none" if s.get("reward") is None else f"{s['reward']:.3g}"
    return (f"<div class='sample'><b>step {s['step']}, reward {reward}</b> &mdash; {verdicts}"
            f"<pre>{html.escape(s['prompt'])}</pre>{body}</div>")


def _episode_html(ep: dict) -> str:
    """Each turn under its role, environment turns (tool results, follow-ups) shaded; then the failed
    tool calls, the cut tool results and why the episode ended."""
    turns = "".join(f"<div class='turn {'env' if t['source'] == 'env' else 'model'}'><span class='role'>"
                    f"{html.escape(str(t['role']))}</span><pre>{html.escape(t['text'])}</pre></div>"
                    for t in ep["turns"])
    calls = ep.get("calls", [])
    errors = "".join(f"<div class='callerr'>tool call {i + 1} of {len(calls)} "
                     f"({html.escape(c.get('name') or 'no name')}) failed: {html.escape(str(c['error']))}</div>"
                     for i, c in enumerate(calls) if c.get("error"))
    cut = ep.get("tool_truncated", 0)
    cut_note = f"; {cut} tool result{'s' * (cut != 1)} cut to env.max_tool_tokens" if cut else ""
    end = str(ep.get("end"))
    why = f" ({html.escape(END_REASONS[end])})" if end in END_REASONS else ""
    why += f": {html.escape(str(ep['error']))}" if ep.get("error") else ""
    return (f"{turns}{errors}<div class='end'>{len(calls)} tool call{'s' * (len(calls) != 1)}{cut_note}; "
            f"ended: {html.escape(end)}{why}</div>")


def _samples(samples: list[dict], k: int = 4) -> str:
    if not samples:
        return "<p>no samples</p>"
    last_step = samples[-1]["step"]
    recent = [s for s in samples if s["step"] >= last_step - 2] or samples
    # a reward of null (a non-finite number, which JSON cannot hold, in a run written before rlvr refused them)
    # ranks lowest
    ranked = sorted(recent, key=lambda s: -math.inf if s.get("reward") is None else s["reward"])
    return ("<h3>Best (last steps)</h3>" + "".join(_sample_html(s) for s in _distinct(ranked[::-1], k)) +
            "<h3>Worst (last steps)</h3>" + "".join(_sample_html(s) for s in _distinct(ranked, k)))


def _distinct(samples: list[dict], k: int) -> list[dict]:
    """The first k samples with different prompts (a group shares its prompt, so the best k would
    otherwise often be one prompt's completions)."""
    seen, out = set(), []
    for s in samples:
        if s["prompt"] not in seen:
            seen.add(s["prompt"])
            out.append(s)
    return out[:k]


def write_report(run_dir: str | Path) -> Path:
    run_dir = Path(run_dir)
    if not (run_dir / "metrics.jsonl").is_file():
        raise RlvrError(f"{run_dir} is not a run directory (no metrics.jsonl)")
    metrics, evals = _jsonl(run_dir / "metrics.jsonl"), _jsonl(run_dir / "evals.jsonl")
    health, samples = _jsonl(run_dir / "health.jsonl"), _jsonl(run_dir / "samples.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").is_file() else {}
    findings = "".join(f"<div class='finding'><b>{html.escape(f['rule'])}</b> (step {f['step']}): "
                       f"{html.escape(f['message'])}</div>" for f in health) or \
        "<div class='ok'>No health rule fired.</div>"
    secs = summary.get("train_seconds")
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>rlvr report: {html.escape(run_dir.name)}</title>
<style>{CSS}{EPISODE_CSS if any(map(_multi_turn, samples)) else ""}</style></head><body>
<h1>rlvr report: {html.escape(run_dir.name)}</h1>
<p class="sub">{len(metrics)} steps{f", {secs:.0f} s of training" if secs else ""}; {html.escape(str(run_dir))}</p>
<h2>Before and after</h2>{_before_after(summary)}
<h2>What changed, problem by problem</h2>{_flips(summary)}
<h2>Health</h2>{findings}
{f"<p>{html.escape(overlap_line(summary['overlap']))}</p>" if summary.get("overlap") else ""}
<h2>Curves</h2><div class="charts">{"".join(f"<div>{c}</div>" for c in _charts(metrics, evals))}</div>
<h2>Samples</h2>{_samples(samples)}
</body></html>"""
    atomic_write_text(run_dir / "report.html", page)
    return run_dir / "report.html"
