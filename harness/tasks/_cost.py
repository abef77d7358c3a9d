"""What a task costs at least: bytes moved and floating-point operations, with how each was obtained.

Why: the physical-limit gate needs a floor for every task. Native tasks declare their figures in
``ATB_META``; KernelBench files declare nothing, so without a count a matmul problem's floor counts 0
FLOPs. Here the reference itself is counted:

- bytes: every input read once and every output written once (a lower bound on traffic);
- FLOPs: :class:`torch.utils.flop_counter.FlopCounterMode` around one forward of the reference
  (it counts matmuls, convolutions and attention; elementwise work counts 0). The floor uses only
  the matrix-product and attention FLOPs (``flops``): convolution FLOPs are counted as a direct
  convolution, but cuDNN/oneDNN may pick Winograd or FFT algorithms that do fewer operations, so an
  honest reference could beat a floor built on them. They are recorded (``flops_total``,
  ``flops_by_op``) but kept out of the floor, which must stay a lower bound.

The count runs on the **meta device** (shapes only: no memory, no arithmetic, milliseconds even for
problems with 7 GB inputs). Where the forward cannot run on meta (data-dependent code, a tensor made
explicitly on the CPU), a real CPU run is tried if the inputs are small, else only the input bytes
are kept. Every figure carries its source: ``declared``, ``flop_counter:meta``, ``flop_counter:cpu``,
``io:measured``, ``io:meta``, ``bytes_only:<reason>``, ``not_declared``.

Task code is never executed in the harness's own process: ``python -m harness.tasks._cost FILE`` is the
counting process, started and collected by :mod:`harness.measure.cost` (:func:`~harness.measure.cost.begin_cost`,
:meth:`~harness.measure.cost.PendingCost.resolve`); :func:`count_module` is the in-process part that the
counting process (or any process that has already imported the task, such as a measuring child) calls.

Why the process is started from the measuring layer (issue 29): it runs the task file's code, so it is
started exactly as a measuring child is (issue 27), with the runner's allow-listed environment and
confinement. Those belong to ``harness.measure``, which this package (a foundation every layer reads) never
imports; so the part that starts processes lives there, and this module keeps only what is pure: the
figures' models, the count itself, and :func:`resolve_cost`.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.tasks._model import Task

# a forward that fails on meta is re-run for real on the CPU only when its inputs are this small
REAL_RUN_MAX_INPUT_BYTES = 64 * 1024 * 1024


class CountedCost(BaseModel):
    """What the counting process reports for one task file.

    ``method`` is how the FLOPs were obtained: ``flop_counter:meta``, ``flop_counter:cpu`` or
    ``bytes_only:<reason>`` (no FLOP count; ``flops`` is None). Bytes are None where even the
    inputs could not be sized.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    input_bytes: int | None = None
    output_bytes: int | None = None
    flops: float | None = None
    method: str
    flops_total: float | None = None   # every FLOP the counter found, convolutions included
    flops_by_op: dict[str, float] = {}
    inputs: list[tuple[list[int], str]] = []
    outputs: list[tuple[list[int], str]] = []
    note: str = ""          # why the meta count fell back, when it did
    wall_s: float = 0.0
    torch_version: str = ""
    confinement: str = ""   # how the counting process was confined ("bwrap:..." or "unconfined:<why>"); set by the parent


