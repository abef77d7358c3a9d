"""The results store. SQLite is the embedded default; the rules live in the database schema."""

from harness.store._errors import IngestRejected, NotFound, StoreError, StoreSchemaVersionError, StoreTampered
from harness.store._sqlite import SqliteStore, connect
from harness.store._sqlite_schema import schema_sql
from harness.store._verify import SCHEMA_VERSION, StoreProblem, StoreVerification, verify_path
from harness.store._protocol import ResultStore
from harness.store._read_models import (CampaignRow, CeilingsSummary, IterationCounts, IterationRow, OutcomeRow,
                                        PreregistrationRow)
from harness.store._open import open_store, store_kind

DEFAULT_DB = "atb.sqlite"


__all__ = ["DEFAULT_DB", "SCHEMA_VERSION", "CampaignRow", "CeilingsSummary", "IngestRejected", "IterationCounts",
           "IterationRow", "NotFound",
           "OutcomeRow", "PreregistrationRow", "ResultStore", "SqliteStore", "StoreError", "StoreProblem",
           "StoreSchemaVersionError", "StoreTampered", "StoreVerification", "connect", "open_store", "schema_sql",
           "store_kind", "verify_path"]
