"""Open the results store for reading only, and verify it off the request path.

``atb view`` must never write to the store it shows: it reads through
:func:`harness.store.open_read_only` (the store's own read methods over a connection the database keeps
read-only).

Why verification runs in a thread: ``atb store verify`` replays every row through the rules, seconds
on a large store, while a page must render in well under a second. The index shows the newest result
and the chain head it covered; a moved head is verified again in the background.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.redact import redact
from harness.store import StoreError, StoreUnavailable, StoreVerification, open_read_only, verify_path
from harness.store._open import sqlite_path, store_kind


class VerifyState(BaseModel):
    """What the index shows first: the newest ``atb store verify`` result, or why there is none."""

    model_config = ConfigDict(frozen=True)
    state: Literal["pending", "verified", "failed", "missing", "error"]
    store: str
    message: str = ""
    head_seq: int = 0
    rows_checked: int = 0
    problems: list[str] = Field(default_factory=list)
    problem_count: int = 0
    signed: str = ""                  # the checkpoint line (covered head, unsigned rows), "" when none
    checked_at: float = 0.0
    seconds: float = 0.0


def verify_store(url: str, key_dir: str | None = None) -> VerifyState:
    """Run the full ``atb store verify`` on ``url``; never raises (a missing store is a state)."""
    started = time.monotonic()
    name = str(sqlite_path(url)) if store_kind(url) == "sqlite" else redact(url)
    try:
        if store_kind(url) == "sqlite":
            path = sqlite_path(url)
            if not path.is_file():
                return VerifyState(state="missing", store=str(path), checked_at=time.time(),
                                   message=f"no results store at {path}: nothing to verify")
            result: StoreVerification = verify_path(path, key_dir)
        else:
            store = open_read_only(url)
            name = str(store.path)
            try:
                result = store.verify(key_dir)
            finally:
                store.close()
    except StoreError as exc:
        state: Literal["missing", "error"] = "missing" if isinstance(exc, StoreUnavailable) else "error"
        return VerifyState(state=state, store=name, message=str(exc), checked_at=time.time())
    except Exception as exc:  # noqa: BLE001 - a page shows what went wrong, never a traceback
        return VerifyState(state="error", store=name, message=f"{type(exc).__name__}: {exc}", checked_at=time.time())
    cp = result.checkpoint
    signed = cp.line() if cp is not None else ""
    return VerifyState(state="verified" if result.ok else "failed", store=result.path,
                       message="" if result.ok else (result.first_problem or ""),
                       head_seq=result.head_seq, rows_checked=result.rows_checked,
                       problems=[p.line() for p in result.problems[:20]], problem_count=len(result.problems),
                       signed=signed, checked_at=time.time(), seconds=time.monotonic() - started)


class Verifier:
    """Keeps the newest verification of the store and re-runs it, one at a time, when the head moves."""

    def __init__(self, url: str, key_dir: str | None = None) -> None:
        self.url = url
        self.key_dir = key_dir
        self._lock = threading.Lock()
        self._result: VerifyState = VerifyState(state="pending", store=redact(url), message="verification running")
        self._running = False
        self._done = threading.Event()

    @property
    def result(self) -> VerifyState:
        with self._lock:
            return self._result

    def request(self, head_seq: int | None) -> None:
        """Start a verification unless one runs or the newest already covers ``head_seq``."""
        with self._lock:
            if self._running:
                return
            r = self._result
            if r.state != "pending" and head_seq is not None and r.head_seq == head_seq:
                return
            if r.state in ("missing", "error") and head_seq is None and r.checked_at > time.time() - 5:
                return
            self._running = True
            self._done.clear()
        threading.Thread(target=self._run, name="atb-view-verify", daemon=True).start()

    def _run(self) -> None:
        result = verify_store(self.url, self.key_dir)   # never raises
        with self._lock:
            self._result = result
            self._running = False
        self._done.set()

    def wait(self, timeout: float = 60.0) -> VerifyState:
        """Block until the running verification ends (tests and the benchmark use this)."""
        self._done.wait(timeout)
        return self.result


def describe_path(url: str) -> Path | None:
    """The SQLite file ``url`` names, or None for a server store (transcripts are searched beside it)."""
    return sqlite_path(url) if store_kind(url) == "sqlite" else None


__all__ = ["StoreUnavailable", "Verifier", "VerifyState", "describe_path", "open_read_only", "verify_store"]

