"""Device memory shared by file descriptor (CUDA virtual memory management), for one-way transport.

Why: legacy CUDA IPC (``cudaIpcGetMemHandle``, what ``UntypedStorage._share_cuda_`` uses) is refused
inside the measuring children's confinement on the H200 (``cudaErrorInvalidValue`` in the exporting
process, in every bwrap variant tried), and the host-file fallback moves a 4 GB output through the
host twice per comparison. A VMM allocation exported as a POSIX file descriptor is a plain fd: it
crosses namespaces like any other fd over a Unix socket (``SCM_RIGHTS``), so the candidate child can
hand its output to the reference child, through the harness, with no host copy.

Only the driver API is used (``libcuda.so.1`` through ctypes), so nothing here is compiled. A
buffer is one allocation holding every output tensor contiguously at 256-byte-aligned offsets;
:class:`VmmBuffer` owns the mapping and frees it on :meth:`VmmBuffer.close` (after a device
synchronisation, so no queued kernel still reads it).
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any

_ALLOC_PINNED = 1                 # CU_MEM_ALLOCATION_TYPE_PINNED
_HANDLE_POSIX_FD = 1              # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_LOC_DEVICE = 1                   # CU_MEM_LOCATION_TYPE_DEVICE
_ACCESS_RW = 3                    # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_GRANULARITY_MIN = 0              # CU_MEM_ALLOC_GRANULARITY_MINIMUM
_ALIGN = 256


class VmmError(RuntimeError):
    """The driver refused a VMM step here (no libcuda, no VMM or fd handles on this device, ...)."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_LOCK = threading.Lock()
_LIB: list[Any] = []


def _lib() -> Any:
    with _LOCK:
        if not _LIB:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise VmmError(f"libcuda.so.1 cannot be loaded: {exc}") from None
            u64p = ctypes.POINTER(ctypes.c_uint64)
            sigs: dict[str, list[Any]] = {
                "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
                "cuMemGetAllocationGranularity": [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(_AllocProp),
                                                  ctypes.c_int],
                "cuMemCreate": [u64p, ctypes.c_size_t, ctypes.POINTER(_AllocProp), ctypes.c_uint64],
                "cuMemRelease": [ctypes.c_uint64],
                "cuMemAddressReserve": [u64p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint64],
                "cuMemAddressFree": [ctypes.c_uint64, ctypes.c_size_t],
                "cuMemMap": [ctypes.c_uint64, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, ctypes.c_uint64],
                "cuMemUnmap": [ctypes.c_uint64, ctypes.c_size_t],
                "cuMemSetAccess": [ctypes.c_uint64, ctypes.c_size_t, ctypes.POINTER(_AccessDesc), ctypes.c_size_t],
                "cuMemExportToShareableHandle": [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64],
                "cuMemImportFromShareableHandle": [u64p, ctypes.c_void_p, ctypes.c_int],
                "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
            }
            for name, args in sigs.items():
                fn = getattr(lib, name, None)
                if fn is None:
                    raise VmmError(f"libcuda.so.1 has no {name} (driver too old for VMM)")
                fn.argtypes, fn.restype = args, ctypes.c_int
            _LIB.append(lib)
        return _LIB[0]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        try:
            _lib().cuGetErrorName(rc, ctypes.byref(name))
        except Exception:  # noqa: BLE001 - only for the message
            pass
        raise VmmError(f"{what} failed: {name.value.decode() if name.value else rc}")


def _device(torch: Any) -> int:
    dev = ctypes.c_int()
    _check(_lib().cuDeviceGet(ctypes.byref(dev), int(torch.cuda.current_device())), "cuDeviceGet")
    return int(dev.value)


def _prop(dev: int) -> _AllocProp:
    p = _AllocProp()
    p.type, p.requestedHandleTypes = _ALLOC_PINNED, _HANDLE_POSIX_FD
    p.location.type, p.location.id = _LOC_DEVICE, dev
    return p


