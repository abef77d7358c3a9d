"""``verify()``: is this store exactly what AutoTuneBench wrote?

Four checks, each naming the first bad object or row:

1. the schema version (``PRAGMA user_version``) is the one this code writes;
2. every table, index and trigger exists with the SQL of ``schema.sql`` (nothing dropped, altered or
   added: a dropped trigger is tampering, never silently recreated);
3. the hash chain: rows in ``chain_seq`` order are 1, 2, 3, ... with no gap, and each ``row_hash``
   recomputes from the row's content and the previous row's hash (:mod:`harness.store._chain`);
4. every rule: each row is replayed, in chain order, into a fresh in-memory database built from
   ``schema.sql``, so a row that was slipped in while a trigger was dropped is refused again there,
   even if the writer recomputed the whole chain; and each ``protocols`` row of a released version
   carries the digest in ``protocol/_released.py``.

5. signed checkpoints (issue 27, :mod:`harness.store._checkpoint`): each checkpoint row signed by the
   key folder's key must verify and name a head the chain holds as signed, and every head the key
   folder's log says it signed for this store must still be there with its checkpoint. This is what a
   writer without the key cannot forge: a rewrite with a recomputed chain, a truncation, deleted
   checkpoints. Rows after the newest checkpoint are counted as unsigned (``checkpoint.unsigned_rows``).

6. verdicts measured under a draft protocol (issue 27): every verdict's digest is checked against the
   released ones; their count (``draft_verdicts``) and the drafts (``draft_protocols``) are reported, not
   treated as problems (a development store is full of them); ``atb store verify --require-released``
   fails on any.

What it cannot see without a checkpoint: a writer with file access who appends rule-abiding rows and
recomputes the chain, or who removes rows from the end (the chain itself is keyless).
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.store._chain import CHAINED_TABLES, GENESIS, row_hash
from harness.store._checkpoint import ChainIndex, CheckpointReport, check_checkpoints
from harness.store._problems import ProblemKind, StoreProblem  # noqa: F401 - ProblemKind re-exported

SCHEMA_VERSION = 3
MAX_PROBLEMS = 200

class DraftProtocolCount(BaseModel):
    """A protocol (version, digest) that is not released, and how many stored verdicts it stamped."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: str
    sha256: str
    verdicts: int


def draft_counts(index: ChainIndex) -> tuple[int, list[DraftProtocolCount]]:
    """(verdicts under a draft protocol, each draft with its count) from the walked chain.

    By digest, never by the verdict's own ``protocol_draft`` stamp (which a store owner could edit): a
    digest that is not a released constant is a draft, whatever its version string says.
    """
    from protocol._released import RELEASED

    released = set(RELEASED.values())
    drafts = [DraftProtocolCount(version=v, sha256=d, verdicts=n)
              for (v, d), n in sorted(index.verdict_protocols.items()) if d not in released]
    return sum(d.verdicts for d in drafts), drafts


