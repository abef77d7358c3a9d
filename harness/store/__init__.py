"""The results store. SQLite is the embedded default; the rules live in the database schema."""

from harness.store._errors import IngestRejected, NotFound, StoreError
from harness.store._sqlite import SqliteStore, connect, schema_sql

ResultStore = SqliteStore

DEFAULT_DB = "atb.sqlite"


def open_store(path: str | None = None) -> SqliteStore:
    """Open (creating if needed) the store at ``path`` or ./atb.sqlite."""
    return SqliteStore(path or DEFAULT_DB)


__all__ = ["DEFAULT_DB", "IngestRejected", "NotFound", "ResultStore", "SqliteStore", "StoreError",
           "connect", "open_store", "schema_sql"]
