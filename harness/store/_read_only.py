"""Open a results store for reading only: the same read methods, over a connection the database keeps read-only.

Why not :func:`harness.store.open_store`: its constructors create the schema in an empty file, switch the
journal mode and register the running protocol, which are all writes. Readers that must never write
(``atb view``, ``atb ab``'s preflight, which must leave a store it refuses byte-identical) use the same
:class:`SqliteStore` / ``PostgresStore`` read methods over a connection the database itself holds
read-only: SQLite's ``mode=ro`` URI, PostgreSQL's ``default_transaction_read_only``. A write through it
is refused by the database, not merely avoided here.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from harness.redact import redact
from harness.store._errors import StoreError
from harness.store._open import sqlite_path, store_kind
from harness.store._protocol import ResultStore


class StoreUnavailable(StoreError):
    """The store a URL names does not exist or cannot be read (nothing was created to find out)."""


def sqlite_read_only(path: Path, *, follow_writers: bool = True) -> sqlite3.Connection:
    """A read-only connection to the SQLite file ``path``.

    ``follow_writers`` (a reader that stays open, ``atb view``): plain ``mode=ro``, which sees rows a
    writer adds later, at the price of creating the ``-shm`` file of a WAL-mode store. Without it (a
    one-off read that must change no byte beside the file, the A/B preflight): with no ``-wal`` present
    nothing is pending, so the file is opened ``immutable`` (no journal files at all); with one present
    (a writer is or was there) the existing files are used as they are.
    """
    wal = path.with_name(path.name + "-wal")
    flags = "mode=ro" if follow_writers or wal.exists() else "mode=ro&immutable=1"
    return sqlite3.connect(f"file:{quote(str(path.resolve()))}?{flags}", uri=True, isolation_level=None,
                           check_same_thread=False, timeout=30.0)


def open_read_only(url: str | Path, *, follow_writers: bool = True) -> ResultStore:
    """A store whose every read method works and whose connection the database keeps read-only
    (``follow_writers``: see :func:`sqlite_read_only`; a server store always sees committed rows).

    Raises:
        StoreUnavailable: no SQLite file at the path, a file that is not a database, or a server that
            cannot be reached.
    """
    if store_kind(url) == "postgresql":
        return _open_postgres(str(url))
    from harness.store._sqlite import SqliteStore

    path = sqlite_path(url)
    if not path.is_file():
        raise StoreUnavailable(f"no results store at {path} (run `atb run ... --db {path}` first)")
    try:
        conn = sqlite_read_only(path, follow_writers=follow_writers)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA schema_version").fetchone()   # fails here, not on first use, for a non-database
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"{path} cannot be read as a results store: {exc}") from exc
    store = SqliteStore.__new__(SqliteStore)   # the constructor writes (schema, WAL, protocol); see module doc
    store.path = path
    store.conn = conn
    store._specs = {}
    return store


def _open_postgres(url: str) -> ResultStore:
    from harness.store._postgres import PgExecutor, PostgresStore, pg_dsn

    try:
        import psycopg
    except ImportError as exc:
        raise StoreUnavailable("the PostgreSQL store needs psycopg 3: pip install 'psycopg[binary]'") from exc
    try:
        conn = psycopg.connect(pg_dsn(url), autocommit=True, connect_timeout=30,
                               options="-c default_transaction_read_only=on")
    except psycopg.Error as exc:
        raise StoreUnavailable(f"cannot connect to the results store {redact(url)}: {' '.join(str(exc).split())}") from exc
    store = PostgresStore.__new__(PostgresStore)
    store.url = url
    store.path = redact(url)
    store.conn = conn
    store.x = PgExecutor(conn)
    store._tx_head = None
    store._specs = {}
    return store


__all__ = ["StoreUnavailable", "open_read_only", "sqlite_read_only"]
