"""Inputs made by harness code from a seed and a named distribution, on the measuring device.

Both the reference and the candidate child call :func:`make_inputs` with the same (seed,
distribution), so a paired measurement sees identical inputs. The task's ``get_inputs()`` gives the
shapes and dtypes (and, for distribution ``task``, the values themselves, drawn under
``torch.manual_seed(seed)``). On CUDA ``get_inputs()`` runs under ``with torch.device("cuda")``, so
its ``torch.rand``/``randn``/``randint`` draw on the device: a 4 GB input costs milliseconds, not a
host draw and a copy. Every other distribution redraws each floating-point tensor from a generator
on the same device seeded with ``seed`` (CPU values are what they always were; CUDA values differ
from CPU values, but every arm of one backend sees the same ones).

Timed repetitions never present one input twice (:class:`TimedSets`): each call of the timed loop
gets its own set, either a fresh draw (CUDA events, one call per repetition) or a window of a pool
of exact draws (CPU inner loops and CUDA-graph replays, where a fresh draw per call would cost
50-170x the call on a CPU). A set is named by a small JSON *spec*, from which the reference child
rebuilds exactly the same values to check a timed output.

Fingerprints for the input-mutation gate are computed where the tensor lives: SHA-256 of the bytes on
the CPU, a keyed position-weighted checksum by torch ops on a device (only the digest crosses to the
host).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

TASK_DISTRIBUTION = "task"
_SEED_MASK = (1 << 62) - 1
_CHUNK = 1 << 25          # elements per checksum chunk (bounds the temporaries on a device)
_K1 = 0x9E3779B97F4A7C15 - (1 << 64)   # odd 64-bit constants (two's complement, so torch accepts them)
_K2 = 0xC2B2AE3D27D4EB4F - (1 << 64)
# A per-process key mixed into the device checksum, so a collision cannot be prepared in advance.
_KEY = int.from_bytes(os.urandom(7), "big") | 1


def buffer_seed(seed: int, buffer: int) -> int:
    """The input seed of set ``buffer`` derived from seed ``seed`` (buffer 0 is ``seed`` itself)."""
    if buffer == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{buffer}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & _SEED_MASK


def _redraw(torch: Any, t: Any, distribution: str, gen: Any, large: float, device: str) -> Any:
    shape, dtype = tuple(t.shape), t.dtype
    kw = {"generator": gen, "device": device}
    if distribution == "normal":
        return torch.randn(shape, **kw).to(dtype)
    if distribution == "uniform":
        return torch.rand(shape, **kw).to(dtype)
    if distribution == "negative":
        return (-(torch.rand(shape, **kw) + 1e-3)).to(dtype)
    if distribution == "zeros_mixed":
        keep = torch.rand(shape, **kw) < 0.5
        return (torch.randn(shape, **kw) * keep).to(dtype)
    if distribution == "large":
        return (torch.randn(shape, **kw) * large).to(dtype)
    if distribution == "noncontiguous":
        if len(shape) == 0:
            return torch.randn(shape, **kw).to(dtype)
        wide = torch.randn(shape[:-1] + (2 * shape[-1],), **kw).to(dtype)
        return wide[..., ::2]
    raise ValueError(f"unknown input distribution {distribution!r}")


def _to_device(torch: Any, t: Any, device: str) -> Any:
    if t.device.type == torch.device(device).type:
        return t
    if not t.is_contiguous() and t.dim() > 0:
        wide = t._base if t._base is not None else t
        step = t.stride(-1)
        return wide.to(device)[..., ::step] if wide.dim() == t.dim() else t.to(device)
    return t.to(device)


def make_inputs(torch: Any, get_inputs: Callable[[], list[Any]], seed: int, distribution: str,
                large: float, device: str) -> list[Any]:
    """Build one input list for ``seed`` and ``distribution`` on ``device``.

    Non-floating tensors and non-tensor values are kept as ``get_inputs()`` made them (under the
    seed). ``noncontiguous`` keeps the strided view on the device, so the candidate really receives a
    non-contiguous tensor.

    Raises:
        ValueError: an unknown distribution name.
    """
    torch.manual_seed(seed)
    if device == "cpu":
        base = list(get_inputs())
    else:
        with torch.device(device):
            base = list(get_inputs())
    gen = torch.Generator(device=device).manual_seed(seed)
    out: list[Any] = []
    for t in base:
        if not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        if distribution != TASK_DISTRIBUTION and t.is_floating_point():
            t = _redraw(torch, t, distribution, gen, large, device)
        out.append(_to_device(torch, t, device))
    return out


# ------------------------------------------------------------------------------------ fingerprints
def tensor_sha256(torch: Any, t: Any) -> str:
    """SHA-256 of a tensor's values (as contiguous bytes, on the CPU) with its shape and dtype."""
    if not isinstance(t, torch.Tensor):
        return hashlib.sha256(repr(t).encode()).hexdigest()
    data = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
    h = hashlib.sha256(f"{tuple(t.shape)}|{t.dtype}|".encode())
    h.update(data)
    return h.hexdigest()


