"""An input class the reference itself cannot take is the harness's fact, never the candidate's
(issue 25, protocol 1.6.0 ``correctness.skip_classes_reference_fails``).

On the H200, A/A (the reference as its own candidate) was rejected on KernelBench L3 37_LSTMCn and
41_GRUBidirectional with "candidate exception" on the ``noncontiguous`` class: cuDNN's RNNs refuse a
non-contiguous hidden state, the reference's as much as the candidate's. Here, on a fixture of our
own that refuses the same way on a CPU: the A/A is accepted with the class skipped and recorded; a
candidate that would take the class does not change that (the skip depends on the reference alone);
and a candidate failure on a class the reference takes is still the candidate's.
"""

from __future__ import annotations

from collections.abc import Iterator
import json
from pathlib import Path

import pytest
import torch

from harness.measure.session import MeasurementContext, open_measurement_session
from harness.store import ResultStore, open_store
from harness.verdict.evaluate import EvalResult, evaluate_candidate

FIX = Path(__file__).parent / "fixtures" / "structured"
RNN = str(FIX / "rnn_needs_contiguous.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, MeasurementContext]]:
    torch.set_num_threads(1)
    store = open_store(tmp_path_factory.mktemp("classskip") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="reference class skip") as ctx:
        yield store, ctx
    store.close()


def _eval(candidate: str, session: tuple[ResultStore, MeasurementContext]) -> EvalResult:
    store, ctx = session
    return evaluate_candidate(RNN, (FIX / candidate).read_text(), store=store, session=ctx)


def _skipped(r: EvalResult) -> dict[str, str]:
    assert r.evidence is not None
    return {c.distribution: c.reason for c in r.evidence.comparisons if c.phase == "skipped"}


def test_aa_is_accepted_with_the_class_the_reference_refuses_skipped_and_recorded(
        session: tuple[ResultStore, MeasurementContext]) -> None:
    r = _eval("rnn_same_code.py", session)
    assert r.verdict == "accepted", (r.reason, [(g.name, g.detail) for g in r.gates if not g.passed])
    skipped = _skipped(r)
    assert set(skipped) == {"noncontiguous"}, skipped
    assert "the reference itself raises" in skipped["noncontiguous"]
    assert "hx is not contiguous" in skipped["noncontiguous"]
    assert "the candidate raised too" in skipped["noncontiguous"]     # A/A: both refuse it
    ev = r.evidence
    assert ev is not None
    # nothing the candidate did on the skipped class is judged; the reference's refusal is kept as its fact
    assert not [c for c in ev.candidate_calls if c.distribution == "noncontiguous"]
    refused = [c for c in ev.reference_calls if c.distribution == "noncontiguous"]
    assert len(refused) == 1 and not refused[0].ok and "hx is not contiguous" in refused[0].error
    # every other class was compared on every correctness seed, with inputs made from the problem's draws
    judged = {(c.seed, c.distribution) for c in ev.comparisons if c.phase == "correctness"}
    assert {d for _, d in judged} == {"task", "normal", "uniform", "negative", "zeros_mixed", "large"}
    assert len(judged) == 6 * len(r.correctness_seeds)
    assert {c.inputs for c in ev.candidate_calls if c.distribution == "normal"} == {"factory"}
    # the stored verdict says which class was skipped and why, and does not list it as compared
    store, _ = session
    row = store.query("SELECT detail_json FROM verdicts WHERE id = ?", (r.verdict_id,))
    stored = json.loads(row[0][0])
    assert set(stored["skipped_classes"]) == {"noncontiguous"}
    assert "hx is not contiguous" in stored["skipped_classes"]["noncontiguous"]
    assert "noncontiguous" not in stored["distributions"]


def test_the_skip_depends_on_the_reference_alone(session: tuple[ResultStore, MeasurementContext]) -> None:
    r = _eval("rnn_contiguous_first.py", session)       # would take the class; it is skipped all the same
    assert r.verdict == "accepted", r.reason
    skipped = _skipped(r)
    assert set(skipped) == {"noncontiguous"} and "the candidate raised too" not in skipped["noncontiguous"]
    assert r.evidence is not None
    assert not [c for c in r.evidence.candidate_calls if c.distribution == "noncontiguous"]


def test_a_candidate_failure_on_a_class_the_reference_takes_is_the_candidates(
        session: tuple[ResultStore, MeasurementContext]) -> None:
    r = _eval("rnn_fails_on_negative.py", session)
    assert r.verdict == "rejected" and r.correct is False, r.reason
    assert r.evidence is not None and r.evidence.failure is not None
    assert r.evidence.failure.role == "candidate" and "assumes non-negative inputs" in r.evidence.failure.detail
    assert not _skipped(r)
