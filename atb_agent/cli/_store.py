"""``atb store verify`` and ``atb store checkpoint``: is the results store exactly what AutoTuneBench wrote?

``verify`` checks the schema version, every table/index/trigger against ``harness/store/schema.sql``, the
hash chain over every row, every ingest rule on every row, and the signed checkpoints of the chain's head
against the key folder's key and log (issue 27: a rewrite with a recomputed chain, a truncation or
deleted checkpoints fail here). Read-only: the store is never created, repaired or rewritten. Exit 0
when it verifies; exit 2 when it does not (one line on stderr naming the first bad row; with ``--json``
the full :class:`StoreVerification`). Rows after the newest checkpoint are reported as unsigned;
``--require-signed`` makes any such row (or a store with no checkpoint) a failure (exit 2).
Verdicts stamped with a protocol digest that is not released (a draft, ``protocol/_released.py``) are
counted (``draft_verdicts``, ``draft_protocols`` and ``all_released`` in ``--json``; a line in the text)
but are not a problem: development stores hold them. ``--require-released`` makes any a failure (exit 2).

``checkpoint`` signs the current head with the key in ``--key-dir`` (default ``$ATB_KEY_DIR`` or
``~/.config/autotunebench``; made on first use, 0600) and stores the checkpoint; exit 0, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from atb_agent.cli._common import EXIT_BAD_INPUT, EXIT_OK, BadInput, add_db, add_json, emit_error


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("store", help="verify the results store (hash chain, triggers, schema version, rules, signed "
                                     "checkpoints) or sign its head (checkpoint)")
    p.add_argument("action", choices=["verify", "checkpoint"])
    add_db(p)
    p.add_argument("--key-dir", default=None,
                   help="folder of the checkpoint signing key and its log (default $ATB_KEY_DIR, else "
                        "~/.config/autotunebench); verify needs only its .pub and signed_heads.jsonl")
    p.add_argument("--require-signed", action="store_true",
                   help="verify: fail (exit 2) when any row lies after the newest checkpoint signed by the key")
    p.add_argument("--require-released", action="store_true",
                   help="verify: fail (exit 2) when any verdict was measured under a draft (unreleased) protocol")
    add_json(p)
    p.set_defaults(handler=run)


def _verify(db: str, key_dir: str | None) -> Any:
    from harness.store import open_store, verify_path
    from harness.store._open import sqlite_path, store_kind

    if store_kind(db) == "sqlite":
        return verify_path(sqlite_path(db), key_dir)   # StoreError (exit 2) when there is no such file
    store = open_store(db)
    try:
        return store.verify(key_dir)
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    if args.action == "checkpoint":
        return run_checkpoint(args)
    result = _verify(str(args.db), args.key_dir)
    data = result.model_dump(mode="json")
    data["first_problem"] = result.first_problem
    cp = result.checkpoint
    unsigned = cp is None or cp.unsigned_rows > 0 or cp.checkpoints == 0
    require_released = bool(getattr(args, "require_released", False))
    drafts = result.draft_verdicts > 0
    failed = not result.ok or (args.require_signed and unsigned) or (require_released and drafts)
    data["signed"] = not unsigned
    data["all_released"] = not drafts
    if args.json:
        print(json.dumps(data, sort_keys=True))
    elif result.ok:
        print(f"store {result.path} verified: schema version {result.schema_version}, {result.rows_checked} rows, "
              f"chain head {result.head_seq} {result.head_hash}")
        if cp is not None:
            print(cp.line())
    else:
        for p in result.problems:
            print(p.line())
    if drafts and not args.json:
        print(_draft_line(result))
    if not failed:
        return EXIT_OK
    if not args.json:
        if not result.ok:
            emit_error(f"store {result.path} fails verification ({len(result.problems)} problem(s)): "
                       f"{result.first_problem}", False, EXIT_BAD_INPUT)
        elif args.require_signed and unsigned:
            emit_error(f"store {result.path} is not fully signed (--require-signed): "
                       f"{cp.line() if cp else 'no checkpoint'}", False, EXIT_BAD_INPUT)
        else:
            emit_error(f"store {result.path} holds verdicts under a draft protocol (--require-released): "
                       f"{_draft_line(result)}", False, EXIT_BAD_INPUT)
    return EXIT_BAD_INPUT


def _draft_line(result: Any) -> str:
    which = ", ".join(f"{d.version} {d.sha256[:12]}… ({d.verdicts})" for d in result.draft_protocols)
    return (f"{result.draft_verdicts} verdict(s) measured under a draft (unreleased) protocol: {which}; "
            "their figures were judged by bars anyone can relock (`--require-released` fails on them)")


def run_checkpoint(args: argparse.Namespace) -> int:
    """Sign the head of an existing store; a missing SQLite file is bad input (nothing is created)."""
    from harness.store import open_store
    from harness.store._open import sqlite_path, store_kind

    db = str(args.db)
    if store_kind(db) == "sqlite" and not sqlite_path(db).is_file():
        raise BadInput(f"no results store at {sqlite_path(db)}: nothing to sign")
    store = open_store(db)
    try:
        cp = store.checkpoint(args.key_dir)
    finally:
        store.close()
    if args.json:
        print(json.dumps({"ok": True, "db": db, **cp.model_dump(mode="json"), "signature_id": cp.signature_id},
                         sort_keys=True))
    else:
        print(f"checkpoint {cp.signature_id}: signed chain_seq {cp.head_seq} {cp.head_hash} of store "
              f"{cp.store_id[:12]}… ({db}) at {cp.signed_at}")
    return EXIT_OK
