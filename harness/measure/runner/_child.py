"""The measuring child process: ``python -m harness.measure.runner._child ROLE REPLY_FD CONFIG_JSON``.

It reads one JSON command per line on stdin and writes one JSON reply per line to REPLY_FD. Order
of events, which is the point of this module:

1. the memory limit (RLIMIT_AS) is set and the harness's clock is bound (``harness.measure.timing._clock``);
2. torch is imported, threads are pinned and TF32 is set from the configuration, and the CUDA
   timer (events, synchronise) is bound;
3. only then may a ``load`` command import task code and, in the candidate and start roles,
   candidate code. The reference role refuses candidate code outright.

Everything reported here is a fact observed by this harness code. Each handler answers with its command's
reply model (:mod:`harness.measure.runner._messages`, imported once the ready line is written); the parent
validates the line into the same model and turns it into :mod:`harness.measure.evidence` records.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from typing import TYPE_CHECKING, Any

from harness.measure.timing import _clock  # noqa: F401 - binds the clock before anything else runs

ROLE, REPLY_FD, CONFIG = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
if int(CONFIG["memory_bytes"]) > 0:   # protocol limits, via the config (0: the backend sets none)
    resource.setrlimit(resource.RLIMIT_AS, (CONFIG["memory_bytes"], CONFIG["memory_bytes"]))
os.dup2(2, 1)  # anything task or candidate code prints goes to the log, never to a protocol pipe
# torch.compile in this child (issue 25): Inductor's and Triton's caches live in a folder of this child's
# private scratch (its cwd: writable inside the confinement, never shared with another child or
# evaluation; the parent may seed it from harness.measure.compile_cache, for its own renderings only).
# The first call (in load) compiles with the config's compile_threads workers (issue 26); then
# _end_compile_pool shuts them down and makes later compiles run in this process, so no worker pool's
# threads or processes exist while timed blocks run (on the H200 a pool's lazily started reader thread
# read as work left running after the timed repetitions and rejected three honest compiled candidates by
# the escape gate; no quiesce timer thread either). Set before torch is imported: Inductor reads them at import.
_COMPILE_CACHE = os.path.join(os.getcwd(), "compile-cache")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_COMPILE_CACHE, "inductor")
os.environ["TRITON_CACHE_DIR"] = os.path.join(_COMPILE_CACHE, "triton")
os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = str(max(1, min(8, int(CONFIG.get("compile_threads", 1)))))
os.environ["TORCHINDUCTOR_QUIESCE_ASYNC_COMPILE_POOL"] = "0"

import importlib.util  # noqa: E402
import secrets  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
import types  # noqa: E402

_T_BEGIN = time.monotonic()   # start-up stages, reported in the ready reply (where a session's open goes)
import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from harness.measure.runner._inputs import (TASK_DISTRIBUTION, TimedSets, fingerprints, inputs_from_spec,  # noqa: E402
                                            make_inputs, sample_key, unchanged_marks)
from harness.measure.runner._inputs import make_inputs_noted  # noqa: E402
from harness.measure.backends import _share  # noqa: E402
from harness.measure.timing import _cpu  # noqa: E402
from harness.measure.backends import load_in_child  # noqa: E402
from harness.measure.timing._clock import perf_counter_ns as _now  # noqa: E402
from harness.measure.timing._clock import time_functions_intact  # noqa: E402
from harness.measure.runner._serve import Handler, serve  # noqa: E402
from harness.measure.runner._torch_wrappers import OwnWrappers  # noqa: E402

if TYPE_CHECKING:
    from harness.measure.runner import _messages as M

BACKEND: str = CONFIG["backend"]
# this child's end of its fd channel to the harness (device-memory fds of shared outputs; see _share)
_FD_CHANNEL: socket.socket | None = (socket.socket(fileno=int(CONFIG["fd_channel"]))
                                     if CONFIG.get("fd_channel") is not None else None)
# the backend's part in this child (harness.measure.backends: device start, facts, ceilings, timing loop)
_BACKEND_SPEC = load_in_child(BACKEND, CONFIG)
DEVICE = _BACKEND_SPEC.device
_T_TORCH = time.monotonic()
torch.set_num_threads(int(CONFIG["threads"]))
_ALLOW_TF32 = bool(CONFIG["allow_tf32"]) and ROLE != "reference"
torch.backends.cuda.matmul.allow_tf32 = _ALLOW_TF32
torch.backends.cudnn.allow_tf32 = _ALLOW_TF32
torch.set_float32_matmul_precision("high" if _ALLOW_TF32 else "highest")
IMPL = _BACKEND_SPEC.child(torch, CONFIG)   # starts the device and binds its timer (CUDA: CudaTimer)
_DEVICE_TOTAL = IMPL.device_total
_CUDA_TIMER: Any = IMPL.timer   # the backend's bound timer under its old name (None on a CPU)
_T_DEVICE = time.monotonic()
_WATCHED = ("torch.nn.Module.__call__", "torch.manual_seed", "torch.set_num_threads", "torch.get_num_threads",
            "torch.set_num_interop_threads", "torch.save", "torch.load", "torch.no_grad")


def _lookup(dotted: str) -> Any:
    obj: Any = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj


_ORIGINAL = {name: _lookup(name) for name in _WATCHED}
# torch's own wrappers of watched functions are not tampering: ``import torch._dynamo`` (every
# torch.compile) wraps torch.manual_seed (see harness.measure.runner._torch_wrappers); built now,
# before any candidate code is imported
_OWN_WRAPPERS = OwnWrappers(torch)
_intact = _OWN_WRAPPERS.intact


def _harness_globals() -> dict[str, Any]:
    """The harness's own timing globals a candidate could reach through ``sys.modules``.

    Replacing ``time.perf_counter_ns`` is caught by ``time_functions_intact``; this snapshot catches
    the subtler patch of the harness's bound copies (``harness.measure.timing._cpu._now``, the CUDA timer's
    bound methods, the timing functions' code objects), taken before any candidate code is imported.
    """
    found: dict[str, Any] = {
        "sys.modules[harness.measure.timing._cpu]": sys.modules.get("harness.measure.timing._cpu"),
        "harness.measure.timing._cpu._now": getattr(_cpu, "_now", None),
        "harness.measure.timing._cpu.time_block.__code__":
            getattr(getattr(_cpu, "time_block", None), "__code__", None),
        "harness.measure.timing._cpu.time_block_sets.__code__":
            getattr(getattr(_cpu, "time_block_sets", None), "__code__", None),
        "harness.measure.timing._cpu.calibrate_inner_loop.__code__":
            getattr(getattr(_cpu, "calibrate_inner_loop", None), "__code__", None),
        "harness.measure.runner._child._now": _now,
    }
    import harness.measure.runner._inputs as inputs_mod

    for fn in ("make_inputs", "make_inputs_noted", "fingerprints", "device_checksum", "tensor_sha256", "pool_of", "window", "windows",
               "unchanged_marks", "sample_key", "_same_bits"):
        found[f"harness.measure.runner._inputs.{fn}.__code__"] = getattr(getattr(inputs_mod, fn, None), "__code__",
                                                                          None)
    for meth in ("take", "spec", "_layout", "_pool_for", "retire", "_per_pool"):
        found[f"TimedSets.{meth}.__code__"] = getattr(getattr(inputs_mod.TimedSets, meth, None), "__code__", None)
        found[f"TimedSets.{meth}"] = getattr(inputs_mod.TimedSets, meth, None)
    found.update(IMPL.timer_globals())   # the backend's timer (CUDA: CudaTimer's bound methods and code)
    return found


_HARNESS_GLOBALS = _harness_globals()
_CANDIDATE_PREFIX = "atb_candidate_"
_CANDIDATE_FILES: set[str] = set()
_AUDIT_EVENTS: set[str] = set()
_AUDIT_GUARD = [False]
_getframe = sys._getframe


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """Record audit events whose immediate Python caller is candidate code (installed before any
    candidate import; a re-entrancy guard keeps the hook's own frame lookup from recursing)."""
    if _AUDIT_GUARD[0] or not _CANDIDATE_FILES or len(_AUDIT_EVENTS) > 256:
        return
    _AUDIT_GUARD[0] = True
    try:
        frame = _getframe(1)
        if frame is not None and frame.f_code.co_filename in _CANDIDATE_FILES:
            _AUDIT_EVENTS.add(event)
    except Exception:  # noqa: BLE001 - an audit hook must never raise into the audited code
        pass
    finally:
        _AUDIT_GUARD[0] = False


sys.addaudithook(_audit)


def _os_threads() -> int:
    """Threads of this process as the OS sees them (a side thread left running shows up here)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


class _OpRecorder(TorchFunctionMode):
    """Records the names of torch functions a call uses (tensor methods and torch.* functions)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.names.add(str(getattr(func, "__name__", repr(func))))
        return func(*args, **(kwargs or {}))


def _eager_if_compiled() -> Any:
    """While the op recorder runs, code compiled by ``torch.compile`` runs eagerly instead.

    Why (issue 25): dynamo traces through an active ``TorchFunctionMode``, guards on it and, on the
    H200, failed the candidate's call ("Guard failed on the same frame it was created", naming this
    recorder). Forced eager, dynamo neither traces nor guards while the recorder is active, and the
    recorder sees every torch function the candidate's Python code calls (what the forbidden-shortcut
    gate reads); the candidate's other calls, timed ones included, run its compiled code. Only when
    dynamo is loaded (a ``torch.compile`` imports it), so other candidates pay nothing."""
    import contextlib

    if "torch._dynamo" not in sys.modules:
        return contextlib.nullcontext()
    return torch.compiler.set_stance("force_eager")


# ----------------------------------------------------------------------- finished outputs (issue 25)
# An output must be a plain, finished tensor when forward returns: a tensor subclass (its
# __torch_dispatch__/__torch_function__ run when the harness first touches it, after the timer
# stopped), a lazy object, a tensor whose values are a pending view transform (neg/conj bits, zero
# tensors, functionalization), or a mode left active to intercept the harness's reads all defer work
# past the timed region. Refused in the candidate and start roles; recorded in every role.
_TENSOR = torch.Tensor
_PARAMETER = torch.nn.Parameter
_DEFERRED_KEYS = tuple(k for k in (getattr(torch._C.DispatchKey, n, None) for n in (
    "Python", "PythonTLSSnapshot", "Functionalize", "Conjugate", "Negative", "ZeroTensor", "Lazy", "Meta",
    "FuncTorchBatched", "FuncTorchGradWrapper", "BatchedNestedTensor")) if k is not None)
_UNFINISHED: list[str] = []              # every refusal this child made, for the integrity reply
# device types whose tensors are materialised (the host's and the backend's own; "cuda" on every backend, as
# before backends were plug-ins, so a CPU session's check is unchanged)
_FINISHED_DEVICES = tuple(dict.fromkeys(("cpu", "cuda", DEVICE)))
OUTPUTS_FINISHED = "outputs.finished"    # its integrity check's name (read by the timer-tampering gate)


def _type_name(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _unfinished(out: Any, deep: bool, where: str = "the output") -> str | None:
    """Why ``out`` is not a finished output, or None. Reads only types and dispatch keys: nothing
    here calls a method of the object that candidate code could have defined."""
    kind = type(out)
    if kind is _TENSOR or kind is _PARAMETER:
        if not deep:
            return None
        try:
            keys = torch._C._dispatch_keys(out)
            pending = [str(k).split(".")[-1] for k in _DEFERRED_KEYS if keys.has(k)]
            device, nested = out.device.type, bool(out.is_nested)
        except Exception as exc:  # noqa: BLE001 - a tensor the harness cannot inspect is not a plain one
            return f"{where} could not be inspected ({type(exc).__name__}: {str(exc)[:120]})"
        if pending:
            return (f"{where} is a torch.Tensor whose values are still pending ({', '.join(pending)} "
                    "dispatch keys: a lazy view, zero or wrapper tensor computed only when read)")
        if device not in _FINISHED_DEVICES or nested:
            return f"{where} is a {'nested' if nested else device} tensor, not a materialised one"
        return None
    if isinstance(out, (tuple, list)):
        base: type = tuple if isinstance(out, tuple) else list
        if any(getattr(kind, m, None) is not getattr(base, m) for m in ("__iter__", "__getitem__", "__len__")):
            return f"{where} is of type {_type_name(kind)}, a {base.__name__} whose items are produced by its own code"
        for i, item in enumerate(out):   # the base type's own iteration (checked just above)
            why = _unfinished(item, deep, f"{where}[{i}]")
            if why:
                return why
        return None
    if out is None or kind in (int, float, bool):
        return None
    if isinstance(out, _TENSOR):
        return (f"{where} is of type {_type_name(kind)}, a torch.Tensor subclass: its own code runs when the "
                "harness reads it, so its work can happen after the timer stopped")
    return f"{where} is of type {_type_name(kind)}, not a tensor: a lazy object is not a finished output"


def _modes_left() -> str | None:
    """A dispatch mode, or a function mode other than torch's own device context, still active after
    forward returned: the candidate's code would run inside the harness's reads of the output."""
    try:
        if torch._C._len_torch_dispatch_stack() > 0:
            return "a TorchDispatchMode was left active after forward returned"
        from torch.utils._device import DeviceContext

        for i in range(torch._C._len_torch_function_stack()):
            mode = torch._C._get_function_stack_at(i)
            if type(mode) is not DeviceContext:
                return f"a TorchFunctionMode ({_type_name(type(mode))}) was left active after forward returned"
    except Exception as exc:  # noqa: BLE001 - an uninspectable mode stack is not a clean one
        return f"the torch mode stacks could not be inspected ({type(exc).__name__})"
    return None


def _note(out: Any) -> Any:
    """The timed loop's check of each call's output (only its type: a few tens of ns, in every arm
    alike); anything not plain is recorded, and refused after the block, before anything reads it."""
    if type(out) is not _TENSOR:
        why = _unfinished(out, False)
        if why and len(_UNFINISHED) < 16:
            _UNFINISHED.append(why)
    return out


class UnfinishedOutput(RuntimeError):
    """The model's output was not a plain, finished tensor (see :func:`_unfinished`)."""


def _refuse(why: str | None) -> None:
    """Raise for an unfinished output in the candidate and start roles (the reference only records)."""
    if why is None:
        return
    if why not in _UNFINISHED and len(_UNFINISHED) < 16:
        _UNFINISHED.append(why)
    if ROLE != "reference":
        raise UnfinishedOutput(f"refused: {why}. An output must be a plain torch.Tensor computed before "
                               "forward returns")


def _check_finished(out: Any) -> None:
    """The full check, where no timer runs: the output's type and dispatch keys, and the modes."""
    _refuse(_unfinished(out, True) or _modes_left())


def _check_timed() -> None:
    """After a timed block: refuse what :func:`_note` recorded, or a mode left active."""
    _refuse(_UNFINISHED[0] if _UNFINISHED else _modes_left())


class _State:
    spread_factor: float = 0.0             # protocol correctness.reference_spread_factor (reference role)
    task: Any = None
    model: Any = None
    timing_seed: int | None = None
    sets: TimedSets | None = None          # this seed's input sets (no two timed calls see one)
    cur: list[list[Any]] = []              # the sets of the repetition being timed
    last_q: int = 0                        # the repetition index of the sets last taken
    static: list[list[Any]] = []           # CUDA-graph static input sets
    fp_acc: list[Any] = []                 # CUDA events path: (repetition, input written?) per timed call
    fp_keys: list[Any] = []                # CUDA events path: each timed set's value key (sample_key)
    timed_calls: int = 0
    timed_keys: set[tuple[Any, ...]] = set()   # identities of the sets timed calls received
    set_bytes: int = 0
    inner: int = 1
    graphs: Any = None
    method: str = ""
    shared: dict[str, list[Any]] = {}      # outputs held for the reference child to read (one way)
    tolerances: dict[str, dict[str, float]] = {}
    large_bytes: int = 0                   # protocol timing.cuda.free_cache_above_bytes (from the config)
    graph_sets_max_bytes: int = 0          # protocol timing.cuda.graph_static_sets_max_bytes (from the config)
    device_total: int = 0                  # bytes of device memory (CUDA), read at start


S = _State()
S.device_total = _DEVICE_TOTAL
# protocol values this child uses come from its config (harness.measure.session.worker_config), never a default
S.large_bytes = int(CONFIG["cuda"]["free_cache_above_bytes"])
S.graph_sets_max_bytes = int(CONFIG["cuda"]["graph_static_sets_max_bytes"])


def _sync() -> None:
    IMPL.sync()


def _import_file(path: str, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _tensors(out: Any) -> list[Any]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _tensors(o)]
    return []


def _meta(t: Any) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", ""),
            "storage_ptr": int(t.untyped_storage().data_ptr()), "contiguous": bool(t.is_contiguous())}


def _as_tensors(out: Any) -> list[Any]:
    """The output as a flat list of tensors (a number or None becomes a 0-d tensor, as before)."""
    if isinstance(out, torch.Tensor):
        return [out.detach()]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _as_tensors(o)]
    if out is None or isinstance(out, (int, float, bool)):
        return [torch.tensor(float("nan") if out is None else out, device=DEVICE)]
    raise TypeError(f"the model returned a {type(out).__name__}, not a tensor or tuple of tensors")


