"""The generated part of the PostgreSQL schema, and the checks a PostgreSQL store makes on open and in ``verify``.

Why generated: the per-table triggers (the write lock and chain order, duplicate keys, protocol stamps,
append-only) follow from each table's keys and columns, which SQLite's ``schema.sql`` defines; deriving
them from that one source (:func:`harness.store._sqlite.unique_keys`) keeps the two stores' rules from
drifting apart. The hand-written rules are in ``schema_pg.sql``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from harness.store._chain import CHAINED_TABLES, MAX_SEQ_SQL, ColumnSpec, column_specs

if TYPE_CHECKING:
    from harness.store._verify import StoreVerification

_RULE_TABLES = ("verdicts", "measurement_sets", "measurements", "quarantine_reviews", "iterations",
                "campaign_outcomes", "protocols", "expected_gates", "campaigns")


# One lock id for the whole store (an arbitrary constant: "atbchain" in ASCII, as a signed int64).
CHAIN_LOCK = 0x6174_6263_6861_696E

# PostgreSQL 15 wants an alias on a subquery in FROM (SQLite and PostgreSQL 16 do not).
PG_MAX_SEQ_SQL = MAX_SEQ_SQL + " AS chain"


def schema_pg_sql() -> str:
    """``schema_pg.sql`` plus the generated per-table triggers (stamp, append-only, chain)."""
    return resources.files("harness.store").joinpath("schema_pg.sql").read_text() + generated_sql()


@lru_cache(maxsize=1)
def reference_specs() -> dict[str, list[ColumnSpec]]:
    """Every table's columns as SQLite's schema declares them (types, defaults, the rowid alias)."""
    from harness.store._verify import reference_database

    mem = reference_database()
    try:
        return {t: column_specs(mem, t) for t in CHAINED_TABLES}
    finally:
        mem.close()


def _stamped() -> tuple[str, ...]:
    from harness.store._sqlite_schema import STAMPED_TABLES

    return tuple(STAMPED_TABLES)


def _id_column(table: str) -> str | None:
    alias = [s.name for s in reference_specs()[table] if s.rowid_alias]
    return alias[0] if alias else None


def _chain_function(table: str) -> str:
    from harness.store._sqlite_schema import _KEYS_WITH_THEIR_OWN_RULE, unique_keys

    keys = [cols for cols in unique_keys()[table] if cols not in _KEYS_WITH_THEIR_OWN_RULE.get(table, ())]
    idc = _id_column(table)
    if idc is not None:
        keys = [(idc,), *keys]
    dup = "\n       OR ".join(
        f"EXISTS (SELECT 1 FROM {table} WHERE " + " AND ".join(f"{c} = NEW.{c}" for c in cols) + ")" for cols in keys)
    return f"""
CREATE OR REPLACE FUNCTION atb_chain_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({CHAIN_LOCK});
    IF {dup} THEN
        RAISE EXCEPTION 'atb_rule:duplicate_key: a {table} row with this key is already stored (upserts are refused: rows are never replaced)';
    END IF;
    IF NEW.chain_seq IS NOT NULL AND NEW.chain_seq IS DISTINCT FROM ({PG_MAX_SEQ_SQL}) + 1 THEN
        RAISE EXCEPTION 'atb_rule:chain_order: {table} row must take the next chain_seq (1 + the largest stored)';
    END IF;
    RETURN NEW;
END
$$;
"""


def _fill_id_function(table: str, col: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION atb_fill_id_{table}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock({CHAIN_LOCK});
    IF NEW.{col} IS NULL THEN
        NEW.{col} := (SELECT coalesce(max({col}), 0) + 1 FROM {table});
    END IF;
    RETURN NEW;
END
$$;
"""


def expected_triggers() -> dict[tuple[str, str], str]:
    """(table, trigger name) -> the function it must call, for every rule trigger of the schema."""
    out: dict[tuple[str, str], str] = {}
    for t in CHAINED_TABLES:
        if _id_column(t) is not None:
            out[(t, "atb1_fill_id")] = f"atb_fill_id_{t}"
        out[(t, "atb2_chain")] = f"atb_chain_{t}"
        if t in _stamped():
            out[(t, "atb3_protocol_stamp")] = "atb_protocol_stamp"
        if t in _RULE_TABLES:
            out[(t, "atb4_rules")] = f"atb_rules_{t}"
        for name in ("atb5_no_update", "atb5_no_delete", "atb5_no_truncate"):
            out[(t, name)] = "atb_append_only"
    return out


