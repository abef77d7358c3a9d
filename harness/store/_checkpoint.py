"""Signed checkpoints of the store's chain head (issue 27): what a writer without the key cannot forge.

Why: the hash chain (:mod:`harness.store._chain`) is keyless. A writer with file access can drop the
triggers, edit a row, recompute every later hash and restore the triggers, or simply cut rows off the
end; the chain alone still verifies. A checkpoint is the chain's head (``head_seq``, ``head_hash``)
signed with an Ed25519 key that never lives in the store (:mod:`harness.store._signing`), after the
signed tree heads of Certificate Transparency and Sigstore's transparency log.

Where checkpoints live, and why two places:

* in the store, as a ``reports`` row of kind ``store_checkpoint`` (chained like any row; its body is the
  signed message and the signature). Anyone holding the public key can check them, on any machine;
  forging one needs the private key. No new table: both stores take it as they are.
* in the signer's own log beside the key (``signed_heads.jsonl``, keyed by store id): deleting every
  checkpoint from a store (or cutting the store back before one) is then itself visible to whoever
  verifies with that key folder.

The store's id is the ``row_hash`` of its first row (chain_seq 1): a copy of a store keeps it; a
rewrite of that row changes it, which the store's own checkpoints (signed for the old id) then show.

What verification concludes (:func:`check_checkpoints`), each as a ``checkpoint`` problem:

* a checkpoint claiming the trusted key whose signature does not verify (edited or forged);
* a valid checkpoint for another store id (the first row was rewritten);
* a valid checkpoint whose head is not in the chain as signed: rows at or before it were rewritten
  (chain recomputed) or the store was cut back below it;
* a head the log says this key signed for this store that the store holds no checkpoint for (deleted).

Rows after the newest valid checkpoint are legitimately unsigned (written since); they are reported as
``unsigned_rows`` (by table) and are not a problem: ``atb store verify --require-signed`` makes them
one. The campaign-end checkpoint (``harness.tuning.campaigns``) covers a campaign's rows, so a
campaign appended by someone else stays visibly outside any signature.

What it cannot see: a writer who rewrites the first row and deletes every checkpoint, verified with
a key folder that never signed that store, sees a store that was never signed (every row unsigned).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.store._signing import (
    CheckpointKeyError,
    PublicKey,
    append_log,
    load_or_create_signing_key,
    load_public_key,
    read_log,
    resolve_key_dir,
)

if TYPE_CHECKING:
    from harness.store._problems import StoreProblem

CHECKPOINT_KIND = "store_checkpoint"


class CheckpointError(CheckpointKeyError):
    """A checkpoint cannot be written (an empty store, a store that fails its head check)."""


class Checkpoint(BaseModel):
    """One signed head: the body of a ``store_checkpoint`` report row, and of the signer's log line."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal[1] = 1
    store_id: str = Field(description="row_hash of the store's first row")
    head_seq: int = Field(ge=1)
    head_hash: str
    signed_at: str
    key_id: str
    public_key: str = Field(description="the signer's raw Ed25519 public key, hex (trust comes from the verifier's key)")
    signature: str

    def message(self) -> bytes:
        """The signed bytes: canonical JSON of everything but the signature and the public key."""
        body = {"format": self.format, "store_id": self.store_id, "head_seq": self.head_seq,
                "head_hash": self.head_hash, "signed_at": self.signed_at, "key_id": self.key_id}
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @property
    def signature_id(self) -> str:
        """``KEYID:first 16 hex of the signature``: what reports and transcripts quote."""
        return f"{self.key_id}:{self.signature[:16]}"


def message_for(store_id: str, head_seq: int, head_hash: str, signed_at: str, key_id: str) -> bytes:
    return Checkpoint(store_id=store_id, head_seq=head_seq, head_hash=head_hash, signed_at=signed_at,
                      key_id=key_id, public_key="", signature="").message()


