"""Where the tuner graph keeps its LangGraph checkpoints: a SQLite file, or the PostgreSQL server of the store.

Why two: a campaign resumes from its graph checkpoint, so the checkpoint must be wherever the campaign
can be resumed from. With a SQLite results store that is a file beside it (``checkpoints.sqlite``);
with a PostgreSQL store a resumed campaign may run on another node (a sweep's Ray worker died), so the
checkpoints live on the same server, through LangGraph's own ``PostgresSaver``
(``langgraph-checkpoint-postgres``). Both are siblings under LangGraph's ``BaseCheckpointSaver``; the
graph never knows which one it got.

On PostgreSQL the checkpointer's tables live in their own schema (:data:`PG_SCHEMA`), never among the
results store's hash-chained tables: a checkpoint is resumable scratch state, not a result, and
``atb store verify`` keeps judging exactly the tables it knows. Its set-up runs under an advisory lock,
so campaigns starting at once on many workers create the tables once.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from atb_agent.errors import CampaignError
from harness.store._postgres import graph_checkpoint_migration

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

CheckpointTarget = Union[Path, str]
"""A SQLite checkpoint file (a ``Path``, or a string without a scheme), or a ``postgresql://`` URL."""

PG_SCHEMA = "atb_graph_checkpoints"
_SETUP_LOCK = 0x617462_6770     # advisory lock key for the checkpointer's set-up ("atbgp")
SETUP_WAIT_S = 300.0
_PG_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def is_postgres(target: CheckpointTarget) -> bool:
    """True when ``target`` names a PostgreSQL server rather than a SQLite file."""
    return isinstance(target, str) and target.startswith(_PG_SCHEMES)


def describe(target: CheckpointTarget) -> str:
    """``target`` fit for messages: a file path, or the URL without its password."""
    if not is_postgres(target):
        return str(target)
    from harness.store._postgres import redact

    return f"{redact(str(target))} (schema {PG_SCHEMA})"


def _pg_dsn(url: str) -> str:
    return "postgresql://" + url.split("://", 1)[1]


@contextmanager
def open_checkpointer(target: CheckpointTarget) -> Iterator[BaseCheckpointSaver[str]]:
    """A LangGraph checkpointer on ``target``, closed on exit.

    SQLite: ``SqliteSaver`` on the file (its folder is created). PostgreSQL: ``PostgresSaver`` on one
    autocommit connection whose ``search_path`` is :data:`PG_SCHEMA`; the schema and LangGraph's
    tables are created on first use (``setup()``), under an advisory lock.

    Raises:
        CampaignError: ``langgraph-checkpoint-postgres`` is not installed, or the server cannot be reached.
    """
    if not is_postgres(target):
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(str(path), check_same_thread=False)) as file_conn:
            yield SqliteSaver(file_conn)
        return
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise CampaignError("LLM campaigns on a PostgreSQL store need LangGraph's PostgreSQL checkpointer: "
                            "pip install 'langgraph-checkpoint-postgres>=3.2,<4'") from exc
    url = str(target)
    try:
        conn = psycopg.connect(_pg_dsn(url), autocommit=True, prepare_threshold=0, row_factory=dict_row,
                               connect_timeout=30, options=f"-c search_path={PG_SCHEMA}")
    except psycopg.Error as exc:
        raise CampaignError(f"cannot reach the checkpoint store {describe(url)}: {' '.join(str(exc).split())}") from exc
    try:
        saver = PostgresSaver(conn)
        _setup_once(conn, saver)
        yield saver
    finally:
        conn.close()


def _setup_once(conn: Any, saver: Any) -> None:
    """Create the schema and run LangGraph's migrations once, however many workers start together.

    Why a polled try-lock, not ``pg_advisory_lock``: a migration is ``CREATE INDEX CONCURRENTLY``, which
    waits for every other open transaction, including a worker's statement blocked on the lock: a
    deadlock (seen with four workers). Waiting between short ``pg_try_advisory_lock`` statements holds
    no transaction open. An up-to-date schema skips the lock altogether.
    """
    latest = len(saver.MIGRATIONS) - 1

    def current() -> int | None:
        return graph_checkpoint_migration(conn, PG_SCHEMA)

    if current() == latest:
        return
    deadline = time.monotonic() + SETUP_WAIT_S
    while not conn.execute(f"SELECT pg_try_advisory_lock({_SETUP_LOCK}) AS got").fetchone()["got"]:
        if time.monotonic() > deadline:
            raise CampaignError(f"the graph checkpointer's set-up lock was held for over {SETUP_WAIT_S:.0f} s")
        time.sleep(0.2)
    try:
        if current() != latest:
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {PG_SCHEMA}")
            saver.setup()
    finally:
        conn.execute(f"SELECT pg_advisory_unlock({_SETUP_LOCK})")


def checkpoint_target(store: str | Path, default_file: Path) -> CheckpointTarget:
    """The checkpointer a campaign on the results store ``store`` uses: the store's own server when it is
    PostgreSQL, else ``default_file`` (a SQLite file beside the store)."""
    text = str(store)
    if text.startswith(_PG_SCHEMES):
        return text
    return default_file


__all__ = ["PG_SCHEMA", "CheckpointTarget", "checkpoint_target", "describe", "is_postgres", "open_checkpointer"]
