"""The store-wide hash chain: every row carries ``chain_seq`` and ``row_hash``.

Why one chain across all tables, not one per table: a verdict is only as good as the measurement
sets, protocol row and expected gates it was judged against, which live in other tables. One chain
orders every row the store ever accepted, so removing or editing any of them (a sample, a gate list,
a protocol) breaks the chain at that row, and the chain's head (``head_seq``, ``head_hash``) names the
whole store's history in one digest that can be written down elsewhere. Writes are already serialised
(SQLite's ``BEGIN IMMEDIATE``; a server store takes a lock on the head), so a single chain costs no
concurrency the store had.

``row_hash = sha256(prev_hash + "\\n" + table + "\\n" + canonical_json(row))`` where ``row`` is every
column of the row except ``row_hash`` (``chain_seq`` included, so a row cannot move; a NULL in a column
added later, :data:`LATER_COLUMNS`, is left out so older rows keep their hashes), and the first
row's ``prev_hash`` is 64 zeros. The canonical JSON (sorted keys, no spaces, UTF-8, floats as Python's
shortest round-trip repr) is defined here and nowhere else: the SQLite and PostgreSQL stores both
call :func:`row_hash`, and ``atb store verify`` recomputes it on read.

This module is dialect-neutral except :func:`column_specs`, which reads SQLite's catalogue.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

GENESIS = "0" * 64

# Every table of the schema, in creation order. All are append-only and chained.
CHAINED_TABLES: tuple[str, ...] = (
    "protocols", "expected_gates", "devices", "sessions", "ceilings", "tasks", "candidates",
    "measurement_sets", "measurements", "verdicts", "quarantine_reviews", "preregistrations",
    "campaigns", "iterations", "campaign_outcomes", "reports",
)
CHAIN_COLUMNS = ("chain_seq", "row_hash")
# Columns added after the chain (schema 2) began, by table: one enters a row's hash only when it holds a
# value, so a row written before the column existed keeps its hash, and a value written with a row (or
# later removed) is covered like any other column.
LATER_COLUMNS: dict[str, tuple[str, ...]] = {"measurements": ("round_lengths_json",)}


class _Executor(Protocol):
    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...


def canonical_row(row: Mapping[str, Any], table: str | None = None) -> str:
    """The row's columns (``row_hash`` excluded, and a NULL in one of ``table``'s
    :data:`LATER_COLUMNS`) as canonical JSON.

    Raises:
        TypeError: a value is not None, int, float or str (the schema stores no other type).
    """
    later = LATER_COLUMNS.get(table or "", ())
    body: dict[str, Any] = {}
    for k, v in row.items():
        t = type(v)
        if t is not str and t is not int and t is not float:  # the common types first: verify hashes every row
            if v is None:
                if k in later:
                    continue
            elif k != "row_hash" and (isinstance(v, bool) or not isinstance(v, (int, float, str))):
                raise TypeError(f"column {k!r} holds a {t.__name__}; the chain hashes only int, float, str, None")
        body[k] = v
    body.pop("row_hash", None)
    return _CANONICAL.encode(body)


# json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False), built once.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def row_hash(prev_hash: str, table: str, row: Mapping[str, Any]) -> str:
    """The chain link of ``row`` in ``table`` after a row whose hash is ``prev_hash``."""
    text = f"{prev_hash}\n{table}\n{canonical_row(row, table)}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _max_seq_sql() -> str:
    parts = " UNION ALL ".join(f"SELECT max(chain_seq) AS m FROM {t}" for t in CHAINED_TABLES)
    return f"SELECT coalesce(max(m), 0) FROM ({parts})"


MAX_SEQ_SQL = _max_seq_sql()


def head(conn: _Executor) -> tuple[int, str, str | None]:
    """(seq, row_hash, table) of the chain's last row; (0, GENESIS, None) for an empty store."""
    seq = int(conn.execute(MAX_SEQ_SQL).fetchone()[0])
    if seq == 0:
        return 0, GENESIS, None
    for t in CHAINED_TABLES:
        r = conn.execute(f"SELECT row_hash FROM {t} WHERE chain_seq = ?", (seq,)).fetchone()
        if r is not None:
            return seq, str(r[0]), t
    raise LookupError(f"chain_seq {seq} is the maximum but no table holds it")


def row_at(conn: _Executor, seq: int) -> tuple[str, dict[str, Any]] | None:
    """(table, row as a dict) of the row at ``seq``, or None."""
    for t in CHAINED_TABLES:
        cur = conn.execute(f"SELECT * FROM {t} WHERE chain_seq = ?", (seq,))
        r = cur.fetchone()
        if r is not None:
            names = [d[0] for d in cur.description]
            return t, dict(zip(names, r))
    return None


