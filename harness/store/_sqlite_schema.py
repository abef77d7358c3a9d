"""The SQLite store's schema and its refusals: what ``schema.sql`` plus the generated triggers are, and
how a database refusal becomes a typed error.

Kept apart from :mod:`harness.store._sqlite` (the store) so that :mod:`harness.store._verify`, which
rebuilds a reference database from this schema and replays rows through its rules, needs nothing of
the store itself: the two modules no longer import each other.
"""

from __future__ import annotations

import re
import sqlite3
from functools import lru_cache
from importlib import resources

from harness.store._chain import CHAINED_TABLES, MAX_SEQ_SQL, ColumnSpec, column_specs
from harness.store._errors import IngestRejected, StoreError

# Tables whose rows must carry a known protocol digest. Every table is append-only and chained.
STAMPED_TABLES = (
    "devices", "sessions", "ceilings", "tasks", "candidates", "measurement_sets", "measurements",
    "verdicts", "quarantine_reviews", "preregistrations", "campaigns", "iterations",
    "campaign_outcomes", "reports",
)
APPEND_ONLY_TABLES = CHAINED_TABLES

_RULE_RE = re.compile(r"atb_rule:(?P<rule>[a-z_]+): (?P<msg>.*)")


def _stamp_triggers(table: str) -> str:
    return f"""
CREATE TRIGGER IF NOT EXISTS {table}_protocol_stamp BEFORE INSERT ON {table}
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:missing_protocol_digest: every {table} row must carry protocol_version and protocol_sha256')
    WHERE NEW.protocol_sha256 IS NULL OR NEW.protocol_version IS NULL;
    SELECT RAISE(ABORT, 'atb_rule:unknown_protocol_digest: {table} row carries a protocol digest the store does not know')
    WHERE NOT EXISTS (SELECT 1 FROM protocols WHERE sha256 = NEW.protocol_sha256 AND version = NEW.protocol_version);
END;
"""


def _append_only_triggers(table: str) -> str:
    return f"""
CREATE TRIGGER IF NOT EXISTS {table}_no_update BEFORE UPDATE ON {table}
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:append_only: {table} rows cannot be changed once stored');
END;
CREATE TRIGGER IF NOT EXISTS {table}_no_delete BEFORE DELETE ON {table}
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:append_only: {table} rows cannot be deleted');
END;
"""


@lru_cache(maxsize=1)
def unique_keys() -> dict[str, list[tuple[str, ...]]]:
    """Every PRIMARY KEY / UNIQUE column set of every table, read from schema.sql's own tables."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(_base_schema())
        out: dict[str, list[tuple[str, ...]]] = {}
        for t in CHAINED_TABLES:
            keys: list[tuple[str, ...]] = []
            for idx in mem.execute(f"PRAGMA index_list({t})"):
                if idx[2]:  # unique
                    keys.append(tuple(str(r[2]) for r in mem.execute(f"PRAGMA index_info('{idx[1]}')")))
            out[t] = sorted(keys)
        return out
    finally:
        mem.close()


# Keys whose duplicates a named rule in schema.sql refuses first, with a clearer message.
_KEYS_WITH_THEIR_OWN_RULE: dict[str, tuple[tuple[str, ...], ...]] = {"protocols": (("version",),)}


def _chain_trigger(table: str, chain_order: bool = True) -> str:
    """chain_order and duplicate_key (which is what refuses INSERT OR REPLACE, REPLACE INTO and upserts).

    ``chain_order=False`` leaves chain_order out: the verifier's replay database
    (:func:`harness.store._verify.replay_database`), whose walk checks the positions itself.
    """
    clauses = [f"EXISTS (SELECT 1 FROM {table} WHERE rowid = NEW.rowid)"]
    for cols in unique_keys()[table]:
        if cols in _KEYS_WITH_THEIR_OWN_RULE.get(table, ()):
            continue
        cond = " AND ".join(f"{c} = NEW.{c}" for c in cols)
        clauses.append(f"EXISTS (SELECT 1 FROM {table} WHERE {cond})")
    dup = "\n       OR ".join(clauses)
    order = f"""    SELECT RAISE(ABORT, 'atb_rule:chain_order: {table} row must take the next chain_seq (1 + the largest stored)')
    WHERE NEW.chain_seq IS NOT NULL AND NEW.chain_seq IS NOT ({MAX_SEQ_SQL.replace("SELECT coalesce(max(m), 0)", "SELECT coalesce(max(m), 0) + 1")});
"""
    return f"""
CREATE TRIGGER IF NOT EXISTS {table}_chain BEFORE INSERT ON {table}
BEGIN
    SELECT RAISE(ABORT, 'atb_rule:duplicate_key: a {table} row with this key is already stored (REPLACE and upserts are refused: rows are never replaced)')
    WHERE {dup};
{order if chain_order else ""}END;
"""


def _base_schema() -> str:
    return resources.files("harness.store").joinpath("schema.sql").read_text()


@lru_cache(maxsize=1)
def schema_sql() -> str:
    """The full schema: tables and rules from schema.sql plus the generated stamp, append-only and chain triggers."""
    generated = "".join(_stamp_triggers(t) for t in STAMPED_TABLES)
    generated += "".join(_append_only_triggers(t) for t in APPEND_ONLY_TABLES)
    generated += "".join(_chain_trigger(t) for t in CHAINED_TABLES)
    return _base_schema() + generated


def translate(exc: sqlite3.Error) -> StoreError:
    """Turn a database refusal into a typed error naming the rule."""
    text = str(exc)
    m = _RULE_RE.search(text)
    if m:
        return IngestRejected(m.group("rule"), m.group("msg"))
    if isinstance(exc, sqlite3.IntegrityError):
        if "FOREIGN KEY" in text:
            return IngestRejected("foreign_key", "a row refers to a device, session, set or verdict that is not stored")
        if "UNIQUE" in text:
            return IngestRejected("duplicate", text)
        if "CHECK" in text or "NOT NULL" in text:
            return IngestRejected("constraint", text)
    return StoreError(f"store error: {text}")
