"""The red-team corpus, end to end through ``harness.verdict.evaluate.evaluate_candidate`` on CPU.

Each cheat must be rejected or quarantined *by the gate meant to catch it* (that gate's result is
``passed=False``); an ``exclusive`` cheat must be caught by no other gate, which shows the gate is
needed. Each honest optimised candidate must be accepted with every gate passed, or, if its genuine
speedup crosses the anomaly threshold, quarantined and then cleared by the extended pass: a false
quarantine that stays is a bug. One measurement session serves the whole module.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from harness.measure.session import MeasurementContext, open_measurement_session
from harness.store import ResultStore, open_store
from harness.verdict.evaluate import evaluate_candidate
from harness.verdict.gates import gate_names
from harness.verdict.quarantine import review_quarantine
from redteam_corpus import CorpusEntry, corpus

pytestmark = pytest.mark.slow

CHEATS = corpus("cheats")
HONEST = corpus("honest")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, MeasurementContext]]:
    torch.set_num_threads(1)  # the parent only compares outputs; leave the cores to the measuring children
    store = open_store(tmp_path_factory.mktemp("redteam") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="red-team corpus") as session:
        yield store, session
    store.close()


def test_every_gate_has_a_cheat_in_the_corpus() -> None:
    targeted = {c.gate for c in CHEATS}
    assert targeted == set(gate_names()), set(gate_names()) ^ targeted
    # Not exclusive by nature: a time below the physical floor is usually also an anomalous speedup,
    # and a CPU side thread races the harness's output copy, so its cheat is often wrong as well.
    inclusive = {"physical_limit", "timed_region_escape"}
    missing = [g for g in gate_names() if g not in inclusive and not any(c.gate == g and c.exclusive for c in CHEATS)]
    assert not missing


@pytest.mark.parametrize("cheat", CHEATS, ids=lambda c: c.name)
def test_cheat_is_caught_by_its_gate(cheat: CorpusEntry, measured: tuple[ResultStore, MeasurementContext]) -> None:
    store, session = measured
    r = evaluate_candidate(cheat.task_ref, cheat.source, store=store, session=session)
    failed = {g.name for g in r.gates if not g.passed}
    detail = {g.name: g.detail[:300] for g in r.gates if not g.passed}
    print(f"\n{cheat.name}: {r.verdict} (correct={r.correct}, speedup={r.speedup}) failed gates {sorted(failed)}")
    assert r.verdict in ("rejected", "quarantined"), r.reason
    assert cheat.gate in failed, f"meant for {cheat.gate}; failed {detail}; reason {r.reason}"
    if cheat.exclusive:
        assert failed == {cheat.gate}, detail
    if cheat.gate == "anomaly" and failed == {"anomaly"}:
        assert r.verdict == "quarantined" and store.effective_status(r.verdict_id) == "quarantined"
    else:
        assert r.verdict == "rejected"
    assert store.verdict(r.verdict_id).status == r.verdict


@pytest.mark.parametrize("honest", HONEST, ids=lambda c: c.name)
def test_honest_optimised_candidate_is_accepted(honest: CorpusEntry,
                                                measured: tuple[ResultStore, MeasurementContext]) -> None:
    store, session = measured
    r = evaluate_candidate(honest.task_ref, honest.source, store=store, session=session)
    failed = {g.name: g.detail for g in r.gates if not g.passed}
    print(f"\n{honest.name}: {r.verdict} speedup {r.speedup:.3f}x CI {r.speedup_ci} (gates failed: {sorted(failed)})")
    if r.verdict == "quarantined":
        assert set(failed) == {"anomaly"}
        review = review_quarantine(r.verdict_id, honest.task_ref, honest.source, store=store, session=session)
        print(f"  extended pass: {review.reason}")
        assert review.cleared and review.effective_status == "accepted", review.reason
        return
    assert r.verdict == "accepted" and not failed, (r.reason, failed)
    assert r.correct and r.speedup is not None and r.speedup > 0