def _forward(inputs: list[Any]) -> Any:
    with torch.no_grad():
        return S.model(*inputs)


def _free_device(nbytes: int) -> None:
    """Give cached device memory back after a heavy step, so the other arms' processes can use it
    (every arm shares one GPU; each process's caching allocator would otherwise keep its peak).
    Only when this process holds more than a quarter of the device: three arms' caches then fit
    beside each other, and a needless release costs a device synchronisation and a re-allocation
    of gigabytes in the next block."""
    IMPL.free_device(nbytes, S.large_bytes)   # CUDA: empty_cache past large_bytes when over a quarter held


def _nbytes(items: list[Any]) -> int:
    return int(sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor)))


def _restore_watched() -> list[str]:
    """Reference role: put back watched torch functions that torch itself wrapped while harness code
    ran (importing ``torch._dynamo``, which lazily loaded meta kernels or decompositions can do,
    wraps ``torch.manual_seed``). No candidate code ever runs here, so any change is torch's own; the
    names restored are reported, and the integrity check still sees anything changed later."""
    if ROLE != "reference":
        return []
    restored = []
    for name, fn in _ORIGINAL.items():
        if fn is not None and _lookup(name) is not fn:
            owner: Any = torch
            parts = name.split(".")[1:]
            for part in parts[:-1]:
                owner = getattr(owner, part)
            setattr(owner, parts[-1], fn)
            restored.append(name)
    return restored


