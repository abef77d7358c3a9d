"""Pydantic models of everything the harness stores or hands across a boundary.

Records that carry a number (measurements, verdicts) can only be built with a verified
:class:`protocol.ProtocolRef`, which only :func:`protocol.load_protocol` produces: a result cannot be
made from loose numbers. Hashes are lowercase SHA-256 hex.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from protocol import Protocol, ProtocolRef

if TYPE_CHECKING:
    from harness.stats import RatioEstimate

# a measuring backend's registered name (harness.measure.backends.BACKENDS: cpu, cuda, mlx and any plug-in)
Backend = str
# the device families the store keeps devices under (its schema's CHECK): a backend's ``stored_as``
DeviceFamily = Literal["cpu", "cuda", "mlx"]
Arm = Literal["candidate", "baseline"]
VerdictStatus = Literal["accepted", "rejected", "quarantined"]
SubjectKind = Literal["kernel", "engine"]

SHA256 = Field(pattern=r"^[0-9a-f]{64}$")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode("utf-8"))


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys and no whitespace: the form every content hash is taken over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def protocol_ref(protocol: Protocol) -> ProtocolRef:
    """The stamp for a result; raises UnverifiedProtocolError for a hand-built Protocol."""
    return protocol.ref()


class DeviceFingerprint(_Record):
    """What a measurement ran on. Two measurements may be compared only when these hash equal."""

    backend: DeviceFamily
    cpu_model: str
    cpu_count: int
    gpu_name: str | None = None
    gpu_driver: str | None = None
    cuda_version: str | None = None
    torch_version: str
    mlx_version: str | None = None
    blas: str | None = None
    torch_threads: int | None = None
    clocks: dict[str, str] = Field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return sha256_text(canonical_json(self.model_dump(mode="json")))

    def summary(self) -> str:
        where = self.gpu_name or self.cpu_model
        return f"{self.backend}:{where}"


class DeviceCeilings(_Record):
    """Measured device ceilings for the physical-limit gate and roofline fractions."""

    bytes_per_s: float = Field(gt=0)
    flops_per_s: float = Field(gt=0)
    method: str


class GateResult(_Record):
    """One anti-cheat gate's verdict: a failed or errored gate is ``passed=False`` (fail closed)."""

    name: str = Field(min_length=1)
    passed: bool
    detail: str = ""


class MeasurementSample(_Record):
    """Raw timing (or throughput) samples of one arm at one paired seed.

    ``round_lengths`` are the round boundaries: ``values`` is the concatenation of one block per
    interleaved round, and the k-th block holds ``round_lengths[k]`` values. The verdict's ratio is
    formed per (seed, round), so a stored verdict recomputes only with them
    (:func:`harness.stats.measurement_set_ratio`). None for a sample stored before they were recorded:
    its values then read as one block.
    """

    seed: int
    values: list[float] = Field(min_length=1)
    round_lengths: list[int] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _rounds_cover_values(self) -> "MeasurementSample":
        if self.round_lengths is not None and (
                any(n < 1 for n in self.round_lengths) or sum(self.round_lengths) != len(self.values)):
            raise ValueError(f"round_lengths {self.round_lengths} do not split the {len(self.values)} values "
                             "into non-empty consecutive blocks")
        return self

    @classmethod
    def from_rounds(cls, seed: int, rounds: list[list[float]]) -> "MeasurementSample":
        """The sample of one arm at ``seed`` from its per-round blocks, keeping the boundaries."""
        return cls(seed=seed, values=[x for block in rounds for x in block],
                   round_lengths=[len(block) for block in rounds])

    def blocks(self) -> list[list[float]]:
        """``values`` split at the round boundaries (one block when none were stored)."""
        if self.round_lengths is None:
            return [list(self.values)]
        out: list[list[float]] = []
        start = 0
        for n in self.round_lengths:
            out.append(list(self.values[start:start + n]))
            start += n
        return out


