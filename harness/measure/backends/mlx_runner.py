"""The MLX measuring child: ``python -m harness.measure.backends.mlx_runner ROLE REPLY_FD CONFIG_JSON``.

It speaks the runner's pipe protocol (one JSON command per line on stdin, one JSON reply per line on
REPLY_FD, a ``ready`` reply first), so :class:`MlxWorker` reuses the runner's deadline and failure
handling. Order of events, as in ``harness.measure.runner._child``: memory limit, then the harness clock and
``mx.eval`` are bound, then task code is imported, and only in the candidate role candidate code.
The reference role never imports candidate code.

The MLX-port convention (this module enforces it; ``harness.science.retest`` documents it for users):

* A task file may define ``mlx_reference(params, *inputs)``: ``params`` is the reference ``Model``'s
  ``state_dict()`` (parameters and buffers, by their torch names) as ``mx.array``; ``inputs`` are the
  harness's inputs (``get_inputs()`` under the paired seed) as ``mx.array``. It returns an
  ``mx.array`` or a tuple of them, and must agree with ``Model`` within the protocol's tolerances.
* A candidate file may define ``mlx_forward(params, *inputs)`` with the same signature, or a class
  ``ModelNewMLX`` built as ``ModelNewMLX(params, *get_init_inputs())`` and called with ``*inputs``.
  The torch ``Model`` is built under ``torch.manual_seed(init_seed)`` in both roles, exactly as the
  torch path builds reference and candidate, so both arms see identical parameters.

Timing: every call is followed by ``mx.eval`` on its outputs (MLX is lazy: without it nothing is
computed), with the runner's CPU inner-loop batching to reach ``min_timed_ns``.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from harness.measure.runner import _messages as M
from harness.measure.runner._serve import Handler, serve
from harness.measure.runner._worker import Worker, child_environment

MLX_PORT_FUNCTION = "mlx_forward"
MLX_PORT_CLASS = "ModelNewMLX"
MLX_REFERENCE_FUNCTION = "mlx_reference"


def mapped_blas_libraries(maps_text: str) -> list[str]:
    """The BLAS/LAPACK shared objects mapped into a process, from its /proc/PID/maps text."""
    libs = {line.split()[-1] for line in maps_text.splitlines()
            if line.split() and ("blas" in line.split()[-1].lower() or "lapack" in line.split()[-1].lower())}
    return sorted(libs)


def blas_label(libs: list[str], preloaded: str | None) -> str:
    """Which BLAS answers MLX's calls: the preloaded library if it is mapped, else MLX's bundled one.

    numpy's and torch's own BLAS copies are mapped too, but MLX resolves its BLAS symbols through the
    dynamic linker, where an LD_PRELOAD'ed library comes first.
    """
    mapped = ", ".join(Path(p).name for p in libs) or "none"
    if preloaded:
        real = str(Path(preloaded).resolve())
        if any(str(Path(p).resolve()) == real for p in libs):
            return f"preloaded {preloaded} (mapped: {mapped})"
    return f"mlx-bundled reference BLAS (mapped: {mapped})"


class MlxWorker(Worker):
    """A runner :class:`Worker` whose child is this module; ``blas_path`` is preloaded when given."""

    commands = M.MLX_COMMANDS

    def __init__(self, role: Any, config: dict[str, Any], workdir: Path, timeout_s: float,
                 blas_path: str | None, startup_timeout_s: float | None = None) -> None:
        super().__init__(role, config, workdir, timeout_s, startup_timeout_s)
        self.blas_path = blas_path

    def start(self) -> "MlxWorker":
        env = child_environment(int(self.config["threads"]), drop=("LD_PRELOAD",))
        env["OPENBLAS_NUM_THREADS"] = str(self.config["threads"])
        if self.blas_path:
            env["LD_PRELOAD"] = self.blas_path
        self._spawn("harness.measure.backends.mlx_runner", env)  # confined like every measuring child
        return self


# ============================================================================ the child process
def _describe(exc: BaseException) -> tuple[str, str]:
    """(error text, failure kind) for a handler's exception: the last frames of its traceback."""
    text = "".join(traceback.format_exception(exc)[-3:])[-2000:]
    return text, "import_error" if isinstance(exc, ImportError) else "exception"