def _end_compile_pool() -> None:
    """Shut Inductor's compile workers down (see harness.measure.runner._compile_pool); a no-op when
    nothing compiled."""
    if "torch._inductor.async_compile" in sys.modules:
        from harness.measure.runner._compile_pool import end_compile_pools

        end_compile_pools()


def _cmd_load(cmd: M.Load) -> M.LoadReply:
    if ROLE == "reference" and cmd.candidate_path:
        raise PermissionError("the reference process never imports candidate code")
    task = _import_file(cmd.task_path, cmd.task_module)
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(task, name):
            raise AttributeError(f"task file {cmd.task_path} defines no {name}")
    cls = task.Model
    if cmd.candidate_path:
        _CANDIDATE_FILES.add(os.path.abspath(cmd.candidate_path))
        try:
            cand = _import_file(cmd.candidate_path, str(cmd.candidate_module))
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure while importing the candidate
            raise ImportError(f"importing the candidate failed: {_brief(exc)}") from exc
        if not hasattr(cand, "ModelNew"):
            raise AttributeError("the candidate defines no class ModelNew")
        cls = cand.ModelNew
    if cmd.tolerances:
        S.tolerances = {str(k): {kk: float(vv) for kk, vv in v.items()} for k, v in cmd.tolerances.items()}
    S.spread_factor = float(cmd.reference_spread_factor)
    torch.manual_seed(int(cmd.init_seed))
    init = list(task.get_init_inputs())
    reply: dict[str, Any] = {}
    torch.manual_seed(int(cmd.init_seed))
    model = cls(*init)
    if isinstance(model, torch.nn.Module):
        model = model.to(DEVICE)
        if ROLE == "reference":
            reply["estimate_param_bytes"] = int(sum(p.numel() * p.element_size() for p in model.parameters()))
    S.task, S.model, S.timing_seed, S.sets, S.graphs = task, model, None, None, None
    try:
        inputs = make_inputs(torch, task.get_inputs, int(cmd.init_seed), TASK_DISTRIBUTION,
                             float(CONFIG["large"]), DEVICE)
        in_bytes = _nbytes(inputs)
        floating = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
        reply.update({"input_bytes": in_bytes,
                      "input_dtype": str(floating[0].dtype).replace("torch.", "") if floating else "float32"})
        out = _forward(inputs)  # one untimed call: lazy thread pools and allocators start before any fact
        _sync()
        _end_compile_pool()   # before any fact: no compile worker outlives the first call
        _check_finished(out)
    except Exception as exc:  # noqa: BLE001 - an allocation the device cannot hold is a verdict, not a crash
        mem = IMPL.mem_info() if ROLE == "reference" and _kind_of(exc) == "memory" else None
        if mem is None:   # only a device with its own memory (CUDA) calls the reference unfit
            raise
        free, total = mem
        return M.LoadReply(**reply, ok=False, failure_kind="memory",
                           error=(f"unfit: the reference's own inputs and output do not fit on the device "
                                  f"({free / 2**30:.1f} of {total / 2**30:.1f} GiB free): {str(exc)[:300]}"))
    out_bytes = _nbytes(_tensors(out))
    if ROLE == "reference":
        reply["output_bytes"] = out_bytes
    del inputs, out
    _free_device(in_bytes + out_bytes)
    reply.update(IMPL.load_facts())   # CUDA: peak_device_bytes, device_free_bytes, device_total_bytes
    reply["restored_by_harness"] = _restore_watched()
    return M.LoadReply(**reply)


