"""``open_store`` is the only constructor of a results store outside ``harness/store/`` (issue 29).

Why: a caller that names ``SqliteStore(...)`` is tied to one implementation; it cannot be pointed at the
PostgreSQL store a sweep writes to, and it reaches past the ``ResultStore`` protocol to whatever the
class happens to offer. Code outside the store opens one with ``harness.store.open_store(url)`` (or
``harness.store.open_read_only(url)`` where it must not write) and types against ``ResultStore``.

The scan reads the project's packages and ``benchmarks/`` (an AST scan, nothing is imported) for calls
of ``SqliteStore`` / ``PostgresStore``, by bare name or as an attribute (``store_mod.SqliteStore(...)``).
Tests are left out: the store's own tests construct each implementation on purpose. Subclassing or
naming the class in an annotation or ``isinstance`` is not a construction and is not reported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("atb_agent", "tools", "sandbox", "harness", "protocol", "transcripts", "benchmarks")
STORE = ROOT / "harness" / "store"
CONSTRUCTORS = frozenset({"SqliteStore", "PostgresStore"})

def constructions(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, class name) of every call of a store class in ``source``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
        if name in CONSTRUCTORS:
            found.append((node.lineno, name))
    return found


def _modules() -> list[Path]:
    return [p for folder in SCANNED for p in sorted((ROOT / folder).rglob("*.py"))
            if STORE not in p.parents and p != STORE]


def test_no_store_constructed_outside_the_store() -> None:
    offenders = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        offenders += [f"{rel}:{line}: {name}(...)"
                      for line, name in constructions(path.read_text(encoding="utf-8"), rel)]
    assert not offenders, ("a results store constructed outside harness/store/ (use harness.store.open_store(url), "
                           "or open_read_only(url) where nothing may be written):\n" + "\n".join(offenders))


@pytest.mark.parametrize("source", [
    "store = SqliteStore(path)",
    "with SqliteStore(db) as store:\n    pass",
    "store = PostgresStore(url)",
    "import harness.store as hs\nstore = hs.SqliteStore(path)",
    "def f():\n    return [SqliteStore(p) for p in paths]",
    "SqliteStore(db).close()",
])
def test_the_scan_catches_a_construction(source: str) -> None:
    assert constructions(source)


@pytest.mark.parametrize("source", [
    "store = open_store(path)",
    "def f(store: SqliteStore) -> None:\n    pass",
    "ok = isinstance(store, SqliteStore)",
    "class MyStore(SqliteStore):\n    pass",
    "from harness.store import SqliteStore",
    "store = SqliteStore.__new__(SqliteStore)",
    '"""SqliteStore(path) in a docstring"""',
])
def test_the_scan_leaves_other_mentions_alone(source: str) -> None:
    assert not constructions(source)
