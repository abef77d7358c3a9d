"""One-way transport of a candidate's output to the reference child, which compares it in place.

Why: a 4 GB output must not go to the host, through ``torch.save`` and back, to be compared; and the
process that compares must be one that never imports candidate code (the reference child), while the
candidate's process must never obtain the reference's outputs.

* CUDA, first choice: the candidate child copies its outputs into one CUDA VMM allocation
  (:mod:`harness.measure.backends._vmm`) and sends that allocation's file descriptor over its fd channel (a
  Unix socket to the harness, ``SCM_RIGHTS``); the harness forwards the fd to the reference child
  over the reference's own channel, and the reference maps it and compares on the device. An fd
  crosses the confinement's namespaces, where legacy CUDA IPC does not.
* CUDA, second choice: legacy CUDA IPC (``UntypedStorage._share_cuda_``). The descriptor (the IPC
  handles as base64, shape, stride, storage offset, dtype) travels over the parent's pipes to the
  reference child, which maps the memory and compares on the device.
* Either way the reference child exports nothing, so no handle to its memory exists anywhere: the
  direction is one way by construction.
* CPU: the candidate child writes the output with ``torch.save`` into the evaluation folder and the
  reference child reads it with ``torch.load(weights_only=True)`` (which cannot execute code). The
  reference child writes no output anywhere.

A descriptor comes from a process that runs candidate code, so :func:`open_output` trusts nothing in
it: the dtype must name a torch dtype, the handle fields must have the types CUDA IPC gives, and
``Tensor.set_`` refuses a view outside the mapped storage.
"""

from __future__ import annotations

import base64
import socket
from typing import Any

from harness.measure.backends import _vmm

# (device, handle, size, offset, ref-counter handle, ref-counter offset, event handle, event sync)
_IPC_TYPES: tuple[tuple[type, ...], ...] = ((int,), (bytes,), (int,), (int,), (bytes, type(None)), (int,),
                                            (bytes, type(None)), (bool,))


def _enc(x: Any) -> Any:
    return {"b64": base64.b64encode(x).decode("ascii")} if isinstance(x, bytes) else x


def _dec(x: Any) -> Any:
    return base64.b64decode(x["b64"]) if isinstance(x, dict) else x


MAX_TAG = 128


def export_output(torch: Any, tensors: list[Any], path: str, channel: socket.socket | None = None,
                  tag: str = "") -> tuple[dict[str, Any], list[Any]]:
    """Describe ``tensors`` for the reference child; returns (descriptor, what must stay alive until
    the reference has read it: pass it to :func:`release`). On a CPU the tensors are written to
    ``path``; on CUDA they go by VMM fd over ``channel`` (named ``tag``), else by legacy IPC, else
    through ``path``."""
    if not tensors or all(t.device.type == "cpu" for t in tensors):
        torch.save(tuple(t.detach().to("cpu", copy=True) for t in tensors), path)
        return {"path": path, "n": len(tensors)}, []
    errors: list[str] = []
    if channel is not None:
        try:
            return _export_vmm(torch, tensors, channel, tag[:MAX_TAG])
        except (_vmm.VmmError, OSError, RuntimeError) as exc:
            errors.append(f"vmm: {str(exc)[:200]}")
    try:
        desc, keep = _export_cuda(torch, tensors)
        if errors:
            desc["vmm_error"] = errors[0]
        return desc, keep
    except RuntimeError as exc:   # no CUDA IPC here (some VMs, some confinements): a host file instead
        errors.append(f"ipc: {str(exc)[:200]}")
        torch.save(tuple(t.detach().to("cpu", copy=True) for t in tensors), path)
        return {"path": path, "n": len(tensors), "ipc_error": "; ".join(errors)}, []


