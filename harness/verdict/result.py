"""What one evaluation hands back to its caller, for a kernel candidate and an engine candidate alike.

Why one base: the campaign, the search, the CLI's ``--json`` and the reports read the same fields
(verdict, correctness, gates, the ratio and its interval, usability, provenance) whichever subject
was measured; each subject adds only what is its own (kernels: start and timing detail; engines: the
engine, its configuration and metrics). The stored :class:`harness.records.Verdict` is the record;
this is the answer to the call that made it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from harness.records import GateResult, VerdictStatus


class VerdictResult(BaseModel):
    """The fields every evaluation result has (``atb eval`` and ``atb engine eval`` print them)."""

    model_config = ConfigDict(frozen=True)
    verdict: VerdictStatus
    correct: bool
    gates: list[GateResult]
    speedup: float | None = Field(default=None, description=(
        "the candidate against its honest baseline: kernels baseline time / candidate time, engines "
        "candidate / default requests per second"))
    speedup_ci: tuple[float, float] | None = None
    speedup_vs_start: float | None = None
    strawman: bool = False
    roofline_fraction: float | None = None
    device: str
    seeds: list[int] = Field(default_factory=list)
    protocol_sha256: str
    candidate_sha256: str
    verdict_id: str
    reason: str = ""
    usable_ci: bool = Field(default=False, description="the interval's half-width is within the usability bar")
    task_id: str