def _run_call(inputs: list[Any], record_ops: bool,
              rebuild: Any = None) -> tuple[dict[str, Any], Any]:
    """One untimed call with the facts every gate reads; (facts, output or None on failure).

    Input mutation: on a CPU, SHA-256 of every input before and after; on a device, the inputs after
    the call against a fresh rebuild from their seed (``rebuild``; None skips the check, as the
    reference does on a device: no gate reads the reference's inputs)."""
    tensors_in = [t for t in inputs if isinstance(t, torch.Tensor)]
    on_device = IMPL.on_device
    before = fingerprints(torch, inputs) if not on_device else []
    facts: dict[str, Any] = {"threads_before": _os_threads()}
    recorder = _OpRecorder() if record_ops else None
    t0 = _now()
    try:
        if recorder is not None:
            with torch.no_grad(), _eager_if_compiled(), recorder:
                out = S.model(*inputs)
        else:
            out = _forward(inputs)
        _sync()
    except MemoryError as exc:
        return {**facts, "ok": False, "error": f"MemoryError: {exc}", "failure_kind": "memory"}, None
    except Exception as exc:  # noqa: BLE001 - candidate exceptions are facts, not harness errors
        return {**facts, "ok": False, "error": _brief(exc), "failure_kind": _kind_of(exc)}, None
    try:
        _check_finished(out)   # before any harness code touches the output
    except UnfinishedOutput as exc:
        return {**facts, "ok": False, "error": str(exc), "failure_kind": "exception"}, None
    facts["wall_ns"] = int(_now() - t0)
    outs = _tensors(out)
    in_ptrs = [int(t.untyped_storage().data_ptr()) for t in tensors_in]
    facts["outputs"] = [_meta(t) for t in outs]
    facts["aliases_input"] = sorted({i for i, p in enumerate(in_ptrs) for o in outs
                                     if int(o.untyped_storage().data_ptr()) == p})
    facts["equals_input"] = sorted({i for i, t in enumerate(tensors_in) for o in outs
                                    if o.shape == t.shape and o.dtype == t.dtype and o.device == t.device
                                    and torch.equal(o, t)})
    if not on_device:
        facts["input_hashes_before"], facts["input_hashes_after"] = before, fingerprints(torch, inputs)
    elif rebuild is not None:
        facts["input_hashes_before"], facts["input_hashes_after"] = unchanged_marks(torch, inputs, rebuild)
    facts["threads_after"] = _os_threads()
    facts["ops_called"] = sorted(recorder.names) if recorder is not None else []
    facts["tf32_enabled_after"] = bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)
    facts["ok"] = True
    return facts, out


