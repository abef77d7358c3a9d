"""Record the current protocol.yaml's digest in the lock: ``python -m protocol.relock``.

Refuses to re-pin an existing version to a new digest (that is exactly the silent edit the lock is
there to catch); a changed file needs a new ``version`` first. The one exception,
``--amend-unreleased``, re-pins the newest version only while it has not landed (the lock at
``$ATB_LANDED_REF``, default ``origin/main``, does not know it) and it is not in ``protocol/_released.py``:
drafting a version is allowed, rewriting a released one is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from protocol._errors import ProtocolError
from protocol._loader import LOCK_PATH, PROTOCOL_PATH, file_sha256, parse_protocol, read_lock
from protocol._released import RELEASED


def _version_has_landed(version: str, root: Path) -> bool:
    """True when a landed lock already pins ``version``: then it is immutable.

    "Landed" is the lock at ``$ATB_LANDED_REF`` (default ``origin/main``), the state others have
    seen; where that ref does not exist nothing has landed, and only the newest version may be amended.
    """
    ref = os.environ.get("ATB_LANDED_REF", "origin/main")
    try:
        out = subprocess.run(
            ["git", "show", f"{ref}:protocol/protocol.lock.json"],
            cwd=root, capture_output=True, text=True, check=False,
        )
    except OSError:
        return True
    if out.returncode != 0:
        return False
    return any(e.get("version") == version for e in json.loads(out.stdout).get("history", []))


def relock(protocol_path: Path = PROTOCOL_PATH, lock_path: Path = LOCK_PATH, amend: bool = False) -> int:
    """Pin ``protocol_path``'s digest under its version in ``lock_path``; returns an exit status."""
    proto = parse_protocol(protocol_path.read_text(), str(protocol_path))
    digest = file_sha256(protocol_path)
    history: list[dict[str, str]] = []
    if lock_path.exists():
        try:
            history = [e.model_dump() for e in read_lock(lock_path).history]
        except ProtocolError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    for entry in history:
        if entry["version"] == proto.version:
            if entry["sha256"] == digest:
                print(f"protocol {proto.version} already locked at {digest}")
                return 0
            if proto.version in RELEASED:
                print(f"error: version {proto.version} is released (protocol/_released.py pins it to "
                      f"{RELEASED[proto.version][:12]}…); bump `version` in protocol.yaml before re-locking",
                      file=sys.stderr)
                return 2
            if amend and not _version_has_landed(proto.version, protocol_path.parent.parent) and entry is history[-1]:
                entry["sha256"] = digest
                lock_path.write_text(
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
    lock_path.write_text(
        json.dumps({"version": proto.version, "sha256": digest, "history": history}, indent=2) + "\n"
    )
    print(f"locked protocol {proto.version} at {digest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        return relock(amend="--amend-unreleased" in args)
    except ProtocolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
