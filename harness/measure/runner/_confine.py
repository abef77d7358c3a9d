"""Confinement of measuring children: what a child that imports task or candidate code can see and do.

Why: a candidate that passed every gate once read the store's path from its parent's
``/proc/<ppid>/cmdline``, left a detached process behind, and rewrote its own verdict after ``atb eval``
returned (issue 14). A measuring child therefore runs inside ``bwrap`` (bubblewrap) with

* its own user namespace (uid/gid 65534 inside, every capability dropped, no nested user namespaces,
  ``no_new_privs``), PID namespace (its own ``/proc``; no other process in view), network namespace
  (only a downed loopback), IPC namespace (CPU only; see below), UTS and cgroup namespaces;
* a read-only view of only what it runs: the system's library directories, the interpreter and its
  virtual environment, the project's ``harness`` and ``protocol`` packages, the session's work
  directory (which holds the task and candidate files of each evaluation), and, on CUDA, the GPU
  device nodes; a private writable scratch directory; a size-capped private ``/tmp``; nothing of the
  store, the rest of the repository, the user's home, ``/run`` or ``/sys``;
* a seccomp filter (a deny list, written here as classic BPF: no ptrace or cross-process memory
  access, no mounts, no namespace creation, no kernel keyring, module, BPF or ``io_uring`` calls);
* ``--die-with-parent`` and a PID namespace, so every descendant dies with the child, and the child
  dies with the harness (``PR_SET_PDEATHSIG``), ``SIGKILL`` of the harness included.

On CUDA the IPC namespace is left shared and the session's children share one /dev/shm directory,
meant for legacy CUDA IPC between the arms of one evaluation. Checked on the H200: that is not enough.
Inside bwrap, ``UntypedStorage._share_cuda_`` (cudaIpcGetMemHandle) fails in the exporting process with
cudaErrorInvalidValue, in every variant tried (each of ``CUDA_RELAXATIONS`` alone and combined, and both
arms in one shared or nested PID namespace); unconfined it works. What works confined: a CUDA VMM
allocation exported as a file descriptor and passed over each child's fd channel through the harness
(:mod:`harness.measure.backends._vmm`, :mod:`harness.measure.backends._share`); every H200 A/A run of the KernelBench sweep
on 2026-12-03 from revision ``e535436`` on recorded ``output_transport: vmm-fd`` with confined children.

Where ``bwrap`` is missing or refused by the kernel, the child runs unconfined, and
:attr:`ConfinePlan.descriptor` says so (``unconfined:<reason>``); the verdict records that string.
Nothing a candidate or a protocol file controls reaches this module: the only switch is the harness
process's own environment (``ATB_BWRAP``, a path to a bwrap binary or a command that runs one).
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import platform
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

SANDBOX_UID = 65534
SANDBOX_GID = 65534
TMP_SIZE_BYTES = 256 << 20
_PR_SET_PDEATHSIG = 1
_PR_SET_NO_NEW_PRIVS = 38

# System directories whose files the interpreter and its libraries load; /etc is bound file by file.
_SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/opt")
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
              "os-release", "host.conf", "hosts", "passwd", "group")
_GPU_NODES = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri")


# ============================================================================ seccomp (classic BPF)
_AUDIT_ARCH_X86_64 = 0xC000003E
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_RET_KILL_PROCESS = 0x80000000
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06

# x86_64 numbers. Denied with EPERM: debugging or reading other processes, mounting, namespaces,
# kernel modules/keyrings/BPF/perf, io_uring (its operations bypass seccomp), clocks, reboot.
_X86_64_DENY = {
    "ptrace": 101, "syslog": 103, "uselib": 134, "vhangup": 153, "pivot_root": 155, "_sysctl": 156,
    "adjtimex": 159, "chroot": 161, "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166,
    "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170, "setdomainname": 171, "iopl": 172,
    "ioperm": 173, "create_module": 174, "init_module": 175, "delete_module": 176, "get_kernel_syms": 177,
    "query_module": 178, "quotactl": 179, "nfsservctl": 180, "lookup_dcookie": 212, "clock_settime": 227,
    "kexec_load": 246, "add_key": 248, "request_key": 249, "keyctl": 250, "unshare": 272,
    "perf_event_open": 298, "fanotify_init": 300, "name_to_handle_at": 303, "open_by_handle_at": 304,
    "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310, "process_vm_writev": 311,
    "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "io_uring_setup": 425,
    "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "fspick": 433, "pidfd_getfd": 438, "mount_setattr": 442,
}
_X86_64_CLONE, _X86_64_CLONE3 = 56, 435
# clone(2) flags that make a namespace; clone3 answers ENOSYS so libc falls back to clone, whose flags
# (unlike clone3's, which sit behind a pointer) a classic filter can inspect.
_CLONE_NS_FLAGS = 0x10000000 | 0x00020000 | 0x20000000 | 0x40000000 | 0x08000000 | 0x04000000 | 0x02000000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k & 0xFFFFFFFF)


def seccomp_program() -> bytes | None:
    """The deny-list filter as a compiled classic-BPF program (``struct sock_filter[]``) for bwrap's
    ``--seccomp FD``; ``None`` on an architecture this table does not cover (only x86_64 is written)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    eperm = _RET_ERRNO | errno.EPERM
    denied = sorted(_X86_64_DENY.values())
    prog: list[bytes] = [
        _insn(_LD_W_ABS, 0, 0, 4),                      # arch
        _insn(_JEQ, 1, 0, _AUDIT_ARCH_X86_64),
        _insn(_RET, 0, 0, _RET_KILL_PROCESS),           # another ABI: refuse outright
        _insn(_LD_W_ABS, 0, 0, 0),                      # syscall number
        _insn(_JGE, 0, 1, 0x40000000),                  # x32 ABI numbers
        _insn(_RET, 0, 0, eperm),
        _insn(_JEQ, 0, 1, _X86_64_CLONE3),
        _insn(_RET, 0, 0, _RET_ERRNO | errno.ENOSYS),
        _insn(_JEQ, 0, 3, _X86_64_CLONE),
        _insn(_LD_W_ABS, 0, 0, 16),                     # clone flags (low 32 bits of args[0])
        _insn(_JSET, 0, 1, _CLONE_NS_FLAGS),
        _insn(_RET, 0, 0, eperm),
        _insn(_LD_W_ABS, 0, 0, 0),                      # reload the number after the clone check
    ]
    n = len(denied)
    for i, nr in enumerate(denied):  # each match jumps to the EPERM return after the ALLOW
        prog.append(_insn(_JEQ, n - i, 0, nr))
    prog.append(_insn(_RET, 0, 0, _RET_ALLOW))
    prog.append(_insn(_RET, 0, 0, eperm))
    return b"".join(prog)


