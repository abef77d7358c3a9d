"""One-way transport of a candidate's output to the reference child, which compares it in place.

Why: a 4 GB output must not go to the host, through ``torch.save`` and back, to be compared; and the
process that compares must be one that never imports candidate code (the reference child), while the
candidate's process must never obtain the reference's outputs.

* CUDA: the candidate child exports each output tensor's storage by CUDA IPC
  (``UntypedStorage._share_cuda_``). The descriptor (the IPC handles as base64, shape, stride,
  storage offset, dtype) travels over the parent's pipes to the reference child, which maps the
  memory and compares on the device. The reference child exports nothing, so no handle to its memory
  exists anywhere: the direction is one way by construction.
* CPU: the candidate child writes the output with ``torch.save`` into the evaluation folder and the
  reference child reads it with ``torch.load(weights_only=True)`` (which cannot execute code). The
  reference child writes no output anywhere.

A descriptor comes from a process that runs candidate code, so :func:`open_output` trusts nothing in
it: the dtype must name a torch dtype, the handle fields must have the types CUDA IPC gives, and
``Tensor.set_`` refuses a view outside the mapped storage.
"""

from __future__ import annotations

import base64
from typing import Any

# (device, handle, size, offset, ref-counter handle, ref-counter offset, event handle, event sync)
_IPC_TYPES: tuple[tuple[type, ...], ...] = ((int,), (bytes,), (int,), (int,), (bytes, type(None)), (int,),
                                            (bytes, type(None)), (bool,))


def _enc(x: Any) -> Any:
    return {"b64": base64.b64encode(x).decode("ascii")} if isinstance(x, bytes) else x


def _dec(x: Any) -> Any:
    return base64.b64decode(x["b64"]) if isinstance(x, dict) else x


def export_output(torch: Any, tensors: list[Any], path: str) -> tuple[dict[str, Any], list[Any]]:
    """Describe ``tensors`` for the reference child; returns (descriptor, what must stay alive until
    the reference has read it). On a CPU the tensors are written to ``path``."""
    if not tensors or all(t.device.type == "cpu" for t in tensors):
        torch.save(tuple(t.detach().to("cpu", copy=True) for t in tensors), path)
        return {"path": path, "n": len(tensors)}, []
    try:
        return _export_cuda(torch, tensors)
    except RuntimeError as exc:   # no CUDA IPC here (some VMs, some confinements): a host file instead
        torch.save(tuple(t.detach().to("cpu", copy=True) for t in tensors), path)
        return {"path": path, "n": len(tensors), "ipc_error": str(exc)[:300]}, []


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


def open_output(torch: Any, desc: dict[str, Any]) -> Any:
    """The candidate's output as a tensor or tuple, mapped (CUDA) or read (CPU) in this process.

    Raises:
        ValueError: a malformed descriptor; RuntimeError: CUDA refused the handle or the view.
    """
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