def _child() -> None:  # pragma: no cover - runs in the child; exercised through MlxWorker in tests
    import resource

    from harness.measure.timing import _clock  # noqa: F401 - binds the clock before any task code runs

    role, reply_fd, config = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    if config.get("memory_bytes", 0) > 0:
        resource.setrlimit(resource.RLIMIT_AS, (config["memory_bytes"], config["memory_bytes"]))
    os.dup2(2, 1)  # task or candidate prints go to the log, never to the reply pipe

    import importlib.util

    import mlx.core as mx
    import numpy as np
    import torch

    from harness.measure.runner._inputs import make_inputs
    from harness.measure.timing import _cpu

    evaluate = mx.eval  # bound before any task or candidate code is imported
    torch.set_num_threads(int(config["threads"]))
    state: dict[str, Any] = {"inputs": {}, "inner": {}}

    def reply(obj: dict[str, Any]) -> None:
        data = memoryview((json.dumps(obj, allow_nan=True) + "\n").encode())
        while data:
            data = data[os.write(reply_fd, data):]

    def load_file(path: str, name: str) -> Any:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def to_mx(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            return mx.array(t.float().numpy()).astype(mx.bfloat16)
        return mx.array(t.numpy())

    def to_numpy(out: Any) -> list[tuple[Any, str]]:
        """Each output as a numpy array with its original dtype name (bfloat16 travels as float32)."""
        outs = out if isinstance(out, (tuple, list)) else [out]
        arrays = []
        for o in outs:
            if isinstance(o, torch.Tensor):
                o = o.detach().cpu()
                name = str(o.dtype).replace("torch.", "")
                arrays.append((o.float().numpy() if o.dtype == torch.bfloat16 else o.numpy(), name))
            else:
                name = str(o.dtype).replace("mlx.core.", "")
                arrays.append((np.array(o.astype(mx.float32) if o.dtype == mx.bfloat16 else o), name))
        return arrays

    def save(out: Any, path: str) -> list[M.MlxOutput]:
        arrays = to_numpy(out)
        np.savez(path, *[a for a, _ in arrays])
        return [M.MlxOutput(shape=list(a.shape), dtype=name) for a, name in arrays]

    def cmd_load(cmd: M.MlxLoad) -> M.MlxLoadReply:
        task = load_file(cmd.task_path, "atb_mlx_task")
        torch.manual_seed(int(cmd.init_seed))
        init_inputs = list(task.get_init_inputs())
        model = task.Model(*init_inputs).eval()
        params = {k: to_mx(v) for k, v in model.state_dict().items()}
        state.update(task=task, model=model)
        if role == "reference":
            fn = getattr(task, MLX_REFERENCE_FUNCTION, None)
            if fn is None:
                return M.MlxLoadReply(ok=False, failure_kind="no_port",
                                      error=f"the task defines no {MLX_REFERENCE_FUNCTION}(params, *inputs)")
            state["fn"] = lambda *xs: fn(params, *xs)
            port = MLX_REFERENCE_FUNCTION
        else:
            cand = load_file(str(cmd.candidate_path), "atb_mlx_candidate")
            if hasattr(cand, MLX_PORT_FUNCTION):
                f = getattr(cand, MLX_PORT_FUNCTION)
                state["fn"] = lambda *xs: f(params, *xs)
                port = MLX_PORT_FUNCTION
            elif hasattr(cand, MLX_PORT_CLASS):
                obj = getattr(cand, MLX_PORT_CLASS)(params, *init_inputs)
                state["fn"] = obj
                port = MLX_PORT_CLASS
            else:
                return M.MlxLoadReply(ok=False, failure_kind="no_port",
                                      error=f"the candidate defines neither {MLX_PORT_FUNCTION}(params, *inputs) "
                                            f"nor class {MLX_PORT_CLASS}")
        return M.MlxLoadReply(port=port, mlx_version=getattr(mx, "__version__", "unknown"),
                              device=str(mx.default_device()),
                              blas_libraries=mapped_blas_libraries(Path("/proc/self/maps").read_text()),
                              torch_threads=torch.get_num_threads())

    def inputs_for(seed: int, distribution: str) -> tuple[list[Any], list[Any]]:
        """The torch inputs and their MLX copies for (seed, distribution); only the latest is cached."""
        key = (seed, distribution)
        if key not in state["inputs"]:
            ts = make_inputs(torch, state["task"].get_inputs, seed, distribution, float(config["large"]), "cpu")
            state["inputs"] = {key: (ts, [to_mx(t) for t in ts])}
        ts, xs = state["inputs"][key]
        return list(ts), list(xs)

    def run(xs: list[Any]) -> Any:
        out = state["fn"](*xs)
        evaluate(out)
        return out

    def cmd_call(cmd: M.MlxCall) -> M.MlxCallReply:
        ts, xs = inputs_for(int(cmd.seed), cmd.distribution)
        outputs = save(run(xs), cmd.out_path)
        torch_outputs = None
        if role == "reference":
            with torch.no_grad():
                torch_outputs = save(state["model"](*ts), str(cmd.torch_out_path))
        return M.MlxCallReply(outputs=outputs, torch_outputs=torch_outputs)

    def cmd_prepare(cmd: M.MlxPrepare) -> M.MlxPrepareReply:
        seed = int(cmd.seed)
        _, xs = inputs_for(seed, "task")
        inner, est = _cpu.calibrate_inner_loop(lambda: run(xs), int(config["warmup_reps"]),
                                               int(config["min_timed_ns"]))
        state["inner"][seed] = inner
        return M.MlxPrepareReply(inner=inner, estimate_ns=est)

    def cmd_rep(cmd: M.MlxRep) -> M.MlxRepReply:
        seed = int(cmd.seed)
        _, xs = inputs_for(seed, "task")
        block = _cpu.time_block(lambda _rep: run(xs), 1, state["inner"][seed], {0} if cmd.out_path else set())
        return M.MlxRepReply(times_ns=block.times_ns, wall_ns=block.wall_ns, timed_total_ns=block.timed_total_ns,
                             method="mlx-eval+" + block.method,
                             outputs=save(block.captured[0], cmd.out_path) if cmd.out_path else None)

    handlers: dict[str, Handler] = {"load": cmd_load, "call": cmd_call, "prepare": cmd_prepare, "rep": cmd_rep}
    reply(M.Ready(op="ready", pid=os.getpid(), mlx_version=getattr(mx, "__version__", "unknown")).model_dump())
    serve(handlers, reply, _describe, commands=M.MLX_COMMANDS, time_handlers=True)


if __name__ == "__main__":
    _child()
