"""Plotly figure specifications (plain dicts) for the campaign and verdict pages.

Why dicts and not ``plotly.graph_objects``: a figure is data the browser's plotly.js draws; building it
through the Python object model validates every attribute and costs tens of milliseconds a figure,
which the 300 ms page budget cannot spare. plotly.js itself is served from the installed ``plotly``
package (:func:`plotly_js_path`), never from a CDN.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from atb_agent.view._models import IterationView, VerdictView

_LAYOUT: dict[str, Any] = {"margin": {"l": 55, "r": 15, "t": 35, "b": 45}, "height": 320,
                           "template": None, "hovermode": "closest", "legend": {"orientation": "h", "y": -0.2}}


def plotly_js_path() -> Path | None:
    """plotly.min.js as the ``plotly`` package ships it; None when plotly is not installed."""
    try:
        import plotly  # type: ignore[import-untyped]
    except ImportError:
        return None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    return path if path.is_file() else None


def _layout(title: str, x: str, y: str) -> dict[str, Any]:
    return {**_LAYOUT, "title": {"text": title, "font": {"size": 14}}, "xaxis": {"title": {"text": x}},
            "yaxis": {"title": {"text": y}}}


def best_so_far_figure(iterations: list[IterationView], curve: list[float | None]) -> dict[str, Any]:
    """The best usable speedup after each slot, with every iteration's speedup and interval beside it."""
    usable = [it for it in iterations if it.usable and it.speedup is not None]
    other = [it for it in iterations if not it.usable and it.speedup is not None]

    def points(its: list[IterationView], name: str, color: str) -> dict[str, Any]:
        return {"type": "scatter", "mode": "markers", "name": name, "x": [it.idx for it in its],
                "y": [it.speedup for it in its], "marker": {"color": color, "size": 8},
                "error_y": {"type": "data", "symmetric": False,
                            "array": [(it.ci_high or it.speedup or 0) - (it.speedup or 0) for it in its],
                            "arrayminus": [(it.speedup or 0) - (it.ci_low or it.speedup or 0) for it in its]},
                "customdata": [it.verdict_id for it in its],
                "hovertemplate": "iteration %{x}: %{y:.3f}x<extra>" + name + "</extra>"}

    data = [{"type": "scatter", "mode": "lines", "line": {"shape": "hv", "width": 3, "color": "#1f5fbf"},
             "name": "best so far (usable)", "x": list(range(len(curve))), "y": curve,
             "hovertemplate": "after iteration %{x}: %{y:.3f}x<extra></extra>"},
            points(usable, "usable iteration", "#2e8b57"), points(other, "not usable", "#c0392b")]
    layout = _layout("Best-so-far speedup vs honest baseline", "iteration", "speedup (x)")
    layout["shapes"] = [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                         "line": {"dash": "dot", "color": "#888"}}]
    return {"data": data, "layout": layout}


def usability_figure(iterations: list[IterationView], budget: int) -> dict[str, Any]:
    """Usable iterations accumulated over the budget, and each unusable iteration's reason."""
    by_idx = {it.idx: it for it in iterations}
    total, cumulative = 0, []
    for i in range(budget):
        it = by_idx.get(i)
        total += 1 if it is not None and it.usable else 0
        cumulative.append(total if it is not None or i < len(iterations) else None)
    reasons: dict[str, int] = {}
    for it in iterations:
        if not it.usable:
            key = (it.unusable_reason or "unknown").split(":")[0][:40]
            reasons[key] = reasons.get(key, 0) + 1
    data = [{"type": "scatter", "mode": "lines+markers", "name": "usable iterations", "x": list(range(budget)),
             "y": cumulative, "line": {"shape": "hv", "color": "#2e8b57"}},
            {"type": "bar", "name": "unusable, by reason", "x": list(reasons), "y": list(reasons.values()),
             "xaxis": "x2", "yaxis": "y2", "marker": {"color": "#c0392b"}}]
    layout = _layout("Usability", "iteration", "usable so far")
    layout.update({"xaxis": {"domain": [0, 0.55], "title": {"text": "iteration"}},
                   "xaxis2": {"domain": [0.65, 1], "anchor": "y2"},
                   "yaxis2": {"anchor": "x2", "title": {"text": "iterations"}}})
    return {"data": data, "layout": layout}


def samples_figure(v: VerdictView) -> dict[str, Any]:
    """Histogram of every timed sample of both arms (the ratio's raw material)."""
    unit = "ns per call" if v.unit == "ns" else v.unit
    data = [{"type": "histogram", "name": f"candidate ({len(v.candidate_samples)})", "x": v.candidate_samples,
             "opacity": 0.65, "marker": {"color": "#1f5fbf"}},
            {"type": "histogram", "name": f"baseline: {v.baseline_label} ({len(v.baseline_samples)})",
             "x": v.baseline_samples, "opacity": 0.65, "marker": {"color": "#d68910"}}]
    layout = _layout("Timed samples", unit, "count")
    layout["barmode"] = "overlay"
    return {"data": data, "layout": layout}


def interval_figure(v: VerdictView, bar: float | None) -> dict[str, Any]:
    """The ratio with its confidence interval, and where the protocol's usability bar would put it."""
    if v.ratio is None:
        return {"data": [], "layout": _layout("No ratio: not measured", "speedup (x)", "")}
    lo, hi = v.ci_low if v.ci_low is not None else v.ratio, v.ci_high if v.ci_high is not None else v.ratio
    data = [{"type": "scatter", "mode": "markers", "x": [v.ratio], "y": ["speedup"], "name": "ratio",
             "marker": {"size": 12, "color": "#1f5fbf"},
             "error_x": {"type": "data", "symmetric": False, "array": [hi - v.ratio], "arrayminus": [v.ratio - lo]},
             "hovertemplate": f"{v.ratio:.4f}x [{lo:.4f}, {hi:.4f}]<extra></extra>"}]
    layout = _layout("Interval", "speedup (x)", "")
    layout["height"] = 180
    shapes = [{"type": "line", "x0": 1, "x1": 1, "yref": "paper", "y0": 0, "y1": 1, "line": {"dash": "dot", "color": "#888"}}]
    if bar is not None:
        for edge in (v.ratio * (1 - bar), v.ratio * (1 + bar)):
            shapes.append({"type": "line", "x0": edge, "x1": edge, "yref": "paper", "y0": 0.2, "y1": 0.8,
                           "line": {"color": "#2e8b57", "dash": "dash"}})
    layout["shapes"] = shapes
    return {"data": data, "layout": layout}


def figure_json(fig: dict[str, Any]) -> str:
    """JSON safe inside a ``<script type="application/json">`` element."""
    return json.dumps(fig, separators=(",", ":")).replace("</", "<\\/")


__all__ = ["best_so_far_figure", "figure_json", "interval_figure", "plotly_js_path", "samples_figure",
           "usability_figure"]
