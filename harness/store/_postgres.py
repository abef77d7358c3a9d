"""The PostgreSQL results store: the same tables, rules and hash chain as SQLite, on a server.

Why a server store: a sweep's workers on many machines write to one store at once, which a SQLite
file cannot take across machines. Why the same rules: every ingest and append-only rule of
``schema.sql`` exists here as a PostgreSQL constraint or PL/pgSQL trigger (``schema_pg.sql``),
raising ``atb_rule:<rule>: ...`` with the same rule names, so a raw ``INSERT`` through ``psql`` is refused
just as one through ``sqlite3`` is, and ``tests/test_store_conformance.py`` holds both to one suite.

What differs, and why:

* Writes serialise on one transaction-scoped advisory lock (taken by every write transaction here, and
  by the chain trigger for a raw writer), the server's equivalent of SQLite's ``BEGIN IMMEDIATE``:
  the store-wide hash chain needs one order of rows, and the lock is what makes concurrent writers
  neither lose nor duplicate a row.
* ``INTEGER PRIMARY KEY`` ids are filled in by the writer (the next id under the lock, as SQLite's
  AUTOINCREMENT would) or, for a raw insert without one, by a trigger; upserts (``ON CONFLICT``) are
  refused by the same ``duplicate_key`` rule that refuses SQLite's ``REPLACE``.
* The record-level methods (sessions, verdicts, reports, the campaign tables' typed reads...) are the
  shared core's (:class:`harness.store._base.StoreBase`), whose SQL is dialect-neutral (``json_extract``
  is a function of ``schema_pg.sql``); this class, a sibling of :class:`SqliteStore` under it, supplies
  only the plumbing: connection, transactions, placeholders, rows, the chained insert, schema creation
  and verification.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.store._chain import CHAINED_TABLES, GENESIS, ColumnSpec, build_row, row_at, row_hash
from harness.store._errors import IngestRejected, StoreError, StoreSchemaVersionError, StoreTampered
from harness.store._pg_schema import CHAIN_LOCK, PG_MAX_SEQ_SQL, schema_pg_sql
from harness.store._base import StoreBase

if TYPE_CHECKING:
    import psycopg

    from harness.store._verify import StoreVerification

_RULE_RE = re.compile(r"atb_rule:(?P<rule>[a-z_]+): (?P<msg>[^\n]*)")


def pg_dsn(url: str) -> str:
    """A libpq DSN from a PostgreSQL URL (``postgresql+psycopg://`` is accepted as SQLAlchemy writes it)."""
    return "postgresql://" + url.split("://", 1)[1]


_HEAD_SQL = "SELECT chain_seq, row_hash, t FROM (" + " UNION ALL ".join(
    f"(SELECT chain_seq, row_hash, '{t}' AS t FROM {t} ORDER BY chain_seq DESC LIMIT 1)" for t in CHAINED_TABLES
) + ") AS heads ORDER BY chain_seq DESC LIMIT 1"


# The head, the store's id (chain_seq 1's hash) and the newest protocol in one query: the checkpoint's read.
_SIGN_HEAD_SQL = (
    "SELECT h.chain_seq, h.row_hash, (SELECT row_hash FROM (" + " UNION ALL ".join(
        f"(SELECT row_hash FROM {t} WHERE chain_seq = 1)" for t in CHAINED_TABLES)
    + ") AS first LIMIT 1), p.version, p.sha256 FROM (" + _HEAD_SQL + ") AS h LEFT JOIN "
    "(SELECT version, sha256 FROM protocols ORDER BY chain_seq DESC LIMIT 1) AS p ON true")


def head(x: Any) -> tuple[int, str, str | None]:
    """(seq, row_hash, table) of the chain's last row; (0, GENESIS, None) for an empty store.

    One round trip (each table's newest row by its chain_seq index, the largest of those): a writer
    reads the head once per transaction, under the write lock.
    """
    r = x.execute(_HEAD_SQL).fetchone()
    if r is None:
        return 0, GENESIS, None
    return int(r[0]), str(r[1]), str(r[2])


# ---------------------------------------------------------------------- SQL and rows
@lru_cache(maxsize=4096)
def pg_sql(sql: str, with_params: bool) -> str:
    """``?`` placeholders to ``%s`` (outside quoted strings and identifiers); ``%`` doubled when params are passed."""
    if not with_params:
        return sql
    out: list[str] = []
    quote: str | None = None
    for ch in sql:
        if quote is not None:
            out.append("%%" if ch == "%" else ch)
            if ch == quote:
                quote = None
            continue
        if ch in ("'", '"'):
            quote = ch
            out.append(ch)
        elif ch == "?":
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return "".join(out)


def _plain(v: Any) -> Any:
    """What SQLite would give back: aggregates over BIGINT come back as Decimal here, as int there."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    return v


class PgRow:
    """A row readable by position and by column name, like ``sqlite3.Row``."""

    __slots__ = ("_values", "_index")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = tuple(_plain(v) for v in values)
        self._index = index

    def __getitem__(self, key: int | str | slice) -> Any:
        if isinstance(key, str):
            try:
                return self._values[self._index[key.lower()]]
            except KeyError:
                raise IndexError(f"no column {key!r}") from None
        return self._values[key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PgRow):
            return self._values == other._values
        return self._values == other

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"PgRow({dict(zip(self._index, self._values))!r})"


_NUMERIC_OID = 1700
_CURSORS = itertools.count(1)


def _row_factory(cursor: Any) -> Any:
    desc = cursor.description or []
    index = {d.name.lower(): i for i, d in enumerate(desc)}

    def make(values: Sequence[Any]) -> PgRow:
        return PgRow(values, index)

    return make


class PgExecutor:
    """What :meth:`PostgresStore.transaction` yields, and what raw-SQL tests use: ``execute(sql, params)``
    with ``?`` placeholders, returning a cursor (``fetchone``, ``fetchall``, iteration, ``description``)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cur = self.conn.cursor(row_factory=_row_factory)
        params = list(params) if params else []
        cur.execute(pg_sql(sql, bool(params)), params or None)
        return cur

    def stream_rows(self, sql: str, batch: int = 20_000) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
        """(column names, rows as plain tuples) of ``sql`` through a server-side cursor fetched ``batch``
        rows per round trip: what ``verify``'s chain walk reads (a table of any size in bounded memory).

        Needs an open transaction (``verify`` holds one snapshot for the whole walk). A ``NUMERIC``
        column (which no table of the schema has, but an altered one could) is read as SQLite would give
        it back (:func:`_plain`), so it hashes as written. Outside a transaction the table is read whole.

        Raises:
            psycopg.Error: the table cannot be read (``verify`` reports it as a problem).
        """
        from psycopg.pq import TransactionStatus

        if self.conn.info.transaction_status == TransactionStatus.IDLE:
            # Outside a transaction (autocommit): one client-side read of the whole table.
            plain = self.conn.cursor(binary=True)
            plain.execute(sql)
            names = [d.name for d in plain.description or []]
            numeric = [i for i, d in enumerate(plain.description or []) if d.type_code == _NUMERIC_OID]
            rows_all = plain.fetchall()
            return names, (iter(rows_all) if not numeric else (tuple(_plain(v) for v in r) for r in rows_all))
        cur = self.conn.cursor(name=f"atb_walk_{next(_CURSORS)}", binary=True)
        cur.execute(sql)
        rows = cur.fetchmany(batch)
        names = [d.name for d in cur.description or []]
        numeric = [i for i, d in enumerate(cur.description or []) if d.type_code == _NUMERIC_OID]

        def gen() -> Iterator[tuple[Any, ...]]:
            nonlocal rows
            try:
                while rows:
                    if numeric:
                        for r in rows:
                            yield tuple(_plain(v) for v in r)
                    else:
                        yield from rows
                    rows = cur.fetchmany(batch)
            finally:
                cur.close()

        return names, gen()


def translate_pg(exc: BaseException) -> StoreError:
    """A PostgreSQL refusal as a typed error naming the rule (the same names as SQLite's)."""
    import psycopg

    text = str(exc)
    m = _RULE_RE.search(text)
    if m:
        return IngestRejected(m.group("rule"), m.group("msg"))
    if isinstance(exc, psycopg.errors.ForeignKeyViolation):
        return IngestRejected("foreign_key", "a row refers to a device, session, set or verdict that is not stored")
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return IngestRejected("duplicate", " ".join(text.split()))
    if isinstance(exc, (psycopg.errors.CheckViolation, psycopg.errors.NotNullViolation)):
        return IngestRejected("constraint", " ".join(text.split()))
    return StoreError(f"store error: {' '.join(text.split())}")


def insert_chained_pg(x: PgExecutor, table: str, row: dict[str, Any], specs: list[ColumnSpec] | None = None,
                      known_head: tuple[int, str] | None = None) -> tuple[int, str]:
    """Insert ``row`` as the chain's next link: the PostgreSQL twin of ``_chain.insert_chained``.

    The row is completed as SQLite would store it (defaults, the next id), hashed after the current
    head, inserted, and read back (``RETURNING *``) to check the hash. Call it inside a transaction that
    holds the write lock; outside one (a raw autocommit writer) the trigger takes the lock per statement.

    ``known_head`` is (seq, row_hash) of the chain's last row when the caller already knows it (the
    row it inserted last in this locked transaction); returns the new head.

    Raises:
        psycopg.Error: a rule refused the row.
        ValueError: the stored row does not hash as written (a bug in the writer).
    """
    from harness.store._pg_schema import reference_specs

    if table not in CHAINED_TABLES:
        raise ValueError(f"no table {table!r} in the results store")
    specs = specs if specs is not None else reference_specs()[table]
    next_id = None
    alias = [s.name for s in specs if s.rowid_alias]
    if alias:
        next_id = int(x.execute(f"SELECT coalesce(max({alias[0]}), 0) + 1 FROM {table}").fetchone()[0])
    full = build_row(specs, row, next_id)
    seq, prev = known_head if known_head is not None else head(x)[:2]
    full["chain_seq"] = seq + 1
    digest = row_hash(prev, table, full)
    cols = ", ".join(full) + ", row_hash"
    marks = ", ".join("?" for _ in full) + ", ?"
    back = x.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks}) RETURNING *", [*full.values(), digest]).fetchone()
    if back is None or row_hash(prev, table, {k: back[k] for k in back.keys()}) != digest:
        raise ValueError(f"the {table} row read back does not hash as written (a value's type changed on "
                         "storage): a bug in the writer; nothing was stored")
    return seq + 1, digest


