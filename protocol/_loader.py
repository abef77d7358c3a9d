"""The one place that reads the protocol: load ``protocol.yaml``, check its digest, validate it.

Why a digest and not a version string alone: a version string is easy to forget to bump. The digest
of the exact bytes is pinned in ``protocol.lock.json`` beside the version, so any edit that is not
accompanied by a bump and a re-lock is caught at load time, in tests and in ``atb protocol verify``.
Because one edit can change the lock too, the digests of released versions are also constants in
code (``protocol/_released.py``): a released version must hash to its constant whatever the lock says.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import ValidationError

from protocol._errors import (
    ProtocolDigestMismatch,
    ProtocolFileError,
    ProtocolLockError,
    ProtocolSchemaError,
)
from protocol._released import RELEASED
from protocol._schema import Protocol, ProtocolLock

PROTOCOL_DIR = Path(__file__).resolve().parent
PROTOCOL_PATH = PROTOCOL_DIR / "protocol.yaml"
LOCK_PATH = PROTOCOL_DIR / "protocol.lock.json"


def file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ProtocolFileError(f"cannot read {path}: {exc}") from exc


def read_lock(lock_path: Path = LOCK_PATH) -> ProtocolLock:
    """Read and sanity-check the lock: each version appears once, the pin is the last entry."""
    try:
        raw = json.loads(lock_path.read_text())
    except OSError as exc:
        raise ProtocolFileError(f"cannot read the protocol lock {lock_path}: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ProtocolFileError(f"{lock_path} is not valid JSON: {exc}") from exc
    try:
        lock = ProtocolLock.model_validate(raw)
    except ValidationError as exc:
        raise ProtocolLockError(f"{lock_path} has the wrong shape: {exc}") from exc
    versions = [e.version for e in lock.history]
    if len(set(versions)) != len(versions):
        raise ProtocolLockError(f"{lock_path}: a version appears twice in history: {versions}")
    digests = [e.sha256 for e in lock.history]
    if len(set(digests)) != len(digests):
        raise ProtocolLockError(f"{lock_path}: one digest is pinned under two versions")
    if not lock.history or (lock.history[-1].version, lock.history[-1].sha256) != (lock.version, lock.sha256):
        raise ProtocolLockError(f"{lock_path}: the pinned version/digest must be the last history entry")
    return lock


def parse_protocol(text: str, source: str = "protocol.yaml") -> Protocol:
    """Validate protocol text into an *unverified* Protocol (no digest check)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ProtocolFileError(f"{source} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ProtocolSchemaError(f"{source} must be a mapping at the top level")
    try:
        return Protocol.model_validate(raw)
    except ValidationError as exc:
        raise ProtocolSchemaError(f"{source} does not match the protocol schema:\n{exc}") from exc


def load_protocol(path: Path | None = None, lock_path: Path | None = None) -> Protocol:
    """Load, digest-check and validate the protocol.

    Raises:
        ProtocolFileError: a file is missing or unreadable.
        ProtocolDigestMismatch: the file was edited without bumping the version and re-locking.
        ProtocolLockError: the lock is inconsistent.
        ProtocolSchemaError: a key is unknown or a value is invalid.
    """
    path = path or PROTOCOL_PATH
    lock_path = lock_path or LOCK_PATH
    return _load_cached(path.resolve(), lock_path.resolve(), file_sha256(path), file_sha256(lock_path))


@lru_cache(maxsize=8)
def _load_cached(path: Path, lock_path: Path, digest: str, lock_digest: str) -> Protocol:
    """Cached on both files' digests, so any edit to either is seen by the next load."""
    lock = read_lock(lock_path)
    proto = parse_protocol(path.read_text(), source=str(path))
    if proto.version == lock.version and digest != lock.sha256:
        raise ProtocolDigestMismatch(
            f"{path} was edited but its version is still {proto.version}: the lock pins "
            f"{lock.sha256[:12]}…, the file hashes to {digest[:12]}…. Bump `version` in protocol.yaml "
            "and run `python -m protocol.relock` to record the new digest (or undo the edit)."
        )
    if proto.version != lock.version:
        known = {e.version: e.sha256 for e in lock.history}
        if proto.version in known:
            raise ProtocolDigestMismatch(
                f"{path} says version {proto.version}, an old version pinned to {known[proto.version][:12]}…; "
                f"the current pin is {lock.version}. Choose a new version number and re-lock."
            )
        raise ProtocolDigestMismatch(
            f"{path} is version {proto.version} but the lock pins {lock.version}: run "
            "`python -m protocol.relock` to record the new version's digest."
        )
    released = RELEASED.get(proto.version)
    if released is not None and digest != released:
        raise ProtocolDigestMismatch(
            f"{path} says version {proto.version}, released with digest {released[:12]}… "
            f"(protocol/_released.py), but the file hashes to {digest[:12]}…: a released protocol never "
            "changes, whatever protocol.lock.json says. Undo the edit, or give the changed protocol a new "
            "version and run `python -m protocol.relock`."
        )
    check_lock_against_released(lock, lock_path)
    proto._sha256 = digest
    return proto


def check_lock_against_released(lock: ProtocolLock, lock_path: Path = LOCK_PATH) -> None:
    """Every released version the lock pins must be pinned to its released digest.

    Raises:
        ProtocolLockError: the lock pins a released version to another digest (an edited lock).
    """
    for e in lock.history:
        want = RELEASED.get(e.version)
        if want is not None and e.sha256 != want:
            raise ProtocolLockError(
                f"{lock_path} pins released version {e.version} to {e.sha256[:12]}…, but it was released as "
                f"{want[:12]}… (protocol/_released.py): restore the lock from version control")


def released_digest(version: str) -> str | None:
    """The digest version ``version`` was released with, or None for a draft (unreleased) version."""
    return RELEASED.get(version)


def known_digests(lock_path: Path | None = None) -> list[tuple[str, str]]:
    """Every (version, sha256) ever pinned, oldest first: the store registers all of them."""
    lock = read_lock(lock_path or LOCK_PATH)
    return [(e.version, e.sha256) for e in lock.history]


# ---------------------------------------------------------------------------------------- drafts
DRAFT_ENV = "ATB_ALLOW_DRAFT_PROTOCOL"
"""Set to ``1`` to allow a draft protocol where ``--allow-draft-protocol`` would (a whole test suite run
under the repository's draft does; nothing else should). Read only by :func:`require_released`."""


def is_released_digest(digest: str) -> bool:
    """Whether ``digest`` is the digest of a released protocol version (a constant in code)."""
    return digest in set(RELEASED.values())


def draft_label(proto: Protocol) -> str:
    """One line naming the protocol's standing: ``draft (unreleased) 1.6.0 <digest>`` for a draft, else
    ``released 1.5.0 <digest>``. What `atb protocol verify` prints and reports show."""
    kind = "draft (unreleased)" if proto.draft else "released"
    return f"{kind} {proto.version} {proto.sha256}"


def require_released(proto: Protocol, action: str, *, allow_draft: bool = False) -> None:
    """Refuse to ``action`` (compare runs, decide an A/B) under a draft protocol unless allowed.

    Why: a draft's numbers can be anything (``anomaly_speedup: 1000``, ``paired_seeds: 2``) and still
    relock cleanly; a comparison stated under it would read like one under the released rules.
    ``allow_draft`` is the CLI's ``--allow-draft-protocol``; the environment variable
    :data:`DRAFT_ENV` set to ``1`` allows it too.

    Raises:
        DraftProtocolRefused: the protocol is a draft and neither the flag nor the variable allows it.
    """
    import os

    from protocol._errors import DraftProtocolRefused

    if not proto.draft or allow_draft or os.environ.get(DRAFT_ENV) == "1":
        return
    raise DraftProtocolRefused(
        f"cannot {action} under {draft_label(proto)}: its digest is not a released one "
        "(protocol/_released.py), so its bars are not the released rules; pass --allow-draft-protocol to do "
        "it anyway (the output is marked protocol_draft), or release the version first")
