"""Reading an ``atb sweep`` run from outside it: its one ``--json`` line and its store's rows. Shared by the
tests of the Ray sweep (``test_sweep.py``) and of the local one (``test_sweep_local.py``)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any


def finish(proc: subprocess.Popen[str], timeout: float = 400) -> tuple[int, dict[str, Any], str]:
    out, err = proc.communicate(timeout=timeout)
    lines = [x for x in out.splitlines() if x.strip()]
    assert len(lines) == 1, f"--json must print exactly one line, got {out!r}; stderr: {err[-3000:]}"
    return proc.returncode, json.loads(lines[0]), err


def store_rows(db: Path | str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read the store directly (SQLite read-only, or PostgreSQL), as an observer outside the sweep."""
    if str(db).startswith("postgresql://"):
        import psycopg

        from harness.store._postgres import PgExecutor

        with psycopg.connect(str(db), autocommit=True) as pg:
            try:
                return [tuple(r) for r in PgExecutor(pg).execute(sql, params).fetchall()]
            except psycopg.errors.UndefinedTable:
                return []
    db = Path(db)
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return list(conn.execute(sql, params))
    except sqlite3.OperationalError:           # the schema is still being created
        return []
    finally:
        conn.close()
