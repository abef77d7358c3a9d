"""Helpers that build real stored verdicts and campaigns (no evaluation needed), and their own checks.

Other test files of the campaign/compare/prereg/report family import these helpers; the verdicts go
through the store's real ingest rules, so a helper that built an untrustworthy row would fail here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.records import (
    DeviceFingerprint, GateResult, MeasurementSample, MeasurementSet, Verdict, sha256_text,
)
from harness.store import IngestRejected, ResultStore, open_store
from harness.tuning.campaigns import CampaignRecorder, IterationUsage
from harness.verdict.gates import gate_names
from protocol import load_protocol

PROTO = load_protocol()
REF = PROTO.ref()
SEEDS = list(range(7, 7 + PROTO.seeds.paired_seeds))
TASK = "relu"


def fingerprint(name: str = "cpu-test") -> DeviceFingerprint:
    return DeviceFingerprint(backend="cpu", cpu_model=name, cpu_count=2, torch_version="2.13.0")


def open_session(store: ResultStore, device: str = "cpu-test") -> str:
    return store.open_session(fingerprint(device), REF)


def make_verdict(store: ResultStore, session: str, text: str, ratio: float | None, halfwidth: float = 0.01,
                 *, status: str = "accepted", correct: bool = True, failed_gate: str | None = None,
                 task: str = TASK, reason: str = "") -> str:
    """Store a verdict for candidate ``text`` with speedup ``ratio`` and relative CI half-width."""
    cand = store.add_candidate(text, "kernel", REF)
    base = sha256_text("baseline:" + task)
    dev = store.session(session)["device_sha256"]
    # every registered gate, as the store requires; ``failed_gate`` names one by its suffix ("escape")
    names = gate_names()
    failing = next(n for n in names if n.endswith(failed_gate)) if failed_gate else None
    gates = [GateResult(name=n, passed=n != failing, detail="tripped" if n == failing else "") for n in names]
    cset = bset = None
    lo = hi = None
    if ratio is not None:
        cset = MeasurementSet(session_id=session, device_sha256=dev, protocol=REF, task_id=task,
                              subject_sha256=cand, arm="candidate",
                              samples=[MeasurementSample(seed=s, values=[1000.0 / ratio]) for s in SEEDS])
        bset = MeasurementSet(session_id=session, device_sha256=dev, protocol=REF, task_id=task,
                              subject_sha256=base, arm="baseline",
                              samples=[MeasurementSample(seed=s, values=[1000.0]) for s in SEEDS])
        lo, hi = ratio * (1 - halfwidth), ratio * (1 + halfwidth)
    v = Verdict(session_id=session, device_sha256=dev, protocol=REF, task_id=task, candidate_sha256=cand,
                baseline_sha256=base, baseline_label="eager-reference", status=status,  # type: ignore[arg-type]
                correct=correct, reason=reason or ("" if status == "accepted" else "judged"), ratio=ratio,
                ci_low=lo, ci_high=hi, candidate_set_id=cset.id if cset else None,
                baseline_set_id=bset.id if bset else None, gates=gates)
    return store.add_verdict(v, cset, bset)


def build_campaign(store: ResultStore, session: str, ratios: list[float | None], *, tuner: str = "random",
                   seed: int = 1, budget: int | None = None, task: str = TASK, halfwidth: float = 0.01,
                   truncated: int = 0, calls: int = 0, tag: str = "", finish: bool = True,
                   preregistration_id: str | None = None, arm: str | None = None) -> str:
    """A campaign whose iteration ``i`` has speedup ``ratios[i]`` (None: a rejected, incorrect candidate)."""
    rec = CampaignRecorder.open(store, PROTO, task_id=task, kind="kernel", tuner_spec=tuner, seed=seed,
                                budget=budget or len(ratios), session_id=session,
                                preregistration_id=preregistration_id, arm=arm)
    for i, r in enumerate(ratios):
        text = f"# {tuner} {tag} seed {seed} iteration {i}\nclass ModelNew: pass\n"
        if r is None:
            vid = make_verdict(store, session, text, None, status="rejected", correct=False, task=task,
                               reason="outputs differ")
        else:
            vid = make_verdict(store, session, text, r, halfwidth, task=task)
        usage = IterationUsage(model_calls=calls, truncated_calls=truncated if i == 0 else 0,
                               tokens_in=100 * calls, tokens_out=50 * calls)
        rec.record(i, verdict_id=vid, usage=usage)
    if finish:
        rec.finish()
    return rec.campaign_id


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    return open_store(tmp_path / "atb.sqlite")


def test_helper_verdicts_pass_the_store_rules(store: ResultStore) -> None:
    sid = open_session(store)
    vid = make_verdict(store, sid, "x", 1.5)
    v = store.verdict(vid)
    assert v.status == "accepted" and v.ratio == 1.5 and v.ci_relative_halfwidth == pytest.approx(0.01)


def test_helper_cannot_store_an_accepted_verdict_with_a_failed_gate(store: ResultStore) -> None:
    sid = open_session(store)
    with pytest.raises(IngestRejected) as e:
        make_verdict(store, sid, "x", 1.5, failed_gate="escape")
    assert e.value.rule == "accepted_with_failed_gate"
