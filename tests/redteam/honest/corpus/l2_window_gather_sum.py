"""Honest (L2 access-policy window): the embedding-bag sum with the table marked as persisting in L2 for
the kernels of this call (cudaStreamSetAttribute, through the CUDA runtime torch already loaded), then the
window cleared again before forward returns. The computation is the reference's own ops; only the cache
policy differs. Where the runtime or the device offers no window, it computes the same without one.
REDTEAM = {"task": "tasks/hc_gather_sum.py", "gate": null, "class": "l2_window", "backends": ["cuda"]}
"""

import ctypes

import torch
import torch.nn as nn
import torch.nn.functional as F

_ACCESS_POLICY_WINDOW = 1          # cudaStreamAttributeAccessPolicyWindow (= cudaLaunchAttributeAccessPolicyWindow)
_LIMIT_PERSISTING_L2 = 0x06        # cudaLimitPersistingL2CacheSize
_ATTR_MAX_PERSISTING_L2 = 108      # cudaDevAttrMaxPersistingL2CacheSize
_ATTR_MAX_WINDOW = 109             # cudaDevAttrMaxAccessPolicyWindowSize
_PROP_NORMAL, _PROP_STREAMING, _PROP_PERSISTING = 0, 1, 2


class _Window(ctypes.Structure):
    _fields_ = [("base_ptr", ctypes.c_void_p), ("num_bytes", ctypes.c_size_t), ("hitRatio", ctypes.c_float),
                ("hitProp", ctypes.c_int), ("missProp", ctypes.c_int)]


class _AttrValue(ctypes.Union):
    _fields_ = [("accessPolicyWindow", _Window), ("pad", ctypes.c_char * 64)]


def _runtime() -> ctypes.CDLL | None:
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._rt: ctypes.CDLL | None = None
        self._max_window = 0
        self._persisting = 0
        self._ready = False

    def _setup(self, device: torch.device) -> None:
        self._ready = True
        rt = _runtime()
        if rt is None:
            return
        dev = device.index if device.index is not None else torch.cuda.current_device()
        persist, window = ctypes.c_int(0), ctypes.c_int(0)
        if rt.cudaDeviceGetAttribute(ctypes.byref(persist), _ATTR_MAX_PERSISTING_L2, dev) != 0:
            return
        if rt.cudaDeviceGetAttribute(ctypes.byref(window), _ATTR_MAX_WINDOW, dev) != 0:
            return
        if persist.value <= 0 or window.value <= 0:
            return
        if rt.cudaDeviceSetLimit(_LIMIT_PERSISTING_L2, ctypes.c_size_t(persist.value)) != 0:
            return
        self._rt, self._max_window, self._persisting = rt, window.value, persist.value

    def _set_window(self, stream: int, ptr: int, nbytes: int) -> None:
        assert self._rt is not None
        value = _AttrValue()
        value.accessPolicyWindow.base_ptr = ptr
        value.accessPolicyWindow.num_bytes = nbytes
        # the share of the window that may persist: the set-aside L2 over the window (CUDA's own guidance)
        value.accessPolicyWindow.hitRatio = min(1.0, self._persisting / nbytes) if nbytes else 0.0
        value.accessPolicyWindow.hitProp = _PROP_PERSISTING if nbytes else _PROP_NORMAL
        value.accessPolicyWindow.missProp = _PROP_STREAMING if nbytes else _PROP_NORMAL
        self._rt.cudaStreamSetAttribute(ctypes.c_void_p(stream), _ACCESS_POLICY_WINDOW, ctypes.byref(value))

    def forward(self, table: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        if not table.is_cuda:
            return F.embedding(idx, table).sum(dim=1)
        if not self._ready:
            self._setup(table.device)
        table = table.contiguous()
        if self._rt is None or torch.cuda.is_current_stream_capturing():
            return F.embedding(idx, table).sum(dim=1)
        stream = torch.cuda.current_stream(table.device).cuda_stream
        self._set_window(stream, table.data_ptr(), min(table.numel() * table.element_size(), self._max_window))
        try:
            return F.embedding(idx, table).sum(dim=1)
        finally:
            self._set_window(stream, 0, 0)