def redact(url: str) -> str:
    if "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    cred, host = rest.rsplit("@", 1)
    return f"{scheme}://{cred.split(':', 1)[0]}@{host}"


def graph_checkpoint_migration(conn: Any, schema: str) -> int | None:
    """The newest migration LangGraph's PostgreSQL checkpointer has run in ``schema`` of the results
    store's server; None before its first set-up.

    Why here: the graph checkpoints live on the same server as the results (a campaign resumes from
    both), and every SQL statement the project writes lives in the store. ``conn`` is any psycopg 3
    connection (its row factory is not relied on).
    """
    from psycopg import sql
    from psycopg.rows import tuple_row

    cur = conn.cursor(row_factory=tuple_row)
    there = cur.execute("SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.checkpoint_migrations",)).fetchone()
    if not (there and there[0]):
        return None
    got = cur.execute(sql.SQL("SELECT max(v) FROM {}.checkpoint_migrations").format(sql.Identifier(schema))).fetchone()
    return None if got is None or got[0] is None else int(got[0])


class PostgresStore(StoreBase):
    """The results store on a PostgreSQL server (``postgresql://USER@HOST:PORT/DB``)."""

    path: str                          # the URL without its password (messages never carry it)
    conn: psycopg.Connection[tuple[Any, ...]]

    def __init__(self, url: str) -> None:  # noqa: D107 - see the class
        try:
            import psycopg
        except ImportError as exc:
            raise StoreError("the PostgreSQL store needs psycopg 3: pip install 'psycopg[binary]'") from exc
        self.url = url
        self.path = redact(url)
        try:
            self.conn = psycopg.connect(pg_dsn(url), autocommit=True, connect_timeout=30)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to the results store {self.path}: {' '.join(str(exc).split())}") from exc
        self.x = PgExecutor(self.conn)
        self._tx_head: tuple[int, str] | None = None
        self._specs: dict[str, list[ColumnSpec]] = {}
        try:
            self._open_schema()
        except psycopg.Error as exc:
            self.conn.close()
            raise StoreError(f"cannot open the results store at {self.path}: {' '.join(str(exc).split())}") from exc
        except BaseException:
            self.conn.close()
            raise
        self._register_known_protocols()

    # ------------------------------------------------------------------ schema
    def _open_schema(self) -> None:
        """Create the schema in an empty database (under the chain lock, so concurrent first opens
        create it once); otherwise check its version, its rule objects and the chain's head.

        Raises:
            StoreSchemaVersionError: the database holds another schema version (left untouched).
            StoreTampered: a rule trigger or function is missing, disabled or altered, or the head row's
                hash is wrong.
        """
        from harness.store._pg_schema import installed_version, object_problems
        from harness.store._verify import version_problem

        if installed_version(self.x) is None:
            with self.conn.transaction():
                self.x.execute("SELECT pg_advisory_xact_lock(%d)" % CHAIN_LOCK)
                if installed_version(self.x) is None:
                    if self.x.execute("SELECT 1 FROM pg_tables WHERE schemaname = current_schema() "
                                      "AND tablename = 'protocols'").fetchone():
                        raise StoreSchemaVersionError(f"results store {self.path}: the database holds AutoTuneBench "
                                                      "tables but no schema version; it was not written by this code")
                    self.conn.execute(schema_pg_sql())
        if installed_version(self.x) == 2:
            self._upgrade_from_2()
        version = installed_version(self.x) or 0
        problem = version_problem(version)
        if problem is not None:
            raise StoreSchemaVersionError(f"results store {self.path}: {problem.detail}")
        objects = object_problems(self.x)
        if objects:
            raise StoreTampered(str(self.path), objects[0].line(), len(objects))
        self._check_head()

    def _upgrade_from_2(self) -> None:
        """Schema 2 -> 3 in place, under the write lock: measurements gains ``round_lengths_json`` (NULL in
        every stored row, which the chain leaves out of the hash, so every row keeps its hash) and the
        rule functions are re-created from ``schema_pg.sql``. The chain head is checked after, as on
        every open, and ``verify()`` replays every row through the rules."""
        with self.conn.transaction():
            self.x.execute("SELECT pg_advisory_xact_lock(%d)" % CHAIN_LOCK)
            from harness.store._pg_schema import installed_version

            if installed_version(self.x) != 2:
                return
            self.x.execute(
                "ALTER TABLE measurements ADD COLUMN IF NOT EXISTS round_lengths_json TEXT CHECK ("
                "round_lengths_json IS NULL OR (atb_json_valid(round_lengths_json) "
                "AND jsonb_typeof(atb_jsonb(round_lengths_json)) = 'array' "
                "AND jsonb_array_length(atb_jsonb(round_lengths_json)) > 0))")
            self.conn.execute(schema_pg_sql())

    def _check_head(self) -> None:
        seq, stored, table = head(self.x)
        if seq == 0 or table is None:
            return
        prev = "0" * 64
        if seq > 1:
            before = row_at(self.x, seq - 1)
            if before is None:
                raise StoreTampered(str(self.path), f"chain_seq {seq - 1} is missing: a row was deleted")
            prev = str(before[1]["row_hash"])
        found = row_at(self.x, seq)
        assert found is not None
        if row_hash(prev, table, found[1]) != stored:
            raise StoreTampered(str(self.path), f"{table} (chain_seq {seq}): row_hash does not match the row's "
                                "content: it was changed after it was written")

    def chain_head(self) -> tuple[int, str]:
        """(chain_seq, row_hash) of the newest row in one round trip (the checkpoint's head read)."""
        seq, digest, _ = head(self.x)
        return seq, digest

    def append_signed_head(self, sign: Callable[[str | None, int, str], Any]) -> Any:
        """Sign the head and append its checkpoint row right after it, in one transaction under the
        write lock: :func:`harness.store._checkpoint.write_checkpoint`'s PostgreSQL path.

        Three round trips: (1) ``BEGIN``, the lock, and the head, the store's id and the newest protocol in
        one prepared query, pipelined; (2) the chained ``INSERT ... RETURNING *`` (the row read back is checked against its hash
        before anything commits, as every write here); (3) ``COMMIT``. The ordinary path took eight
        (``benchmarks/results/checkpoint_cpu.md``). The head signed is the row just before the checkpoint.

        Returns the ``Checkpoint`` that ``sign(store_id, head_seq, head_hash)`` made.

        Raises:
            CheckpointError: the store is empty or holds no protocol row (from ``sign`` or here).
            IngestRejected / StoreError: the store refused the row; nothing was written.
        """
        import psycopg

        from harness.records import canonical_json, new_id, utc_now
        from harness.store._checkpoint import CHECKPOINT_KIND, CheckpointError

        try:
            with self.conn.pipeline():  # BEGIN, the lock and the read in one round trip
                self.conn.execute("BEGIN")
                self.conn.execute(f"SELECT pg_advisory_xact_lock({CHAIN_LOCK})")
                cur = self.conn.execute(_SIGN_HEAD_SQL, prepare=True)  # planned once per connection
            got = cur.fetchone()
            seq, head_hash, store_id, p_version, p_sha = got if got is not None else (0, GENESIS, None, None, None)
            cp = sign(None if store_id is None else str(store_id), int(seq), str(head_hash))
            if p_version is None:
                raise CheckpointError(f"the results store {self.path} holds no protocol row: nothing to sign")
            row = {"id": new_id(CHECKPOINT_KIND), "kind": CHECKPOINT_KIND, "subject": cp.store_id,
                   "body_json": canonical_json(cp.model_dump(mode="json")), "created_at": utc_now(),
                   "protocol_version": str(p_version), "protocol_sha256": str(p_sha)}
            insert_chained_pg(self.x, "reports", row, self._columns("reports"), (int(seq), str(head_hash)))
            self.conn.execute("COMMIT")
        except psycopg.Error as exc:
            self._rollback_quietly()
            raise translate_pg(exc) from exc
        except ValueError as exc:
            self._rollback_quietly()
            raise StoreError(str(exc)) from exc
        except BaseException:
            self._rollback_quietly()
            raise
        return cp

    def _rollback_quietly(self) -> None:
        from psycopg.pq import TransactionStatus

        try:
            if not self.conn.closed and self.conn.info.transaction_status != TransactionStatus.IDLE:
                self.conn.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 - the error being raised is the one that matters
            pass

    def verify(self, key_dir: Path | str | None = None) -> StoreVerification:
        """Schema version and rule objects, the whole hash chain, every row replayed through the rules
        (into an in-memory copy of the SQLite schema: the rules are the same), and the signed checkpoints
        against ``key_dir``'s key and log. Writes nothing."""
        from harness.store._pg_schema import verify_pg

        return verify_pg(self, key_dir)

    # ------------------------------------------------------------------ plumbing
    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[PgExecutor]:
        """One atomic write under the store's write lock; a refusal rolls it back and raises IngestRejected."""
        import psycopg

        self._tx_head = None
        try:
            with self.conn.transaction():
                self.x.execute("SELECT pg_advisory_xact_lock(%d)" % CHAIN_LOCK)
                yield self.x
        except psycopg.Error as exc:
            raise translate_pg(exc) from exc
        finally:
            self._tx_head = None

    def _columns(self, table: str) -> list[ColumnSpec]:
        """Column names, declared types and defaults as the SQLite schema declares them: the hash is
        over the row as SQLite would store it, so the two stores hash a row alike."""
        from harness.store._pg_schema import reference_specs

        if table not in self._specs:
            self._specs[table] = reference_specs()[table]
        return self._specs[table]

    def _insert(self, conn: Any, table: str, row: dict[str, Any]) -> None:
        """Insert one row as the chain's next link (inside :meth:`transaction`, which holds the lock).

        Raises:
            psycopg.Error: a rule refused the row (``transaction`` turns it into IngestRejected).
            StoreError: the stored row does not hash as written (a bug in the writer); rolled back.
        """
        if table not in CHAINED_TABLES:
            raise StoreError(f"no table {table!r} in the results store")
        try:
            # Inside the locked transaction nobody else appends: the row inserted last is the head.
            self._tx_head = insert_chained_pg(conn, table, row, self._columns(table), self._tx_head)
        except ValueError as exc:
            raise StoreError(str(exc)) from exc

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[Any]:
        import psycopg

        try:
            return list(self.x.execute(sql, params).fetchall())
        except psycopg.Error as exc:
            raise translate_pg(exc) from exc

    # ------------------------------------------------------------------ "add if absent", race-free
    # StoreBase checks for an existing row before its write transaction; with many writers at once
    # two can both find none, and the second insert is refused as a duplicate. That refusal means the
    # row is there, which is all these idempotent calls promise, so it is taken as success.
    def register_protocol(self, protocol: Any) -> Any:
        try:
            return super().register_protocol(protocol)
        except IngestRejected as exc:
            if exc.rule not in _DUPLICATE_RULES:
                raise
            return super().register_protocol(protocol)

    def add_device(self, fp: Any, ref: Any) -> str:
        try:
            return super().add_device(fp, ref)
        except IngestRejected as exc:
            if exc.rule not in _DUPLICATE_RULES or not self.query("SELECT 1 FROM devices WHERE sha256 = ?", (fp.sha256,)):
                raise
            return str(fp.sha256)

    def add_task(self, task_id: str, kind: str, source_sha256: str, metadata: dict[str, Any], ref: Any) -> None:
        try:
            super().add_task(task_id, kind, source_sha256, metadata, ref)
        except IngestRejected as exc:
            if exc.rule not in _DUPLICATE_RULES or not self.query("SELECT 1 FROM tasks WHERE id = ?", (task_id,)):
                raise

    def add_candidate(self, content: str, kind: str, ref: Any) -> str:
        from harness.records import sha256_text

        try:
            return super().add_candidate(content, kind, ref)
        except IngestRejected as exc:
            digest = sha256_text(content)
            if exc.rule not in _DUPLICATE_RULES or not self.query("SELECT 1 FROM candidates WHERE sha256 = ?", (digest,)):
                raise
            return digest


_DUPLICATE_RULES = ("duplicate_key", "duplicate")


__all__ = ["CHAIN_LOCK", "graph_checkpoint_migration", "PG_MAX_SEQ_SQL", "PgExecutor", "PgRow", "PostgresStore", "head", "insert_chained_pg", "pg_dsn",
           "pg_sql", "schema_pg_sql", "translate_pg"]
