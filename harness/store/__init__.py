"""The results store. SQLite is the embedded default; the rules live in the database schema."""

from harness.store._errors import IngestRejected, NotFound, StoreError, StoreSchemaVersionError, StoreTampered
from harness.store._sqlite import SqliteStore, connect
from harness.store._sqlite_schema import schema_sql
from harness.store._verify import SCHEMA_VERSION, StoreProblem, StoreVerification, verify_path
from harness.store._protocol import ResultStore
from harness.store._read_models import (CampaignRow, CeilingsSummary, IterationCounts, IterationRow, OutcomeRow,
                                        PreregistrationRow)
from harness.store._open import open_store, store_kind
from harness.store._read_only import StoreUnavailable, open_read_only
from harness.store._checkpoint import (CHECKPOINT_KIND, Checkpoint, CheckpointError, CheckpointReport, newest_checkpoint,
                                       write_checkpoint)
from harness.store._signing import KEY_DIR_ENV, CheckpointKeyError, default_key_dir
from harness.store._evidence import CampaignEvidence, campaign_evidence, sqlite_holds_campaign

DEFAULT_DB = "atb.sqlite"


__all__ = ["CHECKPOINT_KIND", "CampaignEvidence", "Checkpoint", "campaign_evidence", "sqlite_holds_campaign", "CheckpointError", "CheckpointKeyError", "CheckpointReport", "KEY_DIR_ENV",
           "default_key_dir", "newest_checkpoint", "write_checkpoint",
           "DEFAULT_DB", "SCHEMA_VERSION", "CampaignRow", "CeilingsSummary", "IngestRejected", "IterationCounts",
           "IterationRow", "NotFound",
           "OutcomeRow", "PreregistrationRow", "ResultStore", "SqliteStore", "StoreError", "StoreProblem",
           "StoreSchemaVersionError", "StoreTampered", "StoreUnavailable", "open_read_only", "StoreVerification", "connect", "open_store", "schema_sql",
           "store_kind", "verify_path"]
