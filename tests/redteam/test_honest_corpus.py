"""The honest corpus (issue 25): its shape, every CPU entry's correctness in-process, and acceptance of a
small CPU subset through the harness.

Why: the harness rejected real speedups (torch.compile, fused small kernels, algebraic rewrites, structure
the problem states), and every validation before was A/A plus cheats. This corpus is the other side:
candidates that are honest (correct on every input the problem could give, same precision, no caching
across calls, work inside forward), declared with their technique class and backends. The correctness
check here runs each CPU entry against its reference in this process on the harness's input classes,
drawn *at the problem's own random factories* (so a triangular, symmetric, SPD or sorted input stays so,
as the problem states), plus non-contiguous strides, so a candidate that is only right on the easy draw
fails here, not in the benchmark. ``benchmarks/honest_corpus.py`` runs the whole corpus on a device.
"""

from __future__ import annotations

import ast
import json
import contextlib
import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from redteam_corpus import HERE, CorpusEntry, honest_corpus

HONEST = honest_corpus()
CPU = honest_corpus("cpu")
KNOWN_BACKENDS = {"cpu", "cuda"}
CLASSES = ("normal", "uniform", "negative", "zeros_mixed", "large", "noncontiguous")
LARGE = 1.0e4   # protocol correctness.large_magnitude
# One entry per technique class that runs on the CPU (at most six): what the acceptance test runs.
ACCEPTANCE = ("alg_distribute_matmul_sum", "struct_symmetric_skip_symmetrize", "inplace_elementwise_chain",
              "fused_small_addcmul", "compile_default_silu", "channels_last_conv_relu")


def _module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _size(args: tuple[Any, ...]) -> tuple[int, ...]:
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(int(a) for a in args[0])
    return tuple(int(a) for a in args)


@contextlib.contextmanager
def _factories(distribution: str, gen: torch.Generator) -> Iterator[None]:
    """``torch.randn``/``torch.rand`` swapped for the input class's draw while ``get_inputs`` runs, so what
    the problem builds from them (tril, symmetrisation, sorting, normalisation) keeps its structure."""
    real_randn, real_rand = torch.randn, torch.rand

    def draw(*args: Any, **kw: Any) -> torch.Tensor:
        size = _size(args)
        dtype = kw.get("dtype") or torch.get_default_dtype()
        if distribution == "uniform":
            t = real_rand(size, generator=gen)
        elif distribution == "negative":
            t = -(real_rand(size, generator=gen) + 1e-3)
        elif distribution == "zeros_mixed":
            t = real_randn(size, generator=gen) * (real_rand(size, generator=gen) < 0.5)
        elif distribution == "large":
            t = real_randn(size, generator=gen) * LARGE
        else:
            t = real_randn(size, generator=gen)
        return t.to(dtype)

    torch.randn, torch.rand = draw, draw  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.randn, torch.rand = real_randn, real_rand  # type: ignore[assignment]


def _strided(t: Any) -> Any:
    """The same values as a non-contiguous view (every other element of a twice-as-wide buffer)."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dim() == 0:
        return t
    wide = torch.zeros(t.shape[:-1] + (2 * t.shape[-1],), dtype=t.dtype)
    wide[..., ::2] = t
    return wide[..., ::2]


def _inputs(task: ModuleType, distribution: str, seed: int) -> list[Any]:
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    with _factories("normal" if distribution == "noncontiguous" else distribution, gen):
        inputs = list(task.get_inputs())
    return [_strided(t) for t in inputs] if distribution == "noncontiguous" else inputs


def _close(out: torch.Tensor, ref: torch.Tensor) -> str | None:
    """The protocol's float32 bars: |out - ref| <= 1e-4 max(1, rms(ref)) + 1e-4 |ref|, relative L2 <= 2e-5."""
    if out.shape != ref.shape or out.dtype != ref.dtype:
        return f"shape/dtype {tuple(out.shape)} {out.dtype} against {tuple(ref.shape)} {ref.dtype}"
    o, r = out.double(), ref.double()
    if not torch.isfinite(o).all():
        return "non-finite output"
    scale = max(1.0, float(r.square().mean().sqrt())) if r.numel() else 1.0
    over = (o - r).abs() - (1e-4 * scale + 1e-4 * r.abs())
    if r.numel() and float(over.max()) > 0:
        return f"largest excess over the element bar {float(over.max()):.3g}"
    rel = float((o - r).norm() / r.norm().clamp_min(1e-30))
    return None if rel <= 2e-5 else f"relative L2 {rel:.3g}"


