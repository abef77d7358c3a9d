"""``atb view``: a read-only local browser over the results store (SQLite or PostgreSQL).

Users import from here; the modules behind it (``_app``, ``_data``, ``_store``, ``_transcripts``,
``_plots``) can move.
"""

from atb_agent.view._app import ViewConfig, ViewState, create_app
from atb_agent.view._store import StoreUnavailable, Verifier, VerifyState, open_read_only, verify_store

__all__ = ["StoreUnavailable", "Verifier", "VerifyState", "ViewConfig", "ViewState", "create_app", "open_read_only",
           "verify_store"]
