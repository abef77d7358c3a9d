"""``atb sandbox build|status|cleanup``: make the sandbox image, say how sandboxes would run, remove leftovers."""

from __future__ import annotations

import argparse
import shutil
from typing import Any

from atb_agent.cli._common import EXIT_OK, BadInput, add_json, emit, progress


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("sandbox", help="build the sandbox image, show its status, or remove leftover sandboxes")
    actions = p.add_subparsers(dest="sandbox_action", metavar="ACTION")
    actions.required = True

    b = actions.add_parser("build", help="build the root filesystem (debootstrap) and import it into Docker")
    b.add_argument("--force", action="store_true", help="rebuild even when the root filesystem is cached")
    b.add_argument("--reimport", action="store_true", help="re-import the Docker image from the cached root filesystem")
    b.add_argument("--no-docker", action="store_true", help="only build the root filesystem (bubblewrap backend)")
    add_json(b)
    b.set_defaults(handler=run_build)

    s = actions.add_parser("status", help="which backend a run would use, and what of the sandbox exists")
    add_json(s)
    s.set_defaults(handler=run_status)

    c = actions.add_parser("cleanup", help="remove sandboxes (containers, workspaces, cgroups) of runs that died")
    c.add_argument("--all", action="store_true", help="also remove those of runs still alive on this host")
    add_json(c)
    c.set_defaults(handler=run_cleanup)


def _tag() -> str:
    from protocol import load_protocol

    return load_protocol().sandbox.image


def _docker() -> tuple[Any, str]:
    """(client or None, a one-line description of the daemon's state)."""
    from sandbox import SandboxUnavailableError
    from sandbox._docker import docker_client

    try:
        client = docker_client(timeout_s=30)
    except SandboxUnavailableError as exc:
        return None, str(exc)
    return client, f"Docker {client.version().get('Version', '?')} answers"


def run_build(args: argparse.Namespace) -> int:
    from sandbox import SandboxError, build_image, image_status

    tag = _tag()
    client, daemon = _docker()
    if client is None and not args.no_docker:
        raise BadInput(f"{daemon}; or pass --no-docker to build only the bubblewrap root filesystem")
    progress(f"building sandbox {tag} ({daemon if client is not None else 'root filesystem only'})")
    try:
        rootfs = build_image(tag, force=args.force, docker=not args.no_docker, reimport=args.reimport)
    except SandboxError as exc:
        raise BadInput(str(exc)) from exc
    status = image_status(tag, client)
    payload = {"ok": True, "tag": tag, "rootfs": str(rootfs), "status": status.model_dump(mode="json")}
    size = status.docker_image_bytes
    human = f"sandbox {tag} ready: root filesystem {rootfs}" + (
        f", Docker image {status.docker_image_id} ({size / 1e6:.0f} MB)" if size else "")
    emit(payload, args, human)
    return EXIT_OK


def run_status(args: argparse.Namespace) -> int:
    from sandbox import image_status
    from sandbox._identity import LABEL

    tag = _tag()
    client, daemon = _docker()
    status = image_status(tag, client)
    from sandbox._bwrap import bwrap_available, bwrap_command
    from sandbox._open import bwrap_root

    bwrap_missing = bwrap_available()          # honours ATB_BWRAP, as the sandbox itself does
    bwrap = None if bwrap_missing else " ".join(bwrap_command())
    live: list[str] = []
    if client is not None:
        live = [c.name for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"})]
    if client is not None and status.docker_image_present:
        backend, why = "docker", daemon
    elif client is not None:
        backend, why = "none", f"{daemon} but image {tag} is missing: run `atb sandbox build`"
    elif bwrap:
        root, root_why = bwrap_root(tag)
        backend, why = "bwrap", f"{daemon}; bubblewrap will be used over {root_why}"
    else:
        backend, why = "none", f"{daemon}; {bwrap_missing}"
    payload = {"ok": True, "tag": tag, "auto_backend": backend, "reason": why, "docker_answers": client is not None,
               "bwrap": bwrap, "image": status.model_dump(mode="json"), "live_containers": live}
    human = (f"auto backend: {backend} ({why})\nroot filesystem: {status.rootfs} "
             f"({'present' if status.rootfs_present else 'missing'})\n"
             f"docker image {tag}: {status.docker_image_present}\nlive sandbox containers: {len(live)}")
    emit(payload, args, human)
    return EXIT_OK


def run_cleanup(args: argparse.Namespace) -> int:
    from sandbox import cleanup_leftovers

    report = cleanup_leftovers(everything=args.all)
    payload = {"ok": True, **report.model_dump(mode="json")}
    human = (f"removed {len(report.containers_removed)} container(s), {len(report.workspaces_removed)} "
             f"workspace(s), {len(report.cgroups_removed)} cgroup(s)" + (f"; {report.docker_note}" if report.docker_note else ""))
    emit(payload, args, human)
    return EXIT_OK