# ------------------------------------------------------------------ SQLite: columns, defaults, affinity
class ColumnSpec:
    """One column: its name, declared type and default value (already evaluated)."""

    __slots__ = ("name", "decl", "default", "has_default", "rowid_alias")

    def __init__(self, name: str, decl: str, default: Any, has_default: bool, rowid_alias: bool) -> None:
        self.name, self.decl, self.default = name, decl.upper(), default
        self.has_default, self.rowid_alias = has_default, rowid_alias


def column_specs(conn: _Executor, table: str) -> list[ColumnSpec]:
    """The table's columns in order, from SQLite's catalogue (defaults evaluated by SQLite itself)."""
    info = list(conn.execute(f"PRAGMA table_info({table})"))
    pks = [r for r in info if r[5]]
    out: list[ColumnSpec] = []
    for cid, name, decl, _notnull, dflt, pk in info:
        default: Any = None
        if dflt is not None:
            default = conn.execute(f"SELECT {dflt}").fetchone()[0]
        alias = bool(pk) and len(pks) == 1 and str(decl).upper() == "INTEGER"
        out.append(ColumnSpec(str(name), str(decl), default, dflt is not None, alias))
    return out


def normalise(value: Any, decl: str) -> Any:
    """``value`` as SQLite will store it in a column declared ``decl`` (its type affinity).

    The writer hashes what will be read back, so an int written to a REAL column is hashed as a float,
    a bool as an int, and NaN (which SQLite stores as NULL) as None.
    """
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, float) and math.isnan(value):
        return None
    if "INT" in decl:
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            return int(value)
        return value
    if any(k in decl for k in ("REAL", "FLOA", "DOUB")):
        if isinstance(value, int) and abs(value) < 2**53:
            return float(value)
        return value
    return value


def build_row(specs: Sequence[ColumnSpec], row: Mapping[str, Any], next_rowid: int | None) -> dict[str, Any]:
    """Every column of the row to insert (defaults filled in, values normalised), chain columns aside.

    Raises:
        KeyError: ``row`` names a column the table does not have.
    """
    names = {s.name for s in specs}
    unknown = set(row) - names
    if unknown:
        raise KeyError(f"no such column(s): {sorted(unknown)}")
    out: dict[str, Any] = {}
    for s in specs:
        if s.name in CHAIN_COLUMNS:
            continue
        if s.name in row and row[s.name] is not None:
            out[s.name] = normalise(row[s.name], s.decl)
        elif s.name in row:
            out[s.name] = None if not s.rowid_alias else next_rowid
        elif s.rowid_alias:
            out[s.name] = next_rowid
        else:
            out[s.name] = normalise(s.default, s.decl) if s.has_default else None
    return out


def insert_chained(conn: _Executor, table: str, row: Mapping[str, Any],
                   specs: Sequence[ColumnSpec] | None = None) -> None:
    """Insert ``row`` into ``table`` as the chain's next link (SQLite; inside the caller's transaction).

    The row is completed (defaults, an AUTOINCREMENT id) and normalised to what SQLite stores, so the
    hash is over exactly what is read back; the read-back is checked before the caller commits.

    Raises:
        sqlite3.Error: a rule refused the row.
        ValueError: the stored row does not hash as written (a value whose type the writer did not
            normalise); the caller's transaction must roll back.
    """
    if table not in CHAINED_TABLES:
        raise ValueError(f"no table {table!r} in the results store")
    specs = list(specs) if specs is not None else column_specs(conn, table)
    next_rowid = None
    if any(s.rowid_alias for s in specs):
        next_rowid = int(conn.execute(f"SELECT coalesce(max(rowid), 0) + 1 FROM {table}").fetchone()[0])
        seq_row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).fetchone()
        if seq_row is not None:
            next_rowid = max(next_rowid, int(seq_row[0]) + 1)
    full = build_row(specs, row, next_rowid)
    seq, prev, _ = head(conn)
    full["chain_seq"] = seq + 1
    digest = row_hash(prev, table, full)
    cols = ", ".join(full) + ", row_hash"
    marks = ", ".join("?" for _ in full) + ", ?"
    cur = conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", [*full.values(), digest])
    back = conn.execute(f"SELECT * FROM {table} WHERE rowid = ?", (cur.lastrowid,))
    names = [d[0] for d in back.description]
    got = back.fetchone()
    if got is None or row_hash(prev, table, dict(zip(names, tuple(got)))) != digest:
        raise ValueError(f"the {table} row read back does not hash as written (a value's type changed on "
                         "storage): a bug in the writer")


__all__ = [
    "CHAINED_TABLES", "CHAIN_COLUMNS", "ColumnSpec", "GENESIS", "LATER_COLUMNS", "MAX_SEQ_SQL", "build_row", "canonical_row",
    "column_specs", "head", "insert_chained", "normalise", "row_at", "row_hash",
]