def device_checksum(torch: Any, t: Any) -> Any:
    """Two keyed, position-weighted 64-bit sums of a device tensor's bytes, as a (2,) int64 tensor
    on that device (no host synchronisation). Any change of one word changes both sums unless the
    change was solved for against the per-process key; work is chunked, so temporaries stay small."""
    c = t.detach()
    if not c.is_contiguous():
        c = c.contiguous()
    raw = c.reshape(-1).view(torch.uint8)
    words = raw.view(torch.int32) if raw.numel() % 4 == 0 else raw
    acc = torch.zeros(2, dtype=torch.int64, device=c.device)
    n = words.numel()
    for i in range(0, n, _CHUNK):
        w = words[i:i + _CHUNK].to(torch.int64)
        idx = torch.arange(i, i + w.numel(), dtype=torch.int64, device=c.device)
        mix = idx * _K1 + _KEY
        acc[0] += (w * mix).sum()
        acc[1] += ((w + _KEY) * (mix * _K2 + 1)).sum()
    return acc


def fingerprints(torch: Any, inputs: list[Any]) -> list[str]:
    """One fingerprint per input: SHA-256 on the CPU, :func:`device_checksum` on a device (one
    synchronisation for the whole list; only 16 bytes per tensor cross to the host)."""
    out: list[str | None] = []
    dev: list[tuple[int, Any, Any]] = []
    for i, t in enumerate(inputs):
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            dev.append((i, t, device_checksum(torch, t)))
            out.append(None)
        else:
            out.append(tensor_sha256(torch, t))
    if dev:
        sums = torch.stack([d[2] for d in dev]).cpu().tolist()
        for (i, t, _), (a, b) in zip(dev, sums):
            out[i] = f"{tuple(t.shape)}|{t.dtype}|{a & (2**64 - 1):016x}{b & (2**64 - 1):016x}"
    return [str(x) for x in out]


