"""The measuring child process: ``python -m harness.runner._child ROLE REPLY_FD CONFIG_JSON``.

It reads one JSON command per line on stdin and writes one JSON reply per line to REPLY_FD. Order
of events, which is the point of this module:

1. the memory limit (RLIMIT_AS) is set and the harness's clock is bound (``harness.timing._clock``);
2. torch is imported, threads are pinned and TF32 is set from the configuration, and the CUDA
   timer (events, synchronise) is bound;
3. only then may a ``load`` command import task code and, in the candidate and start roles,
   candidate code. The reference role refuses candidate code outright.

Everything reported here is a fact observed by this harness code; the parent turns replies into
:mod:`harness.evidence` records.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from typing import Any

from harness.timing import _clock  # noqa: F401 - binds the clock before anything else runs

ROLE, REPLY_FD, CONFIG = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
if CONFIG.get("memory_bytes", 0) > 0:
    resource.setrlimit(resource.RLIMIT_AS, (CONFIG["memory_bytes"], CONFIG["memory_bytes"]))
os.dup2(2, 1)  # anything task or candidate code prints goes to the log, never to a protocol pipe

import importlib.util  # noqa: E402

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from harness.runner._inputs import TASK_DISTRIBUTION, buffer_seed, make_inputs, tensor_sha256  # noqa: E402
from harness.timing import _cpu  # noqa: E402
from harness.timing._clock import perf_counter_ns as _now  # noqa: E402
from harness.timing._clock import time_functions_intact  # noqa: E402
from harness.runner._serve import serve  # noqa: E402

BACKEND: str = CONFIG["backend"]
DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
torch.set_num_threads(int(CONFIG["threads"]))
_ALLOW_TF32 = bool(CONFIG["allow_tf32"]) and ROLE != "reference"
torch.backends.cuda.matmul.allow_tf32 = _ALLOW_TF32
torch.backends.cudnn.allow_tf32 = _ALLOW_TF32
torch.set_float32_matmul_precision("high" if _ALLOW_TF32 else "highest")
_CUDA_TIMER: Any = None
if BACKEND == "cuda":
    from harness.timing._cuda import CudaTimer

    torch.cuda.init()
    _CUDA_TIMER = CudaTimer(torch, int(CONFIG["cuda"]["l2_flush_bytes"]))
_WATCHED = ("torch.nn.Module.__call__", "torch.manual_seed", "torch.set_num_threads", "torch.get_num_threads",
            "torch.set_num_interop_threads", "torch.save", "torch.load", "torch.no_grad")


def _lookup(dotted: str) -> Any:
    obj: Any = torch
    for part in dotted.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj


_ORIGINAL = {name: _lookup(name) for name in _WATCHED}


def _harness_globals() -> dict[str, Any]:
    """The harness's own timing globals a candidate could reach through ``sys.modules``.

    Replacing ``time.perf_counter_ns`` is caught by ``time_functions_intact``; this snapshot catches
    the subtler patch of the harness's bound copies (``harness.timing._cpu._now``, the CUDA timer's
    bound methods, the timing functions' code objects), taken before any candidate code is imported.
    """
    found: dict[str, Any] = {
        "sys.modules[harness.timing._cpu]": sys.modules.get("harness.timing._cpu"),
        "harness.timing._cpu._now": getattr(_cpu, "_now", None),
        "harness.timing._cpu.time_block.__code__": getattr(getattr(_cpu, "time_block", None), "__code__", None),
        "harness.timing._cpu.calibrate_inner_loop.__code__":
            getattr(getattr(_cpu, "calibrate_inner_loop", None), "__code__", None),
        "harness.runner._child._now": _now,
    }
    if _CUDA_TIMER is not None:
        for attr in ("_event", "_record", "_elapsed", "_sync", "_graph_cls", "_replay"):
            found[f"CudaTimer.{attr}"] = getattr(_CUDA_TIMER, attr, None)
        for meth in ("time_block", "time_block_graph", "capture_graphs", "calibrate", "sync", "_events"):
            fn = getattr(type(_CUDA_TIMER), meth, None)
            found[f"CudaTimer.{meth}.__code__"] = getattr(fn, "__code__", None)
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


class _State:
    task: Any = None
    model: Any = None
    timing_seed: int | None = None
    buffers: list[list[Any]] = []
    buffer_seeds: list[int] = []
    inner: int = 1
    graphs: Any = None
    method: str = ""


S = _State()


def _sync() -> None:
    if _CUDA_TIMER is not None:
        _CUDA_TIMER.sync()


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


def _to_saveable(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out.detach().to("cpu", copy=True)
    if isinstance(out, (tuple, list)):
        return tuple(_to_saveable(o) for o in out)
    if out is None or isinstance(out, (int, float, bool)):
        return torch.tensor(float("nan")) if out is None else torch.tensor(out)
    raise TypeError(f"the model returned a {type(out).__name__}, not a tensor or tuple of tensors")


def _forward(inputs: list[Any]) -> Any:
    with torch.no_grad():
        return S.model(*inputs)


def _cmd_load(cmd: dict[str, Any]) -> dict[str, Any]:
    if ROLE == "reference" and cmd.get("candidate_path"):
        raise PermissionError("the reference process never imports candidate code")
    task = _import_file(cmd["task_path"], cmd["task_module"])
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(task, name):
            raise AttributeError(f"task file {cmd['task_path']} defines no {name}")
    cls = task.Model
    if cmd.get("candidate_path"):
        _CANDIDATE_FILES.add(os.path.abspath(cmd["candidate_path"]))
        try:
            cand = _import_file(cmd["candidate_path"], cmd["candidate_module"])
        except MemoryError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure while importing the candidate
            raise ImportError(f"importing the candidate failed: {_brief(exc)}") from exc
        if not hasattr(cand, "ModelNew"):
            raise AttributeError("the candidate defines no class ModelNew")
        cls = cand.ModelNew
    torch.manual_seed(int(cmd["init_seed"]))
    init = list(task.get_init_inputs())
    torch.manual_seed(int(cmd["init_seed"]))
    model = cls(*init)
    if isinstance(model, torch.nn.Module):
        model = model.to(DEVICE)
    S.task, S.model, S.timing_seed, S.buffers, S.graphs = task, model, None, [], None
    inputs = make_inputs(torch, task.get_inputs, int(cmd["init_seed"]), TASK_DISTRIBUTION,
                         float(CONFIG["large"]), DEVICE)
    in_bytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    floating = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
    reply: dict[str, Any] = {"input_bytes": int(in_bytes),
                             "input_dtype": str(floating[0].dtype).replace("torch.", "") if floating else "float32"}
    out = _forward(inputs)  # one untimed call: lazy thread pools and allocators start before any fact
    _sync()
    if ROLE == "reference":
        reply["output_bytes"] = int(sum(t.numel() * t.element_size() for t in _tensors(out)))
    return reply


def _cmd_call(cmd: dict[str, Any]) -> dict[str, Any]:
    seed, dist = int(cmd["seed"]), str(cmd["distribution"])
    inputs = make_inputs(torch, S.task.get_inputs, seed, dist, float(CONFIG["large"]), DEVICE)
    tensors_in = [t for t in inputs if isinstance(t, torch.Tensor)]
    before = [tensor_sha256(torch, t) for t in inputs]
    threads_before = _os_threads()
    facts: dict[str, Any] = {"seed": seed, "distribution": dist, "threads_before": threads_before}
    recorder = _OpRecorder() if cmd.get("record_ops") else None
    t0 = _now()
    try:
        if recorder is not None:
            with torch.no_grad(), recorder:
                out = S.model(*inputs)
        else:
            out = _forward(inputs)
        _sync()
    except MemoryError as exc:
        return {**facts, "ok": False, "error": f"MemoryError: {exc}", "failure_kind": "memory"}
    except Exception as exc:  # noqa: BLE001 - candidate exceptions are facts, not harness errors
        return {**facts, "ok": False, "error": _brief(exc), "failure_kind": _kind_of(exc)}
    facts["wall_ns"] = int(_now() - t0)
    outs = _tensors(out)
    in_ptrs = [int(t.untyped_storage().data_ptr()) for t in tensors_in]
    facts["outputs"] = [_meta(t) for t in outs]
    facts["aliases_input"] = sorted({i for i, p in enumerate(in_ptrs) for o in outs
                                     if int(o.untyped_storage().data_ptr()) == p})
    facts["equals_input"] = sorted({i for i, t in enumerate(tensors_in) for o in outs
                                    if o.shape == t.shape and o.dtype == t.dtype and torch.equal(o, t)})
    facts["input_hashes_before"] = before
    facts["input_hashes_after"] = [tensor_sha256(torch, t) for t in inputs]
    facts["threads_after"] = _os_threads()
    facts["ops_called"] = sorted(recorder.names) if recorder is not None else []
    facts["tf32_enabled_after"] = bool(torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32)
    torch.save(_to_saveable(out), cmd["save_path"])
    facts["output_path"] = cmd["save_path"]
    facts["ok"] = True
    return facts


def _cmd_prepare(cmd: dict[str, Any]) -> dict[str, Any]:
    """Make the rotating buffers for one paired seed, warm up and calibrate."""
    seed, n_buf = int(cmd["seed"]), int(cmd["n_buffers"])
    S.timing_seed = seed
    S.buffer_seeds = [buffer_seed(seed, b) for b in range(n_buf)]
    S.buffers = [make_inputs(torch, S.task.get_inputs, s, TASK_DISTRIBUTION, float(CONFIG["large"]), DEVICE)
                 for s in S.buffer_seeds]
    hashes = [tensor_sha256(torch, t) for t in S.buffers[0]]
    S.graphs = None
    if BACKEND == "cuda":
        c = CONFIG["cuda"]
        reps, est_ns = _CUDA_TIMER.calibrate(lambda: _forward(S.buffers[0]), c["warmup_ms"], c["rep_ms"],
                                             c["min_reps"], c["max_reps"])
        S.method = "cuda-events+l2flush"
        return {"reps": reps, "est_ns": est_ns, "method": S.method, "buffer_seeds": S.buffer_seeds,
                "input_hashes_before": hashes}
    p = CONFIG["cpu"]
    S.inner, est_ns = _cpu.calibrate_inner_loop(lambda: _forward(S.buffers[0]), int(p["warmup_reps"]),
                                                int(p["min_timed_ns"]))
    S.method = "cpu-perf_counter"
    return {"reps": int(p["timed_reps"]), "inner": S.inner, "est_ns": est_ns, "method": S.method,
            "buffer_seeds": S.buffer_seeds, "input_hashes_before": hashes}


def _cmd_capture(cmd: dict[str, Any]) -> dict[str, Any]:
    """Time this seed by CUDA-graph replay (``graph``: true) or by events (false).

    The parent decides for every arm of a verdict together, so candidate and baseline are always timed
    by the same method: a ratio of a graph-replayed time to an event-timed one would mix device time
    with launch overhead.
    """
    S.graphs = None
    S.method = "cuda-events+l2flush"
    if BACKEND == "cuda" and bool(cmd.get("graph")):
        n_buf = len(S.buffers)
        S.graphs = _CUDA_TIMER.capture_graphs(lambda b: _forward(S.buffers[b]), n_buf,
                                              int(CONFIG["cuda"]["graph_replays"]))
        if S.graphs is not None:
            S.method = "cuda-graph"
    return {"captured": S.graphs is not None, "method": S.method}


def _cmd_block(cmd: dict[str, Any]) -> dict[str, Any]:
    reps, offset = int(cmd["reps"]), int(cmd["rep_offset"])
    capture_global = {int(r) for r in cmd.get("capture", [])}
    capture = {r - offset for r in capture_global if offset <= r < offset + reps}
    n_buf = len(S.buffers)
    cpu0, thr0 = _clock.process_time_ns(), _clock.thread_time_ns()
    if S.graphs is not None:
        bt = _CUDA_TIMER.time_block_graph(_rotate(S.graphs, offset), reps, int(CONFIG["cuda"]["graph_replays"]), capture)
    elif BACKEND == "cuda":
        bt = _CUDA_TIMER.time_block(lambda r: _forward(S.buffers[(offset + r) % n_buf]), reps, capture)
    else:
        for _ in range(int(CONFIG["cpu"]["block_warmup_calls"])):
            _forward(S.buffers[offset % n_buf])
        bt = _cpu.time_block(lambda r: _forward(S.buffers[(offset + r) % n_buf]), reps, S.inner, capture)
    timed_outputs = []
    for r, out in sorted(bt.captured.items()):
        g = offset + r
        path = os.path.join(cmd["save_dir"], f"{ROLE}-{S.timing_seed}-{g}.pt")
        torch.save(_to_saveable(out), path)
        timed_outputs.append({"rep": g, "input_seed": S.buffer_seeds[g % n_buf], "output_path": path})
    other_cpu = (_clock.process_time_ns() - cpu0) - (_clock.thread_time_ns() - thr0)
    return {"other_threads_cpu_ns": float(max(0, other_cpu)), "times_ns": bt.times_ns, "wall_ns": bt.wall_ns, "timed_total_ns": bt.timed_total_ns,
            "method": bt.method, "timed_outputs": timed_outputs}


def _rotate(items: list[Any], offset: int) -> list[Any]:
    k = offset % len(items)
    return items[k:] + items[:k]


def _cmd_reuse_probe(cmd: dict[str, Any]) -> dict[str, Any]:
    """Call the model twice on one input object, then rewrite that object's contents in place (same
    address, autograd version unchanged) and call it again; the parent checks this last output.

    Why: timed repetitions on CPU repeat one input in an inner loop, so a model that memoises its
    answer by input address or version looks fast while every answer it returns is right. Here such a
    model returns its stored answer for contents that have changed, and the comparison fails.
    """
    large = float(CONFIG["large"])
    inputs = make_inputs(torch, S.task.get_inputs, int(cmd["seed_a"]), TASK_DISTRIBUTION, large, DEVICE)
    _forward(inputs)
    _forward(inputs)
    fresh = make_inputs(torch, S.task.get_inputs, int(cmd["seed_b"]), TASK_DISTRIBUTION, large, DEVICE)
    with torch.no_grad():
        for dst, src in zip(inputs, fresh):
            if isinstance(dst, torch.Tensor) and isinstance(src, torch.Tensor) and dst.shape == src.shape:
                dst.data.copy_(src)
    out = _forward(inputs)
    _sync()
    torch.save(_to_saveable(out), cmd["save_path"])
    return {"output_path": cmd["save_path"]}


def _cmd_finish_seed(cmd: dict[str, Any]) -> dict[str, Any]:
    hashes = [tensor_sha256(torch, t) for t in S.buffers[0]] if S.buffers else []
    S.buffers, S.graphs = [], None
    return {"input_hashes_after": hashes, "threads_after": _os_threads()}


def _cmd_integrity(cmd: dict[str, Any]) -> dict[str, Any]:
    import harness.runner._inputs as inputs_mod

    checks = {name: _lookup(name) is fn for name, fn in _ORIGINAL.items()}
    checks["harness.runner._inputs.make_inputs"] = inputs_mod.make_inputs is make_inputs
    checks.update(time_functions_intact())
    now = _harness_globals()
    checks.update({name: now.get(name) is orig for name, orig in _HARNESS_GLOBALS.items()})
    if _CUDA_TIMER is not None:
        checks.update(_CUDA_TIMER.intact())
    checks["torch_threads_pinned"] = torch.get_num_threads() == int(CONFIG["threads"])
    return {"checks": checks, "audit_events": sorted(_AUDIT_EVENTS), "candidate_modules": sorted(m for m in sys.modules if m.startswith(_CANDIDATE_PREFIX)),
            "pid": os.getpid()}


def _cmd_fingerprint(cmd: dict[str, Any]) -> dict[str, Any]:
    from harness.device import local_fingerprint_facts

    return local_fingerprint_facts(torch, BACKEND, int(CONFIG["threads"]))


def _cmd_ceilings(cmd: dict[str, Any]) -> dict[str, Any]:
    from harness.device import measure_ceilings_here

    return measure_ceilings_here(torch, BACKEND, CONFIG["ceilings"])


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


_HANDLERS = {"load": _cmd_load, "call": _cmd_call, "prepare": _cmd_prepare, "block": _cmd_block,
             "finish_seed": _cmd_finish_seed, "capture": _cmd_capture,
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
    if isinstance(exc, ImportError):
        return _brief(exc), "import_error"
    return _brief(exc), _kind_of(exc)


def main() -> None:
    _reply({"ok": True, "op": "ready", "pid": os.getpid(), "torch_version": torch.__version__,
            "threads": torch.get_num_threads(), "device": DEVICE})
    serve(_HANDLERS, _reply, _describe)


if __name__ == "__main__":
    main()
