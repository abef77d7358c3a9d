"""Errors raised while loading or verifying the protocol. Each message says what to do."""

from __future__ import annotations

from typing import ClassVar


class ProtocolError(Exception):
    """Base class of every protocol problem."""

    user_fixable: ClassVar[bool] = True   # the CLI prints it in one line and exits 2


class ProtocolFileError(ProtocolError):
    """The protocol or lock file is missing, unreadable, or not valid YAML/JSON."""


class ProtocolSchemaError(ProtocolError):
    """A key is unknown, missing, or has a value of the wrong type or range."""


class ProtocolDigestMismatch(ProtocolError):
    """The file's bytes do not match the digest pinned in the lock: an edit without a version bump."""


class ProtocolLockError(ProtocolError):
    """The lock is inconsistent: a version reused with another digest, or history out of order."""


class UnverifiedProtocolError(ProtocolError):
    """A result was about to be made from a Protocol that was not loaded from a digest-checked file."""


class DraftProtocolRefused(ProtocolError):
    """A command that states a result between runs (compare, A/B) was asked to work under a draft
    protocol (its digest is not in ``protocol/_released.py``) without ``--allow-draft-protocol``."""
