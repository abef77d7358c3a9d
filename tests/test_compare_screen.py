"""The comparison's screen (``harness.measure.correctness._screen``) may only shortcut a pass.

The screen answers "clearly inside both bars" from min/max and float32 norms, so a large correct
output is not put through ~20 float64 passes. These tests hold it to the exact pass: on every case
below, the comparison with the screen gives the same pass or fail as the exact pass alone, the same
reason on a failure, errors within float32 rounding on a pass, and the screen itself never answers
on a case the exact pass fails.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from harness.measure import correctness
from harness.measure.correctness import OutputCheck, compare_tensors

TOLS = {"float64": {"atol": 1e-9, "rtol": 1e-7, "rel_l2": 1e-9},
        "float32": {"atol": 1e-4, "rtol": 1e-4, "rel_l2": 2e-5},
        "float16": {"atol": 1e-3, "rtol": 1e-3, "rel_l2": 1e-3},
        "bfloat16": {"atol": 1e-2, "rtol": 1e-2, "rel_l2": 8e-3}}


def _exact(ref: Any, cand: Any, monkeypatch: pytest.MonkeyPatch, **kw: float) -> OutputCheck:
    with monkeypatch.context() as m:
        m.setattr(correctness, "_screen", lambda *a, **k: None)
        return compare_tensors(ref, cand, TOLS, **kw)


def _cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(7)
    r = torch.randn(4099, generator=g)
    big = torch.randn(3000, generator=g) * 1e4
    rms = float(r.square().mean().sqrt())
    bar = 1e-4 * max(1.0, rms)
    cases = [
        ("equal", r, r.clone()),
        ("tiny noise", r, r + 1e-7 * torch.randn(r.shape, generator=g)),
        ("one element just inside the bar", r, r.clone().index_put_((torch.tensor([5]),), r[5] + 0.995 * bar)),
        ("one element at 0.999 of the bar", r, r.clone().index_put_((torch.tensor([5]),), r[5] + 0.999 * bar)),
        ("one element past the bar", r, r.clone().index_put_((torch.tensor([5]),), r[5] + 3.0 * bar + 1e-3)),
        ("relative L2 just past", r, r * (1 + 2.5e-5)),
        ("relative L2 just inside", r, r * (1 + 1.0e-5)),
        ("a NaN in the candidate", r, r.clone().index_put_((torch.tensor([9]),), torch.tensor(float("nan")))),
        ("an infinity in the candidate", r, r.clone().index_put_((torch.tensor([9]),), torch.tensor(float("inf")))),
        ("matching infinities", r.clone().index_put_((torch.tensor([3]),), torch.tensor(float("-inf"))),
         r.clone().index_put_((torch.tensor([3]),), torch.tensor(float("-inf")))),
        ("large magnitudes, honest rounding", big, big * (1 + 1e-7)),
        ("large magnitudes, wrong", big, big + 50.0),
        ("reference all zeros, candidate zeros", torch.zeros(1000), torch.zeros(1000)),
        ("reference all zeros, candidate off", torch.zeros(1000), torch.full((1000,), 1e-3)),
        ("norm that overflows float32", torch.full((64,), 3e19), torch.full((64,), 3e19)),
        ("candidate huge", r, r * 1e30),
        ("float64 equal", r.double(), r.double().clone()),
        ("float64 off by 1e-8", r.double(), r.double() + 1e-8),
        ("float16 rounding", r.half(), (r * (1 + 1e-4)).half()),
        ("float16 wrong", r.half(), (r + 0.05).half()),
        ("bfloat16 equal", r.bfloat16(), r.bfloat16().clone()),
        ("empty", torch.zeros(0), torch.zeros(0)),
    ]
    return cases


@pytest.mark.parametrize("name,ref,cand", _cases(), ids=[c[0] for c in _cases()])
def test_the_screen_never_changes_a_judgement(name: str, ref: torch.Tensor, cand: torch.Tensor,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    fast = compare_tensors(ref, cand, TOLS)
    exact = _exact(ref, cand, monkeypatch)
    assert fast.passed == exact.passed, name
    assert fast.reason == exact.reason, name
    if exact.passed and exact.max_abs_err is not None:
        assert fast.max_abs_err == pytest.approx(exact.max_abs_err, rel=1e-5, abs=1e-12)
        assert fast.rel_l2 == pytest.approx(exact.rel_l2, rel=1e-4, abs=1e-12)
    dtype = str(ref.dtype).replace("torch.", "")
    answer = correctness._screen(torch, ref.reshape(-1), cand.reshape(-1), TOLS[dtype], 0.0, 0.0)
    if not exact.passed:
        assert answer is None, f"{name}: the screen answered on a case the exact pass fails"


def test_the_screen_answers_for_clearly_correct_outputs_and_defers_near_a_bar() -> None:
    r = torch.randn(10_000, generator=torch.Generator().manual_seed(1))
    tol = TOLS["float32"]
    assert correctness._screen(torch, r, r + 1e-7, tol, 0.0, 0.0) is not None
    bar = tol["atol"] * max(1.0, float(r.square().mean().sqrt()))
    near = r.clone()
    near[0] += 0.995 * bar
    assert correctness._screen(torch, r, near, tol, 0.0, 0.0) is None, "within 1% of the element bar: exact pass"
    with_nan = r.clone()
    with_nan[1] = math.nan
    assert correctness._screen(torch, r, with_nan, tol, 0.0, 0.0) is None


def test_the_screen_honours_the_references_spread_allowance(monkeypatch: pytest.MonkeyPatch) -> None:
    r = torch.randn(5000, generator=torch.Generator().manual_seed(3))
    cand = r + 0.01
    assert not compare_tensors(r, cand, TOLS).passed
    widened = compare_tensors(r, cand, TOLS, extra_abs=0.05, extra_rel_l2=0.05)
    assert widened.passed == _exact(r, cand, monkeypatch, extra_abs=0.05, extra_rel_l2=0.05).passed
    assert widened.passed


def test_the_screen_spans_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(correctness, "_CHUNK", 1000)
    r = torch.randn(4500, generator=torch.Generator().manual_seed(5))
    bad = r.clone()
    bad[4321] += 1.0                       # in the last, partial chunk
    assert compare_tensors(r, r.clone(), TOLS).passed
    check = compare_tensors(r, bad, TOLS)
    assert not check.passed and "1 elements outside" in check.reason
