"""``open_store`` is the only constructor of a results store outside ``harness/store/`` (issue 29).

Why: a caller that names ``SqliteStore(...)`` is tied to one implementation; it cannot be pointed at the
PostgreSQL store a sweep writes to, and it reaches past the ``ResultStore`` protocol to whatever the
class happens to offer. Code outside the store opens one with ``harness.store.open_store(url)`` (or
``harness.store.open_read_only(url)`` where it must not write) and types against ``ResultStore``.

The scan reads the project's packages, ``benchmarks/`` and ``tests/`` (an AST scan, nothing is imported)
for calls of ``SqliteStore`` / ``PostgresStore``, by bare name or as an attribute
(``store_mod.SqliteStore(...)``); only ``harness/store/`` may construct a concrete store. Tests open
theirs with ``open_store`` too, so the suite runs the stores the way every caller does (the conformance
suite reaches each implementation through its URL: a path or ``postgresql://...``). Subclassing or
naming the class in an annotation or ``isinstance`` (``open_store``'s own test checks which class a URL
gives) is not a construction and is not reported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("atb_agent", "tools", "sandbox", "harness", "protocol", "transcripts", "benchmarks", "tests")
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


def casts(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, class name) of every ``cast(<a store class>, ...)`` in ``source`` (by name or as a string)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if (func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None) != "cast":
            continue
        target = node.args[0]
        name = target.id if isinstance(target, ast.Name) else target.value if isinstance(target, ast.Constant) else None
        if name in CONSTRUCTORS:
            found.append((node.lineno, str(name)))
    return found


def test_no_store_is_cast_to_a_concrete_class() -> None:
    """What a caller needs of a store is a ``ResultStore`` method: a ``cast`` to ``SqliteStore`` would reach
    past the protocol (and lie about a PostgreSQL store)."""
    offenders = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        offenders += [f"{rel}:{line}: cast({name!r}, ...)" for line, name in casts(path.read_text(encoding="utf-8"), rel)]
    assert not offenders, "a store cast to a concrete class (type it as ResultStore):\n" + "\n".join(offenders)
    assert casts('cast("SqliteStore", open_store(u))\ntyping.cast(PostgresStore, s)\ncast(ResultStore, s)\n') == [
        (1, "SqliteStore"), (2, "PostgresStore")]


def test_the_scan_reads_the_tests_and_the_benchmarks() -> None:
    scanned = {p.relative_to(ROOT).as_posix() for p in _modules()}
    assert {"tests/test_store_conformance.py", "tests/redteam/test_redteam_corpus.py",
            "benchmarks/kernelbench_random.py", "atb_agent/mcp/_campaign.py"} <= scanned
    assert not any(rel.startswith("harness/store/") for rel in scanned)


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
