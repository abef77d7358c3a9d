"""Inputs made by harness code from a seed and a named distribution, on the measuring device.

Both the reference and the candidate child call :func:`make_inputs` with the same (seed,
distribution), so a paired measurement sees identical inputs. For distribution ``task`` the values
are the task's ``get_inputs()`` drawn under ``torch.manual_seed(seed)``. On CUDA ``get_inputs()`` runs
under ``with torch.device("cuda")``, so its ``torch.rand``/``randn``/``randint`` draw on the device:
a 4 GB input costs milliseconds, not a host draw and a copy.

An adversarial *input class* (``normal``, ``uniform``, ``negative``, ``zeros_mixed``, ``large``) keeps
the structure ``get_inputs()`` builds (protocol ``correctness.class_inputs: factory``, issue 25): the
problem's own ``get_inputs()`` runs again with its continuous random draws (``torch.rand``, ``randn``,
``rand_like``, ``randn_like``, ``normal``, ``Tensor.normal_``/``uniform_``/``exponential_``/
``cauchy_``/``log_normal_`` and ``torch.nn.init``'s random fillers) taken from the class's distribution
by a torch function mode, so what it does with them afterwards (``tril``, a symmetrisation, ``abs``,
a normalisation, a softmax, a sort) survives, and a candidate that uses a structure the problem states
is not rejected for it. Why not redraw each floating-point input whole (``redraw``, the rule before
1.6.0): a product of lower-triangular matrices is lower triangular, and a dense redraw of
KernelBench's triangular inputs rejected exactly the kernels that exploit it. Discrete draws
(``randint``, ``randperm``, ``bernoulli``, ``multinomial``, ``random_``) keep their ranges, and values made
without a draw (``arange``, ``ones``, ``eye``, a module constant) stay as they are. The class's draws
come from a generator on the tensor's device seeded from (seed, class), and the discrete ones from
``torch.manual_seed(seed)``, so both children build the same values, each draw costs what the
problem's own draw costs, and no input is drawn twice. ``noncontiguous`` keeps the task's values
and only lays each floating-point input out with a stride of 2 in its last dimension.

A ``get_inputs()`` that cannot be re-run that way (it raises under the class's draws, or makes its
floating-point inputs without any torch random draw, e.g. from numpy) falls back to the redraw, and
says so: :func:`make_inputs_noted` returns how each set was made, which the children record with
every call (``CallFacts.inputs``).

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

import contextlib
import hashlib
import os
import secrets
import weakref
from collections.abc import Callable
from typing import Any

TASK_DISTRIBUTION = "task"
CLASS_DISTRIBUTIONS = ("normal", "uniform", "negative", "zeros_mixed", "large", "noncontiguous")
FACTORY_INPUTS = "factory"   # protocol correctness.class_inputs: get_inputs re-run with the class's draws
REDRAW_INPUTS = "redraw"     # each floating-point input redrawn whole (the rule before 1.6.0; the fallback)
# continuous draws a class replaces: Tensor methods that fill in place, and torch.nn.init's random fillers
_FILL_METHODS = ("normal_", "uniform_", "exponential_", "cauchy_", "log_normal_")
_INIT_FILLERS = ("uniform_", "normal_", "trunc_normal_", "xavier_uniform_", "xavier_normal_",
                 "kaiming_uniform_", "kaiming_normal_")
# discrete draws a class leaves as they are: a get_inputs that made its inputs from these alone (a float
# copy of randint) keeps them, rather than falling back to a redraw that would lose their range
_DISCRETE_DRAWS = ("randint", "randint_like", "randperm", "bernoulli", "multinomial", "poisson")
_DISCRETE_FILLS = ("random_", "bernoulli_", "geometric_")
_MAX_CLASS_DRAWS = 4096     # a get_inputs drawing more than this under a class falls back to the redraw
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
    if not isinstance(t, torch.Tensor):   # a number or other value get_inputs returned: kept as it is
        return t
    if t.device.type == torch.device(device).type:
        return t
    if not t.is_contiguous() and t.dim() > 0:
        wide = t._base if t._base is not None else t
        step = t.stride(-1)
        return wide.to(device)[..., ::step] if wide.dim() == t.dim() else t.to(device)
    return t.to(device)


def make_inputs(torch: Any, get_inputs: Callable[[], list[Any]], seed: int, distribution: str,
                large: float, device: str, how: str = FACTORY_INPUTS) -> list[Any]:
    """Build one input list for ``seed`` and ``distribution`` on ``device`` (:func:`make_inputs_noted`
    without the note of how it was made).

    Raises:
        ValueError: an unknown distribution name or way of making a class's inputs.
    """
    return make_inputs_noted(torch, get_inputs, seed, distribution, large, device, how)[0]


def make_inputs_noted(torch: Any, get_inputs: Callable[[], list[Any]], seed: int, distribution: str,
                      large: float, device: str, how: str = FACTORY_INPUTS) -> tuple[list[Any], str]:
    """One input list for ``seed`` and ``distribution`` on ``device``, and how it was made: ``""`` (the
    task's own draw), ``"factory"`` (the task's ``get_inputs`` with the class's draws), ``"strided"``
    (the task's values, non-contiguous) or ``"redraw"`` / ``"redraw (why)"`` (each floating-point
    input redrawn whole: asked for by ``how``, or the fallback, with its reason).

    ``how`` is the protocol's ``correctness.class_inputs``. Non-tensor values are kept as
    ``get_inputs()`` made them. ``noncontiguous`` keeps the strided view on the device, so the
    candidate really receives a non-contiguous tensor.

    Raises:
        ValueError: an unknown distribution name or way of making a class's inputs.
    """
    if how not in (FACTORY_INPUTS, REDRAW_INPUTS):
        raise ValueError(f"unknown way of making a class's inputs {how!r}: {FACTORY_INPUTS!r} or {REDRAW_INPUTS!r}")
    if distribution != TASK_DISTRIBUTION and distribution not in CLASS_DISTRIBUTIONS:
        raise ValueError(f"unknown input distribution {distribution!r}")
    if distribution == TASK_DISTRIBUTION:
        return [_to_device(torch, t, device) for t in _run_get_inputs(torch, get_inputs, seed, device, None)], ""
    if how == FACTORY_INPUTS and distribution == "noncontiguous":
        base = _run_get_inputs(torch, get_inputs, seed, device, None)
        for i, t in enumerate(base):
            if isinstance(t, torch.Tensor):
                t = _to_device(torch, t, device)
                base[i] = _strided(torch, t) if t.is_floating_point() else t
        return base, "strided"
    note = REDRAW_INPUTS
    if how == FACTORY_INPUTS:
        mode = _class_draws(torch)(distribution, seed, large)
        try:
            made = _run_get_inputs(torch, get_inputs, seed, device, mode)
        except Exception as exc:  # noqa: BLE001 - any failure of the re-run falls back, and says why
            why = f"get_inputs raised under the class's draws: {type(exc).__name__}: {str(exc)[:160]}"
        else:
            if mode.swapped or mode.discrete or not any(isinstance(t, torch.Tensor) and t.is_floating_point()
                                                        for t in made):
                return [_to_device(torch, t, device) for t in made], FACTORY_INPUTS
            why = "get_inputs made its floating-point inputs without a torch random draw"
            del made
        note = f"{REDRAW_INPUTS} ({why})"
    base = _run_get_inputs(torch, get_inputs, seed, device, None)
    gen = torch.Generator(device=device).manual_seed(seed)
    out: list[Any] = []
    for t in base:
        if not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        if t.is_floating_point():
            t = _redraw(torch, t, distribution, gen, large, device)
        out.append(_to_device(torch, t, device))
    return out, note


def _run_get_inputs(torch: Any, get_inputs: Callable[[], list[Any]], seed: int, device: str,
                    mode: Any) -> list[Any]:
    """``get_inputs()`` under ``torch.manual_seed(seed)``, on ``device`` (a device context on CUDA, so
    its draws happen there), under the class's draw mode when one is given (innermost: it sees each
    call first, and the tensors it makes still land on the device)."""
    on_host = device == "cpu"
    if on_host:
        torch.default_generator.manual_seed(seed)   # what torch.manual_seed does for CPU draws, 30x cheaper
    else:
        torch.manual_seed(seed)
    with contextlib.ExitStack() as stack:
        if not on_host:
            stack.enter_context(torch.device(device))
        if mode is not None:
            stack.enter_context(mode)
        return list(get_inputs())


def _strided(torch: Any, t: Any) -> Any:
    """``t``'s values in a non-contiguous layout (every other element of a buffer twice as wide in the
    last dimension), on ``t``'s device; a 0-d tensor is returned as it is."""
    if t.dim() == 0:
        return t
    shape = tuple(t.shape)
    wide = torch.empty(shape[:-1] + (2 * shape[-1],), dtype=t.dtype, device=t.device)
    view = wide[..., ::2]
    view.copy_(t)
    return view


