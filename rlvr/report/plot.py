"""Self-contained SVG line charts (no plotting dependency), for compare pages and reports."""
from __future__ import annotations

import html
import math

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    if hi == lo:
        return [lo]
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def _int_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """At most n whole numbers from lo to hi, evenly spaced: steps are counted, never 1.75."""
    stride = max(1, math.ceil((hi - lo) / (n - 1)))
    return list(range(math.ceil(lo), math.floor(hi) + 1, stride))


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def line_chart(series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str,
               width: int = 560, height: int = 300, empty: str = "no data") -> str:
    """One polyline (with point markers) per named series of (x, y) points; x ticks are whole numbers
    when every x is (steps); `empty`: what the chart says when no series has a point."""
    pts = [p for s in series.values() for p in s if p[1] is not None]
    left, right, top, bottom = 60, 150, 30, 45
    pw, ph = width - left - right, height - top - bottom
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<text x="{left}" y="18" font-size="13" font-weight="bold">{html.escape(title)}</text>']
    if not pts:
        out.append(f'<text x="{left}" y="{top + ph / 2}">{html.escape(empty)}</text></svg>')
        return "\n".join(out)
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if y0 == y1:
        y0, y1 = y0 - 0.5, y1 + 0.5
    if x0 == x1:
        x0, x1 = x0 - 0.5, x1 + 0.5
    sx = lambda x: left + (x - x0) / (x1 - x0) * pw
    sy = lambda y: top + ph - (y - y0) / (y1 - y0) * ph
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>')
    for t in _ticks(y0, y1):
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>'
                   f'<text x="{left - 5}" y="{sy(t) + 4:.1f}" text-anchor="end">{_fmt(t)}</text>')
    whole = all(float(p[0]).is_integer() for p in pts)
    for t in (_int_ticks(x0, x1) if whole else _ticks(x0, x1)):
        out.append(f'<text x="{sx(t):.1f}" y="{top + ph + 15}" text-anchor="middle">{_fmt(t)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 8}" text-anchor="middle">{html.escape(xlabel)}</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + ph / 2})">{html.escape(ylabel)}</text>')
    for i, (name, s) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        good = [(x, y) for x, y in s if y is not None]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in good)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in good]
        ly = top + 12 + 16 * i
        out.append(f'<line x1="{left + pw + 10}" x2="{left + pw + 28}" y1="{ly}" y2="{ly}" stroke="{colour}" '
                   f'stroke-width="3"/><text x="{left + pw + 32}" y="{ly + 4}">{html.escape(name[:22])}</text>')
    out.append("</svg>")
    return "\n".join(out)
