"""``atb protocol show|verify``."""

from __future__ import annotations

import argparse

from atb_agent.cli._common import EXIT_OK, add_json, emit


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("protocol", help="show or verify the frozen measurement protocol")
    p.add_argument("action", choices=["show", "verify"])
    add_json(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from protocol import LOCK_PATH, PROTOCOL_PATH, draft_label, known_digests, load_protocol

    proto = load_protocol()  # raises ProtocolDigestMismatch (exit 2) on an unbumped edit
    if args.action == "verify":
        # a draft (digest not in protocol/_released.py) loads and verifies against the lock, but is said
        # to be a draft on its own line: a relocked edit must never read as the released protocol (issue 27)
        payload = {
            "ok": True, "version": proto.version, "protocol_sha256": proto.sha256,
            "path": str(PROTOCOL_PATH), "lock": str(LOCK_PATH),
            "history": [{"version": v, "sha256": d} for v, d in known_digests()],
            "protocol_draft": proto.draft, "released": not proto.draft,
        }
        human = (f"{draft_label(proto)}\nprotocol {proto.version} matches its lock, but is NOT released: results "
                 "under it are marked protocol_draft; compare and ab refuse it without --allow-draft-protocol"
                 if proto.draft else f"protocol {proto.version} verified: sha256 {proto.sha256}")
        emit(payload, args, human)
    else:
        payload = {"version": proto.version, "protocol_sha256": proto.sha256, "protocol_draft": proto.draft,
                   "protocol": proto.model_dump(mode="json")}
        emit(payload, args, PROTOCOL_PATH.read_text())
    return EXIT_OK
