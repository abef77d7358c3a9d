"""The random-search space of any PyTorch-module problem: what a careful engineer's autotuner tries on
UNCHANGED model code, in :mod:`harness.space` terms, and how one point renders into a candidate file.

Why: a KernelBench file declares no knob space (``ATB_META['knobs']``), so without this the seeded
random-search baseline did not exist for any of its problems (issue 26). The space holds only choices
that leave the model's arithmetic as written: ``torch.compile`` (off, default, max-autotune,
max-autotune-no-cudagraphs; reduce-overhead on CUDA) with Inductor options (coordinate-descent tuning,
epilogue fusion, GEMM backends), a CUDA-graph wrapper, ``channels_last`` memory format,
``cudnn.benchmark`` and inference mode. Never a precision change: no TF32, no half precision, no
autocast (the precision gate would refuse them anyway).

What applies is derived from the problem, never from its file name: the input ranks and the ops the
reference calls come from the cost count (:func:`harness.measure.cost.count_task`, which runs the
problem on the meta device in its own process; the caller passes it in, as this package imports no
layer), and the backend decides the CUDA-only knobs, which are absent from a CPU space rather than
forbidden there (a forbidden knob would still spend draws).

Rendering: a point becomes the problem's own source followed by ``class ModelNew(Model)``, built from
the same init inputs, so under the harness's init seed it holds the same weights as the reference
(``harness/measure/runner/_child.py`` seeds torch before building either class). The all-default point
renders to exactly the task's starting candidate (``Task.start_source()``: ``ModelNew = Model``), the
eager start arm. A point whose compilation raises says so: its first call's exception is re-raised as
"the candidate raised while compiling: ..." (the verdict's reason), and the campaign goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from harness.records import sha256_text
from harness.space import (
    BoolKnob, CategoricalKnob, Constraint, Forbidden, Implies, Knob, KnobSpace, KnobSpaceError, KnobValue,
)
from harness.tasks._cost import CountedCost
from harness.tasks._model import Task

#: names the renderer; stored with every campaign's search config (a changed template changes it)
RENDERER = "atb-module-space/2"

#: every knob of the module space with its default (the eager setting), in draw order
DEFAULTS: dict[str, KnobValue] = {
    "compile": "off",
    "coordinate_descent": False,     # force Inductor's coordinate-descent tuning on (max-autotune has it already)
    "epilogue_fusion": True,         # Inductor's default; False turns template epilogue fusion off
    "gemm_backends": "default",      # max_autotune_gemm_backends (max-autotune modes only)
    "cuda_graph": False,             # CUDA-graph capture and replay around the forward
    "channels_last": False,          # model and 4-D/5-D inputs in channels_last(_3d); outputs back to standard
    "cudnn_benchmark": False,        # torch.backends.cudnn.benchmark
    "inference_mode": False,         # forward under torch.inference_mode()
}
COMPILE_MODES: dict[str, list[str]] = {
    # a CPU has no CUDA graphs: max-autotune-no-cudagraphs is max-autotune there, reduce-overhead is eager + graphs
    "cpu": ["off", "default", "max-autotune"],
    "cuda": ["off", "default", "max-autotune", "max-autotune-no-cudagraphs", "reduce-overhead"],
}
MAX_AUTOTUNE = ["max-autotune", "max-autotune-no-cudagraphs"]
GEMM_BACKENDS = ["default", "ATEN", "TRITON"]
# aten ops (FlopCounterMode's keys) that make GEMM templates, epilogue fusion and cuDNN's choice matter
_GEMM_OPS = ("aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.convolution", "aten._convolution",
             "aten._scaled_dot_product", "aten._flash_attention", "aten._efficient_attention", "aten._cudnn_attention")
_CONV_OPS = ("aten.convolution", "aten._convolution")
_FLOATING = ("float16", "bfloat16", "float32", "float64")


class ModuleFacts(BaseModel):
    """What the space is derived from, as counted from the problem (stored with the campaign).

    ``gemm`` / ``conv`` are None when the count could not run the forward (the ops are unknown: the
    knobs that depend on them are kept); ``inputs_known`` is False when not even the inputs were sized
    (``channels_last`` is then left out: the problem cannot be shown to have 4-D/5-D inputs).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    input_ranks: list[int]
    input_dtypes: list[str]
    inputs_known: bool
    nd_input: bool                 # a floating-point input of rank 4 or 5
    gemm: bool | None              # a matrix product, convolution or attention is called
    conv: bool | None              # a convolution is called
    count_method: str

    @classmethod
    def from_count(cls, counted: CountedCost | None) -> ModuleFacts:
        """Facts from a cost count (None: nothing counted)."""
        if counted is None:
            return cls(input_ranks=[], input_dtypes=[], inputs_known=False, nd_input=False, gemm=None, conv=None,
                       count_method="not counted")
        ranks = [len(shape) for shape, _ in counted.inputs]
        dtypes = [dtype for _, dtype in counted.inputs]
        ran = not counted.method.startswith("bytes_only")
        ops = list(counted.flops_by_op)
        return cls(input_ranks=ranks, input_dtypes=dtypes, inputs_known=bool(counted.inputs),
                   nd_input=any(r in (4, 5) and d in _FLOATING for r, d in zip(ranks, dtypes)),
                   gemm=any(o.startswith(_GEMM_OPS) for o in ops) if ran else None,
                   conv=any(o.startswith(_CONV_OPS) for o in ops) if ran else None,
                   count_method=counted.method)