_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _same_bits(torch: Any, a: Any, b: Any) -> bool:
    """Bitwise equality of two tensors of one shape and dtype (NaN payloads included)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype == torch.bool or not (a.is_floating_point() or a.is_complex()):
        return bool(torch.equal(a, b))
    bits = _BITS.get(a.element_size())
    if bits is None:
        return bool(torch.equal(a, b))
    return bool(torch.equal(a.view(getattr(torch, bits)), b.view(getattr(torch, bits))))


def sample_key(torch: Any, inputs: list[Any], n: int = 4096) -> Any:
    """A device-side key of an input set's values from ``n`` evenly spaced elements per tensor (no
    host synchronisation): two sets with different values almost surely get different keys. Used to
    count the distinct input sets a timed loop presented (a task whose ``get_inputs`` ignores the seed
    shows up as one set), not as a mutation check."""
    parts = []
    for t in inputs:
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        flat = t.detach().reshape(-1)
        m = min(n, flat.numel())
        # integer positions: a float linspace rounds past the end of a tensor of 2**30 elements
        idx = torch.arange(m, device=flat.device, dtype=torch.int64) * (flat.numel() // m)
        vals = flat[idx]
        bits = _BITS.get(vals.element_size())
        if vals.dtype == torch.bool:
            vals = vals.to(torch.uint8)
        elif bits is not None and (vals.is_floating_point() or vals.is_complex()):
            vals = vals.view(getattr(torch, bits))
        w = vals.to(torch.int64)
        pos = torch.arange(1, w.numel() + 1, device=w.device, dtype=torch.int64)
        parts.append(torch.stack([(w * pos).sum(), (w * (pos * _K2 + _KEY)).sum()]))
    if not parts:
        return torch.zeros(2, dtype=torch.int64)
    return torch.stack(parts).sum(0)


def unchanged_marks(torch: Any, inputs: list[Any], rebuild: Callable[[], list[Any]]) -> tuple[list[str], list[str]]:
    """Input-mutation evidence for inputs the harness made from a seed: each input against a fresh
    rebuild from that seed, compared bitwise where it lives; returns (before, after) marks, equal
    where the input is unchanged. Exact, and far cheaper on a device than two checksums (one draw
    and one compare instead of ~30 passes over int64 temporaries); peak memory is the inputs twice."""
    again = rebuild()
    before = [f"made:{i}" for i in range(len(inputs))]
    after = []
    for i, (x, y) in enumerate(zip(inputs, again)):
        if isinstance(x, torch.Tensor):
            same = isinstance(y, torch.Tensor) and _same_bits(torch, x, y)
        else:
            same = repr(x) == repr(y)
        after.append(before[i] if same else f"made:{i}-changed")
    del again
    return before, after


# ------------------------------------------------------------------------------------ timed sets
def pool_of(torch: Any, get_inputs: Callable[[], list[Any]], seeds: list[int], device: str) -> list[Any]:
    """The pool behind windowed sets: per input, the exact draws of ``seeds`` concatenated flat
    (a non-tensor input is kept as the first draw made it). Entry: (template, flat) or the value."""
    draws = [make_inputs(torch, get_inputs, s, TASK_DISTRIBUTION, 0.0, device) for s in seeds]
    pool: list[Any] = []
    for i, t in enumerate(draws[0]):
        if isinstance(t, torch.Tensor):
            flat = torch.cat([d[i].reshape(-1) for d in draws])
            pool.append(_Pooled(None if t.is_contiguous() else torch.empty_like(t), tuple(t.shape), flat, t.numel()))
        else:
            pool.append(t)
    del draws
    return pool


class _Pooled:
    """One tensor input's pool: its draws concatenated flat, and how to cut a set out of them."""

    __slots__ = ("strided", "shape", "flat", "n")

    def __init__(self, strided: Any, shape: tuple[int, ...], flat: Any, n: int) -> None:
        self.strided, self.shape, self.flat, self.n = strided, shape, flat, n


def window(torch: Any, pool: list[Any], starts: list[int]) -> list[Any]:
    """The input set whose tensor ``t`` is the ``n_t`` pool elements from ``starts[t]`` (one start per
    tensor input, in order). Contiguous inputs are views (no copy); a non-contiguous input keeps its
    strides (a copy into a tensor laid out like the draw's)."""
    out: list[Any] = []
    k = 0
    for entry in pool:
        if not isinstance(entry, _Pooled):
            out.append(entry)
            continue
        start = int(starts[k])
        k += 1
        if start < 0 or start + entry.n > entry.flat.numel():
            raise ValueError(f"window start {start} outside a pool of {entry.flat.numel()} elements")
        view = entry.flat[start:start + entry.n].view(entry.shape)
        out.append(view if entry.strided is None else torch.empty_like(entry.strided).copy_(view))
    return out


