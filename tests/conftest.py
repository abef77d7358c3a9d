"""Suite-wide rules.

In CI (``CI=true``) the services the suite needs are installed and started by ``.ci/run``; there a
Docker, bubblewrap or llama-server test that skips because its service is missing would hide a broken
setup behind a green run, so such a skip is turned into a failure that carries the skip's reason.
Locally (no ``CI``) those tests skip with their reason as usual.
"""

from __future__ import annotations

import os

import pytest

SERVICE_MARKERS = ("docker", "bwrap", "engine")


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