class TaskCost(BaseModel):
    """The figures the physical floor uses, each with its source."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    bytes: float | None
    bytes_source: str
    flops: float | None
    flops_source: str

    def summary(self) -> str:
        b = f"{self.bytes:.4g}" if self.bytes is not None else "none"
        f = f"{self.flops:.4g}" if self.flops is not None else "none"
        return f"bytes {b} ({self.bytes_source}), flops {f} ({self.flops_source})"


# ------------------------------------------------------------------------------- in-process count
def _tensors(obj: Any, torch: Any) -> list[Any]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o, torch)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o, torch)]
    return []


def _nbytes(ts: list[Any]) -> int:
    return int(sum(t.numel() * t.element_size() for t in ts))


def _shapes(ts: list[Any]) -> list[tuple[list[int], str]]:
    return [(list(t.shape), str(t.dtype).replace("torch.", "")) for t in ts]


def _brief(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ")
    return text[:200]


# aten ops whose counted FLOPs no library undercuts in practice (no Strassen in cuBLAS/oneDNN GEMMs)
FLOOR_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten._scaled_dot_product", "aten._flash_attention",
             "aten._efficient_attention", "aten._cudnn_attention")


def _forward_count(torch: Any, module: Any, device: str) -> tuple[list[Any], list[Any], dict[str, float]]:
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device(device):
        torch.manual_seed(0)
        init = list(module.get_init_inputs())
        torch.manual_seed(0)
        model = module.Model(*init)
        if isinstance(model, torch.nn.Module):
            model = model.to(device)
        torch.manual_seed(0)
        inputs = list(module.get_inputs())
    ins = _tensors(inputs, torch)
    if any(t.device.type != device for t in ins):
        raise RuntimeError(f"get_inputs() made tensors on {sorted({t.device.type for t in ins})}, not {device}")
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        out = model(*inputs)
    by_op = {str(k): float(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return ins, _tensors(out, torch), by_op


def _flop_fields(by_op: dict[str, float]) -> dict[str, Any]:
    floor = sum(v for k, v in by_op.items() if k.startswith(FLOOR_OPS))
    return {"flops": float(floor), "flops_total": float(sum(by_op.values())), "flops_by_op": by_op}


def count_module(torch: Any, module: Any, *, real_max_input_bytes: int = REAL_RUN_MAX_INPUT_BYTES) -> CountedCost:
    """Count one imported KernelBench-format module's bytes and FLOPs (see the module docstring).

    Never raises for a problem in the task's code: the fallback and its reason are in ``method``.
    """
    t0 = time.perf_counter()
    version = str(torch.__version__)
    try:
        ins, outs, by_op = _forward_count(torch, module, "meta")
        return CountedCost(input_bytes=_nbytes(ins), output_bytes=_nbytes(outs), **_flop_fields(by_op),
                           method="flop_counter:meta", inputs=_shapes(ins), outputs=_shapes(outs),
                           wall_s=time.perf_counter() - t0, torch_version=version)
    except Exception as exc:  # noqa: BLE001 - any failure on meta falls back, with its reason
        meta_reason = _brief(exc)
    in_bytes: int | None = None
    in_shapes: list[tuple[list[int], str]] = []
    try:  # the inputs alone, sized on meta, decide whether a real run is affordable
        with torch.device("meta"):
            torch.manual_seed(0)
            ins_meta = _tensors(list(module.get_inputs()), torch)
        in_bytes, in_shapes = _nbytes(ins_meta), _shapes(ins_meta)
    except Exception as exc:  # noqa: BLE001
        meta_reason += f"; get_inputs on meta: {_brief(exc)}"
    if in_bytes is not None and in_bytes <= real_max_input_bytes:
        try:
            ins, outs, by_op = _forward_count(torch, module, "cpu")
            return CountedCost(input_bytes=_nbytes(ins), output_bytes=_nbytes(outs), **_flop_fields(by_op),
                               method="flop_counter:cpu", inputs=_shapes(ins), outputs=_shapes(outs),
                               note=f"forward failed on meta ({meta_reason})", wall_s=time.perf_counter() - t0,
                               torch_version=version)
        except Exception as exc:  # noqa: BLE001
            meta_reason += f"; cpu run: {_brief(exc)}"
    elif in_bytes is not None:
        meta_reason += f"; inputs are {in_bytes} bytes, above {real_max_input_bytes} for a real CPU run"
    return CountedCost(input_bytes=in_bytes, output_bytes=None, flops=None,
                       method=f"bytes_only:forward failed on meta ({meta_reason})", inputs=in_shapes,
                       wall_s=time.perf_counter() - t0, torch_version=version)


def import_task_module(torch: Any, path: Path, name: str) -> Any:
    """Import a task file as a fresh module, under the meta device so module-level tensors cost nothing."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    mod = importlib.util.module_from_spec(spec)
    with torch.device("meta"):
        spec.loader.exec_module(mod)
    return mod


def count_file(torch: Any, path: Path) -> CountedCost:
    """Import and count one file; an import failure is a ``bytes_only`` result, not an exception."""
    t0 = time.perf_counter()
    try:
        mod = import_task_module(torch, path, f"atb_cost_{abs(hash(str(path))):x}")
    except Exception as exc:  # noqa: BLE001
        return CountedCost(method=f"bytes_only:import failed ({_brief(exc)})", wall_s=time.perf_counter() - t0,
                           torch_version=str(torch.__version__))
    return count_module(torch, mod)


def needs_count(task: Task) -> bool:
    """Whether the task's FLOPs must be counted: KernelBench-format files that declare none.

    Native tasks keep their declarations (a native task that declares no FLOPs is elementwise or a
    reduction, which the FLOP counter counts as 0 anyway; tests check that).
    """
    return task.meta.flops is None and task.kind != "native"


def resolve_cost(task: Task, counted: CountedCost | None, *, input_bytes: int = 0, output_bytes: int = 0) -> TaskCost:
    """Combine declarations, a count and the reference process's measured sizes (see :class:`TaskCost`)."""
    declared_bytes = task.meta.bytes
    nbytes: float | None
    if isinstance(declared_bytes, (int, float)):
        nbytes, bsrc = float(declared_bytes), "declared"
    elif declared_bytes is None:
        nbytes, bsrc = None, "not_declared"
    elif output_bytes:
        nbytes, bsrc = float(input_bytes + output_bytes), "io:measured"
    elif counted is not None and counted.input_bytes is not None and counted.output_bytes is not None:
        nbytes, bsrc = float(counted.input_bytes + counted.output_bytes), f"io:{counted.method.split(':')[-1]}"
    else:
        nbytes, bsrc = None, "not_measured"
    if task.meta.flops is not None:
        flops, fsrc = float(task.meta.flops), "declared"
    elif counted is None:
        flops, fsrc = None, "not_declared"
    else:
        flops, fsrc = counted.flops, counted.method
        left_out = (counted.flops_total or 0.0) - (counted.flops or 0.0)
        if left_out > 0:
            fsrc += f" (matmul/attention only; {left_out:.3g} convolution FLOPs left out of the floor)"
    return TaskCost(bytes=nbytes, bytes_source=bsrc, flops=flops, flops_source=fsrc)


def _main(argv: list[str]) -> int:
    """``python -m harness.tasks._cost FILE...``: one JSON line per file, ``{"path":..., "cost":{...}}``."""
    import torch

    torch.set_num_threads(1)
    for arg in argv:
        try:
            cost = count_file(torch, Path(arg))
        except Exception:  # noqa: BLE001 - report, then go on with the next file
            cost = CountedCost(method="bytes_only:counting raised " + traceback.format_exc().splitlines()[-1][:160])
        print(json.dumps({"path": arg, "cost": cost.model_dump(mode="json")}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
