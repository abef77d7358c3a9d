"""What the graph's ``submit`` node hands submissions to, and where iterations are recorded.

The graph never measures anything itself: an :class:`Evaluator` turns submitted workspace files into
a :class:`VerdictSummary` (from the harness through :class:`atb_agent.services.SubjectEvaluator`, or,
when replaying with recorded measurement, from the transcript), and an :class:`IterationSink` stores
each iteration exactly once.
"""

from __future__ import annotations

import hashlib
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

# The workspace file the harness measures: the tools' submit hands over the workspace, and this is the
# candidate (KernelBench format, defines ModelNew) within it.
CANDIDATE_FILE = "candidate.py"


def file_hashes(files: dict[str, bytes]) -> dict[str, str]:
    return {path: hashlib.sha256(data).hexdigest() for path, data in sorted(files.items())}


class VerdictSummary(BaseModel):
    """The harness's word on one submission, as the agent side sees it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: str = Field(description="accepted | rejected | quarantined | no_submission")
    verdict_id: str | None = None
    candidate_sha256: str | None = None
    correct: bool = False
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    reason: str = ""
    usable_ci: bool = False
    built: bool = True
    detail: dict[str, Any] = Field(default_factory=dict)
    shown_to_model: str | None = Field(
        default=None, description="replay as a tuner: the recorded verdict text the model was shown, while "
                                  "the fields above are this run's fresh measurement")

    def for_model(self) -> str:
        """The verdict as the model reads it in its next observation."""
        if self.shown_to_model is not None:
            return self.shown_to_model
        if self.status == "no_submission":
            return f"no candidate was measured: {self.reason}"
        parts = [f"status: {self.status}", f"correct: {self.correct}"]
        if self.speedup is not None:
            ci = f" (95% CI {self.speedup_ci[0]:.3f}-{self.speedup_ci[1]:.3f})" if self.speedup_ci else ""
            parts.append(f"speedup over the baseline: {self.speedup:.3f}x{ci}")
        if self.reason:
            parts.append(f"reason: {self.reason}")
        return "; ".join(parts)


class Evaluator(Protocol):
    """Measures one submission. Must not raise for a bad candidate (that is a rejected verdict)."""

    def evaluate(self, iteration: int, files: dict[str, bytes]) -> VerdictSummary: ...


class IterationUsageCounts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens_in: int = 0
    tokens_out: int = 0
    model_calls: int = 0
    truncated_calls: int = 0


class IterationSink(Protocol):
    """Stores iteration ``idx`` exactly once (idempotent for the same verdict: a resumed run)."""

    def record(self, idx: int, verdict: VerdictSummary, usage: IterationUsageCounts,
               detail: dict[str, Any]) -> dict[str, Any]: ...


class StoreIterationSink:
    """Records through the harness's :class:`harness.tuning.campaigns.CampaignRecorder`."""

    def __init__(self, recorder: Any) -> None:
        self.recorder = recorder

    def record(self, idx: int, verdict: VerdictSummary, usage: IterationUsageCounts,
               detail: dict[str, Any]) -> dict[str, Any]:
        from harness.tuning.campaigns import IterationUsage

        row = self.recorder.record(
            idx, verdict_id=verdict.verdict_id, candidate_sha256=verdict.candidate_sha256, built=verdict.built,
            no_verdict_reason=verdict.reason if verdict.verdict_id is None else "",
            usage=IterationUsage(**usage.model_dump()), detail=detail)
        return {"idx": row.idx, "usable": row.usable, "unusable_reason": row.unusable_reason,
                "verdict_id": row.verdict_id}


class MemoryIterationSink:
    """Keeps iterations in memory (replay compares them with the transcript; nothing is stored)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}

    def record(self, idx: int, verdict: VerdictSummary, usage: IterationUsageCounts,
               detail: dict[str, Any]) -> dict[str, Any]:
        row = {"idx": idx, "verdict": verdict.model_dump(mode="json"), "usage": usage.model_dump()}
        self.rows.setdefault(idx, row)
        return self.rows[idx]


def summary_of_result(result: Any, detail: dict[str, Any] | None = None) -> VerdictSummary:
    """The agent's view of a harness result (a kernel ``EvalResult`` or an ``EngineEvalResult``: both
    carry the same verdict fields), so the graph reads kernel and engine verdicts alike."""
    ci = tuple(result.speedup_ci) if result.speedup_ci else None
    return VerdictSummary(status=result.verdict, verdict_id=result.verdict_id,
                          candidate_sha256=result.candidate_sha256, correct=bool(result.correct),
                          speedup=result.speedup, speedup_ci=ci,  # type: ignore[arg-type]
                          reason=result.reason or "", usable_ci=bool(result.usable_ci), detail=detail or {})
