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


class StoreSchemaVersionError(StoreError):
    """The file's schema version (``PRAGMA user_version``) is not the one this code writes.

    A newer version is refused and left untouched (never rewritten); an older one (version 1, before
    the hash chain) cannot be verified and must be re-created: move the file aside and run again.
    """


class StoreTampered(StoreError):
    """The store fails verification: a trigger, table or index differs from ``schema.sql``, or a row
    breaks the hash chain or a rule. ``problem`` is the first one found, as one line naming the table,
    the row's key and what is wrong; ``atb store verify`` lists all of them. Nothing was written."""

    def __init__(self, path: str, problem: str, count: int = 1) -> None:
        self.problem = problem
        more = f" (and {count - 1} more)" if count > 1 else ""
        super().__init__(f"the results store {path} fails verification: {problem}{more}; the store may have "
                         f"been tampered with. `atb store verify --db {path}` lists every problem")
