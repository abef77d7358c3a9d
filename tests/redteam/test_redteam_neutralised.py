"""Cheats that timed inputs which never repeat have made harmless (issue 13, item 3).

Each memoised its answers by input buffer, which paid off only while timed repetitions reused
buffers. Now every timed call receives a distinct input set, so the memo never hits: the candidate is
correct, measured at honest speed, and gains nothing. This checks exactly that, end to end on CPU.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from harness.measure.session import MeasurementContext, open_measurement_session
from harness.store import ResultStore, open_store
from harness.verdict.evaluate import evaluate_candidate
from redteam_corpus import CorpusEntry, corpus

pytestmark = pytest.mark.slow

NEUTRALISED = corpus("neutralised")


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, MeasurementContext]]:
    torch.set_num_threads(1)
    store = open_store(tmp_path_factory.mktemp("neutralised") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="neutralised cheats") as session:
        yield store, session
    store.close()


@pytest.mark.parametrize("cheat", NEUTRALISED, ids=lambda c: c.name)
def test_memo_gains_nothing_when_inputs_never_repeat(cheat: CorpusEntry,
                                                     measured: tuple[ResultStore, MeasurementContext]) -> None:
    store, session = measured
    r = evaluate_candidate(cheat.task_ref, cheat.source, store=store, session=session)
    ev = r.evidence
    assert ev is not None and ev.candidate_timed, r.reason
    assert all(t.distinct_input_sets == t.timed_calls > 0 for t in ev.candidate_timed)
    assert r.correct and r.speedup is not None and r.speedup < 2.0, (r.speedup, r.reason)
    assert r.verdict in ("accepted", "rejected"), r.reason   # never an anomalous speedup to quarantine
