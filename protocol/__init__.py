"""The frozen measurement protocol, as code.

``load_protocol()`` is the only way to get a verified :class:`Protocol`; every result the harness
produces is stamped with its :class:`ProtocolRef` (version and SHA-256 of ``protocol.yaml``).
"""

from protocol._errors import (
    DraftProtocolRefused,
    ProtocolDigestMismatch,
    ProtocolError,
    ProtocolFileError,
    ProtocolLockError,
    ProtocolSchemaError,
    UnverifiedProtocolError,
)
from protocol._loader import (
    DRAFT_ENV,
    LOCK_PATH,
    PROTOCOL_PATH,
    check_lock_against_released,
    draft_label,
    file_sha256,
    is_released_digest,
    known_digests,
    load_protocol,
    parse_protocol,
    released_digest,
    require_released,
)
from protocol._released import RELEASED
from protocol._schema import Protocol, ProtocolRef, Tolerance

__all__ = [
    "DRAFT_ENV",
    "DraftProtocolRefused",
    "LOCK_PATH",
    "PROTOCOL_PATH",
    "RELEASED",
    "Protocol",
    "ProtocolDigestMismatch",
    "ProtocolError",
    "ProtocolFileError",
    "ProtocolLockError",
    "ProtocolRef",
    "ProtocolSchemaError",
    "Tolerance",
    "UnverifiedProtocolError",
    "check_lock_against_released",
    "draft_label",
    "file_sha256",
    "is_released_digest",
    "known_digests",
    "load_protocol",
    "parse_protocol",
    "released_digest",
    "require_released",
]
