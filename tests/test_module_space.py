"""The module space of a PyTorch-module problem (issue 26): what applies where, its constraints, seeded
draws, and rendering (the all-default point is the start arm; other points compute what eager does)."""

from __future__ import annotations

import contextlib
import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.records import sha256_text
from harness.space import KnobSpaceError
from harness.tasks import CountedCost, load_task
from harness.tasks._module_space import (
    DEFAULTS, RENDERER, ModuleFacts, build_module_space, full_point, render_point,
)
from harness.tuning.search import RandomSearch

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "module_space"
SIZES = ROOT / "benchmarks" / "results" / "kernelbench"


def _facts(inputs: list[tuple[list[int], str]], ops: list[str], method: str = "flop_counter:meta") -> ModuleFacts:
    return ModuleFacts.from_count(CountedCost(method=method, inputs=inputs, flops_by_op={o: 1.0 for o in ops}))


CONV = _facts([([2, 3, 12, 12], "float32")], ["aten.convolution"])
ELEMENTWISE = _facts([([8, 256], "float32"), ([8, 256], "float32")], [])
INT_4D = _facts([([2, 3, 12, 12], "int64")], [])


def _names(facts: ModuleFacts, backend: str) -> list[str]:
    return [k.name for k in build_module_space(facts, backend).space.knobs]


def test_what_applies_follows_the_problem_and_the_backend() -> None:
    assert _names(CONV, "cuda") == ["compile", "coordinate_descent", "epilogue_fusion", "gemm_backends", "cuda_graph",
                                    "channels_last", "cudnn_benchmark", "inference_mode"]
    assert _names(CONV, "cpu") == ["compile", "epilogue_fusion", "channels_last", "inference_mode"]
    assert _names(ELEMENTWISE, "cuda") == ["compile", "coordinate_descent", "cuda_graph", "inference_mode"]
    assert _names(ELEMENTWISE, "cpu") == ["compile", "inference_mode"]
    assert "channels_last" not in _names(INT_4D, "cuda")          # 4-D, but not floating point
    cpu_modes = build_module_space(CONV, "cpu").space.knob("compile").values()
    assert cpu_modes == ["off", "default", "max-autotune"]        # no CUDA-graph modes on a CPU
    assert "reduce-overhead" in build_module_space(CONV, "cuda").space.knob("compile").values()
    # a forward the count could not run: the ops are unknown, so the knobs that depend on them stay
    unknown = _facts([([4, 16], "float32")], [], method="bytes_only:forward failed on meta (ValueError)")
    assert unknown.gemm is None and {"gemm_backends", "cudnn_benchmark"} <= set(_names(unknown, "cuda"))
    nothing = ModuleFacts.from_count(None)
    assert _names(nothing, "cpu") == ["compile", "epilogue_fusion", "inference_mode"]
    with pytest.raises(KnobSpaceError, match="cpu and cuda"):
        build_module_space(CONV, "mlx")


def test_constraints_hold_in_every_draw_and_every_value_is_reached() -> None:
    space = build_module_space(CONV, "cuda").space
    points = RandomSearch(space, 5).sequence(300)
    assert all(not space.violations(p) for p in points)
    for p in points:
        if p["compile"] == "off":   # Inductor options only with compile on
            assert (p["coordinate_descent"], p["epilogue_fusion"], p["gemm_backends"]) == (False, True, "default")
        if p["cuda_graph"]:
            assert p["compile"] not in ("max-autotune", "reduce-overhead")
        if p["gemm_backends"] != "default" or not p["epilogue_fusion"]:
            assert p["compile"] in ("max-autotune", "max-autotune-no-cudagraphs")
        if p["coordinate_descent"]:
            assert p["compile"] in ("default", "reduce-overhead")
    for knob in space.knobs:
        assert {json.dumps(p[knob.name]) for p in points} == {json.dumps(v) for v in knob.values()}, knob.name
    bad = {**DEFAULTS, "compile": "off", "gemm_backends": "TRITON"}
    assert space.violations(bad)