def _share_out(tag: str, out: Any, path: str) -> dict[str, Any]:
    """Keep ``out`` for the reference child to read (one way) and return its descriptor."""
    tensors = _as_tensors(out)
    old = S.shared.pop(tag, None)
    if old:
        _share.release(torch, old)
    desc, keep = _share.export_output(torch, tensors, path, _FD_CHANNEL, tag)
    S.shared[tag] = keep
    return desc


def _cmd_call(cmd: M.Call) -> M.CallReply:
    """An untimed call on (seed, distribution). The candidate and start roles share the output with
    the reference child (``share``: a tag); the reference role never writes or shares an output."""
    seed, dist = int(cmd.seed), str(cmd.distribution)
    how = cmd.class_inputs   # protocol correctness.class_inputs
    large = float(CONFIG["large"])
    steps = _Steps()
    inputs, made = make_inputs_noted(torch, S.task.get_inputs, seed, dist, large, DEVICE, how)
    in_bytes = _nbytes(inputs)
    steps.mark("inputs")
    facts, out = _run_call(inputs, bool(cmd.record_ops),
                           lambda: make_inputs(torch, S.task.get_inputs, seed, dist, large, DEVICE, how))
    facts.update({"seed": seed, "distribution": dist, "inputs": made})
    del inputs
    steps.mark("run")
    if out is not None and ROLE != "reference":
        path = str(cmd.save_path or os.path.join(os.getcwd(), f"out-{seed}.pt"))
        facts["share"] = _share_out(cmd.share, out, path)
        facts["output_path"] = path if "path" in facts["share"] else ""
    del out
    steps.mark("share")
    _free_device(in_bytes)
    steps.mark("free")
    return M.CallReply(**facts, steps_s=steps.s)


class _Steps:
    """Seconds spent in each step of one command, sent back as ``steps_s`` so that a verdict's
    ``op_s`` says where a check's or a call's time went (inputs, the call, the comparison, ...). On
    CUDA each boundary synchronises, so device work is charged to the step that queued it; these
    commands are untimed, and one synchronisation costs microseconds."""

    def __init__(self) -> None:
        self.s: dict[str, float] = {}
        self._t = _now()

    def mark(self, name: str) -> None:
        IMPL.synchronize()
        t = _now()
        self.s[name] = round(self.s.get(name, 0.0) + (t - self._t) / 1e9, 6)
        self._t = t


def _uninformative(ref_out: list[Any]) -> bool:
    return any(t.is_floating_point() and bool(torch.isnan(t).any()) for t in ref_out)


def _judge_with_reference_spread(ref: list[Any], cand: Any, rebuild: Any, first: dict[str, Any]) -> dict[str, Any]:
    """A comparison that failed on tolerance, judged again against the reference's own run-to-run
    spread: the reference runs a second time on the same input; if its two runs differ, the candidate
    may differ by ``reference_spread_factor`` times that more (see ``harness.measure.correctness.
    reference_spread``). A reference that repeats itself exactly leaves the failure as it was."""
    from harness.measure.correctness import compare_tensors, reference_spread

    inputs = rebuild()
    in_bytes = _nbytes(inputs)
    _, again = _run_call(inputs, False)
    del inputs
    if again is None:
        return {**first, "reason": f"{first['reason']}; the reference failed on a second run"}
    ref2 = _as_tensors(again)
    del again
    spread = reference_spread(tuple(ref), tuple(ref2))
    out_bytes = _nbytes(ref2)
    del ref2
    _free_device(in_bytes + out_bytes)
    if spread is None:
        return {**first, "reason": f"{first['reason']}; the reference's two runs differ beyond any tolerance"}
    if spread == (0.0, 0.0):
        return {**first, "reason": f"{first['reason']}; the reference repeats itself exactly on this input"}
    k = S.spread_factor
    check = compare_tensors(tuple(ref), cand, S.tolerances, extra_abs=k * spread[0], extra_rel_l2=k * spread[1])
    note = (f"the reference's own two runs differ by up to {spread[0]:.3g} (relative L2 {spread[1]:.3g}); "
            f"{k:g}x that is allowed")
    return {"passed": check.passed, "reason": f"{check.reason}; {note}" if check.reason else note,
            "max_abs_err": check.max_abs_err, "rel_l2": check.rel_l2, "reference_spread": list(spread)}


