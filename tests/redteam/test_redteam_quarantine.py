"""The quarantine's extended pass: a genuine large speedup is cleared, a cheat that only fooled the
task's own inputs is not, and the verdict's effective status follows the stored review."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from harness.measure.session import MeasurementContext, open_measurement_session
from harness.store import ResultStore, open_store
from harness.verdict.evaluate import evaluate_candidate
from harness.verdict.quarantine import QuarantineError, review_quarantine
from protocol import load_protocol
from redteam_corpus import corpus

pytestmark = pytest.mark.slow

CASES = {c.name: c for c in corpus("quarantine")}


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, MeasurementContext]]:
    torch.set_num_threads(1)
    store = open_store(tmp_path_factory.mktemp("quarantine") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="quarantine pass") as session:
        yield store, session
    store.close()


def test_genuine_large_speedup_is_quarantined_then_cleared(measured: tuple[ResultStore, MeasurementContext]) -> None:
    store, session = measured
    c = CASES["relu_once"]
    r = evaluate_candidate(c.task_ref, c.source, store=store, session=session)
    print(f"\nrelu_once: {r.verdict} speedup {r.speedup}")
    assert r.verdict == "quarantined", r.reason
    assert [g.name for g in r.gates if not g.passed] == ["anomaly"]
    assert store.effective_status(r.verdict_id) == "quarantined"
    review = review_quarantine(r.verdict_id, c.task_ref, c.source, store=store, session=session)
    print(f"  {review.reason}")
    assert review.cleared, review.reason
    assert review.paired_seeds >= load_protocol().seeds.extended_paired_seeds
    assert store.effective_status(r.verdict_id) == "accepted"


def test_cheat_that_fooled_only_the_tasks_inputs_stays_quarantined(
        measured: tuple[ResultStore, MeasurementContext]) -> None:
    store, session = measured
    c = CASES["passthrough_copy"]
    r = evaluate_candidate(c.task_ref, c.source, store=store, session=session)
    print(f"\npassthrough_copy: {r.verdict} speedup {r.speedup}")
    assert r.verdict == "quarantined" and r.correct, r.reason
    review = review_quarantine(r.verdict_id, c.task_ref, c.source, store=store, session=session)
    print(f"  {review.reason[:300]}")
    assert not review.cleared and "incorrect" in review.reason
    assert store.effective_status(r.verdict_id) == "quarantined"
    with pytest.raises(QuarantineError):
        review_quarantine(r.verdict_id, c.task_ref, c.source + "\n# edited\n", store=store, session=session)
    extended = review.extended_verdict_ids[-1]
    with pytest.raises(QuarantineError):
        review_quarantine(extended, c.task_ref, c.source, store=store, session=session)


def test_a_speedup_read_from_the_input_pool_does_not_survive_private_inputs(
        measured: tuple[ResultStore, MeasurementContext]) -> None:
    """The pool-prefix cheat is right on every input and above every byte floor; its speed comes only from
    precomputing over the pool its timed windows are cut from. The extended pass times every call on inputs
    of their own storage, where the trick finds nothing, and the verdict stays quarantined (protocol 1.6.0,
    gates.extended_speedup_min_fraction)."""
    store, session = measured
    c = next(e for e in corpus("cheats") if e.name == "anomaly_pool_prefix_precompute")
    r = evaluate_candidate(c.task_ref, c.source, store=store, session=session)
    print(f"\nanomaly_pool_prefix_precompute: {r.verdict} speedup {r.speedup}")
    assert r.verdict == "quarantined" and r.correct, r.reason
    review = review_quarantine(r.verdict_id, c.task_ref, c.source, store=store, session=session)
    print(f"  {review.reason[:400]}")
    assert not review.cleared and "inputs of their own storage" in review.reason, review.reason
    assert store.effective_status(r.verdict_id) == "quarantined"