class StoreVerification(BaseModel):
    """The outcome of :func:`verify_connection`; ``ok`` only when ``problems`` is empty."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str
    ok: bool
    schema_version: int
    expected_schema_version: int = SCHEMA_VERSION
    rows_checked: int = 0
    head_seq: int = 0
    head_hash: str = GENESIS
    problems: list[StoreProblem] = Field(default_factory=list)
    checkpoint: CheckpointReport | None = Field(
        default=None, description="signed checkpoints of the head (issue 27); None when the chain could not be walked")
    draft_verdicts: int = Field(0, description=(
        "verdicts stamped with a protocol digest that is not released (protocol/_released.py): measured under a "
        "draft. Not a problem (``ok`` stays true); ``atb store verify --require-released`` makes it a failure"))
    draft_protocols: list[DraftProtocolCount] = Field(
        default_factory=list, description="each draft (version, digest) that stamped verdicts, with how many")

    @property
    def first_problem(self) -> str | None:
        return self.problems[0].line() if self.problems else None


# ------------------------------------------------------------------ expected schema
def _split_statements(script: str) -> list[str]:
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf)
            buf = ""
    if buf.strip() and not all(ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()):
        out.append(buf)
    return out


def schema_statements() -> list[str]:
    from harness.store._sqlite_schema import schema_sql

    return _split_statements(schema_sql())


def reference_database() -> sqlite3.Connection:
    """A fresh in-memory database built from ``schema.sql`` (foreign keys on)."""
    mem = sqlite3.connect(":memory:", isolation_level=None)
    mem.execute("PRAGMA foreign_keys = ON")
    for stmt in schema_statements():
        mem.execute(stmt)
    return mem


def replay_database() -> sqlite3.Connection:
    """:func:`reference_database` with every rule but chain_order: where the chain walk replays rows.

    The walk checks positions itself (1, 2, 3, ... with no gap or repeat) and replays rows at
    consecutive positions, so chain_order could only ever refuse a row after an earlier row was
    refused (a cascade of false problems); it was also a quarter of the replay's cost (a maximum over
    every table per row). duplicate_key and every other rule stay.
    """
    from harness.store._sqlite_schema import _chain_trigger

    mem = reference_database()
    for t in CHAINED_TABLES:
        mem.execute(f"DROP TRIGGER {t}_chain")
        mem.execute(_chain_trigger(t, chain_order=False))
    return mem


def _objects(conn: sqlite3.Connection) -> dict[tuple[str, str], str | None]:
    return {(str(r[0]), str(r[1])): (None if r[2] is None else str(r[2])) for r in conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}


@lru_cache(maxsize=1)
def expected_objects() -> dict[tuple[str, str], str | None]:
    """Every table, index and trigger of ``schema.sql`` with its SQL as SQLite stores it."""
    mem = reference_database()
    try:
        return _objects(mem)
    finally:
        mem.close()


@lru_cache(maxsize=1)
def primary_keys() -> dict[str, list[str]]:
    mem = reference_database()
    try:
        return {t: [str(r[1]) for r in sorted(mem.execute(f"PRAGMA table_info({t})"), key=lambda r: r[5]) if r[5]]
                for t in CHAINED_TABLES}
    finally:
        mem.close()


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def version_problem(version: int) -> StoreProblem | None:
    if version == SCHEMA_VERSION:
        return None
    if version > SCHEMA_VERSION:
        detail = (f"schema version {version} is newer than this code's {SCHEMA_VERSION}: use the AutoTuneBench "
                  "that wrote it (the file was left untouched)")
    elif version == 0:
        detail = "the file holds tables but no schema version (user_version 0): it was not written by AutoTuneBench"
    elif version == 2:
        detail = ("schema version 2 predates stored round boundaries (version 3): opening it for writing "
                  "(`atb verify-verdict`, or any command that records results) upgrades it in place, keeping every "
                  "row and hash")
    else:
        detail = (f"schema version {version} predates the hash chain (version 2) and cannot be "
                  "verified: move the file aside and re-create the store (re-measure what you need)")
    return StoreProblem(kind="schema_version", detail=detail)


def schema_problems(conn: sqlite3.Connection) -> list[StoreProblem]:
    """Tables, indexes and triggers missing, altered or added, compared with ``schema.sql``."""
    want = expected_objects()
    have = _objects(conn)
    out: list[StoreProblem] = []
    for (kind, name), sql in want.items():
        if (kind, name) not in have:
            out.append(StoreProblem(kind="schema_object", table=None, key=None,
                                    detail=f"{kind} {name} is missing (dropped outside AutoTuneBench)"))
        elif have[(kind, name)] != sql:
            out.append(StoreProblem(kind="schema_object",
                                    detail=f"{kind} {name} differs from its definition in schema.sql"))
    for (kind, name) in have:
        if (kind, name) not in want:
            out.append(StoreProblem(kind="schema_object", detail=f"{kind} {name} is not part of schema.sql"))
    return out


# ------------------------------------------------------------------ rows
def _key(table: str, row: dict[str, Any]) -> str:
    cols = primary_keys().get(table) or []
    if not cols:
        return "?"
    return "/".join(str(row.get(c)) for c in cols)


def _table_rows(conn: Any, table: str) -> tuple[list[str], Iterator[tuple[Any, ...]]] | None:
    """(column names, rows as tuples in chain order) of ``table``; None when it cannot be read.

    A store's executor may offer ``stream_rows(sql)`` (the PostgreSQL store: a server-side cursor inside
    the walk's one snapshot, fetched in large batches); otherwise the rows come from ``execute``.
    """
    sql = f"SELECT * FROM {table} ORDER BY chain_seq"
    stream = getattr(conn, "stream_rows", None)
    if stream is not None:
        return stream(sql)  # type: ignore[no-any-return]
    try:
        cur = conn.execute(sql)
    except sqlite3.Error:
        return None  # a dropped table or column is reported by schema_problems
    return [d[0] for d in cur.description], iter(cur)


def _rows(conn: Any, table: str) -> Iterator[tuple[int, str, tuple[Any, ...], list[str]]]:
    got = _table_rows(conn, table)
    if got is None:
        return
    names, rows = got
    try:
        at = names.index("chain_seq")
    except ValueError:
        return  # no chain column: reported by schema_problems / object_problems
    for r in rows:
        seq = r[at]
        yield (seq if type(seq) is int else -1), table, r, names


def _rule_of(exc: sqlite3.Error) -> str:
    from harness.store._sqlite_schema import translate

    err = translate(exc)
    rule = getattr(err, "rule", None)
    return f"breaks rule {rule}: {err}" if rule else f"cannot be stored again: {exc}"


def chain_and_rule_problems(conn: Any, index: ChainIndex | None = None) -> tuple[list[StoreProblem], int, int, str]:
    """Walk every row in chain order: links, contiguity, and a replay through every rule.

    ``index``, when given, is filled with every row's hash and table by position (for the checkpoint check).
    Returns (problems, rows checked, head seq, head hash).

    Cost (``benchmarks/bench_checkpoint.py``): one pass, rows as tuples (a dict only for the hash's
    canonical JSON), each table's INSERT built once, a row's key only when it has a problem. The
    replay through SQLite's triggers is most of what is left.
    """
    from protocol._released import RELEASED

    problems: list[StoreProblem] = []
    mem = replay_database()
    prev_seq, prev_hash, n = 0, GENESIS, 0
    inserts: dict[tuple[str, int], tuple[str, int]] = {}
    try:
        streams = [_rows(conn, t) for t in CHAINED_TABLES]
        for seq, table, values, names in heapq.merge(*streams, key=lambda x: x[0]):
            n += 1
            row = dict(zip(names, values))
            if index is not None:
                index.add(seq, table, row)
            if len(problems) >= MAX_PROBLEMS:
                break
            if seq == prev_seq:
                problems.append(StoreProblem(kind="chain", table=table, key=_key(table, row), chain_seq=seq,
                                             detail="a second row holds this chain position"))
            elif seq != prev_seq + 1:
                problems.append(StoreProblem(
                    kind="chain", table=table, key=_key(table, row), chain_seq=seq,
                    detail=f"the chain jumps from {prev_seq} to {seq}: a row before this one was deleted"))
            stored = row.get("row_hash")
            if stored != row_hash(prev_hash, table, row):
                problems.append(StoreProblem(
                    kind="row_hash", table=table, key=_key(table, row), chain_seq=seq,
                    detail="row_hash does not match the row's content and the previous row's hash: this row "
                           "(or the one before it) was changed after it was written"))
            if table == "protocols" and row.get("version") in RELEASED and row.get("sha256") != RELEASED[row["version"]]:
                problems.append(StoreProblem(
                    kind="released_protocol", table=table, key=_key(table, row), chain_seq=seq,
                    detail=f"protocol {row['version']} is released with digest {RELEASED[row['version']][:12]}… "
                           f"(protocol/_released.py), not {str(row.get('sha256'))[:12]}…"))
            plan = inserts.get((table, id(names)))
            if plan is None:
                plan = (f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                        names.index("chain_seq"))
                inserts[(table, id(names))] = plan
            sql, at = plan
            replay = list(values)
            replay[at] = n  # gaps are reported above; replay checks the rules, not positions
            try:
                mem.execute(sql, replay)
            except sqlite3.Error as exc:
                problems.append(StoreProblem(kind="rule", table=table, key=_key(table, row), chain_seq=seq,
                                             detail=_rule_of(exc)))
            prev_seq = seq
            prev_hash = str(stored)
    finally:
        mem.close()
    return problems, n, max(prev_seq, 0), prev_hash


def verify_connection(conn: sqlite3.Connection, path: str, key_dir: Path | str | None = None) -> StoreVerification:
    """Every check above on an open connection; writes nothing. ``key_dir`` holds the trusted checkpoint
    key and its log (default ``$ATB_KEY_DIR`` or ``~/.config/autotunebench``)."""
    version = user_version(conn)
    problems: list[StoreProblem] = []
    vp = version_problem(version)
    if vp is not None:
        return StoreVerification(path=path, ok=False, schema_version=version, problems=[vp])
    problems += schema_problems(conn)
    index = ChainIndex()
    rows, n, seq, last = chain_and_rule_problems(conn, index)
    problems += rows
    report, cp_problems = check_checkpoints(index, key_dir)
    problems += cp_problems
    n_draft, drafts = draft_counts(index)
    return StoreVerification(path=path, ok=not problems, schema_version=version, rows_checked=n, head_seq=seq,
                             head_hash=last, problems=problems[:MAX_PROBLEMS], checkpoint=report,
                             draft_verdicts=n_draft, draft_protocols=drafts)


def verify_path(path: Path | str, key_dir: Path | str | None = None) -> StoreVerification:
    """Verify the SQLite file at ``path`` without opening it for writing (nothing is created or changed).

    Raises:
        StoreError: there is no file at ``path``, or it is not a SQLite database.
    """
    from harness.store._errors import StoreError

    p = Path(path)
    if not p.is_file():
        raise StoreError(f"no results store at {p}: nothing to verify")
    try:
        conn = sqlite3.connect(f"file:{p.resolve()}?mode=ro", uri=True, isolation_level=None)
        try:
            return verify_connection(conn, str(p), key_dir)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{p} cannot be read as a results store: {exc}") from exc


__all__ = [
    "SCHEMA_VERSION", "DraftProtocolCount", "StoreProblem", "draft_counts", "StoreVerification", "chain_and_rule_problems", "expected_objects",
    "reference_database", "replay_database", "schema_problems", "schema_statements", "user_version", "verify_connection",
    "verify_path", "version_problem",
]
