"""Only the store writes SQL (issue 18): no module outside ``harness/store/`` holds a SQL statement in a string.

Why: the rules that make a result trustworthy, and the two dialects (SQLite, PostgreSQL), live in the
store; a query written elsewhere bypasses its typed methods, ties a caller to one schema and one
dialect, and is where a raw write could slip past the hash chain. Modules outside the store read
through ``ResultStore``'s named methods (``campaign``, ``iterations``, ``preregistration``...) and
write through ``append``.

The scan reads every string literal of the project's packages (an AST scan, nothing is imported):
plain strings, implicitly joined strings, ``+``-joined literals and f-strings (their literal parts).
Docstrings are documentation, not statements, and are left out; comments are not strings.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("atb_agent", "tools", "sandbox", "harness", "protocol", "transcripts")
STORE = ROOT / "harness" / "store"

# A SQL statement: a verb and the clause that makes it one. Anywhere in a string when uppercase, as SQL
# is written here; at the start of a string in any case (lowercase SQL), so English prose that happens
# to say "select ... from" mid-sentence is not taken for a query.
_STATEMENT = (r"SELECT\b.*?\bFROM\b|INSERT\s+(?:OR\s+\w+\s+)?INTO\b|REPLACE\s+INTO\b"
              r"|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM\b")
SQL = re.compile(rf"\b(?:{_STATEMENT})", re.DOTALL)
SQL_AT_START = re.compile(rf"\s*\(?\s*(?:{_STATEMENT})", re.DOTALL | re.IGNORECASE)

# Module (relative path) -> why it still holds SQL. Each entry is temporary: once its module is free
# of SQL, test_known_exceptions_still_hold_sql fails until the entry is deleted.
KNOWN_EXCEPTIONS: dict[str, str] = {}


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (module, class, function)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                out.add(id(first.value))
    return out


def _text(node: ast.expr) -> str | None:
    """The literal text of a string expression (f-string holes as ``{}``); None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                       for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is not None or right is not None:
            return (left or "{}") + (right or "{}")
    return None


def sql_strings(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """(line, text) of every string expression in ``source`` that holds a SQL statement."""
    tree = ast.parse(source, filename=filename)
    skip = _docstrings(tree)
    found: list[tuple[int, str]] = []
    inside: set[int] = set()          # parts of a larger string expression already checked as a whole
    for node in ast.walk(tree):
        if id(node) in skip or id(node) in inside or not isinstance(node, ast.expr):
            continue
        text = _text(node)
        if text is None:
            continue
        inside.update(id(n) for n in ast.walk(node) if n is not node)
        if SQL.search(text) or SQL_AT_START.match(text):
            found.append((node.lineno, " ".join(text.split())[:120]))
    return found


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py")) if STORE not in p.parents]


def test_no_sql_outside_the_store() -> None:
    offenders = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel in KNOWN_EXCEPTIONS:
            continue
        offenders += [f"{rel}:{line}: {text}" for line, text in sql_strings(path.read_text(encoding="utf-8"), rel)]
    assert not offenders, ("SQL outside harness/store/ (give the store a typed method and call that):\n"
                           + "\n".join(offenders))


def test_known_exceptions_still_hold_sql() -> None:
    stale = [rel for rel in KNOWN_EXCEPTIONS
             if not (ROOT / rel).exists() or not sql_strings((ROOT / rel).read_text(encoding="utf-8"), rel)]
    assert not stale, f"no SQL left in {stale}: delete their entries in KNOWN_EXCEPTIONS"


@pytest.mark.parametrize("source", [
    'q = store.query("SELECT 1 FROM campaigns WHERE id = ?", (cid,))',
    'q = ("SELECT v.id FROM verdicts v "\n     "WHERE v.task_id = ?")',
    'q = "SELECT id " + "FROM campaigns"',
    'q = f"SELECT {cols} FROM {table}"',
    'c.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})")',
    'c.execute("INSERT OR REPLACE INTO reports VALUES (?)")',
    'c.execute("REPLACE INTO reports VALUES (?)")',
    'c.execute("UPDATE verdicts SET status = ?")',
    'c.execute("DELETE FROM verdicts")',
    'def f():\n    x = 1\n    return "SELECT max(x) FROM t"',
    'q = "select id from campaigns where id = ?"',
    'q = "  delete from verdicts"',
])
def test_the_scan_catches_planted_sql(source: str) -> None:
    assert sql_strings(source)


@pytest.mark.parametrize("source", [
    '"""A docstring may name SELECT ... FROM or INSERT INTO."""',
    'def f():\n    """Reads what an UPDATE verdicts SET would change."""\n',
    '# SELECT x FROM y in a comment\nx = 1',
    'msg = "the tuner may select one candidate from each group"',
    'msg = "Selected 3 of 5 from the run"',
    'msg = "then we update the set of knobs"',
])
def test_the_scan_leaves_prose_alone(source: str) -> None:
    assert not sql_strings(source)