class CheckpointReport(BaseModel):
    """What ``verify`` says about checkpoints (``StoreVerification.checkpoint``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    key_dir: str
    key_id: str | None = Field(description="the trusted key (the key folder's); None when it holds no key")
    store_id: str | None
    checkpoints: int = Field(0, description="checkpoints in the store signed by the trusted key, valid and matching")
    untrusted_checkpoints: int = Field(0, description="checkpoints signed by another key: ignored, not trusted")
    covered_seq: int = Field(0, description="chain_seq the newest valid checkpoint signs (0: none)")
    covered_hash: str | None = None
    signed_at: str | None = None
    signature_id: str | None = None
    unsigned_rows: int = Field(0, description="rows after the newest checkpoint (checkpoint rows themselves excluded)")
    unsigned_by_table: dict[str, int] = Field(default_factory=dict)
    logged_heads: int = Field(0, description="heads the key folder's log says it signed for this store")

    def line(self) -> str:
        if self.key_id is None:
            return (f"no checkpoint key in {self.key_dir}: {self.unsigned_rows} rows unsigned "
                    "(`atb store checkpoint` makes a key and signs the head)")
        if self.checkpoints == 0:
            return f"no checkpoint signed by key {self.key_id}: {self.unsigned_rows} rows unsigned"
        tables = ", ".join(f"{t} {n}" for t, n in sorted(self.unsigned_by_table.items()))
        tail = f" ({tables})" if tables else ""
        return (f"checkpoint {self.signature_id} signs chain_seq {self.covered_seq} ({self.signed_at}); "
                f"{self.unsigned_rows} rows after the newest checkpoint (unsigned){tail}")


class ChainIndex:
    """What the verifier's chain walk keeps for the checks after it: every row's hash and table by
    position, the checkpoint rows' bodies (the checkpoint check), and how many verdicts each
    (protocol version, digest) stamped (the draft-protocol count)."""

    __slots__ = ("hashes", "tables", "checkpoint_rows", "verdict_protocols")

    def __init__(self) -> None:
        self.hashes: dict[int, str] = {}
        self.tables: dict[int, str] = {}
        self.checkpoint_rows: list[tuple[int, str]] = []
        self.verdict_protocols: dict[tuple[str, str], int] = {}

    def add(self, seq: int, table: str, row: Mapping[str, Any]) -> None:
        self.hashes[seq] = str(row.get("row_hash"))
        self.tables[seq] = table
        if table == "reports" and row.get("kind") == CHECKPOINT_KIND:
            self.checkpoint_rows.append((seq, str(row.get("body_json"))))
        elif table == "verdicts":
            key = (str(row.get("protocol_version")), str(row.get("protocol_sha256")))
            self.verdict_protocols[key] = self.verdict_protocols.get(key, 0) + 1


def _problem(detail: str, seq: int | None = None, key: str | None = None) -> StoreProblem:
    from harness.store._problems import StoreProblem

    return StoreProblem(kind="checkpoint", table="reports" if seq is not None else None, key=key, chain_seq=seq,
                        detail=detail)


def check_checkpoints(index: ChainIndex, key_dir: Path | str | None = None) -> tuple[CheckpointReport, list[StoreProblem]]:
    """Check the store's checkpoints (and the key folder's log) against the walked chain.

    Never raises for what it finds; a damaged key folder is reported as a problem.
    """
    folder = resolve_key_dir(key_dir)
    problems: list[StoreProblem] = []
    store_id = index.hashes.get(1)
    try:
        pub: PublicKey | None = load_public_key(folder)
    except CheckpointKeyError as exc:
        pub = None
        problems.append(_problem(f"the key folder cannot be read: {exc}"))
    valid: list[tuple[int, Checkpoint]] = []
    untrusted = 0
    for seq, body in index.checkpoint_rows:
        try:
            cp = Checkpoint.model_validate_json(body)
        except ValueError:
            problems.append(_problem("a store_checkpoint row is not a checkpoint: forged or edited", seq))
            continue
        if pub is None or cp.key_id != pub.key_id:
            untrusted += 1
            continue
        if not pub.verify(cp.message(), cp.signature):
            problems.append(_problem(f"checkpoint signature by key {cp.key_id} does not verify: the checkpoint was "
                                     "forged or edited", seq))
            continue
        if cp.store_id != store_id:
            problems.append(_problem(f"checkpoint signed for store {cp.store_id[:12]}…, but this store's first row "
                                     f"hashes to {str(store_id)[:12]}…: the first row was rewritten", seq))
            continue
        have = index.hashes.get(cp.head_seq)
        if have is None:
            problems.append(_problem(f"checkpoint signs chain_seq {cp.head_seq} ({cp.signed_at}), which the store no "
                                     "longer holds: rows were deleted from the end (truncated)", seq))
            continue
        if have != cp.head_hash:
            problems.append(_problem(f"checkpoint signs chain_seq {cp.head_seq} with hash {cp.head_hash[:12]}…, the "
                                     f"chain there holds {have[:12]}…: rows at or before it were rewritten and the "
                                     "chain recomputed", seq))
            continue
        if seq <= cp.head_seq:
            problems.append(_problem(f"checkpoint row sits at chain_seq {seq}, at or before the head it signs "
                                     f"({cp.head_seq}): rows were moved", seq))
            continue
        valid.append((seq, cp))
    logged = [e for e in read_log(folder, store_id) if pub is not None and e.get("key_id") == pub.key_id] \
        if store_id is not None else []
    stored_heads = {(cp.head_seq, cp.head_hash) for _, cp in valid}
    for e in logged:
        seq, digest = int(e.get("head_seq", 0)), str(e.get("head_hash"))
        if (seq, digest) in stored_heads:
            continue
        have = index.hashes.get(seq)
        if have is None:
            why = ("the store no longer holds that row: rows were deleted from the end (truncated), or this is an "
                   "older copy of the store (a backup made before that head)")
        elif have != digest:
            why = "the chain there now holds another hash: rows were rewritten and the chain recomputed"
        else:
            why = "its checkpoint row is gone from the store: checkpoints were deleted"
        problems.append(_problem(f"key {pub.key_id if pub else '?'} signed chain_seq {seq} of this store at "
                                 f"{e.get('signed_at')} (log {folder / 'signed_heads.jsonl'}), but {why}"))
    newest = max(valid, key=lambda v: v[1].head_seq)[1] if valid else None
    covered = newest.head_seq if newest else 0
    checkpoint_seqs = {s for s, _ in index.checkpoint_rows}
    by_table: dict[str, int] = {}
    for seq, table in index.tables.items():
        if seq > covered and seq not in checkpoint_seqs:
            by_table[table] = by_table.get(table, 0) + 1
    report = CheckpointReport(
        key_dir=str(folder), key_id=pub.key_id if pub else None, store_id=store_id, checkpoints=len(valid),
        untrusted_checkpoints=untrusted, covered_seq=covered, covered_hash=newest.head_hash if newest else None,
        signed_at=newest.signed_at if newest else None, signature_id=newest.signature_id if newest else None,
        unsigned_rows=sum(by_table.values()), unsigned_by_table=by_table, logged_heads=len(logged))
    return report, problems


# ---------------------------------------------------------------------- writing
def _latest_protocol(store: Any) -> Any:
    from protocol import ProtocolRef

    rows = store.query("SELECT version, sha256 FROM protocols ORDER BY chain_seq DESC LIMIT 1")
    if not rows:
        raise CheckpointError(f"the results store {store.path} holds no protocol row: nothing to sign")
    return ProtocolRef(version=str(rows[0][0]), sha256=str(rows[0][1]))


def _sign_head(key: Any, store_id: str, seq: int, head_hash: str) -> Checkpoint:
    from harness.records import utc_now

    signed_at = utc_now()
    msg = message_for(store_id, seq, head_hash, signed_at, key.key_id)
    return Checkpoint(store_id=store_id, head_seq=seq, head_hash=head_hash, signed_at=signed_at, key_id=key.key_id,
                      public_key=key.public.raw.hex(), signature=key.sign(msg))


def write_checkpoint(store: Any, key_dir: Path | str | None = None) -> Checkpoint:
    """Sign the store's current head, store the checkpoint as a ``store_checkpoint`` report row and
    append it to the key folder's log (made, with its key, on first use).

    The head signed is the newest row when this is called; the checkpoint row itself comes after it,
    so rows written meanwhile by another writer are simply not covered (never wrongly covered).

    A store may offer ``append_signed_head(sign)`` (the PostgreSQL store): read the head, call
    ``sign(store_id, head_seq, head_hash)`` and append the checkpoint row right after that head in one
    locked transaction and three round trips (``benchmarks/results/checkpoint_cpu.md``). Otherwise
    the head is read and the row appended through the store's ordinary calls.

    Raises:
        CheckpointKeyError: the key cannot be made or read.
        CheckpointError: the store is empty.
        StoreError / IngestRejected: the store refused the row.
    """
    key = load_or_create_signing_key(key_dir)

    def sign(store_id: str | None, seq: int, head_hash: str) -> Checkpoint:
        if seq == 0 or store_id is None:
            raise CheckpointError(f"the results store {store.path} is empty: there is no head to sign")
        return _sign_head(key, store_id, seq, head_hash)

    append = getattr(store, "append_signed_head", None)
    if append is not None:
        cp: Checkpoint = append(sign)
    else:
        seq, head_hash = store.chain_head()
        cp = sign(store.chain_row_hash(1), seq, head_hash)
        store.add_report(CHECKPOINT_KIND, cp.store_id, cp.model_dump(mode="json"), _latest_protocol(store))
    append_log(key.key_dir, {"store_id": cp.store_id, "head_seq": cp.head_seq, "head_hash": cp.head_hash,
                             "signed_at": cp.signed_at, "key_id": key.key_id, "signature_id": cp.signature_id,
                             "location": str(store.path)})
    return cp


def newest_checkpoint(store: Any, key_dir: Path | str | None = None) -> Checkpoint | None:
    """The newest checkpoint in the store signed by the key folder's key whose signature verifies and whose
    head the chain holds as signed: what a report or transcript quotes as "written under". Cheaper than
    :func:`check_checkpoints` (no chain walk); ``atb store verify`` is the full check.
    """
    try:
        pub = load_public_key(key_dir)
    except CheckpointKeyError:
        return None
    if pub is None:
        return None
    best: Checkpoint | None = None
    store_id = store.chain_row_hash(1)
    for r in store.reports(CHECKPOINT_KIND, store_id):
        try:
            cp = Checkpoint.model_validate(r["body"])
        except ValueError:
            continue
        if cp.key_id != pub.key_id or not pub.verify(cp.message(), cp.signature):
            continue
        if store.chain_row_hash(cp.head_seq) != cp.head_hash:
            continue
        if best is None or cp.head_seq > best.head_seq:
            best = cp
    return best


__all__ = ["CHECKPOINT_KIND", "ChainIndex", "Checkpoint", "CheckpointError", "CheckpointReport", "check_checkpoints",
           "message_for", "newest_checkpoint", "write_checkpoint"]
