"""Open a results store by URL: a path or ``sqlite:///PATH`` is SQLite, ``postgresql://...`` is PostgreSQL.

Why a URL: a sweep's many workers, on many nodes, must all write to one store; a server database is
named by a URL, a local file by a path. Every command keeps SQLite as its default, so an existing
``--db PATH`` keeps meaning what it meant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from harness.store._errors import StoreError
from harness.store._protocol import ResultStore

StoreKind = Literal["sqlite", "postgresql"]
_PG_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def store_kind(url: str | Path) -> StoreKind:
    """Which implementation ``url`` names. Raises StoreError for a URL scheme no store speaks."""
    text = str(url)
    if text.startswith(_PG_SCHEMES):
        return "postgresql"
    if "://" in text and not text.startswith("sqlite:///"):
        scheme = text.split("://", 1)[0]
        raise StoreError(f"--db {text!r}: unknown store scheme {scheme!r}; use a file path, sqlite:///PATH "
                         "or postgresql://USER@HOST:PORT/DB")
    return "sqlite"


def sqlite_path(url: str | Path) -> Path:
    """The file a SQLite URL or path names (``sqlite:///rel/x.db`` is relative, ``sqlite:////abs`` absolute)."""
    text = str(url)
    return Path(text[len("sqlite:///"):]) if text.startswith("sqlite:///") else Path(text)


def open_store(url: str | Path | None = None) -> ResultStore:
    """Open (creating its schema if needed) the store ``url`` names; ``None`` is ./atb.sqlite.

    Raises:
        StoreError: an unknown scheme, a server that cannot be reached, or a file that cannot be opened.
    """
    from harness.store._sqlite import SqliteStore

    target = url if url is not None else "atb.sqlite"
    if store_kind(target) == "postgresql":
        from harness.store._postgres import PostgresStore

        return PostgresStore(str(target))
    return SqliteStore(sqlite_path(target))


__all__ = ["StoreKind", "open_store", "sqlite_path", "store_kind"]