def _same_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


# ------------------------------------------------------------------------------------------- shape
def test_corpus_shape() -> None:
    assert len(HONEST) >= 30, len(HONEST)
    classes = {e.technique for e in HONEST}
    assert None not in classes, [e.name for e in HONEST if e.technique is None]
    assert len(classes) >= 10, sorted(c for c in classes if c)
    for e in HONEST:
        assert e.gate is None, e.name
        assert e.backends and set(e.backends) <= KNOWN_BACKENDS, (e.name, e.backends)
        task = Path(e.task_ref)
        assert task.is_file() and task.is_relative_to(HERE / "tasks"), (e.name, e.task)
        tree = ast.parse(e.source)
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body), e.name
        assert "no_grad" not in e.source and "half()" not in e.source and "bfloat16" not in e.source, e.name
    assert len(CPU) >= 10 and len({e.technique for e in CPU}) >= 6


def test_acceptance_subset_is_one_entry_per_cpu_class() -> None:
    by_name = {e.name: e for e in CPU}
    chosen = [by_name[n] for n in ACCEPTANCE]
    assert len(chosen) <= 6 and len({e.technique for e in chosen}) == len(chosen)


# ------------------------------------------------------------------------------------------- correctness
@pytest.fixture(scope="module")
def threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _check_entry(entry: CorpusEntry, classes: tuple[str, ...], seeds: tuple[int, ...]) -> list[str]:
    task = _module(Path(entry.task_ref), f"hc_task_{entry.name}")
    cand = _module(entry.path, f"hc_cand_{entry.name}")
    torch.manual_seed(7)
    ref_model = task.Model(*task.get_init_inputs())
    torch.manual_seed(7)
    new_model = cand.ModelNew(*task.get_init_inputs())
    problems: list[str] = []
    for distribution in classes:
        for seed in seeds:
            inputs = _inputs(task, distribution, seed)
            before = [t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]
            with torch.no_grad():
                ref = ref_model(*inputs)
                out = new_model(*inputs)
            where = f"{distribution}/seed {seed}"
            if not isinstance(out, torch.Tensor) or type(out) is not torch.Tensor:
                problems.append(f"{where}: output is {type(out).__name__}, not a plain tensor")
                continue
            why = _close(out, ref)
            if why:
                problems.append(f"{where}: {why}")
            for i, (t, b) in enumerate(zip(inputs, before)):
                if isinstance(t, torch.Tensor) and not torch.equal(t, b):
                    problems.append(f"{where}: input {i} was written")
                if isinstance(t, torch.Tensor) and _same_storage(out, t):
                    problems.append(f"{where}: the output shares input {i}'s storage")
    return problems


@pytest.mark.parametrize("entry", CPU, ids=lambda e: e.name)
def test_cpu_entry_is_correct_on_every_input_class(entry: CorpusEntry, threads: None) -> None:
    # a compiled entry recompiles per stride pattern: the classes that change its guards are enough
    compiled = entry.technique is not None and entry.technique.startswith("compile")
    classes = ("normal", "large", "noncontiguous") if compiled else CLASSES
    problems = _check_entry(entry, classes, seeds=(1,) if compiled else (1, 2))
    assert not problems, problems


def test_the_check_catches_a_candidate_right_only_on_the_stated_structure(tmp_path: Path, threads: None) -> None:
    """The correctness check can fail: the skip-the-mask candidate, pointed at a problem whose inputs are
    dense (not triangular), is wrong there; and a candidate that caches its first answer is caught."""
    dense = (HERE / "tasks" / "hc_tril_matmul.py").read_text().replace(
        "return [torch.tril(torch.randn(n, n)), torch.tril(torch.randn(n, n))]",
        "return [torch.randn(n, n), torch.randn(n, n)]")
    (tmp_path / "dense.py").write_text(dense)
    skip = next(e for e in HONEST if e.name == "struct_tril_skip_mask")
    wrong = skip.model_copy(update={"task": str(tmp_path / "dense.py")})
    assert _check_entry(wrong, ("normal",), (1,))
    cache = tmp_path / "cache.py"
    cache.write_text(skip.source.replace(
        "        return torch.matmul(a, b)",
        "        if not hasattr(self, 'memo'):\n            self.memo = torch.matmul(a, b)\n        return self.memo.clone()"))
    cached = skip.model_copy(update={"path": cache})
    assert any("element bar" in p or "relative" in p for p in _check_entry(cached, ("normal", "large"), (1,)))