def windows(torch: Any, pool: list[Any], starts: list[int], steps: list[int], count: int) -> list[list[Any]]:
    """``count`` sets at once: set ``i`` takes tensor ``t`` from ``starts[t] + i * steps[t]``. One
    ``as_strided`` and one ``unbind`` per tensor make every view, so a CPU inner loop of hundreds of
    calls gets its sets in microseconds."""
    cols: list[Any] = []
    k = 0
    for entry in pool:
        if not isinstance(entry, _Pooled):
            cols.append([entry] * count)
            continue
        start, step = int(starts[k]), int(steps[k])
        k += 1
        if entry.strided is not None or entry.n == 0:
            cols.append([window(torch, [entry], [start + i * step])[0] for i in range(count)])
            continue
        inner = [1] * len(entry.shape)
        for d in range(len(entry.shape) - 2, -1, -1):
            inner[d] = inner[d + 1] * int(entry.shape[d + 1])
        big = entry.flat.as_strided((count, *entry.shape), (step, *inner), start)
        cols.append(list(big.unbind(0)))
    return [list(row) for row in zip(*cols)] if cols else [[] for _ in range(count)]


def pool_sizes(pool: list[Any]) -> list[int]:
    """Elements per set of each tensor input of a pool."""
    return [e.n for e in pool if isinstance(e, _Pooled)]


def inputs_from_spec(torch: Any, get_inputs: Callable[[], list[Any]], spec: dict[str, Any], large: float,
                     device: str) -> list[Any]:
    """Rebuild the exact input set a timed call received from its spec (see :class:`TimedSets`)."""
    if spec["kind"] == "fresh":
        return make_inputs(torch, get_inputs, int(spec["seed"]), TASK_DISTRIBUTION, large, device)
    pool = pool_of(torch, get_inputs, [int(s) for s in spec["pool_seeds"]], device)
    return window(torch, pool, [int(x) for x in spec["starts"]])