@lru_cache(maxsize=1)
def generated_sql() -> str:
    """Functions and triggers derived from each table's keys and columns."""
    parts: list[str] = ["\n-- ---------------------------------------------------------------- generated (harness/store/_pg_schema.py)\n"]
    for t in CHAINED_TABLES:
        idc = _id_column(t)
        if idc is not None:
            parts.append(_fill_id_function(t, idc))
        parts.append(_chain_function(t))
    for (t, name), fn in expected_triggers().items():
        if name == "atb5_no_update":
            when = "BEFORE UPDATE"
        elif name == "atb5_no_delete":
            when = "BEFORE DELETE"
        elif name == "atb5_no_truncate":
            parts.append(f"CREATE OR REPLACE TRIGGER {name} BEFORE TRUNCATE ON {t} FOR EACH STATEMENT EXECUTE FUNCTION {fn}();\n")
            continue
        else:
            when = "BEFORE INSERT"
        parts.append(f"CREATE OR REPLACE TRIGGER {name} {when} ON {t} FOR EACH ROW EXECUTE FUNCTION {fn}();\n")
    return "".join(parts)


_FUNC_RE = re.compile(r"CREATE OR REPLACE FUNCTION (\w+)\(.*?\$\$(.*?)\$\$", re.S)


def expected_functions() -> dict[str, str]:
    """Every function of the schema and its body as PostgreSQL stores it (``pg_proc.prosrc``)."""
    return {m.group(1): m.group(2) for m in _FUNC_RE.finditer(schema_pg_sql())}


def installed_version(x: Any) -> int | None:
    """The schema version the database holds, or None when no AutoTuneBench schema is installed."""
    if not x.execute("SELECT 1 FROM pg_proc WHERE proname = 'atb_schema_version'").fetchone():
        return None
    return int(x.execute("SELECT atb_schema_version()").fetchone()[0])


def object_problems(x: Any) -> list[Any]:
    """Rule triggers missing, disabled, pointing elsewhere or added; rule functions missing or altered."""
    from harness.store._problems import StoreProblem

    out: list[StoreProblem] = []
    have = {(str(r[0]), str(r[1])): (str(r[2]), str(r[3])) for r in x.execute(
        "SELECT c.relname, t.tgname, p.proname, t.tgenabled FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
        "JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE NOT t.tgisinternal AND n.nspname = current_schema()")}
    want = expected_triggers()
    for (table, name), fn in want.items():
        got = have.get((table, name))
        if got is None:
            out.append(StoreProblem(kind="schema_object", table=table, detail=f"trigger {name} is missing (dropped outside AutoTuneBench)"))
        elif got[0] != fn:
            out.append(StoreProblem(kind="schema_object", table=table, detail=f"trigger {name} calls {got[0]}, not {fn}"))
        elif got[1] == "D":
            out.append(StoreProblem(kind="schema_object", table=table, detail=f"trigger {name} is disabled"))
    for (table, name) in have:
        if (table, name) not in want:
            out.append(StoreProblem(kind="schema_object", table=table, detail=f"trigger {name} is not part of schema_pg.sql"))
    bodies = {str(r[0]): str(r[1]) for r in x.execute(
        "SELECT p.proname, p.prosrc FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname = current_schema()")}
    for fn, body in expected_functions().items():
        if fn not in bodies:
            out.append(StoreProblem(kind="schema_object", detail=f"function {fn} is missing"))
        elif bodies[fn] != body:
            out.append(StoreProblem(kind="schema_object", detail=f"function {fn} differs from its definition in schema_pg.sql"))
    return out


def verify_pg(store: Any, key_dir: Any = None) -> StoreVerification:
    """The PostgreSQL store's ``verify``: version, rule objects, the chain, and every row replayed
    through SQLite's rules (the same rules, so a row slipped in while a trigger was off is caught)."""
    import psycopg

    from harness.store._verify import (
        MAX_PROBLEMS,
        StoreProblem,
        StoreVerification,
        chain_and_rule_problems,
        draft_counts,
        version_problem,
    )

    path = str(store.path)
    version = installed_version(store.x) or 0
    vp = version_problem(version)
    if vp is not None:
        return StoreVerification(path=path, ok=False, schema_version=version, problems=[vp])
    from harness.store._checkpoint import ChainIndex, check_checkpoints

    problems = list(object_problems(store.x))
    index = ChainIndex()
    try:
        # One read-only snapshot for the whole walk: every table as of one moment, so a writer appending
        # meanwhile cannot make one table's rows visible without another's (a false gap in the chain).
        with store.conn.transaction():
            store.x.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            rows, n, seq, last = chain_and_rule_problems(store.x, index)
    except psycopg.Error as exc:
        problems.append(StoreProblem(kind="schema_object", detail=f"a table cannot be read: {' '.join(str(exc).split())}"))
        return StoreVerification(path=path, ok=False, schema_version=version, problems=problems[:MAX_PROBLEMS])
    problems += rows
    report, cp_problems = check_checkpoints(index, key_dir)
    problems += cp_problems
    n_draft, drafts = draft_counts(index)
    return StoreVerification(path=path, ok=not problems, schema_version=version, rows_checked=n, head_seq=seq,
                             head_hash=last, problems=problems[:MAX_PROBLEMS], checkpoint=report,
                             draft_verdicts=n_draft, draft_protocols=drafts)


__all__ = ["expected_functions", "expected_triggers", "generated_sql", "installed_version", "object_problems",
           "reference_specs", "verify_pg"]