class ModuleSpace(BaseModel):
    """One problem's module space on one backend, with what it was derived from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    backend: Literal["cpu", "cuda"]
    facts: ModuleFacts
    space: KnobSpace

    def record(self) -> dict[str, Any]:
        """What a campaign's search config stores beside the knob space: the renderer (name and the
        digest of its template, so a changed rendering is visible), the backend and the facts."""
        return {"renderer": RENDERER, "renderer_sha256": sha256_text(_TEMPLATE), "backend": self.backend,
                "facts": self.facts.model_dump(mode="json")}


#: how a task is counted: :func:`harness.measure.cost.count_task` (in its own process; cached per source digest)
Count = Callable[[Task], CountedCost | None]


def module_facts(task: Task, count: Count) -> ModuleFacts:
    """Count ``task`` with ``count`` and read the facts from the count."""
    return ModuleFacts.from_count(count(task))


def build_module_space(facts: ModuleFacts, backend: str) -> ModuleSpace:
    """The space for a problem with ``facts`` measured on ``backend``.

    Raises:
        KnobSpaceError: ``backend`` is not a torch backend (cpu, cuda); an MLX candidate is no torch module.
    """
    if backend not in COMPILE_MODES:
        raise KnobSpaceError(f"the module space is defined for the torch backends cpu and cuda, not {backend!r}; "
                             "run the random search with --backend cpu or cuda")
    cuda = backend == "cuda"
    gemm = facts.gemm is not False          # unknown ops: keep the knobs that depend on them
    conv = facts.conv is not False
    knobs: list[Knob] = [CategoricalKnob(name="compile", choices=list(COMPILE_MODES[backend]), default="off")]
    inductor: dict[str, list[KnobValue]] = {}
    constraints: list[Constraint] = []
    if cuda:   # coordinate descent tunes Triton kernels' launch configurations
        knobs.append(BoolKnob(name="coordinate_descent", default=False))
        inductor["coordinate_descent"] = [False]
        # the max-autotune modes switch it on themselves: forcing it there is the same point again
        constraints.append(Implies(when={"compile": list(MAX_AUTOTUNE)}, then={"coordinate_descent": [False]}))
    if gemm:   # epilogue fusion and GEMM backends act on the templates max-autotune picks for GEMMs/convolutions
        knobs.append(BoolKnob(name="epilogue_fusion", default=True))
        inductor["epilogue_fusion"] = [True]
        not_autotuned = [m for m in COMPILE_MODES[backend] if m not in MAX_AUTOTUNE]
        constraints.append(Implies(when={"compile": not_autotuned}, then={"epilogue_fusion": [True]}))
        if cuda:
            knobs.append(CategoricalKnob(name="gemm_backends", choices=list(GEMM_BACKENDS), default="default"))
            constraints.append(Implies(when={"compile": not_autotuned}, then={"gemm_backends": ["default"]}))
    if cuda:
        knobs.append(BoolKnob(name="cuda_graph", default=False))
        # these modes capture CUDA graphs themselves (triton.cudagraphs): a second capture around them is refused
        constraints.append(Forbidden(combination={"cuda_graph": [True], "compile": ["max-autotune", "reduce-overhead"]}))
    if facts.nd_input:
        knobs.append(BoolKnob(name="channels_last", default=False))
    if cuda and conv:
        knobs.append(BoolKnob(name="cudnn_benchmark", default=False))
    knobs.append(BoolKnob(name="inference_mode", default=False))
    if inductor:   # Inductor options only with compile on
        constraints.insert(0, Implies(when={"compile": ["off"]}, then=inductor))
    return ModuleSpace(backend="cuda" if cuda else "cpu", facts=facts,
                       space=KnobSpace(knobs=knobs, constraints=constraints))


def module_space(task: Task, backend: str, count: Count) -> ModuleSpace:
    """The module space of ``task`` on ``backend`` (counts the task with ``count``; see :func:`module_facts`).

    Raises:
        KnobSpaceError: ``backend`` is not cpu or cuda.
    """
    if backend not in COMPILE_MODES:
        build_module_space(ModuleFacts.from_count(None), backend)   # raises, before any counting
    return build_module_space(module_facts(task, count), backend)


def full_point(config: Mapping[str, Any]) -> dict[str, KnobValue]:
    """``config`` with every knob a space left out at its default (the renderer reads all of them).

    Raises:
        KnobSpaceError: an unknown knob, or a value of the wrong kind or outside the knob's choices.
    """
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise KnobSpaceError(f"unknown module-space knob(s) {unknown}; knobs are {list(DEFAULTS)}")
    point = {**DEFAULTS, **config}
    allowed: dict[str, list[str]] = {"compile": COMPILE_MODES["cuda"], "gemm_backends": GEMM_BACKENDS}
    for name, value in point.items():
        if name in allowed:
            if not (isinstance(value, str) and value in allowed[name]):
                raise KnobSpaceError(f"module-space knob {name!r}: {value!r} is not one of {allowed[name]}")
        elif type(value) is not bool:
            raise KnobSpaceError(f"module-space knob {name!r} is on or off (a bool), not {value!r}")
    return point


def render_point(task: Task, config: Mapping[str, Any]) -> str:
    """The candidate file of one point: the task's starting candidate for the all-default point, else
    the task's source followed by the rendered ``ModelNew``.

    Raises:
        KnobSpaceError: ``config`` names an unknown knob or value (see :func:`full_point`).
    """
    point = full_point(config)
    if point == DEFAULTS:
        return task.start_source()
    return task.source.rstrip() + "\n\n\n" + _TEMPLATE.replace("__ATB_POINT__", repr(point))


def point_of_rendering(task: Task, text: str) -> dict[str, KnobValue] | None:
    """The point whose rendering ``text`` is, exactly (byte for byte, :func:`render_point` of ``task``), or
    None for any other text: a candidate someone wrote, or a rendering with anything changed.

    Why (issue 26): the compile cache of harness renderings (``harness.measure.compile_cache``) is lent
    only to files the harness itself would write; the point is read from the text's ``_ATB_POINT``
    line and the file re-rendered, so nothing but the identical text qualifies, whoever submitted it.
    """
    prefix = "\n_ATB_POINT = "
    at = text.find(prefix)
    if at < 0:
        return None
    line = text[at + len(prefix):text.find("\n", at + len(prefix))]
    try:
        import ast

        point = full_point(ast.literal_eval(line))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, KnobSpaceError):
        return None
    return point if render_point(task, point) == text else None


# The rendered block. Plain text with one substitution (the point's dict literal), so its digest names
# the rendering; every name it adds starts with _atb so it cannot shadow the problem's own.
_TEMPLATE = '''\
# ----------------------------------------------------------------------------------------------------
# AutoTuneBench module space (atb-module-space/2): one point of the random-search space, rendered by
# harness/tasks/_module_space.py. The problem's Model above is unchanged. ModelNew is Model built from
# the same init inputs (so, under the harness's init seed, the same weights), run with the settings in
# _ATB_POINT. None of them changes precision: no TF32, no half precision, no autocast.
import contextlib as _atb_contextlib

import torch as _atb_torch

_ATB_POINT = __ATB_POINT__
_ATB_GRAPHED_MODES = ("reduce-overhead", "max-autotune")   # the modes with triton.cudagraphs on


def _atb_map(fn, obj):
    """``fn`` on every tensor of an output (a tensor, or a tuple or list of them)."""
    if isinstance(obj, _atb_torch.Tensor):
        return fn(obj)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_atb_map(fn, o) for o in obj)
    return obj


def _atb_channels_last(t):
    """channels_last for a 4-D tensor, channels_last_3d for a 5-D one; any other tensor as it is."""
    if t.dim() == 4:
        return t.contiguous(memory_format=_atb_torch.channels_last)
    if t.dim() == 5:
        return t.contiguous(memory_format=_atb_torch.channels_last_3d)
    return t


def _atb_compiled(fn, mode, options):
    """torch.compile in ``mode`` with extra Inductor ``options`` (a mode and options cannot be given
    together, so the mode's own options are merged under the extra ones)."""
    import torch._inductor as _atb_inductor

    merged = dict(_atb_inductor.list_mode_options(mode))
    merged.update(options)
    return _atb_torch.compile(fn, options=merged) if merged else _atb_torch.compile(fn)


class _AtbCaptureFailed(RuntimeError):
    """The CUDA-graph capture failed (not the compile, which the warm-up before it has done)."""


class _AtbGraphed:
    """CUDA-graph replay of ``fn``, captured once per input signature on static copies of the inputs.
    A call copies its inputs in, replays, and returns copies of the static outputs: the next replay
    overwrites those, and the caller may still hold this call's output."""

    def __init__(self, fn):
        self.fn = fn
        self.graphs = {}

    def __call__(self, *args):
        if _atb_torch.cuda.is_current_stream_capturing():
            return self.fn(*args)   # inside an outer capture: that graph holds these kernels itself
        key = tuple((tuple(a.shape), tuple(a.stride()), a.dtype, str(a.device))
                    if isinstance(a, _atb_torch.Tensor) else repr(a) for a in args)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._capture(args)
        graph, static_in, static_out = entry
        for dst, src in zip(static_in, args):
            if isinstance(dst, _atb_torch.Tensor):
                dst.copy_(src)
        graph.replay()
        return _atb_map(lambda t: t.clone(), static_out)

    def _capture(self, args):
        static_in = [a.clone() if isinstance(a, _atb_torch.Tensor) else a for a in args]
        side = _atb_torch.cuda.Stream()
        side.wait_stream(_atb_torch.cuda.current_stream())
        with _atb_torch.cuda.stream(side):
            for _ in range(3):   # warm-up (and any compilation) outside the capture
                self.fn(*static_in)
        _atb_torch.cuda.current_stream().wait_stream(side)
        graph = _atb_torch.cuda.CUDAGraph()
        try:
            with _atb_torch.cuda.graph(graph):
                static_out = self.fn(*static_in)
        except Exception as exc:
            raise _AtbCaptureFailed(f"the candidate's CUDA-graph capture failed: {type(exc).__name__}: {exc}") from exc
        return graph, static_in, static_out


class ModelNew(Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        point = _ATB_POINT
        if point["channels_last"]:
            self._apply(_atb_channels_last)
        if point["cudnn_benchmark"]:
            _atb_torch.backends.cudnn.benchmark = True
        run = super().forward
        if point["compile"] != "off":
            options = {}
            if point["coordinate_descent"]:
                options["coordinate_descent_tuning"] = True
            if not point["epilogue_fusion"]:
                options["epilogue_fusion"] = False
            if point["gemm_backends"] != "default":
                options["max_autotune_gemm_backends"] = point["gemm_backends"]
            run = _atb_compiled(run, point["compile"], options)
        if point["cuda_graph"]:
            run = _AtbGraphed(run)
        self._atb_run = run
        self._atb_compiling = point["compile"] != "off"

    def forward(self, *args):
        point = _ATB_POINT
        mode = _atb_torch.inference_mode() if point["inference_mode"] else _atb_contextlib.nullcontext()
        with mode:
            if point["channels_last"]:
                args = tuple(_atb_map(_atb_channels_last, a) for a in args)
            graphed = point["compile"] in _ATB_GRAPHED_MODES
            if graphed:   # a new step of Inductor's CUDA-graph trees
                _atb_torch.compiler.cudagraph_mark_step_begin()
            if self._atb_compiling:   # the first call compiles: its failure is a compile failure
                try:
                    out = self._atb_run(*args)
                except _AtbCaptureFailed:
                    raise   # compiled already (the capture's warm-up): say what failed
                except Exception as exc:
                    raise RuntimeError(f"the candidate raised while compiling: {type(exc).__name__}: {exc}") from exc
                self._atb_compiling = False
            else:
                out = self._atb_run(*args)
            if point["channels_last"]:   # the layout the eager Model returns
                out = _atb_map(lambda t: t.contiguous(), out)
            if graphed:   # on CUDA its graph's outputs are overwritten by the next replay
                out = _atb_map(lambda t: t.clone() if t.is_cuda else t, out)
            return out
'''


__all__ = ["COMPILE_MODES", "DEFAULTS", "RENDERER", "ModuleFacts", "ModuleSpace", "build_module_space",
           "full_point", "module_facts", "module_space", "point_of_rendering", "render_point"]
