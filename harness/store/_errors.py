"""Errors of the results store."""

from __future__ import annotations

from harness.errors import HarnessError


class StoreError(HarnessError):
    """The store could not be opened or read (path, permissions, schema version)."""


class IngestRejected(StoreError):
    """The database refused a row because it breaks an ingest rule.

    ``rule`` is the rule's name (for example ``unpaired_seeds``); nothing was written, and every row
    stored before is intact (the insert ran in a transaction that was rolled back).
    """

    def __init__(self, rule: str, message: str) -> None:
        self.rule = rule
        super().__init__(f"ingest refused by rule '{rule}': {message}")


class NotFound(StoreError):
    """No row with the given id (a run, a verdict, a registration)."""