def _cmd_check(cmd: M.Check) -> M.CheckReply:
    """Reference role only: compute the reference's output for the candidate's input (a seed and
    distribution, or a timed set's spec), read the candidate's shared output and compare them here,
    on the device. Replies with the reference call's facts and the comparison's summary only."""
    if ROLE != "reference":
        raise PermissionError("only the reference process compares outputs")
    from harness.measure.correctness import compare_tensors

    large = float(CONFIG["large"])
    if cmd.spec is not None:
        spec = dict(cmd.spec)
        seed, dist = int(cmd.seed), TASK_DISTRIBUTION

        def rebuild() -> list[Any]:
            return inputs_from_spec(torch, S.task.get_inputs, spec, large, DEVICE)
    else:
        seed, dist = int(cmd.seed), str(cmd.distribution)
        how = str(cmd.class_inputs)   # protocol correctness.class_inputs

        def rebuild() -> list[Any]:
            return make_inputs(torch, S.task.get_inputs, seed, dist, large, DEVICE, how)
    steps = _Steps()
    inputs = rebuild()
    in_bytes = _nbytes(inputs)
    steps.mark("inputs")
    facts, out = _run_call(inputs, False)
    facts.update({"seed": seed, "distribution": dist})
    del inputs
    steps.mark("run")
    if out is None and cmd.skip_on_reference_failure:
        # an input class the reference itself cannot take: the harness's fact (the parent skips the
        # class), never the candidate's; its output is taken off the channel unread
        _share.discard_output(dict(cmd.candidate), _FD_CHANNEL)
        _free_device(in_bytes)
        return M.CheckReply(call=M.CallOutcome(**facts),
                            comparison=M.ComparisonOutcome(passed=False, reference_failed=True,
                                                           reason=str(facts.get("error", ""))[-600:]),
                            restored_by_harness=_restore_watched(), steps_s=steps.s)
    if out is None:
        raise RuntimeError(f"the reference failed on seed {seed} ({dist}): {facts.get('error', '')}")
    ref = _as_tensors(out)
    del out
    cmp: dict[str, Any]
    uninformative = _uninformative(ref)
    steps.mark("nan_scan")
    if uninformative:
        cmp = {"passed": True, "reason": "uninformative: the reference output has NaN on this input"}
        _share.discard_output(dict(cmd.candidate), _FD_CHANNEL)
    else:
        try:
            cand = _share.open_output(torch, dict(cmd.candidate), _FD_CHANNEL)
        except Exception as exc:  # noqa: BLE001 - an unreadable output is a failed comparison
            cand = None
            _share.close_opened()
            cmp = {"passed": False, "reason": f"the candidate's output could not be read: {type(exc).__name__}: "
                                              f"{str(exc)[:300]}",
                   "transport_error": _share.device_transport(dict(cmd.candidate))}
        steps.mark("open")
        if cand is not None:
            check = compare_tensors(tuple(ref), cand, S.tolerances)
            cmp = {"passed": check.passed, "reason": check.reason, "max_abs_err": check.max_abs_err,
                   "rel_l2": check.rel_l2}
            steps.mark("compare")
            if not check.passed and S.spread_factor > 0 and check.max_abs_err is not None:
                cmp = _judge_with_reference_spread(ref, cand, rebuild, cmp)
                steps.mark("spread")
            del cand
            _share.close_opened()
    out_bytes = _nbytes(ref)
    del ref
    IMPL.after_compare()   # CUDA: synchronise and collect the IPC handles just closed
    _free_device(in_bytes + out_bytes)
    steps.mark("free")
    return M.CheckReply(call=M.CallOutcome(**facts), comparison=M.ComparisonOutcome(**cmp),
                        restored_by_harness=_restore_watched(), steps_s=steps.s)


def _cmd_reshare(cmd: M.Reshare) -> M.ReshareReply:
    """Share a held output again as a file: the fallback when the reference child cannot map a CUDA
    IPC handle (e.g. separate PID namespaces under a confinement that forbids it)."""
    kept = S.shared.get(cmd.tag)
    if kept is None:
        raise KeyError(f"no shared output is held under {cmd.tag!r}")
    tensors = _share.kept_tensors(torch, kept)
    path = cmd.path
    torch.save(tuple(t.detach().to("cpu", copy=True) for t in tensors), path)
    return M.ReshareReply(share={"path": path, "n": len(tensors), "fallback": "file"})


def _cmd_release(cmd: M.Release) -> M.ReleaseReply:
    """Drop outputs held for the reference (all of them, or the tags named)."""
    tags = cmd.tags
    held = 0
    for tag in list(S.shared) if tags is None else [str(t) for t in tags]:
        kept = S.shared.pop(tag, [])
        held += _nbytes(kept)
        _share.release(torch, kept)
    IMPL.ipc_collect()
    _free_device(held)
    return M.ReleaseReply(released=held)


# ------------------------------------------------------------------------------------ timing
def _track_out(sets: list[list[Any]], q: int) -> None:
    """CUDA events path, after repetition ``q``'s call (outside the timed region): was its fresh set
    written? The set against a rebuild from its spec, bitwise on the device (see ``unchanged_marks``)."""
    assert S.sets is not None
    spec = S.sets.spec(q, 0)
    _, after = unchanged_marks(torch, sets[0], lambda: inputs_from_spec(
        torch, S.task.get_inputs, spec, float(CONFIG["large"]), DEVICE))
    S.fp_acc.append((q, any(a.endswith("-changed") for a in after)))


def _note_sets(sets: list[list[Any]]) -> None:
    """Record which sets timed calls received, from the objects actually handed to the model: a
    window is named by its pool and the addresses of its views (distinct windows of one pool never
    share them), so sets that repeat, however they were made, count once."""
    pool = S.sets._pool_id if S.sets is not None else -1
    S.timed_keys.update((pool,) + tuple(t.data_ptr() for t in st if isinstance(t, torch.Tensor)) for st in sets)


def _next_sets() -> list[list[Any]]:
    assert S.sets is not None
    S.cur = []
    S.last_q, got = S.sets.take()
    return got


def _cmd_prepare(cmd: M.Prepare) -> M.PrepareReply:
    """Start one paired seed: calibrate on a set of its own (never timed), and lay out the timed
    sets (see :class:`harness.measure.runner._inputs.TimedSets`)."""
    seed = int(cmd.seed)
    _end_compile_pool()   # before the timed repetitions (a no-op unless something compiled since load)
    S.timing_seed, S.graphs, S.static, S.fp_acc, S.timed_calls, S.fp_keys = seed, None, [], [], 0, []
    S.timed_keys = set()
    large = float(CONFIG["large"])
    # the backend's calibration and timed-set layout (private_inputs: exact sets, never a window of a pool)
    return M.PrepareReply(**IMPL.prepare(LOOP, seed, large, bool(cmd.private_inputs)))


