"""The SQLite results store: one file, WAL, foreign keys on, ingest rules inside the database.

Why rules live in SQL and not (only) in Python: a result that bypasses this module, a raw INSERT from
a script or another tool, must meet the same bar. The Python layer only translates the database's
refusals into :class:`IngestRejected` with the rule's name. The record-level methods (verdicts, sessions,
the campaign tables' reads...) are :class:`harness.store._base.StoreBase`'s, shared with the PostgreSQL
store, its sibling: this class is SQLite's plumbing under them (the file, its schema and upgrade, WAL,
``BEGIN IMMEDIATE`` transactions, the chained insert, ``query`` and ``verify``).

Why a hash chain as well: any writer with file access can ``DROP TRIGGER``. Every row is written as the
next link of one store-wide chain (:mod:`harness.store._chain`), opening refuses a store whose schema
objects differ from ``schema.sql``, and :meth:`SqliteStore.verify` recomputes the chain and replays
every row through the rules (:mod:`harness.store._verify`), so tampering is named, never repaired.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.store._base import StoreBase
from harness.store._chain import CHAINED_TABLES, ColumnSpec, column_specs, head, insert_chained, row_at, row_hash
from harness.store._errors import StoreError, StoreSchemaVersionError, StoreTampered
from harness.store._sqlite_schema import translate
from harness.store._verify import SCHEMA_VERSION as _SCHEMA_VERSION
from harness.store._verify import (
    StoreVerification,
    schema_problems,
    schema_statements,
    user_version,
    verify_connection,
    version_problem,
)

SCHEMA_VERSION = _SCHEMA_VERSION


def connect(path: Path | str) -> sqlite3.Connection:
    """Open a connection with the settings every user of the file must have (foreign keys on)."""
    conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


class SqliteStore(StoreBase):
    """The embedded results store. Every write is one transaction; a refused write changes nothing.

    Opening checks before it writes anything: a file of another schema version is refused and left
    untouched, and a file whose tables, indexes or triggers differ from ``schema.sql`` (a dropped
    trigger, say) or whose newest row breaks the hash chain is refused as tampered
    (:class:`StoreTampered`), never repaired. :meth:`verify` checks every row.
    """

    path: Path
    conn: sqlite3.Connection

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.conn = connect(self.path)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the results store at {self.path}: {exc}") from exc
        try:
            self._open_schema()
            self.conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.Error as exc:
            self.conn.close()
            raise StoreError(f"cannot open the results store at {self.path}: {exc}") from exc
        except BaseException:
            self.conn.close()
            raise
        self._specs: dict[str, list[ColumnSpec]] = {}
        self._register_known_protocols()

    def _open_schema(self) -> None:
        """Create the schema in an empty file; otherwise check version, schema objects and chain head.

        Raises:
            StoreSchemaVersionError: another schema version (the file is not touched).
            StoreTampered: a table, index or trigger differs from schema.sql, or the head row's hash is wrong.
        """
        version = user_version(self.conn)
        if version == 0 and not self.query("SELECT 1 FROM sqlite_master LIMIT 1"):
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                if user_version(self.conn) == 0 and not self.query("SELECT 1 FROM sqlite_master LIMIT 1"):
                    for stmt in schema_statements():
                        self.conn.execute(stmt)
                    self.conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self.conn.execute("COMMIT")
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            version = user_version(self.conn)
        if version == 2:
            self._upgrade_from_2()
            version = user_version(self.conn)
        problem = version_problem(version)
        if problem is not None:
            raise StoreSchemaVersionError(f"results store {self.path}: {problem.detail}")
        objects = schema_problems(self.conn)
        if objects:
            raise StoreTampered(str(self.path), objects[0].line(), len(objects))
        self._check_head()

    # Schema 2 -> 3 changed these objects only: measurements gained round_lengths_json, and its insert
    # trigger the malformed_round_lengths rule.
    _CHANGED_IN_3 = (("table", "measurements"), ("trigger", "measurement_sealed"))

    def _upgrade_from_2(self) -> None:
        """Schema 2 -> 3 in place: rebuild ``measurements`` with ``round_lengths_json`` (NULL in every
        stored row; the chain leaves that NULL out of the hash, so every row keeps its hash) and
        re-create the triggers from ``schema.sql``.

        Refused, the file untouched, when any other table, index or trigger differs from ``schema.sql``:
        an upgrade must not repair a tampered store.

        Raises:
            StoreTampered: an object other than the two the upgrade changes differs from ``schema.sql``.
        """
        conn = self.conn
        other = [p for p in schema_problems(conn)
                 if not any(p.detail == f"{kind} {name} differs from its definition in schema.sql"
                            for kind, name in self._CHANGED_IN_3)]
        if other:
            raise StoreTampered(str(self.path), other[0].line(), len(other))
        cols = "id, set_id, seed, samples_json, protocol_version, protocol_sha256, chain_seq, row_hash"
        statements = schema_statements()
        create = [st for st in statements if "CREATE TABLE IF NOT EXISTS measurements (" in st]
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("PRAGMA legacy_alter_table = ON")
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if user_version(conn) == 2:
                    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
                        conn.execute(f'DROP TRIGGER "{name}"')
                    conn.execute("ALTER TABLE measurements RENAME TO atb_measurements_v2")
                    conn.execute(create[0])
                    conn.execute(f"INSERT INTO measurements ({cols}) SELECT {cols} FROM atb_measurements_v2 ORDER BY id")
                    conn.execute("DROP TABLE atb_measurements_v2")
                    for stmt in statements:
                        conn.execute(stmt)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        finally:
            conn.execute("PRAGMA legacy_alter_table = OFF")
            conn.execute("PRAGMA foreign_keys = ON")

    def _check_head(self) -> None:
        """The newest row must hash from its content and the row before it (a cheap check on every open)."""
        seq, stored, table = head(self.conn)
        if seq == 0 or table is None:
            return
        prev = "0" * 64
        if seq > 1:
            before = row_at(self.conn, seq - 1)
            if before is None:
                raise StoreTampered(str(self.path), f"chain_seq {seq - 1} is missing: a row was deleted")
            prev = str(before[1]["row_hash"])
        found = row_at(self.conn, seq)
        assert found is not None
        if row_hash(prev, table, found[1]) != stored:
            raise StoreTampered(str(self.path), f"{table} (chain_seq {seq}): row_hash does not match the row's "
                                "content: it was changed after it was written")

    def verify(self, key_dir: Path | str | None = None) -> StoreVerification:
        """Check schema version, every table/index/trigger against schema.sql, the hash chain, every
        rule on every row, and the signed checkpoints against ``key_dir``'s key and log (default
        ``$ATB_KEY_DIR`` or ``~/.config/autotunebench``). Writes nothing; never raises for what it finds
        (see ``problems``)."""
        return verify_connection(self.conn, str(self.path), key_dir)

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic write; a refusal rolls everything in it back and raises IngestRejected."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise translate(exc) from exc
        try:
            yield self.conn
        except sqlite3.Error as exc:
            self.conn.execute("ROLLBACK")
            raise translate(exc) from exc
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        else:
            self.conn.execute("COMMIT")

    def _columns(self, table: str) -> list[ColumnSpec]:
        if table not in self._specs:
            self._specs[table] = column_specs(self.conn, table)
        return self._specs[table]

    def _insert(self, conn: sqlite3.Connection, table: str, row: dict[str, Any]) -> None:
        """Insert one row as the next link of the hash chain (call inside :meth:`transaction`).

        Raises:
            sqlite3.Error: a rule refused the row (``transaction`` turns it into IngestRejected).
            StoreError: the stored row does not hash as written (a bug in the writer); rolled back.
        """
        if table not in CHAINED_TABLES:
            raise StoreError(f"no table {table!r} in the results store")
        try:
            insert_chained(conn, table, row, self._columns(table))
        except ValueError as exc:
            raise StoreError(str(exc)) from exc

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[sqlite3.Row]:
        return list(self.conn.execute(sql, params))
