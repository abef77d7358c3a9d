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
    from protocol import LOCK_PATH, PROTOCOL_PATH, known_digests, load_protocol

    proto = load_protocol()  # raises ProtocolDigestMismatch (exit 2) on an unbumped edit
    if args.action == "verify":
        payload = {
            "ok": True, "version": proto.version, "protocol_sha256": proto.sha256,
            "path": str(PROTOCOL_PATH), "lock": str(LOCK_PATH),
            "history": [{"version": v, "sha256": d} for v, d in known_digests()],
        }
        emit(payload, args, f"protocol {proto.version} verified: sha256 {proto.sha256}")
    else:
        payload = {"version": proto.version, "protocol_sha256": proto.sha256,
                   "protocol": proto.model_dump(mode="json")}
        emit(payload, args, PROTOCOL_PATH.read_text())
    return EXIT_OK