def _export_vmm(torch: Any, tensors: list[Any], channel: socket.socket, tag: str) -> tuple[dict[str, Any], list[Any]]:
    dev = [t.detach() if t.device.type == "cuda" else t.detach().to("cuda") for t in tensors]
    buf, layout = _vmm.pack(torch, dev)
    try:
        fd = buf.export_fd()
        try:
            socket.send_fds(channel, [tag.encode()], [fd])
        finally:
            _vmm.close_fd(fd)
    except BaseException:
        buf.close()
        raise
    views = _vmm.unpack(torch, buf, layout, lambda name: _dtype(torch, name))
    return {"vmm": {"tag": tag, "size": buf.size, "layout": layout}}, [*views, buf]


def release(torch: Any, keep: list[Any]) -> None:
    """Drop what :func:`export_output` kept: tensors by reference, VMM buffers explicitly (unmapped
    after a device synchronisation)."""
    bufs = [k for k in keep if isinstance(k, _vmm.VmmBuffer)]
    keep.clear()
    for b in bufs:
        b.close()


def kept_tensors(torch: Any, keep: list[Any]) -> list[Any]:
    """The tensors among what :func:`export_output` kept (for a re-share as a file)."""
    return [k for k in keep if isinstance(k, torch.Tensor)]


_OPENED: list[_vmm.VmmBuffer] = []


def close_opened() -> None:
    """Unmap every VMM buffer :func:`open_output` mapped here (call once its tensors are dropped)."""
    while _OPENED:
        _OPENED.pop().close()