class SessionStamp(_Record):
    """Where a result was measured: the session, its device and the protocol, as every stored row carries them."""

    session_id: str
    device_sha256: str = SHA256
    protocol: ProtocolRef


class Judgement(_Record):
    """What the gates and the correctness check decided about one candidate (its texts already redacted)."""

    status: VerdictStatus
    correct: bool
    reason: str = ""
    gates: list[GateResult] = Field(min_length=1)


class MeasurementSet(_Record):
    """All samples of one arm of one verdict, in one measurement session, on one device."""

    id: str = Field(default_factory=lambda: new_id("mset"))
    session_id: str
    device_sha256: str = SHA256
    protocol: ProtocolRef
    task_id: str
    subject_sha256: str = SHA256
    arm: Arm
    kind: SubjectKind = "kernel"
    unit: Literal["ns", "requests_per_s"] = "ns"
    samples: list[MeasurementSample] = Field(min_length=1)

    @property
    def seeds(self) -> list[int]:
        return sorted(s.seed for s in self.samples)

    @classmethod
    def of_arm(cls, stamp: SessionStamp, task_id: str, subject_sha256: str, arm: Arm,
               samples: list[MeasurementSample]) -> "MeasurementSet":
        """One arm's samples, stamped with the session that measured them."""
        return cls(session_id=stamp.session_id, device_sha256=stamp.device_sha256, protocol=stamp.protocol,
                   task_id=task_id, subject_sha256=subject_sha256, arm=arm, samples=samples)


class Verdict(_Record):
    """The harness's word on one candidate against its honest baseline."""

    id: str = Field(default_factory=lambda: new_id("verdict"))
    session_id: str
    device_sha256: str = SHA256
    protocol: ProtocolRef
    task_id: str
    kind: SubjectKind = "kernel"
    candidate_sha256: str = SHA256
    baseline_sha256: str = SHA256
    baseline_label: str = Field(min_length=1, description="what the honest baseline is, e.g. 'eager-reference'")
    status: VerdictStatus
    correct: bool
    reason: str = ""
    ratio: float | None = Field(default=None, gt=0, description="baseline time / candidate time (speedup)")
    ci_low: float | None = None
    ci_high: float | None = None
    seeds: list[int] = Field(default_factory=list)
    candidate_set_id: str | None = None
    baseline_set_id: str | None = None
    gates: list[GateResult] = Field(min_length=1)
    detail: dict[str, Any] = Field(default_factory=dict)
    created_at: str = Field(default_factory=utc_now)

    @property
    def ci_relative_halfwidth(self) -> float | None:
        if self.ratio is None or self.ci_low is None or self.ci_high is None:
            return None
        return (self.ci_high - self.ci_low) / 2.0 / self.ratio

    @classmethod
    def judged(cls, stamp: SessionStamp, judgement: Judgement, *, task_id: str, candidate_sha256: str,
               baseline_sha256: str, baseline_label: str, estimate: RatioEstimate | None, seeds: list[int],
               sets: tuple[MeasurementSet, MeasurementSet] | None, detail: dict[str, Any]) -> "Verdict":
        """A kernel verdict from its pieces: the session's stamp, the judgement, the ratio estimate (None: no
        ratio was formed), the (candidate, baseline) measurement sets stored with it, and its detail.
        An accepted verdict with nothing to say reads "all gates passed"."""
        status = judgement.status
        return cls(session_id=stamp.session_id, device_sha256=stamp.device_sha256, protocol=stamp.protocol,
                   task_id=task_id, candidate_sha256=candidate_sha256, baseline_sha256=baseline_sha256,
                   baseline_label=baseline_label, status=status, correct=judgement.correct,
                   reason=judgement.reason if status != "accepted" or judgement.reason else "all gates passed",
                   ratio=estimate.ratio if estimate else None, ci_low=estimate.ci_low if estimate else None,
                   ci_high=estimate.ci_high if estimate else None, seeds=seeds,
                   candidate_set_id=sets[0].id if sets else None, baseline_set_id=sets[1].id if sets else None,
                   gates=judgement.gates, detail=detail)