def _cmd_capture(cmd: M.Capture) -> M.CaptureReply:
    """Time this seed by CUDA-graph replay (``graph``: true) or by events (false).

    The parent decides for every arm of a verdict together, so candidate and baseline are always timed
    by the same method: a ratio of a graph-replayed time to an event-timed one would mix device time
    with launch overhead. A graph holds up to ``graph_replays`` calls, each on its own static set,
    refilled before every replay: as many as those sets fit ``graph_static_sets_max_bytes`` (protocol
    1.7.0: a launch-bound call on 128 MB inputs fits 8, not 32, and was timed by events, which read its
    host launch), and it is refused (events instead) below ``graph_replays_min``.
    """
    S.graphs, S.static = None, []
    S.method = "cuda-events+l2flush"
    seed, large = int(S.timing_seed or 0), float(CONFIG["large"])
    # CUDA: capture graphs when asked, else fresh sets for events (see harness.measure.backends.cuda)
    probe_error = IMPL.capture(LOOP, bool(cmd.graph), seed, large)
    S.fp_acc, S.timed_keys, S.timed_calls, S.fp_keys = [], set(), 0, []
    # probe_error: why a capture was not taken (the harness's fact: this seed is timed by events)
    return M.CaptureReply(captured=S.graphs is not None, method=S.method, probe_error=probe_error)


def _refill_static(rep: int) -> None:
    sets = _next_sets()
    with torch.no_grad():
        for dst, src in zip(S.static, sets):
            for d, x in zip(dst, src):
                if isinstance(d, torch.Tensor):
                    d.copy_(x)
    S.timed_calls += len(sets)
    _note_sets(sets)
    S.cur = sets   # views into the pool: what the static sets must still equal after the replay


def _cmd_block(cmd: M.Block) -> M.BlockReply:
    t_cmd = _now()   # the whole handling, by the bound clock: the parent's own clock is compared with it
    reps, offset = int(cmd.reps), int(cmd.rep_offset)
    capture_global = {int(r) for r in cmd.capture}
    capture = {r - offset for r in capture_global if offset <= r < offset + reps}
    assert S.sets is not None
    rep_q: dict[int, int] = {}
    cpu0, thr0 = _clock.process_time_ns(), _clock.thread_time_ns()

    bt = IMPL.block(LOOP, reps, capture, rep_q)   # the backend's timing loop (CPU, CUDA events or graphs)
    if S.graphs is None:
        S.cur = []
    _check_timed()   # an unfinished output is refused before any harness code reads one
    _check_finished(list(bt.captured.values()))
    timed_outputs = []
    for r, out in sorted(bt.captured.items()):
        g = offset + r
        spec = S.sets.spec(rep_q[r], S.sets.k - 1)   # the captured output is the repetition's last call
        tag = f"timed-{S.timing_seed}-{g}"
        share = _share_out(tag, out, os.path.join(cmd.save_dir or os.getcwd(), f"{ROLE}-{tag}.pt"))
        timed_outputs.append({"rep": g, "input_seed": _spec_seed(spec), "spec": spec, "share": share,
                              "output_path": str(share.get("path", "")), "tag": tag})
    bt.captured.clear()
    other_cpu = (_clock.process_time_ns() - cpu0) - (_clock.thread_time_ns() - thr0)
    IMPL.after_block(LOOP)   # CUDA events: this arm's cache goes back between blocks
    return M.BlockReply(other_threads_cpu_ns=float(max(0, other_cpu)), times_ns=bt.times_ns, wall_ns=bt.wall_ns,
                        timed_total_ns=bt.timed_total_ns, method=bt.method, timed_outputs=timed_outputs,
                        harness_ns=bt.harness_ns, handler_ns=float(_now() - t_cmd))


def _spec_seed(spec: dict[str, Any]) -> int:
    """One integer naming a timed set (the stale gate checks they differ)."""
    if spec["kind"] == "fresh":
        return int(spec["seed"])
    import hashlib

    h = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).digest()
    return int.from_bytes(h[:8], "big") & ((1 << 62) - 1)


def _cmd_reuse_probe(cmd: M.ReuseProbe) -> M.ReuseProbeReply:
    """Call the model twice on one input object, then rewrite that object's contents in place (same
    address, autograd version unchanged) and call it again; the reference checks this last output.

    Why: a model that memoises its answer by input address or version returns its stored answer for
    contents that have changed, and the comparison fails.
    """
    large = float(CONFIG["large"])
    inputs = make_inputs(torch, S.task.get_inputs, int(cmd.seed_a), TASK_DISTRIBUTION, large, DEVICE)
    _forward(inputs)
    _forward(inputs)
    fresh = make_inputs(torch, S.task.get_inputs, int(cmd.seed_b), TASK_DISTRIBUTION, large, DEVICE)
    with torch.no_grad():
        for dst, src in zip(inputs, fresh):
            if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and dst.shape == src.shape:
                dst.data.copy_(src)
    del fresh
    out = _forward(inputs)
    _sync()
    _check_finished(out)
    in_bytes = _nbytes(inputs)
    del inputs
    path = str(cmd.save_path or os.path.join(os.getcwd(), "reuse.pt"))
    share = _share_out("reuse", out, path)
    del out
    _free_device(in_bytes)
    return M.ReuseProbeReply(output_path=path if "path" in share else "", share=share)


