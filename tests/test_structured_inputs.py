"""Input classes keep the structure a problem's ``get_inputs`` builds (issue 25, protocol 1.6.0
``correctness.class_inputs: factory``).

KernelBench L1 15 builds lower-triangular inputs with ``torch.tril``; redrawing them dense for the
``normal`` class rejected every kernel that uses the triangularity. Here: the classes keep ``tril``,
integer ranges and softmax rows while still drawing the class's values (a ReLU passthrough on
``torch.rand`` inputs is still exposed); both children build identical values; a ``get_inputs`` that
cannot be re-run that way falls back to the redraw and says why; timed sets keep the structure too;
and, end to end on CPU, a candidate exploiting the stated structure is accepted while candidates that
assume more than the problem states are rejected. Fixtures: ``tests/fixtures/structured/``.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch

from atb_agent.cli import main
from harness.measure.runner._inputs import (FACTORY_INPUTS, REDRAW_INPUTS, TimedSets, inputs_from_spec, make_inputs,
                                            make_inputs_noted, raw_draws_only)
from harness.measure.session import MeasurementContext, open_measurement_session
from harness.store import ResultStore, open_store
from harness.verdict.evaluate import evaluate_candidate
from protocol import load_protocol

FIX = Path(__file__).parent / "fixtures" / "structured"
RELU = Path(__file__).parent / "fixtures" / "kernelbench" / "19_ReLU.py"
CLASSES = ("normal", "uniform", "negative", "zeros_mixed", "large")
LARGE = 1.0e4


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"fix_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _small_tril() -> list[Any]:
    return [torch.tril(torch.rand(16, 16)), torch.tril(torch.rand(16, 16))]


def _lower(t: torch.Tensor) -> bool:
    return bool(torch.equal(t, torch.tril(t)))


def test_the_protocol_makes_class_inputs_from_the_problems_own_draws() -> None:
    c = load_protocol().correctness
    assert c.class_inputs == FACTORY_INPUTS and c.skip_classes_reference_fails is True


def test_every_class_keeps_tril_and_draws_its_own_values() -> None:
    task, note = make_inputs_noted(torch, _small_tril, 5, "task", LARGE, "cpu")
    assert note == ""
    for dist in CLASSES:
        xs, note = make_inputs_noted(torch, _small_tril, 5, dist, LARGE, "cpu")
        assert note == FACTORY_INPUTS, (dist, note)
        assert all(_lower(x) for x in xs), dist
        assert not any(torch.equal(x, t) for x, t in zip(xs, task)), dist
    lower = torch.tril(torch.ones(16, 16, dtype=torch.bool))
    neg = make_inputs(torch, _small_tril, 5, "negative", LARGE, "cpu")[0]
    assert bool((neg[lower] < 0).all()) and bool((neg[~lower] == 0).all())
    assert float(make_inputs(torch, _small_tril, 5, "large", LARGE, "cpu")[0].abs().max()) > 100.0
    assert bool((make_inputs(torch, _small_tril, 5, "normal", LARGE, "cpu")[0][lower] < 0).any())


def test_noncontiguous_keeps_the_values_and_changes_only_the_strides() -> None:
    task = make_inputs(torch, _small_tril, 9, "task", LARGE, "cpu")
    xs, note = make_inputs_noted(torch, _small_tril, 9, "noncontiguous", LARGE, "cpu")
    assert note == "strided"
    for x, t in zip(xs, task):
        assert not x.is_contiguous() and torch.equal(x, t)


def test_both_children_build_the_same_values_and_seeds_differ() -> None:
    for dist in ("task", *CLASSES, "noncontiguous"):
        a = make_inputs(torch, _small_tril, 11, dist, LARGE, "cpu")
        b = make_inputs(torch, _small_tril, 11, dist, LARGE, "cpu")
        c = make_inputs(torch, _small_tril, 12, dist, LARGE, "cpu")
        assert all(torch.equal(x, y) for x, y in zip(a, b)), dist
        assert not torch.equal(a[0], c[0]), dist
    # classes are not one draw rescaled
    n, g = (make_inputs(torch, _small_tril, 11, d, LARGE, "cpu")[0] for d in ("normal", "large"))
    assert not torch.allclose(n * LARGE, g)


def test_discrete_draws_keep_their_range_and_softmax_rows_stay_distributions() -> None:
    def hinge() -> list[Any]:
        return [torch.rand(8, 4), torch.randint(0, 2, (64,)).float() * 2 - 1, torch.randint(0, 7, (64,))]

    def kl() -> list[Any]:
        return [torch.rand(8, 5).softmax(dim=-1)]

    for dist in CLASSES:
        x, signs, idx = make_inputs(torch, hinge, 3, dist, LARGE, "cpu")
        assert set(signs.tolist()) == {-1.0, 1.0}, dist
        assert idx.dtype == torch.int64 and 0 <= int(idx.min()) and int(idx.max()) < 7, dist
        rows = make_inputs(torch, kl, 3, dist, LARGE, "cpu")[0]
        assert torch.allclose(rows.sum(-1), torch.ones(8)) and bool((rows >= 0).all()), dist
    def signs_only() -> list[Any]:   # floats made from a discrete draw alone keep their values, not redrawn
        return [torch.randint(0, 2, (64,)).float() * 2 - 1]

    for dist in CLASSES:
        signs, note = make_inputs_noted(torch, signs_only, 3, dist, LARGE, "cpu")
        assert note == FACTORY_INPUTS and set(signs[0].tolist()) == {-1.0, 1.0}, dist
    for dist in (*CLASSES, "noncontiguous"):   # a value that is not a tensor is passed on as it is
        assert make_inputs(torch, lambda: [torch.rand(3), 5], 3, dist, LARGE, "cpu")[1] == 5, dist


def test_the_negative_class_still_exposes_a_passthrough_on_rand_inputs() -> None:
    relu = _module(RELU)
    assert bool((make_inputs(torch, relu.get_inputs, 1, "task", LARGE, "cpu")[0] >= 0).all())
    for dist in ("normal", "negative", "zeros_mixed", "large"):
        x = make_inputs(torch, relu.get_inputs, 1, dist, LARGE, "cpu")[0]
        assert not torch.equal(torch.relu(x), x), dist     # returning the input is wrong on this class
    assert bool((make_inputs(torch, relu.get_inputs, 1, "negative", LARGE, "cpu")[0] < 0).all())


def test_a_get_inputs_that_cannot_be_rerun_falls_back_to_the_redraw_and_says_why() -> None:
    def from_numpy() -> list[Any]:
        return [torch.from_numpy(np.random.default_rng(0).random((4, 4))).float()]

    def picky() -> list[Any]:
        x = torch.rand(4, 4)
        assert bool((x >= 0).all()), "inputs must be non-negative"
        return [x]

    xs, note = make_inputs_noted(torch, from_numpy, 2, "normal", LARGE, "cpu")
    assert note.startswith(REDRAW_INPUTS) and "without a torch random draw" in note
    assert bool((xs[0] < 0).any())
    xs, note = make_inputs_noted(torch, picky, 2, "negative", LARGE, "cpu")
    assert note.startswith(REDRAW_INPUTS) and "AssertionError" in note and bool((xs[0] < 0).all())
    # the redraw itself (the rule before 1.6.0) loses the structure: why classes use the factory now
    dense, note = make_inputs_noted(torch, _small_tril, 5, "normal", LARGE, "cpu", how=REDRAW_INPUTS)
    assert note == REDRAW_INPUTS and not _lower(dense[0])
    with pytest.raises(ValueError, match="unknown input distribution"):
        make_inputs(torch, _small_tril, 5, "bogus", LARGE, "cpu")


def test_timed_sets_of_a_structured_problem_are_whole_draws() -> None:
    assert not raw_draws_only(torch, _small_tril, 1, "cpu")
    assert raw_draws_only(torch, _module(RELU).get_inputs, 1, "cpu")
    sets = TimedSets(torch, _small_tril, 21, LARGE, "cpu", "window", 4)
    assert sets.exact
    seen: set[bytes] = set()
    for _ in range(3):
        q, got = sets.take()
        for i, st in enumerate(got):
            assert all(_lower(t) for t in st)
            again = inputs_from_spec(torch, _small_tril, sets.spec(q, i), LARGE, "cpu")
            assert all(torch.equal(a, b) for a, b in zip(st, again))
            seen.add(st[0].numpy().tobytes())
    assert len(seen) == 12                        # no two timed calls see one set
    sets.retire()
    assert sets.fp_before == sets.fp_after and len(sets.fp_before) == 3 * 2
    # a write into a timed set is seen when the repetition is retired
    q, got = sets.take()
    for st in got:
        st[0].add_(1.0)
    sets.retire()
    assert sets.fp_before[-1] != sets.fp_after[-1] or sets.fp_before[-2] != sets.fp_after[-2]
    assert not TimedSets(torch, _module(RELU).get_inputs, 21, LARGE, "cpu", "window", 4).exact


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_class_draws_happen_on_the_device_and_keep_the_structure() -> None:
    def gi() -> list[Any]:
        return [torch.tril(torch.rand(64, 64)), torch.randint(0, 5, (64,)), torch.rand(32).softmax(-1)]

    for dist in (*CLASSES, "noncontiguous"):
        a, note = make_inputs_noted(torch, gi, 7, dist, LARGE, "cuda")
        b = make_inputs(torch, gi, 7, dist, LARGE, "cuda")
        assert note in (FACTORY_INPUTS, "strided"), (dist, note)
        assert all(x.device.type == "cuda" for x in a), dist
        assert _lower(a[0]) and 0 <= int(a[1].min()) and int(a[1].max()) < 5, dist
        assert torch.allclose(a[2].sum(), torch.ones((), device="cuda")), dist
        assert all(torch.equal(x, y) for x, y in zip(a, b)), dist
    sets = TimedSets(torch, gi, 3, LARGE, "cuda", "graph", 4)
    q, got = sets.take()
    assert sets.exact and all(_lower(st[0]) for st in got)
    again = inputs_from_spec(torch, gi, sets.spec(q, 3), LARGE, "cuda")
    assert all(torch.equal(x, y) for x, y in zip(again, got[3]))


# ------------------------------------------------------------------------------------ end to end (CPU)
def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    data: dict[str, Any] = json.loads(lines[0])
    return data


@pytest.mark.slow
def test_atb_eval_accepts_a_candidate_that_uses_the_stated_triangularity(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["eval", str(FIX / "tril_matmul.py"), str(FIX / "tril_matmul_skip_tril.py"),
               "--db", str(tmp_path / "atb.sqlite"), "--json"])
    data = _json(capsys)
    assert rc == 0, data
    assert data["correct"] is True, data["reason"]
    assert data["verdict"] == "accepted", (data["reason"], [g for g in data["gates"] if not g["passed"]])


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, MeasurementContext]]:
    torch.set_num_threads(1)
    store = open_store(tmp_path_factory.mktemp("structured") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="structured inputs") as ctx:
        yield store, ctx
    store.close()


@pytest.mark.slow
def test_dropping_tril_is_wrong_where_the_problem_does_not_build_it(
        session: tuple[ResultStore, MeasurementContext]) -> None:
    store, ctx = session
    r = evaluate_candidate(str(FIX / "dense_matmul_tril_out.py"), (FIX / "tril_matmul_skip_tril.py").read_text(),
                           store=store, session=ctx)
    assert r.verdict == "rejected" and r.correct is False, r.reason
    assert "(task, correctness)" in r.reason, r.reason


@pytest.mark.slow
def test_assuming_non_negative_inputs_is_still_rejected_on_a_structured_problem(
        session: tuple[ResultStore, MeasurementContext]) -> None:
    store, ctx = session
    r = evaluate_candidate(str(FIX / "tril_matmul.py"), (FIX / "tril_matmul_abs.py").read_text(),
                           store=store, session=ctx)
    assert r.verdict == "rejected" and r.correct is False, r.reason
    assert "(normal, correctness)" in r.reason, r.reason
