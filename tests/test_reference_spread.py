"""A nondeterministic reference (protocol 1.5.0, ``correctness.reference_spread_factor``).

A comparison that fails on tolerance is judged again after the reference runs a second time on the
same input: where the reference differs from itself, the candidate may differ by k times that spread
more; where it repeats itself exactly, the failure stands. The honest side (the noisy reference's own
code is accepted) is in the red-team corpus (``honest/noisy_reference_same_code.py``); here are the
comparison itself and the candidates that must still fail.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from harness.measure.correctness import compare_tensors, reference_spread
from harness.measure.session import MeasurementContext, open_measurement_session
from harness.store import ResultStore, open_store
from harness.verdict.evaluate import evaluate_candidate
from protocol import load_protocol

F32 = {"float32": {"atol": 1e-4, "rtol": 1e-4, "rel_l2": 2e-5}}
NOISY = str(Path(__file__).resolve().parent / "redteam" / "tasks" / "noisy_reference.py")


def test_the_protocol_allows_a_multiple_of_the_references_spread() -> None:
    assert load_protocol().correctness.reference_spread_factor > 0


def test_extra_allowance_widens_both_bars_and_nothing_else() -> None:
    r = torch.full((1000,), 2.0)
    c = r + 5e-4
    assert not compare_tensors(r, c, F32).passed                                   # 5e-4 > 2e-4 + 2e-4
    assert not compare_tensors(r, c, F32, extra_abs=4e-4).passed                   # relative L2 2.5e-4 > 2e-5
    assert compare_tensors(r, c, F32, extra_abs=4e-4, extra_rel_l2=3e-4).passed
    far = compare_tensors(r, r + 5e-2, F32, extra_abs=4e-4, extra_rel_l2=3e-4)
    assert not far.passed and "the reference's spread" in far.reason
    nan = c.clone()
    nan[3] = math.nan
    assert not compare_tensors(r, nan, F32, extra_abs=1.0, extra_rel_l2=1.0).passed   # NaN is never excused


def test_reference_spread_is_zero_for_equal_runs_and_none_where_infinities_differ() -> None:
    r = torch.linspace(-3, 3, 4096)
    assert reference_spread(r, r.clone()) == (0.0, 0.0)
    noise = torch.zeros_like(r)
    noise[::7] = 3e-4
    mx, rel = reference_spread(r, r + noise)  # type: ignore[misc]
    assert math.isclose(mx, 3e-4, rel_tol=1e-3) and 0 < rel < 1e-3
    inf = r.clone()
    inf[0] = math.inf
    assert reference_spread(r, inf) is None
    assert reference_spread((r, r), (r, r.clone())) == (0.0, 0.0)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, MeasurementContext]]:
    torch.set_num_threads(1)
    store = open_store(tmp_path_factory.mktemp("spread") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="reference spread") as ctx:
        yield store, ctx
    store.close()


OFFSET = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2.0 + 0.01   # 20x the reference's own noise bound (5e-4)
'''

SLIGHTLY_WRONG_RELU = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1e-3
'''


@pytest.mark.slow
def test_an_error_beyond_the_references_spread_is_still_incorrect(session: tuple[ResultStore, MeasurementContext]) -> None:
    store, ctx = session
    r = evaluate_candidate(NOISY, OFFSET, store=store, session=ctx)
    assert r.verdict == "rejected" and r.correct is False, r.reason
    assert "the reference's own two runs differ by up to" in r.reason, r.reason


@pytest.mark.slow
def test_a_deterministic_reference_excuses_nothing(session: tuple[ResultStore, MeasurementContext]) -> None:
    store, ctx = session
    r = evaluate_candidate("relu", SLIGHTLY_WRONG_RELU, store=store, session=ctx)
    assert r.verdict == "rejected" and r.correct is False, r.reason
    assert "repeats itself exactly" in r.reason, r.reason
