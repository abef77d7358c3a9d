"""Pydantic models at the sandbox's boundary: its limits, exec results, file listings, copy-out."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SandboxLimits(_Frozen):
    """The confinement limits of one sandbox. Same fields as ``protocol.sandbox``.

    The sandbox does not read the protocol itself (it knows nothing of the harness); the caller passes
    ``SandboxLimits.from_params(load_protocol().sandbox)``.
    """

    image: str
    pids_limit: PositiveInt
    memory_mb: PositiveInt
    cpus: PositiveFloat
    exec_timeout_s: PositiveFloat
    run_wallclock_s: PositiveFloat
    exec_output_cap_bytes: PositiveInt
    copy_out_max_bytes: PositiveInt
    copy_out_max_files: PositiveInt
    workspace_max_bytes: PositiveInt
    list_max_entries: PositiveInt
    tmp_max_bytes: PositiveInt

    @classmethod
    def from_params(cls, params: Any) -> "SandboxLimits":
        """Build from ``protocol.sandbox`` (any pydantic model or mapping with these keys)."""
        data = params.model_dump() if isinstance(params, BaseModel) else dict(params)
        return cls.model_validate(data)


class ExecResult(_Frozen):
    """What one command in the sandbox did. ``duration_s`` is advisory: it never enters a verdict."""

    command: list[str]
    exit_code: int | None = Field(description="None when the process was killed before it exited")
    stdout: str
    stderr: str
    stdout_bytes: int = Field(description="bytes the command wrote to stdout, including dropped ones")
    stderr_bytes: int
    truncated: bool = Field(description="output beyond exec_output_cap_bytes was dropped")
    timed_out: bool
    killed_signal: int | None = None
    duration_s: float
    note: str = Field(default="", description="why the command ended, when it did not end on its own")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


FileKind = Literal["file", "dir", "symlink", "other"]


class FileEntry(_Frozen):
    """One workspace entry. Symbolic links are reported as such and never followed."""

    path: str
    kind: FileKind
    size: int

    @property
    def shown(self) -> str:
        """The path as one safe line of a listing: :func:`shown_path`."""
        return shown_path(self.path)


def shown_path(path: str) -> str:
    """A workspace path as it may appear in a one-entry-per-line listing.

    Why: a file name may hold a newline (or a carriage return, a Unicode line separator, an escape
    sequence), so printing it raw lets a file spoof extra entries in ``list_files`` (issue 27). A path
    with any non-printable character, a backslash or a double quote is shown JSON-quoted (``"a\\nb"``);
    every other path is shown as it is, so ordinary listings do not change.
    """
    if path.isprintable() and '"' not in path and "\\" not in path:
        return path
    import json

    return json.dumps(path, ensure_ascii=True)


class CopiedFile(_Frozen):
    path: str
    size: int
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class SkippedEntry(_Frozen):
    path: str
    reason: str


class CopyOut(BaseModel):
    """Files read out of a workspace by content: regular files only, no link followed, capped, hashed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    files: dict[str, bytes]
    manifest: list[CopiedFile]
    skipped: list[SkippedEntry]
    total_bytes: int
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="digest over the sorted manifest")


class SandboxInfo(_Frozen):
    """How a sandbox is confined: reported by ``atb sandbox status`` and stored with a run."""

    backend: Literal["docker", "bwrap"]
    ident: str
    image: str
    workspace_host_path: str
    workspace_in_sandbox: str
    workspace_capped: bool = Field(description="the workspace is a size-capped tmpfs")
    limits: SandboxLimits
    enforcement: dict[str, str] = Field(description="limit name -> mechanism that enforces it")
    torch_mounted: bool
    root: Literal["image", "host"] = Field(
        default="image", description="whose root filesystem: the image's (Docker, or bwrap over the image's "
                                     "root filesystem) or the host's own files, read-only (bwrap, issue 26)")
    root_identity: str = Field(default="", description="which root: the Docker image's id, the root "
                                                       "filesystem's release digest, or the host's OS and Python")

    def choice(self) -> dict[str, Any]:
        """How this sandbox was chosen and over what root, as a run records it (issue 26): ``backend``,
        ``root`` (``image`` or ``host``), ``image`` (the tag, root filesystem path or ``host-root``),
        ``root_identity``, and ``selection`` (every reason in ``enforcement['selection']``, in order)."""
        chain = self.enforcement.get("selection", "")
        return {"backend": self.backend, "root": self.root, "image": self.image, "root_identity": self.root_identity,
                "selection": [part for part in chain.split(" -> ") if part]}
