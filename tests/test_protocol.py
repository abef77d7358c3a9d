"""Provenance of the frozen protocol: the file in the repo matches its lock, edits need a bump."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from protocol import (
    LOCK_PATH,
    PROTOCOL_PATH,
    RELEASED,
    ProtocolDigestMismatch,
    ProtocolLockError,
    ProtocolSchemaError,
    UnverifiedProtocolError,
    file_sha256,
    load_protocol,
    parse_protocol,
    released_digest,
)
from protocol.relock import relock


@pytest.fixture
def draft(tmp_path: Path) -> tuple[Path, Path]:
    """A private copy of protocol.yaml and its lock to edit."""
    (tmp_path / "protocol").mkdir()
    p = tmp_path / "protocol" / "protocol.yaml"
    lock = tmp_path / "protocol" / "protocol.lock.json"
    shutil.copy(PROTOCOL_PATH, p)
    shutil.copy(LOCK_PATH, lock)
    return p, lock


def test_repository_protocol_matches_its_lock() -> None:
    """Fails when protocol.yaml was edited without bumping its version and re-locking."""
    lock = json.loads(LOCK_PATH.read_text())
    proto = load_protocol()
    assert proto.version == lock["version"], "protocol.yaml's version is not the pinned one: bump and re-lock"
    assert file_sha256(PROTOCOL_PATH) == lock["sha256"], (
        "protocol/protocol.yaml was edited without a version bump: bump `version` and run "
        "`python -m protocol.relock`"
    )


def test_lock_history_is_consistent() -> None:
    lock = json.loads(LOCK_PATH.read_text())
    versions = [e["version"] for e in lock["history"]]
    assert len(versions) == len(set(versions))
    assert lock["history"][-1] == {"version": lock["version"], "sha256": lock["sha256"]}


def test_editing_a_number_without_bump_fails(draft: tuple[Path, Path]) -> None:
    p, lock = draft
    p.write_text(p.read_text().replace("anomaly_speedup: 10.0", "anomaly_speedup: 100.0"))
    with pytest.raises(ProtocolDigestMismatch, match="Bump `version`"):
        load_protocol(p, lock)


def test_bump_and_relock_makes_an_edit_load(draft: tuple[Path, Path]) -> None:
    p, lock = draft
    old = load_protocol(p, lock)
    text = p.read_text().replace("anomaly_speedup: 10.0", "anomaly_speedup: 12.0")
    text = text.replace(f'version: "{old.version}"', 'version: "99.0.0"')
    p.write_text(text)
    with pytest.raises(ProtocolDigestMismatch, match="relock"):
        load_protocol(p, lock)
    assert relock(p, lock) == 0
    new = load_protocol(p, lock)
    assert new.version == "99.0.0" and new.gates.anomaly_speedup == 12.0
    assert new.sha256 != old.sha256
    history = json.loads(lock.read_text())["history"]
    assert [e["version"] for e in history][-2:] == [old.version, "99.0.0"]


def test_relock_refuses_to_repin_an_existing_version(draft: tuple[Path, Path]) -> None:
    p, lock = draft
    p.write_text(p.read_text().replace("paired_seeds: 5", "paired_seeds: 6"))
    before = lock.read_text()
    assert relock(p, lock) == 2
    assert lock.read_text() == before


def test_reusing_an_old_version_number_is_refused(draft: tuple[Path, Path]) -> None:
    p, lock = draft
    proto = load_protocol(p, lock)
    p.write_text(p.read_text().replace(f'version: "{proto.version}"', 'version: "50.0.0"'))
    assert relock(p, lock) == 0
    p.write_text(p.read_text().replace('version: "50.0.0"', f'version: "{proto.version}"'))
    with pytest.raises(ProtocolDigestMismatch):
        load_protocol(p, lock)


def test_unknown_key_is_an_error() -> None:
    raw = yaml.safe_load(PROTOCOL_PATH.read_text())
    raw["timing"]["cpu"]["warmup_repz"] = 3
    with pytest.raises(ProtocolSchemaError, match="warmup_repz"):
        parse_protocol(yaml.safe_dump(raw))


def test_missing_key_is_an_error() -> None:
    raw = yaml.safe_load(PROTOCOL_PATH.read_text())
    del raw["gates"]["anomaly_speedup"]
    with pytest.raises(ProtocolSchemaError, match="anomaly_speedup"):
        parse_protocol(yaml.safe_dump(raw))


def test_a_protocol_from_loose_numbers_cannot_stamp_a_result() -> None:
    loose = parse_protocol(PROTOCOL_PATH.read_text())
    assert not loose.is_verified
    with pytest.raises(UnverifiedProtocolError):
        loose.ref()


def test_loaded_protocol_is_frozen() -> None:
    proto = load_protocol()
    with pytest.raises(Exception):
        proto.gates.anomaly_speedup = 1.0  # type: ignore[misc]
    assert proto.gates.anomaly_speedup == 10.0


# ---------------------------------------------------------------- issue 14: released digests are constants
def _edit_both(p: Path, lock: Path) -> None:
    """The attack: change a number in protocol.yaml and write the new digest into the lock as well."""
    p.write_text(p.read_text().replace("paired_seeds: 5", "paired_seeds: 1"))
    digest = file_sha256(p)
    data = json.loads(lock.read_text())
    data["sha256"] = digest
    for e in data["history"]:
        if e["version"] == data["version"]:
            e["sha256"] = digest
    lock.write_text(json.dumps(data, indent=2) + "\n")


def test_released_digests_are_constants_the_lock_agrees_with() -> None:
    """The suite checks the constants: each released version in the lock is pinned to its constant,
    and the protocol in force, if released, hashes to it."""
    lock = json.loads(LOCK_PATH.read_text())
    pinned = {e["version"]: e["sha256"] for e in lock["history"]}
    for version, digest in RELEASED.items():
        assert len(digest) == 64 and int(digest, 16) >= 0
        assert pinned.get(version) == digest, f"protocol.lock.json does not pin released {version} to its constant"
    proto = load_protocol()
    if proto.version in RELEASED:
        assert proto.sha256 == RELEASED[proto.version] == file_sha256(PROTOCOL_PATH)
    assert released_digest("1.0.0") == RELEASED["1.0.0"] and released_digest("99.9.9") is None


def test_editing_protocol_and_lock_together_fails_verify(draft: tuple[Path, Path]) -> None:
    """Issue 14: editing protocol.yaml and the digest inside protocol.lock.json together used to pass."""
    p, lock = draft
    _edit_both(p, lock)
    with pytest.raises(ProtocolDigestMismatch, match="_released.py"):
        load_protocol(p, lock)


def test_a_lock_that_repins_a_released_version_is_refused(draft: tuple[Path, Path]) -> None:
    """Even with protocol.yaml moved to a new version, a lock whose history rewrites 1.0.0 is refused."""
    p, lock = draft
    data = json.loads(lock.read_text())
    data["history"][0]["sha256"] = "ab" * 32
    data["history"].append({"version": "77.0.0", "sha256": "cd" * 32})
    data["version"], data["sha256"] = "77.0.0", "cd" * 32
    lock.write_text(json.dumps(data))
    text = re.sub(r'(?m)^version: "[^"]+"', 'version: "77.0.0"', p.read_text())
    p.write_text(text)
    data["history"][-1]["sha256"] = data["sha256"] = file_sha256(p)
    lock.write_text(json.dumps(data))
    with pytest.raises(ProtocolLockError, match="released"):
        load_protocol(p, lock)


def test_relock_refuses_to_amend_a_released_version(draft: tuple[Path, Path]) -> None:
    p, lock = draft
    p.write_text(p.read_text().replace("paired_seeds: 5", "paired_seeds: 6"))
    before = lock.read_text()
    assert relock(p, lock, amend=True) == 2
    assert lock.read_text() == before


def test_protocol_verify_cli_checks_the_released_constant() -> None:
    """`atb protocol verify` goes through load_protocol: the repository's protocol is the released one."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "atb_agent.cli", "protocol", "verify", "--json"],
                         capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["protocol_sha256"] == RELEASED[json.loads(out.stdout)["version"]]
