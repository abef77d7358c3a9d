"""Reading an ``atb sweep`` run from outside it: its one ``--json`` line and its store's rows. Shared by the
tests of the Ray sweep (``test_sweep.py``, ``test_sweep_llm_postgres.py``, which also share its
cluster, ``ray_cluster``) and of the local one (``test_sweep_local.py``)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
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


_RAY_HOLDER = """
import json, sys, ray
ctx = ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=96 << 20,
               logging_level="ERROR", log_to_driver=False)
print(json.dumps({"address": ctx.address_info["gcs_address"]}), flush=True)
sys.stdin.read()
ray.shutdown()
"""


@contextlib.contextmanager
def ray_cluster(env: dict[str, str] | None = None, cwd: Path | None = None) -> Iterator[str]:
    """A local Ray cluster for a test module, yielding its address: a helper process starts it with
    ``ray.init`` and holds it until its stdin closes, so the cluster's processes are the test's to stop.
    ``env`` is the workers' environment (a Ray worker inherits the cluster's, not the driver's)."""
    proc = subprocess.Popen([sys.executable, "-c", _RAY_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env, cwd=cwd)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, "the Ray holder process exited before the cluster came up"
        yield str(json.loads(line)["address"])
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
