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


# ---------------------------------------------------------------------- scheduling (scripts/test.sh)
# xdist's --dist loadfile hands out whole files, by default the files with the most tests first
# (--loadscope-reorder), which put the heaviest files of all -- end-to-end campaigns with one to three tests
# each -- at the very end, where one worker ran them while the other had nothing left to take (and a
# worker takes a new file while it has up to two tests pending, so it could hold three of them at once).
# scripts/test.sh passes --no-loadscope-reorder and this hook orders the files instead: these first,
# longest first (call-phase seconds in CI, December 2026), then every other file by its number of tests
# as xdist did. It changes only the order in which files start; a file's tests keep their order. A stale
# list costs balance, never a test.
HEAVY_FILES_FIRST = (
    "tests/test_sweep.py",                          # ~190 s: Ray + PostgreSQL sweeps, stop/restart, killed worker
    "tests/test_mcp_per_call.py",                   # ~110 s
    "tests/test_resume_killed.py",                  # ~86 s
    "tests/test_random_kernelbench.py",             # ~80 s
    "tests/redteam/test_redteam_quarantine.py",     # ~80 s
    "tests/test_sweep_local.py",                    # ~40 s: local sweeps without Ray (one exported), a killed campaign
    "tests/test_engine_gpu_space.py",               # ~60 s
    "tests/redteam/test_redteam_neutralised.py",    # ~60 s
    "tests/test_mcp_http.py",                       # ~54 s
    "tests/test_typecheck.py",                      # ~44 s
    "tests/test_mcp_langgraph.py",                  # ~42 s
    "tests/test_mcp_stdio.py",                      # ~41 s
    "tests/test_engine_outputs.py",                 # ~40 s
    "tests/test_agent_engine.py",                   # ~38 s
    "tests/test_sweep_llm_postgres.py",             # ~38 s
    "tests/test_mcp_errors.py",                     # ~36 s
    "tests/test_text_protocol.py",                  # ~35 s
    "tests/test_demo_fixture.py",                   # ~33 s
    "tests/test_kernelbench_llm.py",                # ~32 s
    "tests/test_physical_floor.py",                 # ~31 s
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    files = [item.nodeid.split("::", 1)[0] for item in items]
    counts: dict[str, int] = {}
    for f in files:
        counts[f] = counts.get(f, 0) + 1
    rank = {f: i for i, f in enumerate(HEAVY_FILES_FIRST)}
    order = {id(item): (rank.get(f, len(rank)), -counts[f], f) for item, f in zip(items, files)}
    items.sort(key=lambda item: order[id(item)])    # stable: a file's tests keep their collected order
