"""Reports of runs and comparisons: a self-contained HTML page and PNG plots, from the store only."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.store import SqliteStore
from harness.tuning.reports._data import ReportData, ReportError, collect
from protocol import Protocol


class ReportFiles(BaseModel):
    model_config = ConfigDict(frozen=True)

    html: str
    pngs: list[str]
    runs: list[str]
    comparison_verdict: str | None


def build_report(store: SqliteStore, run_ids: list[str], out_dir: Path | str, protocol: Protocol) -> ReportFiles:
    """Write ``report.html``, ``best_so_far.png`` and ``usability.png`` into ``out_dir``.

    Raises:
        ReportError: an id names neither a run nor a registration, no run was found, or ``out_dir``
            cannot be written.
    """
    from harness.tuning.reports._html import render_html
    from harness.tuning.reports._plots import plot_best_so_far, plot_usability

    data = collect(store, run_ids, protocol)
    if not data.arms:
        raise ReportError(f"no runs found for {run_ids}; a registration with no claimed runs has nothing to show")
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        best = plot_best_so_far(data.arms, out / "best_so_far.png")
        usab = plot_usability(data.arms, out / "usability.png")
        page = out / "report.html"
        page.write_text(render_html(data, protocol, best, usab), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write the report into {out}: {exc}") from exc
    return ReportFiles(html=str(page), pngs=[str(best), str(usab)], runs=[a.summary.campaign.id for a in data.arms],
                       comparison_verdict=data.comparison.verdict if data.comparison else None)


__all__ = ["ReportData", "ReportError", "ReportFiles", "build_report", "collect"]
