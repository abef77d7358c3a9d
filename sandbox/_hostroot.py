"""A root filesystem made of the host's own files, read-only: the bubblewrap backend's root when no image exists.

Why: a GPU host often has neither a Docker daemon nor the debootstrap root filesystem (the H200 machine has
no Docker and carries bwrap as a binary bundle), so an LLM tuner's sandbox could not start there and no
campaign could run (issue 26). Instead of refusing, the bwrap backend can build its root from the host: an
empty tmpfs at ``/`` (remounted read-only once everything is in place) onto which only what a tuner needs
is bound read-only:

* the system directories (``/usr``, and ``/bin``, ``/lib``, ``/lib64``, ``/sbin`` as the same symlinks on a
  merged-usr host): the shell, coreutils, the C++ compiler ``torch.compile`` uses, shared libraries;
* a few ``/etc`` entries (:data:`ETC_ENTRIES`, each with its reason), and a private ``passwd``/``group``
  naming only root, the tuner's uid and nobody (written into the sandbox's own scratch holder, not the
  host's files, which list every host account);
* a Python interpreter of this interpreter's minor version (so the torch site-packages, bound as in the
  image mode, matches its ABI): this interpreter's own base prefix at its real path when the tuner's uid
  can reach it, else the system's ``/usr/bin/python3.X``; ``python3`` on the sandbox's ``PATH`` is a link
  to the chosen one (:data:`PYTHON_LINK_DIR`).

Never bound: ``/root``, ``/home``, ``/run`` and ``/var/run`` (the Docker socket lives there), the project's
repository (which holds the harness and, often, the store), the user's home, or any ancestor of them (an
interpreter prefix *inside* a home is bound, alone, when the tuner's uid can reach it);
:func:`plan_host_root` refuses a bind that would expose one. bwrap runs as the tuner's uid (see
``sandbox._bwrap``), so a bind source must be reachable by that uid on the host: ``/root`` is mode 0700,
so an interpreter under it (pyenv's default) is not, and the check says which folder blocks and what to do.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from sandbox._errors import SandboxUnavailableError
from sandbox._identity import TUNER_GID, TUNER_UID

HOST_ROOT_IMAGE = "host-root"
"""``SandboxInfo.image`` of a sandbox whose root filesystem is the host's own files."""

SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/lib32", "/libx32")
ETC_ENTRIES: dict[str, str] = {
    "ld.so.cache": "the dynamic loader's cache, so programs find their shared libraries",
    "ld.so.conf": "the loader's search configuration",
    "ld.so.conf.d": "the loader's search configuration (e.g. the CUDA libraries' folder)",
    "nsswitch.conf": "how user and group names are looked up (in the private passwd/group files)",
    "localtime": "the host's time zone",
    "ssl/certs": "CA certificates (read-only; the sandbox has no network)",
    "alternatives": "the targets of /usr/bin links such as g++, c++, cc and python3 (update-alternatives)",
    "os-release": "which distribution this is (platform and build tools read it)",
}
PYTHON_LINK_DIR = "/opt/atb/bin"
"""Where ``python3`` (a link to the chosen interpreter) is put, first on the sandbox's ``PATH``."""

NEVER_BOUND = ("/root", "/home", "/run", "/var/run")
SANDBOX_OWN = ("/tmp", "/workspace", "/dev", "/proc", "/opt/atb")
"""Paths the sandbox mounts its own things over: a host folder under one of them would be hidden."""


class HostRootError(SandboxUnavailableError):
    """The host's files cannot make the sandbox's root: no interpreter the tuner can reach, or a bind
    would expose a protected folder. The message names the path and the fix."""


class HostBind(BaseModel):
    """One host path bound read-only into the sandbox, and why the tuner needs it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    target: str
    why: str


class HostRoot(BaseModel):
    """What a host-root sandbox sees of the host: read-only binds, symlinks and the chosen interpreter."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    binds: tuple[HostBind, ...]
    symlinks: tuple[tuple[str, str], ...]  # (what the link points to, the link's path in the sandbox)
    python: str
    python_reason: str

    def bwrap_args(self) -> list[str]:
        """The bwrap arguments that build this root on an empty tmpfs. The caller adds /dev, /proc, the
        writable binds, then ``--remount-ro /`` (after its own binds, whose mount points live on the tmpfs)."""
        argv = ["--tmpfs", "/"]
        for b in self.binds:
            argv += ["--ro-bind", b.source, b.target]
        for target, link in self.symlinks:
            argv += ["--symlink", target, link]
        return argv

    def describe(self) -> str:
        """One line for ``SandboxInfo.enforcement['root_filesystem']``: every bind and why."""
        parts = [f"{b.source}" + (f" at {b.target}" if b.target != b.source else "") + f": {b.why}"
                 for b in self.binds]
        links = [f"{link} -> {target}" for target, link in self.symlinks]
        return ("host-root: an empty read-only tmpfs with only these host paths bound read-only: "
                + "; ".join(parts) + ". Symlinks: " + ", ".join(links)
                + f". Python: {self.python}, {self.python_reason}. Never bound: "
                + ", ".join(NEVER_BOUND) + ", the project's repository and the user's home.")


