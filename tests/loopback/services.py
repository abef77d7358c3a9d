"""Scripted campaign services for tests without Docker or a measuring child process.

The store, campaign recorder, transcripts and graph are real; only measurement is replaced by a
deterministic judge that writes real (protocol-stamped, gated) verdict rows into the store: a
candidate containing ``ModelNew`` is accepted with a speedup derived from its text length, anything
else is rejected. It stands in for the harness, which is not what these tests test.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from atb_agent.evaluation import CANDIDATE_FILE, VerdictSummary
from harness.records import DeviceFingerprint, GateResult, MeasurementSample, MeasurementSet, Verdict, sha256_text
from harness.verdict.gates import gate_names

from .workspace import MemoryToolBox

FINGERPRINT = DeviceFingerprint(backend="cpu", cpu_model="scripted-test-device", cpu_count=1, torch_version="n/a")


class ScriptedJudge:
    def __init__(self, store: Any, protocol: Any, session_id: str, task: Any) -> None:
        self.store, self.protocol, self.session_id, self.task = store, protocol, session_id, task
        self.evaluated: list[int] = []

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary:
        self.evaluated.append(iteration)
        data = files.get(CANDIDATE_FILE)
        if data is None:
            return VerdictSummary(status="no_submission", reason=f"no {CANDIDATE_FILE} submitted")
        text = data.decode()
        ref = self.protocol.ref()
        cand = self.store.add_candidate(text, "kernel", ref)
        good = "ModelNew" in text
        ratio = 1.0 + (len(text) % 7) / 100.0 if good else None
        sets = {}
        if good:
            seeds = range(self.protocol.seeds.paired_seeds)
            for arm, base in (("candidate", 100.0), ("baseline", 100.0 * ratio)):
                sets[arm] = MeasurementSet(
                    session_id=self.session_id, device_sha256=FINGERPRINT.sha256, protocol=ref, task_id=self.task.id,
                    subject_sha256=cand if arm == "candidate" else sha256_text(self.task.source), arm=arm,
                    samples=[MeasurementSample(seed=s, values=[base]) for s in seeds])
        verdict = Verdict(session_id=self.session_id, device_sha256=FINGERPRINT.sha256, protocol=ref,
                          task_id=self.task.id, candidate_sha256=cand, baseline_sha256=sha256_text(self.task.source),
                          baseline_label="scripted-judge", status="accepted" if good else "rejected", correct=good,
                          reason="" if good else "no ModelNew defined", ratio=ratio,
                          ci_low=ratio * 0.995 if ratio else None, ci_high=ratio * 1.005 if ratio else None,
                          gates=[GateResult(name=n, passed=good) for n in gate_names()],
                          candidate_set_id=sets["candidate"].id if sets else None,
                          baseline_set_id=sets["baseline"].id if sets else None)
        self.store.add_verdict(verdict, sets.get("candidate"), sets.get("baseline"))
        return VerdictSummary(status=verdict.status, verdict_id=verdict.id, candidate_sha256=cand, correct=good,
                              speedup=ratio, speedup_ci=(verdict.ci_low, verdict.ci_high) if ratio else None,
                              reason=verdict.reason, usable_ci=good)


class ScriptedServices:
    def __init__(self) -> None:
        self.session_id = ""
        self.judge: ScriptedJudge | None = None
        self.toolboxes: list[MemoryToolBox] = []

    def open_session(self, store: Any, protocol: Any, resume_session_id: str | None) -> str:
        self.session_id = resume_session_id or store.open_session(FINGERPRINT, store.register_protocol(protocol))
        return self.session_id

    def evaluator(self, task: Any, store: Any, protocol: Any) -> ScriptedJudge:
        self.judge = ScriptedJudge(store, protocol, self.session_id, task)
        return self.judge

    def toolbox(self, task: Any, brief: str, submit: Callable[[dict[str, bytes]], dict[str, Any]]) -> MemoryToolBox:
        box = MemoryToolBox(brief, submit)
        self.toolboxes.append(box)
        return box

    def close(self) -> None:
        return None