def class_seed(seed: int, distribution: str, device: str) -> int:
    """The seed of the class's generator on one device: distinct per class, so no two classes of one
    seed draw related values (``large`` is not ``normal`` scaled)."""
    digest = hashlib.sha256(f"class:{seed}:{distribution}:{device}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & _SEED_MASK


def _class_fill(torch: Any, t: Any, distribution: str, gen: Any, large: float) -> None:
    """Fill floating-point ``t`` in place with the class's values: one pass over it, as the draw it
    replaces (``zeros_mixed`` adds a one-byte-per-element mask)."""
    if distribution == "normal":
        t.normal_(0.0, 1.0, generator=gen)
    elif distribution == "uniform":
        t.uniform_(0.0, 1.0, generator=gen)
    elif distribution == "negative":
        t.uniform_(0.0, 1.0, generator=gen).add_(1e-3).neg_()
    elif distribution == "zeros_mixed":
        t.normal_(0.0, 1.0, generator=gen)
        try:
            zero = torch.empty(t.shape, dtype=torch.bool, device=t.device).bernoulli_(0.5, generator=gen)
        except (RuntimeError, NotImplementedError):   # a backend without a boolean Bernoulli draw
            zero = torch.rand(t.shape, generator=gen, device=t.device) < 0.5
        t.masked_fill_(zero, 0.0)
        del zero
    elif distribution == "large":
        t.normal_(0.0, large, generator=gen)
    else:
        raise ValueError(f"input class {distribution!r} has no draw of its own")


_CLASS_DRAWS: list[Any] = []   # the mode class, built on first use (this module must not import torch)


def _lookup(table: dict[Any, Any], func: Any) -> Any:
    try:
        return table.get(func)
    except TypeError:        # an unhashable callable is none of the draws
        return None


def _member(func: Any, funcs: set[Any]) -> bool:
    try:
        return func in funcs
    except TypeError:
        return False


def _class_draws(torch: Any) -> Any:
    """The torch function mode that gives a re-run of ``get_inputs`` the class's draws.

    Why a mode, not patched module attributes: it sees every call, including a ``from torch import
    rand`` made when the problem was imported, and it leaves nothing patched behind (the integrity
    check watches torch's functions)."""
    if _CLASS_DRAWS:
        return _CLASS_DRAWS[0]
    from torch.overrides import TorchFunctionMode

    fresh = {torch.rand: torch.empty, torch.randn: torch.empty,
             torch.rand_like: torch.empty_like, torch.randn_like: torch.empty_like}
    methods = {getattr(torch.Tensor, n) for n in _FILL_METHODS}
    discrete = ({getattr(torch, n) for n in _DISCRETE_DRAWS if hasattr(torch, n)}
                | {getattr(torch.Tensor, n) for n in _DISCRETE_FILLS if hasattr(torch.Tensor, n)})
    init = torch.nn.init
    fillers = {getattr(init, n) for n in _INIT_FILLERS if hasattr(init, n)}

    class ClassDraws(TorchFunctionMode):
        """Continuous random draws take the class's values; everything else runs as written."""

        def __init__(self, distribution: str, seed: int, large: float) -> None:
            super().__init__()
            self.distribution, self.seed, self.large = distribution, seed, large
            self.gens: dict[str, Any] = {}
            self.swapped = 0       # continuous draws given the class's values
            self.discrete = 0      # discrete draws left as they are (their range is structure)

        def _fill(self, t: Any) -> bool:
            if not isinstance(t, torch.Tensor) or not t.is_floating_point():
                return False
            self.swapped += 1
            if self.swapped > _MAX_CLASS_DRAWS:
                raise RuntimeError(f"more than {_MAX_CLASS_DRAWS} random draws in one get_inputs() "
                                   "(a loop that waits for a value this class never draws?)")
            key = str(t.device)
            gen = self.gens.get(key)
            if gen is None:
                gen = self.gens[key] = torch.Generator(device=t.device)
                gen.manual_seed(class_seed(self.seed, self.distribution, key))
            with torch.no_grad():
                _class_fill(torch, t, self.distribution, gen, self.large)
            return True

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = dict(kwargs or {})
            make = _lookup(fresh, func)
            if make is not None:
                bare = {k: v for k, v in kwargs.items() if k != "generator"}
                t = make(*args, **bare)
                return t if self._fill(t) else func(*args, **kwargs)
            if _member(func, methods):
                if args and self._fill(args[0]):
                    return args[0]
                return func(*args, **kwargs)
            out = func(*args, **kwargs)
            if _member(func, discrete):
                self.discrete += 1
            elif func is torch.normal:
                self._fill(out)
            elif _member(func, fillers):
                self._fill(args[0] if args else kwargs.get("tensor"))
            return out

    _CLASS_DRAWS.append(ClassDraws)
    return ClassDraws


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
_RAW_DRAWS: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()   # get_inputs -> raw?
_DRAW_TRACKER: list[Any] = []
# draws whose elements are independent and alike, so a shifted window of several is again such a draw
# (randperm and multinomial are not: a window of permutations is no permutation)
_IID_DRAWS = ("rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "normal", "bernoulli",
              "poisson")
_IID_FILLS = ("normal_", "uniform_", "exponential_", "cauchy_", "log_normal_", "random_", "bernoulli_",
              "geometric_")


def raw_draws_only(torch: Any, get_inputs: Callable[[], list[Any]], seed: int, device: str) -> bool:
    """Whether every tensor ``get_inputs()`` returns is a random draw left as drawn (the tensor a
    ``torch.rand``/``randn``/``randint``/... call or an in-place fill made, not written since): then
    windows of concatenated draws are draws too (:class:`TimedSets`). Anything else (``tril`` of a
    draw, a softmax, a constant, a value made outside torch) is structure a window could break.
    Decided once per ``get_inputs`` (one draw, by a pass-through torch function mode, so the values
    are the task's own); a ``get_inputs`` that raises here is treated as structured."""
    try:
        known = _RAW_DRAWS.get(get_inputs)
    except TypeError:
        known = None
    if known is not None:
        return known
    tracker = _draw_tracker(torch)()
    try:
        made = _run_get_inputs(torch, get_inputs, seed, device, tracker)
    except Exception:  # noqa: BLE001 - exact sets are always right, only slower
        raw = False
    else:
        raw = all(tracker.untouched(t) for t in made if isinstance(t, torch.Tensor))
        del made
    try:
        _RAW_DRAWS[get_inputs] = raw
    except TypeError:
        pass
    return raw


def _draw_tracker(torch: Any) -> Any:
    """The pass-through torch function mode behind :func:`raw_draws_only` (built on first use)."""
    if _DRAW_TRACKER:
        return _DRAW_TRACKER[0]
    from torch.overrides import TorchFunctionMode

    draws = {getattr(torch, n) for n in _IID_DRAWS if hasattr(torch, n)}
    fills = {getattr(torch.Tensor, n) for n in _IID_FILLS if hasattr(torch.Tensor, n)}

    class DrawTracker(TorchFunctionMode):
        """Notes each tensor a draw made, with its version counter right after the draw."""

        def __init__(self) -> None:
            super().__init__()
            self.drawn: dict[int, tuple[Any, int]] = {}

        def _note(self, t: Any) -> None:
            if isinstance(t, torch.Tensor):
                self.drawn[id(t)] = (t, int(t._version))

        def untouched(self, t: Any) -> bool:
            seen = self.drawn.get(id(t))
            return seen is not None and seen[0] is t and int(t._version) == seen[1]

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if _member(func, draws):
                self._note(out)
            elif _member(func, fills) and args:
                self._note(args[0])
            return out

    _DRAW_TRACKER.append(DrawTracker)
    return DrawTracker


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

    Windows are cut at any element offset, so they are draws only where every tensor input *is* a
    random draw, untouched afterwards (:func:`raw_draws_only`): then a shifted window of concatenated
    draws is itself a draw. Where ``get_inputs`` builds structure (``tril``, a softmax, a
    permutation, an integer range turned into signs), a window would break it and a timed output
    would be compared on inputs the problem can never produce (KernelBench L1 15: every lower-
    triangular candidate failed the stale-output check). Those problems get ``exact`` sets instead:
    each of a repetition's ``k`` sets is a whole draw of its own seed (named by a ``fresh`` spec).
    Their mutation evidence is the CUDA events path's: when the next repetition retires them, one set
    chosen at random then (after its call returned) is compared bitwise with a rebuild from its seed
    (fingerprinting every set before and after would cost more than the draws themselves).
    """

    def __init__(self, torch: Any, get_inputs: Callable[[], list[Any]], seed: int, large: float,
                 device: str, mode: str, calls_per_rep: int, force_exact: bool = False) -> None:
        self.torch, self.get_inputs, self.seed, self.large, self.device = torch, get_inputs, seed, large, device
        self.mode, self.k = mode, max(1, calls_per_rep)
        self.q = 0                                   # repetitions handed out so far
        self.used = 0                                # sets handed out so far (timed or not)
        self.last_keys: list[tuple[Any, ...]] = []   # identities of the sets the last call handed out
        self._pool: list[Any] | None = None
        self._pool_id = -1
        self._sizes: list[int] = []
        self._ndraws = 2 if mode == "window" else self.k + 1
        # structured inputs: every set a whole draw (see the class docstring); decided once per get_inputs
        # (force_exact: the caller wants no shared pool at all; the quarantine's extended pass)
        self.exact = mode != "fresh" and (force_exact or not raw_draws_only(torch, get_inputs, seed, device))
        self._exact: list[list[Any]] = []            # the sets of the repetition last handed out (exact)
        self._exact_q = -1                           # ... and that repetition's index
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
        """Fingerprint the current pool again and drop it (exact: check one of the last repetition's
        sets, chosen now, against a rebuild from its seed)."""
        if self._exact:
            i = secrets.randbelow(len(self._exact))
            before, after = unchanged_marks(self.torch, self._exact[i], lambda: make_inputs(
                self.torch, self.get_inputs, self._exact_seed(self._exact_q, i), TASK_DISTRIBUTION, self.large,
                self.device))
            tag = f"exact:{self._exact_q}:{i}:"
            self.fp_before += [tag + m for m in before]
            self.fp_after += [tag + m for m in after]
        elif self._pool is not None:
            self.fp_after += fingerprints(self.torch, self.pool_tensors())
        self._pool = None
        self._exact = []

    def _exact_seed(self, q: int, i: int) -> int:
        """The input seed of set ``i`` of repetition ``q`` on the exact path."""
        return buffer_seed(buffer_seed(self.seed, 2_000_003 + q), i + 1)

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
        if self.exact:
            return {"kind": "fresh", "seed": self._exact_seed(q, i)}
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
        if self.exact:
            self.retire()
            self._exact = [make_inputs(self.torch, self.get_inputs, self._exact_seed(q, i), TASK_DISTRIBUTION,
                                       self.large, self.device) for i in range(self.k)]
            self._pool_id = self._exact_q = q   # names this repetition's sets (the child keys timed sets by it)
            self.last_keys = [("exact", q, i) for i in range(self.k)]
            return q, [list(st) for st in self._exact]
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
        """The pool's flat tensors (exact: the last repetition's set tensors): what a mutation would
        change, for fingerprints."""
        if self.exact:
            return [t for st in self._exact for t in st if isinstance(t, self.torch.Tensor)]
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
