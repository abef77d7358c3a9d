"""Suite-wide rules.

In CI (``CI=true``) the services the suite needs are installed and started by ``.ci/run``; there a
Docker, bubblewrap or llama-server test that skips because its service is missing would hide a broken
setup behind a green run, so such a skip is turned into a failure that carries the skip's reason.
Locally (no ``CI``) those tests skip with their reason as usual.
"""

from __future__ import annotations

import os
import tempfile

import pytest

SERVICE_MARKERS = ("docker", "bwrap", "engine")

# Issue 27: `atb compare`/`atb ab` (and compare_runs, prereg.register/decide) refuse a draft protocol
# (digest not in protocol/_released.py) without --allow-draft-protocol. The repository's own protocol is a
# draft between releases, so the suite allows it here (children inherit it); tests of the refusal
# (tests/test_protocol_draft.py) unset it with monkeypatch.
os.environ.setdefault("ATB_ALLOW_DRAFT_PROTOCOL", "1")
# campaign ends sign the store's head with a key kept outside it (issue 27): the suite's keys live in a
# throwaway folder, never in the user's ~/.config/autotunebench
os.environ.setdefault("ATB_KEY_DIR", tempfile.mkdtemp(prefix="atb-test-keys-"))
# the compile cache of rendered points (issue 26, harness.measure.compile_cache): the suite's own, so a
# run neither fills the user's ~/.cache/autotunebench nor finds compiles an earlier run left there
os.environ.setdefault("ATB_COMPILE_CACHE", tempfile.mkdtemp(prefix="atb-test-compile-cache-"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") != "true" or not report.skipped:
        return
    if not any(item.get_closest_marker(m) for m in SERVICE_MARKERS):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"CI=true but a service this test needs is missing (was a skip): {reason}"


@pytest.fixture
def docker_sandbox_ready() -> None:
    """Skip (a failure under ``CI=true``) unless dockerd answers and the sandbox image is built."""
    from protocol import load_protocol
    from sandbox import SandboxUnavailableError, image_status
    from sandbox._docker import docker_client

    try:
        client = docker_client()
    except SandboxUnavailableError as exc:
        pytest.skip(str(exc))
    status = image_status(load_protocol().sandbox.image, client)
    if not status.docker_image_present:
        pytest.skip(f"sandbox image {status.tag} is not built (atb sandbox build)")


# ---------------------------------------------------------------------- PostgreSQL (issue 17)
def _pg_missing(reason: str) -> None:
    """Skip locally; under CI=true a missing PostgreSQL is a broken setup, so fail."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but PostgreSQL is missing (scripts/services.sh starts it): {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL unavailable: {reason}")


@pytest.fixture(scope="session")
def pg_url() -> str:
    """A reachable PostgreSQL server: ATB_TEST_PG_URL, else one started by scripts/services.sh
    (a throwaway server as the postgres user on 127.0.0.1, reused while it runs)."""
    import subprocess
    from pathlib import Path

    url = os.environ.get("ATB_TEST_PG_URL")
    if not url:
        script = Path(__file__).resolve().parent.parent / "scripts" / "services.sh"
        proc = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, timeout=180)
        if proc.returncode != 0 or not proc.stdout.strip():
            _pg_missing(f"scripts/services.sh start failed: {proc.stderr.strip()[-500:]}")
        url = proc.stdout.strip().splitlines()[-1]
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=10) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any failure to reach it is "missing"
        _pg_missing(f"cannot connect to {url}: {exc}")
    return url


@pytest.fixture
def pg_db(pg_url: str):  # type: ignore[no-untyped-def]
    """A fresh, empty database on the test server for one test (dropped afterwards): its URL."""
    import uuid

    import psycopg

    name = f"atb_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = pg_url.rpartition("/")
    yield f"{base}/{name}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
