"""Chart geometry for server-side SVG: scales, ticks, polylines and bars in pixel units.

The template draws what :func:`layout` returns, so a page shows its charts without any
JavaScript and a browser test can read the plotted data (``checksum``) from the markup.
Pure Python, no Django.
"""

from __future__ import annotations

import math
from typing import Any

from labs.experiments.base import Chart, fmt_number

__all__ = ["DASHES", "PALETTE", "layout", "nice_step", "nice_ticks"]

#: Series colours (Okabe-Ito, readable by colour-blind people) and dash patterns, so lines
#: stay apart in print and in greyscale too.
PALETTE = ("#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9")
DASHES = ("", "6 3", "2 3", "8 3 2 3", "1 2", "10 4")

_MARGIN = {"left": 64, "right": 16, "top": 16, "bottom": 48}


def nice_step(span: float, count: int = 5) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about ``count`` ticks."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


def nice_ticks(high: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to at least ``high`` (about ``count`` of them)."""
    if high <= 0 or not math.isfinite(high):
        return [0.0, 1.0]
    step = nice_step(high, count)
    ticks = [0.0]
    while ticks[-1] < high - 1e-9:
        ticks.append(round(ticks[-1] + step, 10))
    return ticks


def _label(value: float) -> str:
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return fmt_number(round(value, 2), 2 if abs(value) < 1 else 1)


def layout(chart: Chart, width: int = 720, height: int = 300) -> dict[str, Any]:
    """Pixel geometry of ``chart`` in a ``width`` x ``height`` SVG."""
    x0, x1 = _MARGIN["left"], width - _MARGIN["right"]
    y0, y1 = _MARGIN["top"], height - _MARGIN["bottom"]
    values = [v for s in chart.series for v in s.values if math.isfinite(v)]
    y_ticks = nice_ticks(max(values, default=0.0))
    y_top = y_ticks[-1] or 1.0

    def ypos(v: float) -> float:
        return round(y1 - (y1 - y0) * (v / y_top), 2)

    series_out: list[dict[str, Any]] = []
    x_ticks: list[dict[str, Any]] = []
    if chart.kind == "bar":
        groups = max(1, len(chart.x))
        group_w = (x1 - x0) / groups
        bar_w = group_w * 0.8 / max(1, len(chart.series))
        for gi, label in enumerate(chart.x):
            x_ticks.append({"pos": round(x0 + group_w * (gi + 0.5), 2), "label": str(label)})
        for si, s in enumerate(chart.series):
            bars = []
            for gi, v in enumerate(s.values):
                left = x0 + group_w * gi + group_w * 0.1 + bar_w * si
                top = ypos(v)
                bars.append(
                    {
                        "x": round(left, 2),
                        "y": top,
                        "w": round(bar_w, 2),
                        "h": round(y1 - top, 2),
                        "value": fmt_number(v),
                        "label": chart.x[gi],
                    }
                )
            series_out.append(_series_style(si, s.name, bars=bars))
    else:
        xs = [float(x) for x in chart.x]
        lo, hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
        span = (hi - lo) or 1.0

        def xpos(v: float) -> float:
            return round(x0 + (x1 - x0) * (v - lo) / span, 2)

        step = nice_step(hi - lo, 6)
        tick = math.ceil(lo / step - 1e-9) * step
        while tick <= hi + 1e-9:
            x_ticks.append({"pos": xpos(tick), "label": _label(tick)})
            tick = round(tick + step, 10)
        for si, s in enumerate(chart.series):
            points = " ".join(f"{xpos(x)},{ypos(v)}" for x, v in zip(xs, s.values, strict=True))
            series_out.append(_series_style(si, s.name, points=points))
    return {
        "key": chart.key,
        "title": chart.title,
        "kind": chart.kind,
        "width": width,
        "height": height,
        "plot": {"x0": x0, "x1": x1, "y0": y0, "y1": y1},
        "x_label": chart.x_label,
        "y_label": chart.y_label,
        "x_label_y": height - 8,
        "y_label_x": 14,
        "y_label_mid": round((y0 + y1) / 2, 2),
        "x_mid": round((x0 + x1) / 2, 2),
        "x_ticks": x_ticks,
        "y_ticks": [{"pos": ypos(t), "label": _label(t)} for t in y_ticks],
        "series": series_out,
        "checksum": chart.checksum(),
    }


def _series_style(index: int, name: str, **geometry: Any) -> dict[str, Any]:
    return {
        "index": index,
        "name": name,
        "color": PALETTE[index % len(PALETTE)],
        "dash": DASHES[index % len(DASHES)],
        **geometry,
    }