# ------------------------------------------------------------------------------------ reachability
def _allows(st: os.stat_result, uid: int, gid: int, want: int) -> bool:
    if st.st_uid == uid:
        bits = (st.st_mode >> 6) & 7
    elif st.st_gid == gid:
        bits = (st.st_mode >> 3) & 7
    else:
        bits = st.st_mode & 7
    return bits & want == want


def tuner_blocked_at(path: str | Path, uid: int = TUNER_UID, gid: int = TUNER_GID) -> str | None:
    """The first folder (or the path itself) that ``uid`` cannot pass on the way to ``path``, with its
    mode; ``None`` when it can search every folder above ``path`` and read (and, for a folder or a
    program, enter or run) ``path`` itself.

    Why: bwrap runs as the tuner's uid and opens each bind source as that uid, so a source it cannot
    reach fails every command with "Can't find source path". Checked by the permission bits as that
    uid with no supplementary groups (the sandbox drops them); ACLs are not read (the start-up probe of
    ``sandbox._bwrap`` catches what this misses). For this process's own uid ``os.access`` decides.
    """
    real = Path(os.path.realpath(path))
    if not real.exists():
        return f"{real} (does not exist)"
    own = uid == os.geteuid()
    chain = [*reversed(real.parents), real]
    for i, p in enumerate(chain):
        last = i == len(chain) - 1
        st = os.stat(p)
        want = 1 if not last else (5 if stat.S_ISDIR(st.st_mode) or st.st_mode & 0o111 else 4)
        if own:
            ok = os.access(p, (os.X_OK if want & 1 else 0) | (os.R_OK if want & 4 else 0))
        else:
            ok = _allows(st, uid, gid, want)
        if not ok:
            return f"{p} (mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid})"
    return None


# ------------------------------------------------------------------------------------ protection
def project_root() -> Path:
    """The folder holding this package (the repository, in a checkout): never visible in a sandbox."""
    return Path(__file__).resolve().parents[1]


def _protected() -> list[Path]:
    paths = [Path(p) for p in NEVER_BOUND] + [project_root()]
    home = os.environ.get("HOME")
    if home:
        paths.append(Path(home))
    return [Path(os.path.realpath(p)) for p in paths]


def exposes(source: str | Path, protected: list[Path] | None = None) -> str | None:
    """Why binding ``source`` would expose a protected folder, or ``None``.

    Refused: a protected folder itself or any folder containing one (``/``, ``/home``, the user's home);
    anything inside ``/run`` (the Docker socket) or the project's repository. A folder *inside* ``/root``
    or a home (an interpreter under ``~/.pyenv``) is allowed: only it is exposed, and only when the
    tuner's uid can reach it anyway.
    """
    real = Path(os.path.realpath(source))
    inside_refused = [Path(os.path.realpath("/run")), project_root()]
    for p in protected if protected is not None else _protected():
        if real == p or p.is_relative_to(real):
            return f"binding {real} would expose {p}"
    for p in inside_refused:
        if real.is_relative_to(p):
            return f"{real} lies inside {p}, which is never bound into a sandbox"
    return None


# ------------------------------------------------------------------------------------ the interpreter
def _minor() -> str:
    return "%d.%d" % sys.version_info[:2]


def _interpreter_candidates() -> list[tuple[Path, Path | None, str]]:
    """(program, prefix to bind or None when under /usr, label) in order of preference."""
    minor = _minor()
    exe = Path(os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable))
    prefix = Path(os.path.realpath(sys.base_prefix))
    if not exe.is_relative_to(prefix):
        prefix = exe.parent.parent
    found: list[tuple[Path, Path | None, str]] = [(exe, prefix, "this interpreter's base prefix")]
    for d in ("/usr/bin", "/usr/local/bin"):
        found.append((Path(d) / f"python{minor}", None, f"the system's Python {minor}"))
    return found


def _under_system(path: Path) -> bool:
    return any(path.is_relative_to(d) for d in ("/usr",))


