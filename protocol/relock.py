"""Record the current protocol.yaml's digest in the lock: ``python -m protocol.relock``.

Refuses to re-pin an existing version to a new digest (that is exactly the silent edit the lock is
there to catch); a changed file needs a new ``version`` first. The one exception,
``--amend-unreleased``, re-pins the newest version only while no commit has landed it (git HEAD's lock
does not know it): drafting a version is allowed, rewriting a released one is not.
"""

from __future__ import annotations

import json
import subprocess
import sys

from protocol._errors import ProtocolError
from protocol._loader import LOCK_PATH, PROTOCOL_PATH, file_sha256, parse_protocol, read_lock


def _version_has_landed(version: str) -> bool:
    """True when the committed lock (git HEAD) already pins ``version``: then it is immutable."""
    try:
        out = subprocess.run(
            ["git", "show", "HEAD:protocol/protocol.lock.json"],
            cwd=PROTOCOL_PATH.parent.parent, capture_output=True, text=True, check=False,
        )
    except OSError:
        return True
    if out.returncode != 0:
        return False
    return any(e.get("version") == version for e in json.loads(out.stdout).get("history", []))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    amend = "--amend-unreleased" in args
    proto = parse_protocol(PROTOCOL_PATH.read_text(), str(PROTOCOL_PATH))
    digest = file_sha256(PROTOCOL_PATH)
    history: list[dict[str, str]] = []
    if LOCK_PATH.exists():
        try:
            history = [e.model_dump() for e in read_lock().history]
        except ProtocolError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    for entry in history:
        if entry["version"] == proto.version:
            if entry["sha256"] == digest:
                print(f"protocol {proto.version} already locked at {digest}")
                return 0
            if amend and not _version_has_landed(proto.version) and entry is history[-1]:
                entry["sha256"] = digest
                LOCK_PATH.write_text(
                    json.dumps({"version": proto.version, "sha256": digest, "history": history}, indent=2)
                    + "\n"
                )
                print(f"amended unreleased protocol {proto.version} to {digest}")
                return 0
            print(
                f"error: version {proto.version} is already pinned to {entry['sha256'][:12]}…; "
                "bump `version` in protocol.yaml before re-locking",
                file=sys.stderr,
            )
            return 2
    history.append({"version": proto.version, "sha256": digest})
    LOCK_PATH.write_text(
        json.dumps({"version": proto.version, "sha256": digest, "history": history}, indent=2) + "\n"
    )
    print(f"locked protocol {proto.version} at {digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