class TimedSets:
    """The input sets of one paired seed's timed loop: no two calls see the same values.

    Each repetition takes ``k`` sets: 1 on the CUDA events path (``fresh``: an exact draw of
    ``buffer_seed(seed, q + 1)`` for repetition ``q``); the inner-loop length on a CPU (``window``:
    views of a pool of 2 exact draws, set ``i`` of repetition ``q`` at ``o_q + i * d`` with
    ``d = n // k`` and ``o_q < d`` distinct per repetition, so no two sets of a pool coincide; the
    refill costs microseconds where a fresh CPU draw costs 50-170x the call); the graph's replays on
    CUDA-graph replay (``graph``: ``k`` consecutive chunks of a pool of ``k + 1`` draws at offset
    ``o_q <= n``, copied into the graph's static sets outside the timed region). A pool whose
    offsets are used up is replaced by fresh draws. Repetition ``q`` of a seed is a pure function of
    (seed, q), the same in every arm, and :meth:`spec` names any of its sets for the reference.
    """

    def __init__(self, torch: Any, get_inputs: Callable[[], list[Any]], seed: int, large: float,
                 device: str, mode: str, calls_per_rep: int) -> None:
        self.torch, self.get_inputs, self.seed, self.large, self.device = torch, get_inputs, seed, large, device
        self.mode, self.k = mode, max(1, calls_per_rep)
        self.q = 0                                   # repetitions handed out so far
        self.used = 0                                # sets handed out so far (timed or not)
        self.last_keys: list[tuple[Any, ...]] = []   # identities of the sets the last call handed out
        self._pool: list[Any] | None = None
        self._pool_id = -1
        self._sizes: list[int] = []
        self._ndraws = 2 if mode == "window" else self.k + 1
        self.fp_before: list[str] = []     # fingerprints of each pool when drawn ...
        self.fp_after: list[str] = []      # ... and when retired: a write by the model shows here

    def _seeds_for(self, p: int) -> list[int]:
        return [buffer_seed(buffer_seed(self.seed, 1_000_003 + p), d) for d in range(self._ndraws)]

    def _pool_for(self, p: int) -> None:
        if p == self._pool_id:
            return
        self.retire()
        self._pool = pool_of(self.torch, self.get_inputs, self._seeds_for(p), self.device)
        self._pool_id = p
        self._sizes = pool_sizes(self._pool)
        self.fp_before += fingerprints(self.torch, self.pool_tensors())

    def retire(self) -> None:
        """Fingerprint the current pool again and drop it."""
        if self._pool is not None:
            self.fp_after += fingerprints(self.torch, self.pool_tensors())
        self._pool = None

    def _per_pool(self) -> int:
        """Repetitions one pool serves with no set repeated."""
        if self._pool_id < 0:
            self._pool_for(0)
            big = max(self._sizes, default=0)
            if self.mode == "window" and 0 < big < self.k:   # tiny inputs: more draws, so k sets differ
                self._pool, self._pool_id, self.fp_before = None, -1, []
                self._ndraws = -(-self.k // big) + 1
                self._pool_for(0)
        big = max(self._sizes, default=0)
        if self.mode == "window":
            return max(1, (self._ndraws - 1) * big // self.k)
        return big + 1

    def _layout(self, q: int) -> tuple[int, list[int], list[int], int]:
        """(pool, per-tensor starts of set 0, per-tensor steps, offset) of repetition ``q``."""
        per = self._per_pool()
        p, r = divmod(q, per)
        o = _permute(r, per, self.seed)
        if self.mode == "window":
            steps = [(self._ndraws - 1) * n // self.k for n in self._sizes]
            starts = [o % st if st > 0 else o % (n + 1) for n, st in zip(self._sizes, steps)]
        else:
            steps = list(self._sizes)
            starts = [o % (n + 1) for n in self._sizes]
        return p, starts, steps, o

    def spec(self, q: int, i: int) -> dict[str, Any]:
        """The spec naming set ``i`` of repetition ``q`` (what :func:`inputs_from_spec` rebuilds)."""
        if self.mode == "fresh":
            return {"kind": "fresh", "seed": buffer_seed(self.seed, q + 1)}
        p, starts, steps, _ = self._layout(q)
        return {"kind": "window", "pool_seeds": self._seeds_for(p),
                "starts": [s + i * st for s, st in zip(starts, steps)]}

    def take(self) -> tuple[int, list[list[Any]]]:
        """The next repetition's index and its ``k`` sets (made outside timing)."""
        q = self.q
        self.q += 1
        self.used += self.k
        if self.mode == "fresh":
            self.last_keys = [("fresh", q)]
            return q, [make_inputs(self.torch, self.get_inputs, buffer_seed(self.seed, q + 1),
                                   TASK_DISTRIBUTION, self.large, self.device)]
        p, starts, steps, o = self._layout(q)
        self._pool_for(p)
        assert self._pool is not None
        if self.mode == "window":
            d = max(1, (self._ndraws - 1) * max(self._sizes, default=0) // self.k)
            self.last_keys = [(p, o + i * d) for i in range(self.k)]
        else:
            self.last_keys = [(p, o, c) for c in range(self.k)]
        return q, windows(self.torch, self._pool, starts, steps, self.k)

    def pool_tensors(self) -> list[Any]:
        """The pool's flat tensors (what a mutation would change), for fingerprints."""
        return [e.flat for e in (self._pool or []) if isinstance(e, _Pooled)]


def _permute(r: int, n: int, seed: int) -> int:
    """A seed-dependent permutation of range(n) (an affine map with a step coprime to n)."""
    if n <= 1:
        return 0
    step = (seed % n) | 1
    while _gcd(step, n) != 1:
        step += 2
    return (step * r + (seed >> 7)) % n


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a
