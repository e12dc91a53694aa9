"""Inline SVG charts for the HTML report: speedup bars, latency-versus-loss scatter, knob effects.

Plain strings, no dependencies; every piece of user text goes through ``esc``. Elements carry
classes (``threshold``, ``winner``, ``point``...) that the page's CSS styles and the tests look for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

FONT = 12


def esc(text: object) -> str:
    return escape(str(text), quote=True)


def num(x: float) -> str:
    return f"{x:.1f}".rstrip("0").rstrip(".") if math.isfinite(x) else "0"


def fmt_ms(x: float) -> str:
    return f"{x:.3g}" if x >= 0.01 else f"{x:.2g}"


def _svg(width: int, height: int, body: list[str], cls: str, label: str) -> str:
    # inline in HTML5 an <svg> needs no xmlns, so the page holds no URL at all
    return (f'<svg class="plot {cls}" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-label="{esc(label)}">'
            + "".join(body) + "</svg>")


def _text(x: float, y: float, text: str, cls: str = "", anchor: str = "start", extra: str = "") -> str:
    c = f' class="{cls}"' if cls else ""
    return f'<text x="{num(x)}" y="{num(y)}" text-anchor="{anchor}"{c}{extra}>{esc(text)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, cls: str) -> str:
    return f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" class="{cls}"/>'


# -- summary: one speedup bar per job --------------------------------------------------------------

@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None  # speedup; None: no result (note says why)
    low: float | None = None
    high: float | None = None
    kind: str = "tuned"  # tuned | default | none
    note: str = ""
    anchor: str = ""


def speedup_bars(bars: Sequence[Bar], label_w: int = 230, text_w: int = 320, width: int = 1000) -> str:
    """One row per job: name | bar with its interval whisker | speedup and route."""
    row, top = 26, 24
    n = len(bars)
    height = top + row * n + 30
    plot_w = width - label_w - text_w
    vmax = max([1.2, *(b.high or 0 for b in bars), *(b.value or 0 for b in bars)]) * 1.05

    def sx(v: float) -> float:
        return label_w + plot_w * min(v, vmax) / vmax

    body = [_text(label_w, 14, "speedup over the default route (bar: ratio of medians; whisker: 95% CI)", "caption")]
    step = _nice_step(vmax / 5)
    tick = 0.0
    while tick <= vmax + 1e-9:
        body.append(_line(sx(tick), top - 4, sx(tick), top + row * n, "grid"))
        body.append(_text(sx(tick), top + row * n + 16, f"{tick:g}x", "tick", "middle"))
        tick += step
    body.append(_line(sx(1.0), top - 6, sx(1.0), top + row * n + 2, "unity"))
    for i, b in enumerate(bars):
        y = top + i * row
        ty = y + row / 2 + 4
        label = _text(label_w - 10, ty, _clip(b.label, 34), "label", "end")
        body.append(f'<a href="#{esc(b.anchor)}">{label}</a>' if b.anchor else label)
        if b.value is None:
            body.append(_text(sx(0) + 6, ty, b.note or "no result", "note"))
            continue
        title = f"<title>{esc(b.label)}: {b.value:.3f}x" + (f", {esc(b.note)}" if b.note else "") + (
            f" (95% CI {b.low:.2f}x-{b.high:.2f}x)" if b.low is not None and b.high is not None else "") + "</title>"
        body.append(f'<rect class="bar {b.kind}" x="{num(sx(0))}" y="{num(y + 5)}" '
                    f'width="{num(max(1.0, sx(b.value) - sx(0)))}" height="{row - 10}">{title}</rect>')
        if b.low is not None and b.high is not None:
            cy = y + row / 2
            body.append(_line(sx(b.low), cy, sx(b.high), cy, "whisker"))
            body.append(_line(sx(b.low), cy - 4, sx(b.low), cy + 4, "whisker"))
            body.append(_line(sx(b.high), cy - 4, sx(b.high), cy + 4, "whisker"))
        body.append(_text(label_w + plot_w + 10, ty, f"{b.value:.2f}x", "value strong"))
        if b.note:
            body.append(_text(label_w + plot_w + 52, ty, _clip(b.note, 46), "value"))
    return _svg(width, height, body, "summary", "speedup of every job over its default route")


# -- per job: latency versus accuracy loss -----------------------------------------------------------

@dataclass(frozen=True)
class Point:
    label: str
    median: float
    low: float | None
    high: float | None
    loss: float  # worst loss / threshold; >= 1 fails the gate; inf for non-finite outputs
    eligible: bool
    winner: bool = False
    default: bool = False
    title: str = ""
    candidate: bool = True  # False: measured earlier, not a candidate of the current search


def scatter(points: Sequence[Point], width: int = 520, height: int = 320) -> str:
    """Median latency (y) against worst loss over threshold (x, log), threshold line at 1."""
    ml, mr, mt, mb = 62, 18, 22, 44
    pw, ph = width - ml - mr, height - mt - mb
    finite = [p.loss for p in points if math.isfinite(p.loss) and p.loss > 0]
    lo_dec = math.floor(math.log10(min([*finite, 1e-3])))
    hi_dec = max(1, math.ceil(math.log10(max([*finite, 1.0]))))
    lo_dec = max(lo_dec, hi_dec - 14)  # keep decades readable; anything smaller sits at the left edge

    x0, x1 = lo_dec - 0.3, hi_dec + 0.15  # a little room so that edge points clear the frame

    def sx(loss: float) -> float:
        if loss <= 0 or not math.isfinite(loss):
            return ml + pw * ((lo_dec - x0) if loss <= 0 else (hi_dec - x0)) / (x1 - x0)
        d = min(max(math.log10(loss), lo_dec), hi_dec)
        return ml + pw * (d - x0) / (x1 - x0)

    ys = [v for p in points for v in (p.median, p.low, p.high) if v is not None and v > 0]
    ymax, ymin = max(ys, default=1.0), min(ys, default=1.0)
    log_y = ymax / ymin > 4
    if log_y:
        y0, y1 = math.log10(ymin / 1.3), math.log10(ymax * 1.15)
    else:
        y0, y1 = 0.0, ymax * 1.1

    def sy(v: float) -> float:
        t = (math.log10(v) - y0) / (y1 - y0) if log_y else (v - y0) / (y1 - y0)
        return mt + ph * (1 - t)

    body = [f'<rect class="fail-zone" x="{num(sx(1.0))}" y="{mt}" width="{num(ml + pw - sx(1.0))}" '
            f'height="{ph}"><title>losses at or above the threshold fail the accuracy gate</title></rect>']
    step = max(1, math.ceil((hi_dec - lo_dec) / 6))
    for d in range(lo_dec, hi_dec + 1, step):
        x = sx(10.0 ** d)
        body.append(_line(x, mt, x, mt + ph, "grid"))
        body.append(_text(x, mt + ph + 14, "1" if d == 0 else f"1e{d}", "tick", "middle"))
    for v in _y_ticks(ymin, ymax, log_y, y0, y1):
        body.append(_line(ml, sy(v), ml + pw, sy(v), "grid"))
        body.append(_text(ml - 6, sy(v) + 4, fmt_ms(v), "tick", "end"))
    body.append(f'<rect class="frame" x="{ml}" y="{mt}" width="{pw}" height="{ph}"/>')
    body.append(_line(sx(1.0), mt, sx(1.0), mt + ph, "threshold"))
    body.append(_text(sx(1.0) + 4, mt + 12, "threshold", "threshold-label"))
    default = next((p for p in points if p.default), None)
    if default is not None:
        body.append(_line(ml, sy(default.median), ml + pw, sy(default.median), "default-line"))
        body.append(_text(ml + pw - 4, sy(default.median) - 4, f"default {fmt_ms(default.median)} ms",
                          "default-label", "end"))
    body.append(_text(ml + pw / 2, height - 8, "worst accuracy loss / its threshold (log scale)", "axis", "middle"))
    body.append(_text(14, mt + ph / 2, f"median latency, ms{' (log)' if log_y else ''}", "axis", "middle",
                      f' transform="rotate(-90 14 {num(mt + ph / 2)})"'))
    marks = []
    for p in sorted(points, key=lambda p: (p.winner, p.default)):  # the winner is drawn last, on top
        x, y = sx(p.loss), sy(p.median)
        cls = "point " + ("winner" if p.winner else "eligible" if p.eligible else
                          "failed" if p.candidate else "other")
        title = f"<title>{esc(p.title or p.label)}</title>"
        whisker = _line(x, sy(p.low), x, sy(p.high), "ci") if p.low and p.high else ""
        if p.default:
            shape = f'<rect x="{num(x - 5)}" y="{num(y - 5)}" width="10" height="10"/>'
        else:
            shape = f'<circle cx="{num(x)}" cy="{num(y)}" r="{7 if p.winner else 4.5}"/>'
        marks.append(f'<g class="{cls}{" default" if p.default else ""}" data-route="{esc(p.label)}">'
                     f"{title}{whisker}{shape}</g>")
        if p.winner:
            label_px = 6.2 * (8 + min(len(p.label), 40))
            anchor = "end" if x + 10 + label_px > ml + pw else "start"
            dx = -10 if anchor == "end" else 10
            marks.append(_text(x + dx, y - 8, f"winner: {_clip(p.label, 40)}", "winner-label", anchor))
    body.append('<g class="marks">' + "".join(marks) + "</g>")
    return _svg(width, height, body, "scatter", "median latency against accuracy loss per route")


def _y_ticks(ymin: float, ymax: float, log_y: bool, y0: float, y1: float) -> list[float]:
    if not log_y:
        step = _nice_step(y1 / 5)
        return [i * step for i in range(int(y1 / step) + 1)]
    out = []
    for d in range(math.floor(y0), math.ceil(y1) + 1):
        for m in (1, 2, 5):
            v = m * 10.0 ** d
            if 10 ** y0 <= v <= 10 ** y1:
                out.append(v)
    return out


def _nice_step(raw: float) -> float:
    if raw <= 0:
        return 1.0
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


# -- per job: effect of each knob value ---------------------------------------------------------

@dataclass(frozen=True)
class Effect:
    label: str  # knob=value
    change: float | None  # median relative latency change against the route without it; None: no timing
    n: int = 0
    note: str = ""  # e.g. "1 crashed"
    title: str = ""


def knob_effects(effects: Sequence[Effect], width: int = 560, label_w: int = 230, text_w: int = 140,
                 caption: str = "median latency change vs the same route without it",
                 label: str = "effect of each knob value on the median latency", kind: str = "effects") -> str:
    """One row per knob value: label | bar from 0 (left: faster, right: slower) | change and notes."""
    row, top = 22, 24
    n = max(1, len(effects))
    height = top + row * n + 28
    pw = width - label_w - text_w
    values = [e.change for e in effects if e.change is not None]
    lo = min([-0.05, *(v * 1.1 for v in values)])
    hi = max([0.05, *(v * 1.1 for v in values)])

    def sx(v: float) -> float:
        return label_w + pw * (min(max(v, lo), hi) - lo) / (hi - lo)

    body = [_text(label_w, 14, caption, "caption")]
    step = _nice_step((hi - lo) / 4)
    tick = math.ceil(lo / step) * step
    while tick <= hi + 1e-12:
        body.append(_line(sx(tick), top - 2, sx(tick), top + row * n, "grid"))
        body.append(_text(sx(tick), top + row * n + 14, f"{tick * 100:+.0f}%" if abs(tick) > 1e-12 else "0",
                          "tick", "middle"))
        tick += step
    body.append(_line(sx(0), top - 4, sx(0), top + row * n + 2, "unity"))
    for i, e in enumerate(effects):
        y = top + i * row
        ty = y + row / 2 + 4
        body.append(_text(label_w - 8, ty, _clip(e.label, 34), "label small", "end", f' data-knob="{esc(e.label)}"'))
        if e.change is None:
            body.append(_text(sx(lo) + 4, ty, e.note or "no timing", "note"))
            continue
        x0, x1 = sorted((sx(0), sx(e.change)))
        cls = "faster" if e.change < 0 else "slower"
        title = f"<title>{esc(e.title or e.label)}</title>"
        body.append(f'<rect class="effect {cls}" x="{num(x0)}" y="{num(y + 4)}" width="{num(max(1.0, x1 - x0))}" '
                    f'height="{row - 8}">{title}</rect>')
        text = f"{e.change * 100:+.1f}%" + (f" n={e.n}" if e.n > 1 else "") + (f" · {e.note}" if e.note else "")
        body.append(_text(label_w + pw + 8, ty, text, f"value {cls}"))
    return _svg(width, height, body, kind, label)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