# ------------------------------------------------------------------------------------------- harness
@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    from harness.measure.session import open_measurement_session
    from harness.store import open_store

    torch.set_num_threads(1)
    store = open_store(tmp_path_factory.mktemp("honest") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="honest corpus subset") as session:
        yield store, session
    store.close()


@pytest.mark.parametrize("name", ACCEPTANCE)
def test_honest_entry_is_accepted_by_the_harness(name: str, measured: tuple[Any, Any]) -> None:
    from harness.verdict.evaluate import evaluate_candidate
    from harness.verdict.quarantine import review_quarantine

    store, session = measured
    entry = next(e for e in CPU if e.name == name)
    r = evaluate_candidate(entry.task_ref, entry.source, store=store, session=session)
    failed: dict[str, str] = {g.name: g.detail[:300] for g in r.gates if not g.passed}
    print(f"\n{name}: {r.verdict} speedup {r.speedup} CI {r.speedup_ci} failed {sorted(failed)}")
    if r.verdict == "quarantined" and set(failed) == {"anomaly"}:
        review = review_quarantine(r.verdict_id, entry.task_ref, entry.source, store=store, session=session)
        assert review.cleared and review.effective_status == "accepted", review.reason
        return
    assert r.verdict == "accepted" and not failed, (r.reason, failed)
    assert r.correct and r.speedup is not None and r.speedup > 0



# ------------------------------------------------------------------------------------------- the benchmark's records
def _benchmark() -> ModuleType:
    return _module(HERE.parents[1] / "benchmarks" / "honest_corpus.py", "atb_honest_corpus_benchmark")


def test_benchmark_resumes_and_summarises(tmp_path: Path) -> None:
    """The benchmark skips settled entries (an ``error`` row is retried once) and its summary counts
    acceptance, the ratio error and the cheats that got through, from the rows as written."""
    bench = _benchmark()
    rows = [
        {"kind": "honest", "name": "a", "class": "algebraic", "status": "accepted", "accepted": True,
         "harness_ratio": 2.0, "independent_ratio": 1.6, "ratio_error": 0.25, "failed_gates": [],
         "ratio_error_same_regime": 0.25, "baseline_median_ns": 200_000.0, "candidate_median_ns": 100_000.0,
         "independent": {"reference_s": [3.1e-4, 3.2e-4, 3.3e-4], "candidate_s": [2e-4, 2e-4, 2e-4]}},
        {"kind": "honest", "name": "b", "class": "structure", "status": "rejected", "accepted": False,
         "harness_ratio": 3.0, "independent_ratio": 3.0, "ratio_error": 0.0, "rejecting_gates": ["stale_output"],
         "failed_gates": [{"name": "stale_output", "detail": "timed output differs"}]},
        {"kind": "honest", "name": "c", "status": "error", "accepted": False},
        {"kind": "cheat", "name": "x", "status": "accepted", "accepted": True, "harness_ratio": 1.5,
         "caught": False, "expected_gate": "stale_output"},
        {"kind": "cheat", "name": "y", "status": "rejected", "accepted": False, "caught": True,
         "caught_by_any_gate": True, "expected_gate": "anomaly", "rejecting_gates": ["anomaly"]},
    ]
    out = tmp_path / "rows.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"torn')
    assert bench.read_done(out) == {"honest:a", "honest:b", "cheat:x", "cheat:y"}
    with out.open("a") as f:
        f.write("\n" + json.dumps(rows[2]) + "\n")
    assert "honest:c" in bench.read_done(out)          # a second error row settles it
    md = bench.render(bench.latest_rows(out), "cpu")
    assert "honest entries accepted: **1 of 3**" in md
    assert "median **0.125**, max 0.250" in md
    assert "caught by the gate meant for them: **1 of 2**" in md and "above 1.1: **1** (x)" in md
    assert "stale_output: timed output differs" in md
    # the pair more than 10% apart gets its arms side by side (us): here the harness reads the reference fast
    assert "| a | 200.000 | 320.000 | 100.000 | 200.000 |" in md