# ============================================================================ the plan
@dataclass
class ConfinePlan:
    """How one child is started: the argv prefix (empty when unconfined), extra fds to pass, and the
    descriptor the verdict records. ``close()`` releases the seccomp fd after the spawn."""

    descriptor: str
    prefix: list[str] = field(default_factory=list)
    pass_fds: tuple[int, ...] = ()

    @property
    def confined(self) -> bool:
        return bool(self.prefix)

    def close(self) -> None:
        for fd in self.pass_fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.pass_fds = ()


CUDA_RELAXATIONS = ("sys", "hostdev", "noseccomp", "nouserns", "nopidns")


def cuda_relaxations() -> list[str]:
    """Parts of the confinement a CUDA child goes without, from the harness's own environment
    (``ATB_CONFINE_CUDA``, comma-separated names from :data:`CUDA_RELAXATIONS`). Each one named is
    written into the descriptor, so a verdict shows exactly what was relaxed; a candidate cannot set
    it (children never receive ``ATB_*`` variables, and the parent reads it before any child runs)."""
    given = os.environ.get("ATB_CONFINE_CUDA", "")
    return [r for r in CUDA_RELAXATIONS if r in {x.strip() for x in given.split(",")}]


def bwrap_command() -> list[str] | None:
    """The command that runs bwrap: ``$ATB_BWRAP`` (a path, or a command such as
    ``/x/ld-linux-x86-64.so.2 --library-path /x /x/bwrap`` for a carried copy) or ``bwrap`` on PATH."""
    given = os.environ.get("ATB_BWRAP", "").strip()
    if given:
        return shlex.split(given)
    found = shutil.which("bwrap")
    return [found] if found else None


def _seccomp_fd() -> int | None:
    prog = seccomp_program()
    if prog is None:
        return None
    # a memfd or pipe both work; a pipe keeps this independent of memfd_create's availability
    r, w = os.pipe()
    os.write(w, prog)  # a few hundred bytes: well under a pipe's buffer
    os.close(w)
    return r


def _gpu_nodes() -> list[str]:
    nodes: list[str] = []
    for pattern in _GPU_NODES:
        nodes.extend(sorted(glob.glob(pattern)))
    return nodes


def _project_roots() -> list[str]:
    """Directories of the project packages a child imports (``harness`` and ``protocol``)."""
    import harness
    import protocol

    return [str(Path(harness.__file__).resolve().parent), str(Path(protocol.__file__).resolve().parent)]


