"""The frozen measurement protocol, as code.

``load_protocol()`` is the only way to get a verified :class:`Protocol`; every result the harness
produces is stamped with its :class:`ProtocolRef` (version and SHA-256 of ``protocol.yaml``).
"""

from protocol._errors import (
    ProtocolDigestMismatch,
    ProtocolError,
    ProtocolFileError,
    ProtocolLockError,
    ProtocolSchemaError,
    UnverifiedProtocolError,
)
from protocol._loader import (
    LOCK_PATH,
    PROTOCOL_PATH,
    check_lock_against_released,
    file_sha256,
    known_digests,
    load_protocol,
    parse_protocol,
    released_digest,
)
from protocol._released import RELEASED
from protocol._schema import Protocol, ProtocolRef, Tolerance

__all__ = [
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
    "file_sha256",
    "known_digests",
    "load_protocol",
    "parse_protocol",
    "released_digest",
]
