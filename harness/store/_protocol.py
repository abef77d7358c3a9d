"""``ResultStore``: the one interface every results store implements (SQLite, PostgreSQL).

Why a protocol as well as a base class: the rules that make a result trustworthy live in each database's
own schema (CHECKs and triggers), not in shared Python; the record-level methods over them are written
once in :class:`harness.store._base.StoreBase`, under which ``SqliteStore`` and ``PostgresStore`` are
siblings. Callers (the evaluation, campaigns, compare, reports, the sweep) type against this protocol,
never a class, and open a store with ``open_store(url)``; ``tests/test_store_conformance.py`` holds both
implementations to the same raw-SQL rules.

SQL passed to :meth:`ResultStore.query` and to ``transaction().execute`` uses ``?`` placeholders and the
SQL both dialects share (no JSON functions but ``json_extract``, which the PostgreSQL schema defines; no
``INSERT OR ...``); the PostgreSQL store translates the placeholders.

Only the store writes SQL (issue 18): ``query`` is for the store's own modules, its tests and one-off
scripts. Every other module reads through the named, typed methods below (the campaign tables' rows are
:mod:`harness.store._read_models`) and writes through ``append``; ``tests/test_sql_in_store.py`` fails
on SQL text in a module outside ``harness/store/``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from harness.records import DeviceCeilings, DeviceFingerprint, MeasurementSet, Verdict
from harness.store._read_models import (CampaignRow, CeilingsSummary, IterationCounts, IterationRow, OutcomeRow,
                                        PreregistrationRow)
from protocol import Protocol as FrozenProtocol
from protocol import ProtocolRef

if TYPE_CHECKING:
    from harness.store._verify import StoreVerification


class Row(Protocol):
    """A result row, readable by column position and by column name (``sqlite3.Row`` is one)."""

    def __getitem__(self, key: int | str, /) -> Any: ...

    def keys(self) -> list[str]: ...


class Executor(Protocol):
    """What ``transaction()`` yields: a connection-like object that runs one statement at a time."""

    def execute(self, sql: str, params: Sequence[Any] = ..., /) -> Any: ...


@runtime_checkable
class ResultStore(Protocol):
    """A results store whose ingest and append-only rules are enforced by the database itself.

    Every write is one transaction; a refused write raises ``IngestRejected(rule)`` and changes
    nothing. ``path`` names the store in messages: the SQLite file, or the server URL without its
    password.
    """

    @property
    def path(self) -> Path | str: ...

    def close(self) -> None: ...

    def __enter__(self) -> "ResultStore": ...

    def __exit__(self, *exc: object) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]: ...

    def append(self, table: str, row: dict[str, Any]) -> None: ...

    def query(self, sql: str, params: tuple[Any, ...] | list[Any] = ...) -> list[Any]: ...

    def register_protocol(self, protocol: FrozenProtocol) -> ProtocolRef: ...

    def add_device(self, fp: DeviceFingerprint, ref: ProtocolRef) -> str: ...

    def device(self, sha256: str) -> DeviceFingerprint: ...

    def open_session(self, fp: DeviceFingerprint, ref: ProtocolRef, note: str = "") -> str: ...

    def session(self, session_id: str) -> Any: ...

    def add_ceilings(self, session_id: str, ceilings: DeviceCeilings, ref: ProtocolRef) -> None: ...

    def ceilings_for_device(self, device_sha256: str) -> DeviceCeilings | None: ...

    def ceilings_summary(self, device_sha256: str) -> CeilingsSummary | None: ...

    def add_task(self, task_id: str, kind: str, source_sha256: str, metadata: dict[str, Any],
                 ref: ProtocolRef) -> None: ...

    def add_candidate(self, content: str, kind: str, ref: ProtocolRef) -> str: ...

    def candidate_content(self, sha256: str) -> str: ...

    def add_verdict(self, verdict: Verdict, candidate_set: MeasurementSet | None = None,
                    baseline_set: MeasurementSet | None = None) -> str: ...

    def verdict(self, verdict_id: str) -> Verdict: ...

    def measurement_set_samples(self, set_id: str) -> dict[int, list[float]]: ...

    def measurement_set(self, set_id: str) -> MeasurementSet: ...

    def add_quarantine_review(self, verdict_id: str, cleared: bool, reason: str,
                              extended_verdict_id: str | None, ref: ProtocolRef) -> None: ...

    def effective_status(self, verdict_id: str) -> str: ...

    def add_report(self, kind: str, subject: str, body: dict[str, Any], ref: ProtocolRef) -> str: ...

    def reports(self, kind: str, subject: str | None = None) -> list[dict[str, Any]]: ...

    # ---- campaign tables, registrations and tasks, read (rows: harness.store._read_models)
    def campaign(self, campaign_id: str) -> CampaignRow | None: ...

    def campaigns(self, preregistration_id: str | None = None) -> list[CampaignRow]: ...

    def iterations(self, campaign_id: str) -> list[IterationRow]: ...

    def iteration_verdict_details(self, campaign_id: str) -> list[dict[str, Any]]: ...

    def unrecorded_verdict_id(self, session_ids: Sequence[str], task_id: str,
                              candidate_sha256: str) -> str | None: ...

    def iteration_counts(self) -> dict[str, IterationCounts]: ...

    def campaign_outcome(self, campaign_id: str) -> OutcomeRow | None: ...

    def outcome_statuses(self) -> dict[str, str]: ...

    def preregistration(self, reg_id: str) -> PreregistrationRow | None: ...

    def preregistrations(self) -> list[PreregistrationRow]: ...

    def task_metadata(self, task_id: str) -> dict[str, Any] | None: ...

    def report_counts(self, kind: str) -> dict[str, int]: ...

    def verify(self, key_dir: Path | str | None = None) -> StoreVerification: ...

    # ---- signed checkpoints of the chain head (issue 27; harness.store._checkpoint)
    def chain_head(self) -> tuple[int, str]: ...

    def chain_row_hash(self, seq: int) -> str | None: ...

    def verdict_chain_seq(self, verdict_id: str) -> int | None: ...

    def checkpoint(self, key_dir: Path | str | None = None) -> Any: ...


def rows_iter(rows: list[Any]) -> Iterator[dict[str, Any]]:
    """Rows as plain dicts (for JSON output), whichever store produced them."""
    for r in rows:
        yield {k: r[k] for k in r.keys()}


__all__ = ["Executor", "ResultStore", "Row", "rows_iter"]
