"""The live progress table on stderr: campaigns done / running / failed / pending and usable iterations.

On a terminal it redraws in place (rich); otherwise (CI logs, a pipe) it prints one line whenever a
count changes, so a log shows the sweep's history without a line per second.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from pydantic import BaseModel


class ProgressRow(BaseModel):
    label: str
    campaigns: int = 0
    done: int = 0
    running: int = 0
    failed: int = 0
    pending: int = 0
    iterations: int = 0
    usable: int = 0

    def counts(self) -> tuple[int, ...]:
        return (self.done, self.running, self.failed, self.pending, self.iterations, self.usable)


class ProgressTable:
    """Render per-tuner rows and a total; call :meth:`update` as often as you like, :meth:`close` at the end."""

    def __init__(self, title: str, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.title = title
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self._last: tuple[int, ...] | None = None
        self._t0 = time.monotonic()
        self._live_obj = None
        if self.live:
            from rich.console import Console
            from rich.live import Live

            self._live_obj = Live(console=Console(file=self.stream), refresh_per_second=2, transient=False)
            self._live_obj.start()

    def _table(self, rows: list[ProgressRow], total: ProgressRow):  # type: ignore[no-untyped-def]
        from rich.table import Table

        t = Table(title=f"{self.title}  ({time.monotonic() - self._t0:.0f} s)")
        for col in ("tuner", "campaigns", "done", "running", "failed", "pending", "iterations", "usable"):
            t.add_column(col, justify="left" if col == "tuner" else "right")
        for r in [*rows, total]:
            t.add_row(r.label, *(str(x) for x in (r.campaigns, *r.counts())),
                      style="bold" if r is total else None)
        return t

    def update(self, rows: list[ProgressRow]) -> None:
        total = ProgressRow(label="total")
        for r in rows:
            for f in ("campaigns", "done", "running", "failed", "pending", "iterations", "usable"):
                setattr(total, f, getattr(total, f) + getattr(r, f))
        if self._live_obj is not None:
            self._live_obj.update(self._table(rows, total))
            return
        sig = tuple(x for r in rows for x in r.counts())
        if sig == self._last:
            return
        self._last = sig
        parts = "; ".join(f"{r.label}: {r.done}/{r.campaigns} done, {r.running} running, {r.failed} failed, "
                          f"{r.usable}/{r.iterations} usable" for r in rows)
        print(f"[{self.title} {time.monotonic() - self._t0:5.0f}s] total {total.done}/{total.campaigns} done, "
              f"{total.running} running, {total.failed} failed, {total.pending} pending, usable iterations "
              f"{total.usable}/{total.iterations} | {parts}", file=self.stream, flush=True)

    def close(self) -> None:
        if self._live_obj is not None:
            self._live_obj.stop()
            self._live_obj = None


__all__ = ["ProgressRow", "ProgressTable"]