def test_same_seed_same_points_and_candidates() -> None:
    task = load_task(FIX / "tiny_conv_relu.py")
    space = build_module_space(CONV, "cuda").space
    first = RandomSearch(space, 1).sequence(10)
    assert RandomSearch(space, 1).sequence(10) == first
    assert RandomSearch(space, 2).sequence(10) != first
    digests = [sha256_text(render_point(task, p)) for p in first]
    assert digests == [sha256_text(render_point(task, p)) for p in RandomSearch(space, 1).sequence(10)]
    assert len(set(digests)) == 10                              # distinct points render distinct files


def test_the_all_default_point_is_the_start_arm() -> None:
    task = load_task(FIX / "tiny_conv_relu.py")
    assert render_point(task, {}) == task.start_source()
    assert render_point(task, dict(DEFAULTS)) == task.start_source()
    assert render_point(task, {"compile": "off", "inference_mode": False}) == task.start_source()
    other = render_point(task, {"inference_mode": True})
    assert other.startswith(task.source.rstrip()) and "class ModelNew(Model)" in other and RENDERER in other


def test_a_point_outside_the_universe_is_refused() -> None:
    with pytest.raises(KnobSpaceError, match="unknown"):
        full_point({"tf32": True})
    with pytest.raises(KnobSpaceError, match="not one of"):
        full_point({"compile": "fast"})
    with pytest.raises(KnobSpaceError, match="bool"):
        full_point({"channels_last": 1})


def _build(source: str, init: list[Any], seed: int = 3) -> tuple[Any, Any]:
    ns: dict[str, Any] = {}
    exec(compile(source, "<rendered>", "exec"), ns)  # noqa: S102 - our own rendered file, in a test
    torch.manual_seed(seed)
    ref = ns["Model"](*init)
    torch.manual_seed(seed)
    new = ns["ModelNew"](*init)
    return ref, new


@pytest.mark.parametrize("channels_last, inference_mode", list(itertools.product([False, True], repeat=2)))
def test_uncompiled_points_compute_what_eager_computes(channels_last: bool, inference_mode: bool) -> None:
    task = load_task(FIX / "tiny_conv_relu.py")
    ref, new = _build(render_point(task, {"channels_last": channels_last, "inference_mode": inference_mode}), [3, 8])
    assert all(torch.equal(a, b) for a, b in zip(ref.state_dict().values(), new.state_dict().values()))
    assert list(ref.state_dict()) == list(new.state_dict())     # a subclass: the same parameter names
    if channels_last:
        assert new.conv.weight.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        want, got = ref(x), new(x)
    assert got.is_contiguous() and got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_every_rendered_point_passes_the_source_scans() -> None:
    """No point may look like a precision downgrade or tampering to the gates' static scans."""
    from harness.verdict.gates import precision, tampering
    from harness.verdict.gates._source import scan_source

    task = load_task(FIX / "tiny_conv_relu.py")
    for p in RandomSearch(build_module_space(CONV, "cuda").space, 3).sequence(40):
        scan = scan_source(render_point(task, p))
        assert not scan.parse_error
        assert precision._source_problems(scan, "float32", precision.RANK["float32"]) == []
        assert tampering._source_problems(scan) == []


@pytest.mark.parametrize("level", [1, 2])
def test_every_kernelbench_problem_of_levels_1_and_2_has_a_space(level: int) -> None:
    """From the committed counts of KernelBench (snapshot 423217d; benchmarks/results/kernelbench/sizes_levelN.json):
    every problem gets a space on both backends, channels_last exactly where a 4-D/5-D float input is."""
    doc = json.loads((SIZES / f"sizes_level{level}.json").read_text())
    assert len(doc["problems"]) == 100
    with_nd = 0
    for row in doc["problems"]:
        counted = CountedCost(method=row["method"], inputs=[tuple(i) for i in row["inputs"]],
                              flops_by_op=row["flops_by_op"])
        facts = ModuleFacts.from_count(counted)
        nd = any(len(shape) in (4, 5) and dtype.startswith(("float", "bfloat")) for shape, dtype in row["inputs"])
        for backend in ("cpu", "cuda"):
            ms = build_module_space(facts, backend)
            assert ("channels_last" in [k.name for k in ms.space.knobs]) == nd, row["problem"]
            ms.space.sample(random.Random(0))
        with_nd += nd
    assert 0 < with_nd < 100