def _python_roots(project: list[str]) -> list[str]:
    """The interpreter's prefixes and every ``sys.path`` entry, except any that would expose the
    repository itself (an ancestor of a project package, as a ``PYTHONPATH=$PWD`` would add)."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
             str(Path(sys.executable).resolve().parent)}
    roots.update(p for p in sys.path if p)
    keep: list[str] = []
    for r in roots:
        try:
            real = str(Path(r).resolve())
        except OSError:
            continue
        if not os.path.isdir(real) or real == "/":
            continue
        if any(Path(pr).is_relative_to(real) for pr in project):
            continue
        keep.append(real)
    return keep


# Compilers a child may run: torch.compile's Inductor JIT-compiles C++ with the system's C++ compiler
# on CPU, and inline extensions use it (and nvcc) on CUDA.
_COMPILERS = ("g++", "c++", "gcc", "cc", "clang++", "nvcc")


def _compiler_roots(project: list[str]) -> list[str]:
    """Install prefixes of the compilers on PATH (and of ``$CXX``, ``$CC``, ``$CUDA_HOME``), bound
    read-only so that a child can compile. Those under the system directories are bound already and
    are left out by the caller; one toolchain elsewhere (a conda or /opt prefix) is bound at its prefix
    (the folder above its ``bin``). Never ``/`` and never an ancestor of the project packages (that
    would expose the repository and its store). The child's compile caches are its own (see
    ``harness.measure.runner._child``: under its scratch)."""
    found: set[str] = set()
    for name in _COMPILERS + tuple(os.environ.get(v, "").strip() for v in ("CXX", "CC")):
        path = shutil.which(name) if name else None
        if path is None:
            continue
        real = Path(path).resolve()
        found.add(str(real.parent.parent if real.parent.name == "bin" else real.parent))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        given = os.environ.get(var, "").strip()
        if given and os.path.isdir(given):
            found.add(str(Path(given).resolve()))
    return sorted(r for r in found if r != "/" and os.path.isdir(r)
                  and not any(Path(p).is_relative_to(r) for p in project))


def _covered(path: str, roots: list[str]) -> bool:
    return any(Path(path).is_relative_to(r) for r in roots)


_PROBED: dict[tuple[str, ...], str] = {}


def _probe(prefix: tuple[str, ...], cuda: bool) -> str:
    """'' when the flags work here, else why not; one trial run per distinct set of flags (the
    child's own directories left out of the key) per harness process."""
    key = tuple(a for a in prefix if "atb-child-" not in a and "atb-measure-" not in a)
    if key not in _PROBED:
        _PROBED[key] = _probe_run(prefix)
    return _PROBED[key]


def _probe_run(prefix: tuple[str, ...]) -> str:
    try:
        fd = _seccomp_fd() if "--seccomp" in prefix else None
        argv = list(prefix)
        fds: tuple[int, ...] = ()
        if fd is not None:
            argv[argv.index("--seccomp") + 1] = str(fd)
            fds = (fd,)
        try:
            res = subprocess.run(argv + ["--", "/bin/sh", "-c", "exit 0"], capture_output=True, timeout=30,
                                 pass_fds=fds)
        finally:
            if fd is not None:
                os.close(fd)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    if res.returncode != 0:
        err = res.stderr.decode("utf-8", "replace").strip().splitlines()
        return (err[-1] if err else f"exit status {res.returncode}")[:200]
    return ""


def plan(backend: str, workdir: Path, scratch: Path, extra_ro: tuple[str, ...] = (),
         inbox: Path | None = None) -> ConfinePlan:
    """Build the confinement for one child; never raises: a missing or refused bwrap gives an
    unconfined plan whose descriptor names the reason.

    ``workdir`` (the session's work directory, writable: each evaluation's task and candidate files
    and the arms' saved outputs live there) and ``scratch`` (the child's private directory, its cwd)
    are bound at their own paths, so paths in commands mean the same inside and out. ``inbox`` (a
    directory inside ``scratch``) is bound read-only over itself: the parent stages task files there.
    """
    base = bwrap_command()
    if base is None:
        return ConfinePlan("unconfined:bwrap not found (install bubblewrap or set ATB_BWRAP)")
    if not os.access(base[0], os.X_OK):
        return ConfinePlan(f"unconfined:bwrap not found at {base[0]}")
    from harness.measure.backends import backend_named

    spec = backend_named(backend)
    cuda = spec.gpu_nodes   # a GPU's device nodes are bound, its relaxations apply (harness.measure.backends.cuda)
    extra_ro = (*extra_ro, *spec.confinement_ro_paths())   # a plug-in backend's own module, read-only
    relax = cuda_relaxations() if cuda else []
    project = _project_roots()
    ro: list[str] = []
    for d in _SYSTEM_DIRS:
        if os.path.isdir(d) and not os.path.islink(d):
            ro += ["--ro-bind", d, d]
        elif os.path.islink(d):
            ro += ["--symlink", os.readlink(d), d]
    for name in _ETC_FILES:
        p = f"/etc/{name}"
        if os.path.exists(p):
            ro += ["--ro-bind", p, p]
    sys_roots = [d for d in _SYSTEM_DIRS if os.path.isdir(d)]
    for r in sorted(set(_python_roots(project)) | set(extra_ro) | set(_compiler_roots(project))):
        if os.path.exists(r) and not _covered(r, sys_roots):
            ro += ["--ro-bind", r, r]
    for p in project:
        ro += ["--ro-bind", p, p]
    ns_user = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID), "--disable-userns"]
    common = [
        "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
        "--hostname", "atb-child", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--tmpfs", "/", *(["--dev-bind", "/dev", "/dev"] if "hostdev" in relax else ["--dev", "/dev"]),
        "--proc", "/proc",
        "--size", str(TMP_SIZE_BYTES), "--tmpfs", "/tmp",
    ]
    if cuda:
        # CUDA IPC between the arms of one evaluation: a shared IPC namespace, and torch's IPC
        # reference counters are files in /dev/shm, so the session's children share one directory
        shm = Path(workdir).resolve() / ".shm"
        shm.mkdir(mode=0o1777, exist_ok=True)
        common += ["--bind", str(shm), "/dev/shm"]
    else:
        common += ["--size", str(TMP_SIZE_BYTES), "--tmpfs", "/dev/shm", "--unshare-ipc"]
    common += ro
    wd, sc = str(Path(workdir).resolve()), str(Path(scratch).resolve())
    common += ["--bind", wd, wd, "--bind", sc, sc, "--chdir", sc]
    if inbox is not None:
        ib = str(Path(inbox).resolve())
        common += ["--ro-bind", ib, ib]
    if cuda and "hostdev" not in relax:
        for node in _gpu_nodes():
            common += ["--dev-bind", node, node]
    if "sys" in relax and os.path.isdir("/sys"):
        common += ["--ro-bind", "/sys", "/sys"]
    if "nopidns" in relax:
        common.remove("--unshare-pid")
    seccomp = seccomp_program() is not None and "noseccomp" not in relax
    if seccomp:
        common += ["--seccomp", "SECCOMP_FD"]
    # a user namespace (uid 65534 inside) where the kernel allows one; else bwrap as root with every
    # capability dropped (the descriptor says "root-nocaps" so the verdict shows the weaker form)
    tried: list[str] = []
    users = ((ns_user, "userns"), ([], "root-nocaps")) if "nouserns" not in relax else (([], "root-nocaps"),)
    for user_part, label in users:
        argv = list(base) + user_part + common
        why = _probe(tuple(argv), cuda)
        if not why:
            break
        tried.append(f"{label}: {why}")
    else:
        return ConfinePlan("unconfined:bwrap refused here (" + "; ".join(tried) + ")")
    fds: tuple[int, ...] = ()
    if seccomp:
        fd = _seccomp_fd()
        assert fd is not None
        argv[argv.index("--seccomp") + 1] = str(fd)
        fds = (fd,)
    parts = [label] + (["pidns"] if "nopidns" not in relax else []) + ["netns"]
    parts += (["ipcns"] if not cuda else []) + ["ro-fs", "capdrop"]
    parts.append("seccomp" if seccomp else "no-seccomp")
    if cuda:
        parts.append("gpu-nodes")
    if relax:
        parts.append("relaxed-" + "-".join(relax))
    return ConfinePlan("bwrap:" + "+".join(parts), argv + ["--"], fds)


# ============================================================================ process lifetime
_libc: ctypes.CDLL | None = None


def _prctl(option: int, arg: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    _libc.prctl(option, arg, 0, 0, 0)


def die_with_parent(parent_pid: int | None = None) -> None:
    """``preexec_fn`` for every child: SIGKILL when the harness dies (kill -9 included), and no new
    privileges. Runs between fork and exec. If the harness already died before the signal was armed
    (``parent_pid`` no longer the parent), the child exits at once.

    The kernel sends the death signal when the *thread* that spawned the child exits: spawn
    long-lived workers from a thread that lives as long as they should (the main thread, or a pool
    thread that outlives the session).
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    _prctl(_PR_SET_NO_NEW_PRIVS, 1)
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


def new_scratch(role: str) -> Path:
    """A private scratch directory for one child, marked with this harness process as its owner
    (so a later start removes it if this process dies without cleaning up)."""
    from harness.measure.runner._reaper import claim

    d = Path(tempfile.mkdtemp(prefix=f"atb-child-{role}-"))
    claim(d)
    return d