class _Interface:
    """A bare ``__cuda_array_interface__`` over mapped bytes, for ``torch.as_tensor`` (no copy)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 2, "strides": None}


class VmmBuffer:
    """One mapped VMM allocation of ``size`` bytes in this process (created here, or imported)."""

    def __init__(self, torch: Any, handle: int, size: int) -> None:
        self.torch, self.handle, self.size = torch, handle, size
        self.ptr = 0
        lib = _lib()
        ptr = ctypes.c_uint64()
        try:
            _check(lib.cuMemAddressReserve(ctypes.byref(ptr), size, 0, 0, 0), "cuMemAddressReserve")
            self.ptr = int(ptr.value)
            _check(lib.cuMemMap(self.ptr, size, 0, handle, 0), "cuMemMap")
            access = _AccessDesc()
            access.location.type, access.location.id, access.flags = _LOC_DEVICE, _device(torch), _ACCESS_RW
            _check(lib.cuMemSetAccess(self.ptr, size, ctypes.byref(access), 1), "cuMemSetAccess")
        except VmmError:
            self.close()
            raise

    def raw(self) -> Any:
        """The whole buffer as a uint8 device tensor that borrows the mapping (keep ``self`` alive)."""
        return self.torch.as_tensor(_Interface(self.ptr, self.size), device="cuda")

    def export_fd(self) -> int:
        """A new POSIX fd naming the allocation (the caller closes it)."""
        fd = ctypes.c_int(-1)
        _check(_lib().cuMemExportToShareableHandle(ctypes.byref(fd), self.handle, _HANDLE_POSIX_FD, 0),
               "cuMemExportToShareableHandle")
        return int(fd.value)

    def close(self) -> None:
        """Unmap and release (idempotent). Synchronises the device first: a queued kernel may still
        read the buffer."""
        if self.handle == 0 and self.ptr == 0:
            return
        lib = _lib()
        try:
            self.torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - a broken context still gets its mapping released
            pass
        if self.ptr:
            lib.cuMemUnmap(self.ptr, self.size)
            lib.cuMemAddressFree(self.ptr, self.size)
            self.ptr = 0
        if self.handle:
            lib.cuMemRelease(self.handle)
            self.handle = 0

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _padded(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def create(torch: Any, nbytes: int) -> VmmBuffer:
    """A new exportable allocation of at least ``nbytes`` (rounded up to the driver's granularity)."""
    lib = _lib()
    prop = _prop(_device(torch))
    gran = ctypes.c_size_t()
    _check(lib.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), _GRANULARITY_MIN),
           "cuMemGetAllocationGranularity")
    g = max(1, int(gran.value))
    size = max(g, (max(1, nbytes) + g - 1) // g * g)
    handle = ctypes.c_uint64()
    _check(lib.cuMemCreate(ctypes.byref(handle), size, ctypes.byref(prop), 0), "cuMemCreate")
    return VmmBuffer(torch, int(handle.value), size)


def import_fd(torch: Any, fd: int, size: int) -> VmmBuffer:
    """Map an allocation received as ``fd`` (``size`` bytes, as the exporter created it)."""
    handle = ctypes.c_uint64()
    _check(_lib().cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd), _HANDLE_POSIX_FD),
           "cuMemImportFromShareableHandle")
    return VmmBuffer(torch, int(handle.value), size)


def pack(torch: Any, tensors: list[Any]) -> tuple[VmmBuffer, list[dict[str, Any]]]:
    """Copy ``tensors`` (device tensors) contiguously into one new buffer; (buffer, layout)."""
    layout: list[dict[str, Any]] = []
    off = 0
    for t in tensors:
        n = int(t.numel()) * int(t.element_size())
        layout.append({"offset": off, "nbytes": n, "shape": list(t.shape),
                       "dtype": str(t.dtype).replace("torch.", "")})
        off += _padded(n)
    buf = create(torch, off)
    raw = buf.raw()
    with torch.no_grad():
        for t, part in zip(tensors, layout):
            if part["nbytes"]:
                raw[part["offset"]:part["offset"] + part["nbytes"]].view(t.dtype).view(t.shape).copy_(t)
    del raw
    torch.cuda.synchronize()
    return buf, layout


def unpack(torch: Any, buf: VmmBuffer, layout: list[dict[str, Any]], dtype_of: Any) -> list[Any]:
    """Views of ``buf`` laid out as ``layout`` says; every offset and size is checked against the
    buffer (the layout comes from a process that runs candidate code)."""
    raw = buf.raw()
    out = []
    for part in layout:
        dt = dtype_of(part["dtype"])
        shape = [int(x) for x in part["shape"]]
        off, n = int(part["offset"]), int(part["nbytes"])
        count = 1
        for s in shape:
            if s < 0:
                raise ValueError("a negative dimension in the candidate's output layout")
            count *= s
        itemsize = torch.empty(0, dtype=dt).element_size()
        if n != count * itemsize or off < 0 or off % _ALIGN or off + n > buf.size:
            raise ValueError("the candidate's output layout does not fit the shared buffer")
        out.append(raw[off:off + n].view(dt).view(shape) if n else torch.empty(shape, dtype=dt, device="cuda"))
    return out


def close_fd(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