def _export_cuda(torch: Any, tensors: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    keep: list[Any] = []
    descs: list[dict[str, Any]] = []
    for t in tensors:
        t = t.detach()
        if t.device.type != "cuda":
            t = t.to("cuda")
        meta = {"shape": list(t.shape), "stride": list(t.stride()), "offset": int(t.storage_offset()),
                "dtype": str(t.dtype).replace("torch.", "")}
        if t.untyped_storage().nbytes() == 0:
            descs.append({**meta, "empty": True})
            keep.append(t)
            continue
        try:
            handle = t.untyped_storage()._share_cuda_()
        except RuntimeError:  # memory not from torch's caching allocator: share a copy instead
            t = t.clone()
            meta.update(stride=list(t.stride()), offset=int(t.storage_offset()))
            handle = t.untyped_storage()._share_cuda_()
        descs.append({**meta, "ipc": [_enc(x) for x in handle]})
        keep.append(t)
    return {"cuda": descs}, keep


def _dtype(torch: Any, name: Any) -> Any:
    dt = getattr(torch, str(name), None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(f"the candidate's output descriptor names no torch dtype: {name!r}")
    return dt


def open_output(torch: Any, desc: dict[str, Any], channel: socket.socket | None = None) -> Any:
    """The candidate's output as a tensor or tuple, mapped (CUDA) or read (CPU) in this process.
    A VMM share's fd is read from ``channel`` (the harness forwarded it just before the command);
    call :func:`close_opened` once the tensors are dropped.

    Raises:
        ValueError: a malformed descriptor; RuntimeError: CUDA refused the handle or the view.
    """
    if "vmm" in desc:
        return _open_vmm(torch, dict(desc["vmm"]), channel)
    if "path" in desc:
        loaded = torch.load(str(desc["path"]), map_location="cpu", weights_only=True)
        return loaded[0] if isinstance(loaded, tuple) and len(loaded) == 1 else loaded
    out = []
    if desc.get("cuda"):
        torch.cuda.init()   # mapping a handle before this process has a CUDA context crashes it
    for d in desc.get("cuda", []):
        dt = _dtype(torch, d["dtype"])
        shape = [int(x) for x in d["shape"]]
        stride = [int(x) for x in d["stride"]]
        if d.get("empty"):
            out.append(torch.empty(shape, dtype=dt, device="cuda"))
            continue
        args = [_dec(x) for x in d["ipc"]]
        if len(args) != len(_IPC_TYPES) or not all(isinstance(a, k) for a, k in zip(args, _IPC_TYPES)):
            raise ValueError("the candidate's output descriptor is not a CUDA IPC handle")
        storage = torch.UntypedStorage._new_shared_cuda(*args)
        out.append(torch.empty(0, dtype=dt, device="cuda").set_(storage, int(d["offset"]), shape, stride))
    return out[0] if len(out) == 1 else tuple(out)


def _open_vmm(torch: Any, d: dict[str, Any], channel: socket.socket | None) -> Any:
    if channel is None:
        raise RuntimeError("a VMM share arrived but this process has no fd channel")
    tag, size, layout = str(d["tag"]), int(d["size"]), list(d["layout"])
    torch.cuda.init()
    fd = recv_tagged_fd(channel, tag, timeout_s=30.0)
    try:
        buf = _vmm.import_fd(torch, fd, size)
    finally:
        _vmm.close_fd(fd)
    _OPENED.append(buf)
    out = _vmm.unpack(torch, buf, layout, lambda name: _dtype(torch, name))
    return out[0] if len(out) == 1 else tuple(out)


def discard_output(desc: dict[str, Any], channel: socket.socket | None, timeout_s: float = 5.0) -> None:
    """Take the fd a VMM share sent under its tag off ``channel`` and close it, unread.

    Why: the harness forwards a candidate's output fd before the comparison command; a comparison
    that never opens it (the reference's own output holds NaN on that input, so nothing is compared)
    must still take it, or it waits on the channel, and a later comparison under a reused tag would
    map this stale output instead of its own (seen on the H200: 90_cumprod and 98_KLDivLoss read an
    earlier seed's NaN output as the candidate's)."""
    vmm = desc.get("vmm")
    if channel is None or not isinstance(vmm, dict):
        return
    try:
        _vmm.close_fd(recv_tagged_fd(channel, str(vmm.get("tag", ""))[:MAX_TAG], timeout_s=timeout_s))
    except (TimeoutError, OSError):
        pass


def recv_tagged_fd(channel: socket.socket, tag: str, timeout_s: float, pending: dict[str, int] | None = None,
                   max_pending: int = 64) -> int:
    """The fd sent under ``tag`` on ``channel``; fds under other tags wait in ``pending`` (or are
    closed when no dict is given). A message without exactly one fd is dropped.

    Raises:
        TimeoutError: nothing under ``tag`` within ``timeout_s``.
    """
    import select
    import time

    if pending is not None and tag in pending:
        return pending.pop(tag)
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no output fd named {tag!r} arrived within {timeout_s:g} s")
        ready, _, _ = select.select([channel], [], [], left)
        if not ready:
            continue
        msg, fds, _flags, _addr = socket.recv_fds(channel, MAX_TAG, 4)
        if not msg and not fds:
            raise TimeoutError("the fd channel was closed")
        got = msg.decode("utf-8", "replace")
        if len(fds) != 1:
            for f in fds:
                _vmm.close_fd(f)
            continue
        if got == tag:
            return fds[0]
        if pending is None:
            _vmm.close_fd(fds[0])
            continue
        old = pending.pop(got, None)
        if old is not None:
            _vmm.close_fd(old)
        pending[got] = fds[0]
        while len(pending) > max_pending:
            _vmm.close_fd(pending.pop(next(iter(pending))))


def device_transport(desc: dict[str, Any]) -> bool:
    """Whether a descriptor names a device-memory transport (CUDA IPC or a VMM fd): an output that could
    not be read through one is the transport's failure (the parent retries it as a file)."""
    return "cuda" in desc or "vmm" in desc


def transport_kind(share: dict[str, Any]) -> str:
    """How an output travelled, in the words a verdict records (``vmm-fd``, ``cuda-ipc``, ``file``)."""
    if "vmm" in share:
        kind = "vmm-fd"
    elif "cuda" in share:
        kind = "cuda-ipc" + (f" (vmm refused: {str(share['vmm_error'])[:160]})" if share.get("vmm_error") else "")
    else:
        kind = "file" + (f" ({str(share['ipc_error'])[:200]})" if share.get("ipc_error") else "")
    return kind
