"""The checkpoint signing key: Ed25519, kept outside every store, made on first use.

Why a key at all: the store's hash chain is keyless, so a writer with file access can edit a row and
recompute every hash after it (issue 27). A signature over the chain's head by a key that never lives
in the store is what such a writer cannot reproduce. Why outside the store's folder: whoever can
rewrite the store must not thereby also hold the key; the default is the user's config folder
(``$ATB_KEY_DIR``, else ``$XDG_CONFIG_HOME/autotunebench``, else ``~/.config/autotunebench``), and
every command that signs or verifies takes ``--key-dir`` too.

Files in the key folder (created 0700; files 0600, the public key 0644):

* ``checkpoint_ed25519.key``: the private key (PKCS#8 PEM, unencrypted). Refused when its permissions
  let anyone but the owner read it.
* ``checkpoint_ed25519.pub``: the raw public key in hex: all a verifier needs, shareable.
* ``signed_heads.jsonl``: one line per head this key signed (store id, seq, hash, when): the local log
  that makes deleting every checkpoint from a store visible (:mod:`harness.store._checkpoint`).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from harness.store._errors import StoreError

KEY_DIR_ENV = "ATB_KEY_DIR"
PRIVATE_NAME = "checkpoint_ed25519.key"
PUBLIC_NAME = "checkpoint_ed25519.pub"
LOG_NAME = "signed_heads.jsonl"


class CheckpointKeyError(StoreError):
    """The signing key cannot be made, read or trusted (permissions, a damaged file, a missing package)."""


def default_key_dir() -> Path:
    """``$ATB_KEY_DIR``, else ``$XDG_CONFIG_HOME/autotunebench``, else ``~/.config/autotunebench``."""
    env = os.environ.get(KEY_DIR_ENV)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "autotunebench"


def resolve_key_dir(key_dir: Path | str | None) -> Path:
    return Path(key_dir).expanduser() if key_dir is not None else default_key_dir()


def key_id_of(public_raw: bytes) -> str:
    """A key's short name: the first 16 hex digits of the SHA-256 of its raw public bytes."""
    return hashlib.sha256(public_raw).hexdigest()[:16]


def _ed25519() -> Any:
    try:
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise CheckpointKeyError("signed checkpoints need the `cryptography` package: pip install 'cryptography>=42'") \
            from exc
    return ed25519


class PublicKey:
    """A verifier's half: checks signatures; loaded from ``checkpoint_ed25519.pub`` (hex)."""

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        self.key_id = key_id_of(raw)
        self._key = _ed25519().Ed25519PublicKey.from_public_bytes(raw)

    def verify(self, message: bytes, signature_hex: str) -> bool:
        from cryptography.exceptions import InvalidSignature

        try:
            self._key.verify(bytes.fromhex(signature_hex), message)
        except (InvalidSignature, ValueError):
            return False
        return True


class SigningKey:
    """The signer's half. Only :func:`load_or_create_signing_key` makes one."""

    def __init__(self, private: Any, key_dir: Path) -> None:
        from cryptography.hazmat.primitives import serialization

        self._private = private
        self.key_dir = key_dir
        raw = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public = PublicKey(raw)
        self.key_id = self.public.key_id

    def sign(self, message: bytes) -> str:
        return bytes(self._private.sign(message)).hex()


def _check_private_mode(path: Path) -> None:
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise CheckpointKeyError(f"the checkpoint signing key {path} is readable by others (mode {oct(mode & 0o777)}): "
                                 f"run `chmod 600 {path}` (and make a new key if others may have read it)")


def load_or_create_signing_key(key_dir: Path | str | None = None) -> SigningKey:
    """The private key in ``key_dir`` (default :func:`default_key_dir`), made there on first use.

    Raises:
        CheckpointKeyError: the folder cannot be made, the key file is damaged or readable by others.
    """
    from cryptography.hazmat.primitives import serialization

    ed = _ed25519()
    folder = resolve_key_dir(key_dir)
    priv_path = folder / PRIVATE_NAME
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not priv_path.exists():
            private = ed.Ed25519PrivateKey.generate()
            pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption())
            try:
                fd = os.open(priv_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:      # another process made it first: use theirs
                pass
            else:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(pem)
                    fh.flush()
                    os.fsync(fh.fileno())
        _check_private_mode(priv_path)
        private = serialization.load_pem_private_key(priv_path.read_bytes(), password=None)
    except OSError as exc:
        raise CheckpointKeyError(f"cannot make or read the checkpoint signing key in {folder}: {exc}; set "
                                 f"${KEY_DIR_ENV} or pass --key-dir to a writable folder outside the store's") from exc
    except ValueError as exc:
        raise CheckpointKeyError(f"{priv_path} is not an Ed25519 private key ({exc}): move it aside to make a new "
                                 "one (checkpoints it signed will then no longer verify with this folder)") from exc
    if not isinstance(private, ed.Ed25519PrivateKey):
        raise CheckpointKeyError(f"{priv_path} holds a {type(private).__name__}, not an Ed25519 private key")
    key = SigningKey(private, folder)
    pub_path = folder / PUBLIC_NAME
    try:
        if not pub_path.exists() or pub_path.read_text().strip() != key.public.raw.hex():
            pub_path.write_text(key.public.raw.hex() + "\n")
    except OSError as exc:
        raise CheckpointKeyError(f"cannot write the public key {pub_path}: {exc}") from exc
    return key


def load_public_key(key_dir: Path | str | None = None) -> PublicKey | None:
    """The trusted public key of ``key_dir`` (its ``.pub``, else derived from its private key); None when
    the folder holds no key (nothing has been signed with it).

    Raises:
        CheckpointKeyError: the public key file is damaged.
    """
    folder = resolve_key_dir(key_dir)
    pub_path = folder / PUBLIC_NAME
    if pub_path.is_file():
        try:
            return PublicKey(bytes.fromhex(pub_path.read_text().strip()))
        except ValueError as exc:
            raise CheckpointKeyError(f"{pub_path} is not a hex Ed25519 public key: {exc}") from exc
    if (folder / PRIVATE_NAME).is_file():
        return load_or_create_signing_key(folder).public
    return None


def append_log(key_dir: Path, entry: dict[str, Any]) -> None:
    """Append one signed head to the key folder's log (one ``O_APPEND`` write, 0600).

    Not fsynced (it would double the campaign-end cost, see benchmarks/results/checkpoint_cpu.md): a line
    lost to a crash just after it leaves a checkpoint in the store that the log does not list, which
    verifies as before; the log only ever adds checks, so losing a line never makes a store fail.
    """
    path = key_dir / LOG_NAME
    line = (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError as exc:
        raise CheckpointKeyError(f"cannot append to the signed-head log {path}: {exc}") from exc


def read_log(key_dir: Path | str | None, store_id: str) -> list[dict[str, Any]]:
    """The heads this key folder's log says were signed for ``store_id``, oldest first (damaged lines skipped:
    the log is the signer's own memory, not evidence for others)."""
    path = resolve_key_dir(key_dir) / LOG_NAME
    if not path.is_file():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(entry, dict) and entry.get("store_id") == store_id:
            out.append(entry)
    return out


__all__ = ["CheckpointKeyError", "KEY_DIR_ENV", "LOG_NAME", "PRIVATE_NAME", "PUBLIC_NAME", "PublicKey", "SigningKey",
           "append_log", "default_key_dir", "key_id_of", "load_or_create_signing_key", "load_public_key", "read_log",
           "resolve_key_dir"]