def choose_interpreter(uid: int = TUNER_UID, gid: int = TUNER_GID,
                       candidates: list[tuple[Path, Path | None, str]] | None = None) -> tuple[Path, Path | None, str]:
    """The interpreter a host-root sandbox runs, the prefix to bind for it (``None`` when ``/usr`` holds
    it), and why it was chosen. Same minor version as this interpreter, so the torch site-packages bound
    into the sandbox matches its ABI.

    Raises ``HostRootError`` naming each candidate and what blocks it, and the fixes.
    """
    tried: list[str] = []
    for exe, prefix, label in candidates if candidates is not None else _interpreter_candidates():
        if not exe.is_file():
            tried.append(f"{label} {exe}: does not exist")
            continue
        bind = None if prefix is None or _under_system(prefix) else prefix
        blocked = tuner_blocked_at(exe, uid, gid) or (tuner_blocked_at(bind, uid, gid) if bind else None)
        if blocked:
            tried.append(f"{label} {exe}: uid {uid} cannot reach {blocked}")
            continue
        why = exposes(bind) if bind else None
        hidden = [d for d in SANDBOX_OWN if bind is not None and bind.is_relative_to(d)]
        if hidden:
            why = f"{bind} lies under {hidden[0]}, which the sandbox mounts its own folder over"
        if why:
            tried.append(f"{label} {exe}: {why}")
            continue
        reason = f"{label}, " + (f"{bind} bound read-only at its own path" if bind else "under /usr")
        if tried:
            reason += " (passed over: " + "; ".join(tried) + ")"
        return exe, bind, reason
    raise HostRootError(
        f"no Python {_minor()} that the sandbox's uid {uid} can reach: " + "; ".join(tried)
        + ". Fix one: install Python " + _minor() + " where every folder on the way is searchable by others "
        "(under /opt or /usr, e.g. `apt-get install python3`), or `chmod o+x` each folder that blocks (this "
        "exposes only what is already world-readable below it), or build the image's root filesystem "
        "(`atb sandbox build --no-docker`)"
    )


# ------------------------------------------------------------------------------------ the plan
def _write_accounts(etc_dir: Path, uid: int, gid: int) -> None:
    """A private passwd/group: only root, the tuner and nobody (the host's list every account)."""
    etc_dir.mkdir(mode=0o755, exist_ok=True)
    users = ["root:x:0:0:root:/root:/usr/sbin/nologin", f"tuner:x:{uid}:{gid}:AutoTuneBench tuner:/tmp:/bin/sh",
             "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"]
    groups = ["root:x:0:", f"tuner:x:{gid}:", "nogroup:x:65534:"]
    if uid in (0, 65534):
        users = [u for u in users if not u.startswith("tuner:")]
    if gid in (0, 65534):
        groups = [g for g in groups if not g.startswith("tuner:")]
    for name, lines in (("passwd", users), ("group", groups)):
        path = etc_dir / name
        path.write_text("\n".join(lines) + "\n")
        os.chmod(path, 0o644)


def plan_host_root(etc_dir: Path, uid: int = TUNER_UID, gid: int = TUNER_GID) -> HostRoot:
    """Choose the interpreter, write the private passwd/group into ``etc_dir`` (a host folder only this
    process writes, outside anything the sandbox can write), and list every read-only bind.

    Raises ``HostRootError``: no interpreter the tuner can reach, or a system folder would expose a
    protected one (a repository checked out under /usr, say).
    """
    protected = _protected()
    binds: list[HostBind] = []
    links: list[tuple[str, str]] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            links.append((os.readlink(d), d))
        elif os.path.isdir(d):
            why = exposes(d, protected)
            if why:
                raise HostRootError(f"the host-root sandbox cannot bind {d}: {why}; build the image's root "
                                    "filesystem instead (`atb sandbox build --no-docker`)")
            binds.append(HostBind(source=d, target=d, why="programs, libraries and compilers"))
    for name, why in ETC_ENTRIES.items():
        p = f"/etc/{name}"
        if os.path.exists(p) and tuner_blocked_at(p, uid, gid) is None:
            binds.append(HostBind(source=p, target=p, why=why))
    _write_accounts(etc_dir, uid, gid)
    for name in ("passwd", "group"):
        binds.append(HostBind(source=str(etc_dir / name), target=f"/etc/{name}",
                              why=f"a private {name} naming only root, the tuner (uid {uid}) and nobody"))
    exe, prefix, reason = choose_interpreter(uid, gid)
    if prefix is not None:
        binds.append(HostBind(source=str(prefix), target=str(prefix), why="the Python interpreter's prefix"))
    minor = _minor()
    links += [(str(exe), f"{PYTHON_LINK_DIR}/python3"), (str(exe), f"{PYTHON_LINK_DIR}/python{minor}")]
    return HostRoot(binds=tuple(binds), symlinks=tuple(links), python=str(exe), python_reason=reason)