def test_a_kernel_subject_binds_its_backend_and_records_the_space() -> None:
    from harness.tuning.search._task import on_backend
    from harness.tuning.subjects import load_subject

    subject = load_subject(FIX / "tiny_conv_relu.py")
    assert "cuda_graph" not in [k.name for k in subject.search_space().knobs]   # type: ignore[attr-defined]
    cuda = on_backend(subject, "cuda")
    assert "cuda_graph" in [k.name for k in cuda.search_space().knobs]          # type: ignore[attr-defined]
    config = cuda.search_config()
    assert config["knob_space"] == cuda.search_space().model_dump(mode="json")  # type: ignore[attr-defined]
    record = config["module_space"]
    assert record["renderer"] == RENDERER and record["backend"] == "cuda" and len(record["renderer_sha256"]) == 64
    assert record["facts"]["input_ranks"] == [4] and record["facts"]["conv"] is True
    point = cuda.search_space().sample(random.Random(0))  # type: ignore[attr-defined]
    assert cuda.render(point) == render_point(load_task(FIX / "tiny_conv_relu.py"), point)
    with pytest.raises(KnobSpaceError):
        on_backend(subject, "mlx").search_space()
    native = load_subject("relu")                                  # a task that declares knobs keeps its own
    assert on_backend(native, "cuda").search_config() == native.search_config()


class _FakeStream:
    def wait_stream(self, other: Any) -> None:
        pass


class _FailingCapture:
    """``torch.cuda.graph`` whose capture fails, as a capture does for code that synchronises."""

    def __init__(self, graph: Any) -> None:
        pass

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        raise RuntimeError("operation not permitted when stream is capturing")


def _graphed_compiled_model(monkeypatch: pytest.MonkeyPatch, warm_up_fails: bool) -> Any:
    """A compile+CUDA-graph point's ModelNew on this CPU machine: the compile is the identity (or a
    function that raises, as a failing compile does on its first call) and the CUDA-graph API is faked
    so that the capture fails."""
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "Stream", _FakeStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: _FakeStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(torch.cuda, "graph", _FailingCapture)
    task = load_task(FIX / "tiny_conv_relu.py")
    ns: dict[str, Any] = {}
    exec(compile(render_point(task, {"compile": "default", "cuda_graph": True}), "<rendered>", "exec"), ns)  # noqa: S102

    def compiled(fn: Any, mode: str, options: dict[str, Any]) -> Any:
        if not warm_up_fails:
            return fn

        def broken(*args: Any) -> Any:
            raise RuntimeError("inductor: C++ compile failed")
        return broken

    ns["_atb_compiled"] = compiled
    return ns["ModelNew"](3, 8)


def test_a_failed_cuda_graph_capture_is_not_reported_as_a_compile_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 26: with compile and the CUDA-graph wrapper both on, the first call compiles (in the
    capture's warm-up) and then captures; a capture failure must say so, not "raised while compiling"."""
    model = _graphed_compiled_model(monkeypatch, warm_up_fails=False)
    with pytest.raises(RuntimeError) as caught, torch.no_grad():
        model(torch.randn(2, 3, 12, 12))
    assert str(caught.value).startswith("the candidate's CUDA-graph capture failed: RuntimeError: operation not "
                                        "permitted"), caught.value
    assert "while compiling" not in str(caught.value)
    broken = _graphed_compiled_model(monkeypatch, warm_up_fails=True)
    with pytest.raises(RuntimeError, match="^the candidate raised while compiling: RuntimeError: inductor"), \
            torch.no_grad():
        broken(torch.randn(2, 3, 12, 12))