def _cmd_finish_seed(cmd: M.FinishSeed) -> M.FinishSeedReply:
    """End a paired seed: the inputs' fingerprints before and after the timed calls, how many
    distinct input sets the timed loop used, and every buffer freed."""
    sets = S.sets
    if sets is not None and sets.mode == "window":        # CPU: the pools the windows were cut from
        sets.retire()
        before, after = sets.fp_before, sets.fp_after
    elif sets is not None and sets.mode == "graph":       # the static sets against their last refill
        before = fingerprints(torch, [t for s in S.cur for t in s])
        after = fingerprints(torch, [t for s in S.static for t in s])
    else:                                                 # CUDA events: each call's fresh set
        # one entry per timed call, in order: (repetition index, written?); a fresh set per
        # repetition index, so distinct indices are distinct input values
        changed = [c for _, c in S.fp_acc]
        if S.fp_keys:
            S.timed_keys = {tuple(row) for row in torch.stack(S.fp_keys).cpu().tolist()}   # distinct values
        before = [f"set{i}" for i in range(len(changed))]
        after = [f"set{i}" + ("-changed" if c else "") for i, c in enumerate(changed)]
    reply = M.FinishSeedReply(input_hashes_before=before, input_hashes_after=after, threads_after=_os_threads(),
                              distinct_input_sets=len(S.timed_keys), timed_calls=int(S.timed_calls),
                              input_refill=sets.mode if sets is not None else "")
    held = _nbytes([t for s in S.static for t in s])
    S.sets, S.graphs, S.static, S.cur, S.fp_acc, S.timed_keys = None, None, [], [], [], set()
    S.fp_keys = []
    _free_device(held + 2 * S.set_bytes)
    return reply


def _cmd_integrity(cmd: M.Integrity) -> M.IntegrityReply:
    import harness.measure.runner._inputs as inputs_mod

    checks = {name: _intact(_lookup(name), fn) for name, fn in _ORIGINAL.items()}
    checks["harness.measure.runner._inputs.make_inputs"] = inputs_mod.make_inputs is make_inputs
    checks["harness.measure.runner._inputs.fingerprints"] = inputs_mod.fingerprints is fingerprints
    checks.update(time_functions_intact())
    now = _harness_globals()
    checks.update({name: now.get(name) is orig for name, orig in _HARNESS_GLOBALS.items()})
    checks.update(IMPL.timer_intact(_intact))
    checks["torch_threads_pinned"] = torch.get_num_threads() == int(CONFIG["threads"])
    # every output this child saw was a plain, finished tensor and no mode was left active (issue 25;
    # the timer-tampering gate words a False here as a deferred output)
    if ROLE != "reference":
        checks[OUTPUTS_FINISHED] = not _UNFINISHED and _modes_left() is None
    return M.IntegrityReply(checks=checks, audit_events=sorted(_AUDIT_EVENTS),
                            candidate_modules=sorted(m for m in sys.modules if m.startswith(_CANDIDATE_PREFIX)),
                            pid=os.getpid())


def _cmd_fingerprint(cmd: M.Fingerprint) -> M.FingerprintReply:
    from harness.measure.device_facts import local_fingerprint_facts

    return M.FingerprintReply(facts=local_fingerprint_facts(torch, BACKEND, int(CONFIG["threads"]), smi=cmd.smi))


def _cmd_ceilings(cmd: M.Ceilings) -> M.CeilingsReply:
    from harness.measure.device_facts import measure_ceilings_here

    return M.CeilingsReply(**measure_ceilings_here(torch, BACKEND, CONFIG["ceilings"]))


def _kind_of(exc: BaseException) -> str:
    """'memory' for allocation failures (torch raises RuntimeError/OutOfMemoryError, not MemoryError)."""
    text = str(exc).lower()
    if isinstance(exc, MemoryError) or "out of memory" in text or "can't allocate memory" in text \
            or "failed to allocate" in text:
        return "memory"
    return "exception"


def _brief(exc: BaseException) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    text = "".join(tb[-3:])
    return text[-2000:]


# what a backend's timing loop may use of this child (harness.measure.backends._base.ChildBackend): its state
# and the helpers every backend's loop shares, bound once, after they are all defined
LOOP = types.SimpleNamespace(
    S=S, torch=torch, config=CONFIG, device=DEVICE, cpu_timing=_cpu, now=_now, secrets=secrets,
    make_inputs=make_inputs, TASK_DISTRIBUTION=TASK_DISTRIBUTION, TimedSets=TimedSets, fingerprints=fingerprints,
    sample_key=sample_key, nbytes=_nbytes, note=_note, forward=_forward, check_timed=_check_timed,
    check_finished=_check_finished, next_sets=_next_sets, note_sets=_note_sets, track_out=_track_out,
    refill_static=_refill_static, free_device=_free_device)

_HANDLERS: dict[str, Handler] = {"load": _cmd_load, "call": _cmd_call, "prepare": _cmd_prepare, "block": _cmd_block,
             "finish_seed": _cmd_finish_seed, "capture": _cmd_capture, "check": _cmd_check,
             "release": _cmd_release, "reshare": _cmd_reshare,
             "reuse_probe": _cmd_reuse_probe, "integrity": _cmd_integrity, "fingerprint": _cmd_fingerprint,
             "ceilings": _cmd_ceilings}


def _reply(obj: dict[str, Any]) -> None:
    data = (json.dumps(obj, allow_nan=True) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(REPLY_FD, view)
        view = view[n:]


def _describe(exc: BaseException) -> tuple[str, str]:
    """(error text, failure kind) for a handler's exception."""
    if isinstance(exc, UnfinishedOutput):   # the refusal says everything; no harness traceback
        return str(exc), "exception"
    if isinstance(exc, ImportError):
        return _brief(exc), "import_error"
    return _brief(exc), _kind_of(exc)


def main() -> None:
    _reply({"ok": True, "op": "ready", "pid": os.getpid(), "torch_version": torch.__version__,
            "threads": torch.get_num_threads(), "device": DEVICE,
            "startup_s": {"import_torch": round(_T_TORCH - _T_BEGIN, 3), "device_init": round(_T_DEVICE - _T_TORCH, 3),
                          "to_ready": round(time.monotonic() - _T_BEGIN, 3)}})
    # the commands and replies (pydantic): imported after the ready line, off the start-up path; the
    # handlers above name the reply models through this module-level ``M``
    global M
    from harness.measure.runner import _messages as M

    serve(_HANDLERS, _reply, _describe, commands=M.TORCH_COMMANDS)


if __name__ == "__main__":
    main()
