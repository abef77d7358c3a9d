"""The tuner's sandbox is recorded on the run (issue 26, item 2): which backend, over whose root filesystem
(the image's or the host's own files), which image or root, and why.

Against real sandboxes (no mocks): the choice :class:`atb_agent.services.HarnessServices` reports for the
sandbox it started is checked against what is seen inside that sandbox (the image's release file is there
over an image root and its digest is the one recorded; over the host root it is not, and the host's OS and
Python are); Docker's recorded image id is the daemon's. Then ``atb run --json`` on a machine as a GPU host
without Docker or image sees it (no daemon answers, no image root filesystem): the run records bubblewrap
over the host root, with both reasons, in the campaign's stored config and in its JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer
from loopback.scripts import three_iterations

from atb_agent.graph import SubmissionInbox
from atb_agent.services import HarnessServices, task_brief
from harness.tuning.subjects import load_subject
from protocol import load_protocol
from sandbox import rootfs_path
from sandbox._identity import RELEASE_FILE

NO_DOCKER = "unix:///nonexistent/docker.sock"
CHOICE_KEYS = {"backend", "root", "image", "root_identity", "selection", "requested"}


def _need_bwrap() -> None:
    from sandbox._bwrap import bwrap_available

    why = bwrap_available()
    if why is not None:
        pytest.skip(why)


def _started(backend: str) -> tuple[dict[str, Any], str]:
    """Start the tools' sandbox as a campaign does; its recorded choice and what ``cat`` of the image's
    release file and ``/etc/os-release``'s name give inside it."""
    services = HarnessServices("cpu", backend)
    task = load_subject("gelu")
    try:
        toolbox = services.toolbox(task, task_brief(task), SubmissionInbox())
        choice = services.sandbox_choice()
        assert choice is not None
        r = toolbox.sandbox.exec(["sh", "-c", f"cat /{RELEASE_FILE} 2>/dev/null || echo NO-RELEASE; "
                                              ". /etc/os-release; echo \"$PRETTY_NAME\""], timeout_s=30)
        assert r.ok, r
        return choice, r.stdout
    finally:
        services.close()


def _release_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.docker
@pytest.mark.usefixtures("docker_sandbox_ready")
def test_auto_with_a_daemon_records_docker_and_the_image_id_the_daemon_has() -> None:
    from sandbox._docker import docker_client

    tag = load_protocol().sandbox.image
    choice, inside = _started("auto")
    assert set(choice) == CHOICE_KEYS and choice["requested"] == "auto"
    assert (choice["backend"], choice["root"], choice["image"]) == ("docker", "image", tag)
    image_id = docker_client().images.get(tag).id
    assert choice["root_identity"] == f"docker image {image_id}"
    assert choice["selection"] == ["auto: a Docker daemon answers", f"the Docker image {tag} ({image_id})"]
    assert not inside.startswith("NO-RELEASE")                  # the image's own root filesystem is what runs


@pytest.mark.bwrap
def test_bwrap_with_an_image_root_records_that_root_and_its_release_digest() -> None:
    _need_bwrap()
    tag = load_protocol().sandbox.image
    release = rootfs_path(tag) / RELEASE_FILE
    if not release.is_file():
        pytest.skip(f"no image root filesystem at {rootfs_path(tag)} (atb sandbox build --no-docker)")
    choice, inside = _started("bwrap")
    assert (choice["backend"], choice["root"], choice["image"]) == ("bwrap", "image", str(rootfs_path(tag)))
    assert choice["selection"] == ["bwrap asked for", f"the image's root filesystem {rootfs_path(tag)}"]
    seen = inside.splitlines()[0]
    assert json.loads(seen) == json.loads(release.read_text())     # inside, the image's release file
    assert choice["root_identity"].startswith(f"release sha256:{_release_sha(release.read_text())} (tag {tag}")


@pytest.mark.bwrap
def test_bwrap_without_an_image_root_records_the_host_root_and_why(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _need_bwrap()
    monkeypatch.setenv("ATB_SANDBOX_CACHE", str(tmp_path))
    choice, inside = _started("bwrap")
    assert (choice["backend"], choice["root"], choice["image"], choice["requested"]) == \
        ("bwrap", "host", "host-root", "bwrap")
    assert choice["selection"][0] == "bwrap asked for"
    assert choice["selection"][1].startswith(f"no image root filesystem at {tmp_path}")
    no_release, host_os = inside.splitlines()[:2]
    assert no_release == "NO-RELEASE"                            # not an image's root: the host's own files
    assert choice["root_identity"].startswith(f"host {host_os}, kernel {os.uname().release}, Python /")
    assert choice["root_identity"].endswith("python%d.%d" % sys.version_info[:2])


@pytest.mark.slow
@pytest.mark.bwrap
def test_atb_run_without_docker_or_image_records_the_host_root_in_the_campaign_and_its_json(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A GPU host without Docker: ``auto`` finds no daemon and no image root, so bubblewrap runs over the
    host's files; the campaign's config and ``atb run --json`` say so, with both reasons."""
    _need_bwrap()
    from atb_agent.cli import main
    from harness.tuning.campaigns import campaign_sandboxes
    from harness.store import open_store

    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    monkeypatch.setenv("ATB_SANDBOX_CACHE", str(tmp_path / "no-image"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-scripted")
    db = tmp_path / "atb.sqlite"
    with LoopbackServer(three_iterations()) as srv:
        capsys.readouterr()
        code = main(["run", "gelu", "--tuner", "openai:scripted-model", "--budget", "1", "--seed", "0",
                     "--db", str(db), "--base-url", srv.openai_base_url, "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    payload = json.loads(out)
    assert payload["iterations_recorded"] == 1
    started = payload["sandbox_started"]
    assert set(started) == CHOICE_KEYS and payload["sandbox_runs"] == [started]
    assert (started["backend"], started["root"], started["image"], started["requested"]) == \
        ("bwrap", "host", "host-root", "auto")
    assert started["selection"][0].startswith(f"auto: no Docker daemon answers at {NO_DOCKER}")
    assert started["selection"][1].startswith(f"no image root filesystem at {tmp_path / 'no-image'}")
    with sqlite3.connect(db) as c:                               # stored in the campaign's row itself
        (config_json,) = c.execute("SELECT config_json FROM campaigns WHERE id = ?", (payload["run_id"],)).fetchone()
    assert json.loads(config_json)["sandbox"] == started
    with open_store(db) as store:
        assert campaign_sandboxes(store, payload["run_id"]) == [started]
