"""External anchors: does this harness agree with figures nobody here produced?

``protocol/anchors.yaml`` lists published reference figures (a device's copy bandwidth, a matrix
rate, an architectural ratio), each with its source, the device it applies to, the workload, the
band of agreement and, optionally, an *expected divergence* registered before measurement.
:func:`run_anchors` measures every anchor that applies to the local device and judges it:

* ``agrees``: within the band around the published figure;
* ``explained_divergence``: outside it, but within the band around the figure scaled by a
  divergence registered *before* the anchor was first measured;
* ``unexplained_divergence``: anything else, including a divergence whose explanation was
  registered after the fact (post hoc).

Why a lock and a store check, not only dates: a date in a file is easy to backdate. The anchors file
is digest-pinned in ``anchors.lock.json`` (so an edit is visible in git and refused until re-locked),
every report stores the file's digest and a digest of each explanation, and an explanation that the
anchor's first stored measurement did not carry is post hoc whatever date it claims.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import statistics
import sys
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from harness.errors import DeviceUnavailableError, HarnessError
from harness.measure.backends import backend_named
from harness.records import Backend, DeviceFingerprint, canonical_json, sha256_text, utc_now
from protocol import PROTOCOL_PATH, Protocol, load_protocol

ANCHORS_PATH = PROTOCOL_PATH.parent / "anchors.yaml"
ANCHORS_LOCK_PATH = PROTOCOL_PATH.parent / "anchors.lock.json"
REPORT_KIND = "anchor"

Outcome = Literal["agrees", "explained_divergence", "unexplained_divergence"]
ExplanationStatus = Literal["none", "preregistered", "post_hoc"]


class AnchorsError(HarnessError):
    """The anchors file or its lock is missing, malformed, or edited without re-locking."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------------------- file model
class AnchorSource(_Frozen):
    title: str = Field(min_length=1)
    url: str = Field(min_length=1)
    states: str = Field(min_length=1, description="what the source says (restated unless verbatim)")
    verbatim: bool = False
    derivation: str = ""


class ExpectedDivergence(_Frozen):
    """A divergence explained before measurement: the expectation becomes ``factor * expected``."""

    factor: float = Field(gt=0)
    reason: str = Field(min_length=20)
    registered: date

    @property
    def sha256(self) -> str:
        return sha256_text(canonical_json(self.model_dump(mode="json")))


class AnchorDevice(_Frozen):
    """Which devices an anchor applies to; every given condition must hold."""

    backend: Backend
    name_regex: str | None = None            # against the GPU name (cuda) or CPU model (cpu)
    cpu_flags_all: list[str] = Field(default_factory=list)


class CopyBandwidth(_Frozen):
    kind: Literal["copy_bandwidth"]
    bytes: int = Field(gt=0)


class MatmulRate(_Frozen):
    kind: Literal["matmul_rate"]
    n: int = Field(gt=0)
    dtype: Literal["float64", "float32", "float16", "bfloat16"]


class MatmulRateRatio(_Frozen):
    kind: Literal["matmul_rate_ratio"]
    n: int = Field(gt=0)
    dtype: Literal["float64", "float32", "float16", "bfloat16"]
    over_dtype: Literal["float64", "float32", "float16", "bfloat16"]


class HarnessCeiling(_Frozen):
    """The harness's own ceiling measurement (``harness.measure.device_facts.measure_ceilings_here``), the very
    number the physical-limit gate and roofline fractions use."""

    kind: Literal["harness_ceiling"]
    quantity: Literal["bytes_per_s", "flops_per_s"]


Measure = CopyBandwidth | MatmulRate | MatmulRateRatio | HarnessCeiling


class Anchor(_Frozen):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = Field(min_length=1)
    device: AnchorDevice
    measure: Measure = Field(discriminator="kind")
    unit: Literal["bytes_per_s", "flops_per_s", "ratio"]
    expected: float = Field(gt=0)
    band: float | None = Field(default=None, gt=0, lt=1)
    source: AnchorSource
    expected_divergence: ExpectedDivergence | None = None


class AnchorsFile(_Frozen):
    schema_: int = Field(alias="schema", ge=1)
    anchors: list[Anchor] = Field(min_length=1)


class AnchorsLockEntry(_Frozen):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    locked_at: str


class AnchorsLock(_Frozen):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    history: list[AnchorsLockEntry] = Field(min_length=1)


class LoadedAnchors(_Frozen):
    """The anchors file as loaded, with the digest its bytes hash to (checked against the lock)."""

    file: AnchorsFile
    sha256: str


# ---------------------------------------------------------------------------------------- results
class AnchorResult(_Frozen):
    id: str
    unit: str
    measured: float
    expected: float
    band: float
    low: float
    high: float
    measured_over_expected: float
    outcome: Outcome
    explanation: ExplanationStatus
    explanation_sha256: str | None = None
    explanation_reason: str = ""
    detail: str
    workload: dict[str, Any]
    source: AnchorSource


class AnchorReport(_Frozen):
    """What ``atb anchor`` prints and stores (store report kind ``anchor``)."""

    report_id: str | None = None
    backend: Backend
    device: DeviceFingerprint
    device_sha256: str
    anchors_sha256: str
    protocol_version: str
    protocol_sha256: str
    measured_at: str
    results: list[AnchorResult]
    not_applicable: list[str] = Field(description="anchors whose device does not match this one")
    counts: dict[str, int]


# ---------------------------------------------------------------------------------------- loading
def file_sha256(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise AnchorsError(f"cannot read {path}: {exc}") from exc


def parse_anchors(text: str, source: str = "anchors.yaml") -> AnchorsFile:
    """Validate anchors text (no digest check). Raises AnchorsError naming the bad key."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise AnchorsError(f"{source} is not valid YAML: {exc}") from exc
    try:
        parsed = AnchorsFile.model_validate(raw)
    except ValidationError as exc:
        raise AnchorsError(f"{source} does not match the anchors schema:\n{exc}") from exc
    ids = [a.id for a in parsed.anchors]
    if len(set(ids)) != len(ids):
        raise AnchorsError(f"{source}: an anchor id appears twice: {ids}")
    return parsed


def read_lock(lock_path: Path = ANCHORS_LOCK_PATH) -> AnchorsLock:
    try:
        return AnchorsLock.model_validate_json(lock_path.read_text())
    except OSError as exc:
        raise AnchorsError(f"cannot read the anchors lock {lock_path}: {exc}; "
                           "run `python -m harness.science.anchors relock`") from exc
    except ValidationError as exc:
        raise AnchorsError(f"{lock_path} has the wrong shape: {exc}") from exc


def load_anchors(path: Path | None = None, lock_path: Path | None = None) -> LoadedAnchors:
    """Load the anchors file after checking its digest against the lock.

    Raises:
        AnchorsError: a file is missing or malformed, or the file was edited without
            ``python -m harness.science.anchors relock`` (the edit would otherwise be invisible).
    """
    path = path or ANCHORS_PATH
    lock = read_lock(lock_path or ANCHORS_LOCK_PATH)
    digest = file_sha256(path)
    if digest != lock.sha256:
        raise AnchorsError(
            f"{path} hashes to {digest[:12]}… but {lock_path or ANCHORS_LOCK_PATH} pins {lock.sha256[:12]}…: "
            "the anchors were edited without re-locking. Review the edit (an explanation added after a "
            "measurement is post hoc and will be reported as such), then run "
            "`python -m harness.science.anchors relock`.")
    return LoadedAnchors(file=parse_anchors(path.read_text(), str(path)), sha256=digest)


def relock(path: Path | None = None, lock_path: Path | None = None) -> str:
    """Pin the anchors file's current digest, keeping every earlier digest in the history."""
    path = path or ANCHORS_PATH
    lock_path = lock_path or ANCHORS_LOCK_PATH
    parse_anchors(path.read_text(), str(path))
    digest = file_sha256(path)
    history: list[AnchorsLockEntry] = []
    if lock_path.exists():
        history = list(read_lock(lock_path).history)
    if not history or history[-1].sha256 != digest:
        history.append(AnchorsLockEntry(sha256=digest, locked_at=utc_now()))
    lock = AnchorsLock(sha256=digest, history=history)
    lock_path.write_text(json.dumps(lock.model_dump(mode="json"), indent=2) + "\n")
    return digest


# ---------------------------------------------------------------------------------------- device
def cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def applies(anchor: Anchor, fp: DeviceFingerprint) -> bool:
    dev = anchor.device
    if dev.backend != fp.backend:
        return False
    if dev.name_regex is not None:
        name = backend_named(fp.backend).fingerprint_name(fp)   # the GPU's name on CUDA, else the CPU model
        if not re.search(dev.name_regex, name):
            return False
    return not dev.cpu_flags_all or set(dev.cpu_flags_all) <= cpu_flags()


# ---------------------------------------------------------------------------------------- probes
def _median_seconds(fn: Any, backend: Backend, protocol: Protocol, reps: int | None = None,
                    warm: bool = True) -> float:
    """Median seconds per call of ``fn`` with the protocol's warm-up and repetition counts
    (``reps``/``warm`` override them for the single timed calls of an interleaved pair), by the
    backend's own timing loop (``median_seconds`` in ``harness/measure/backends/{cpu,cuda}.py``: the
    measuring child's ``_cpu.time_block`` and ``CudaTimer``).

    Why not a whole measuring child's block (``ChildBackend.block``): that loop times a loaded task's
    forward on fresh input sets drawn per call from paired seeds, with outputs kept for the gates; an
    anchor times a fixed torch workload on fixed buffers (a 2 GiB copy cannot draw a new buffer per
    call) against a published figure. It runs in its own child (:func:`measure_in_child`) for the same
    reason a measuring child does: the harness's process never initialises CUDA."""
    return backend_named(backend).median_seconds(fn, protocol, reps, warm)


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _matmul_rate(n: int, dtype: str, backend: Backend, protocol: Protocol) -> float:
    import torch

    gen = torch.Generator(device=backend_named(backend).device).manual_seed(protocol.statistics.bootstrap_seed)
    a = torch.randn(n, n, device=backend_named(backend).device, dtype=_torch_dtype(dtype), generator=gen)
    b = torch.randn(n, n, device=backend_named(backend).device, dtype=_torch_dtype(dtype), generator=gen)
    seconds = _median_seconds(lambda: torch.matmul(a, b), backend, protocol)
    return 2.0 * n ** 3 / seconds


def _matmul_rate_ratio(m: MatmulRateRatio, backend: Backend, protocol: Protocol) -> float:
    """Rate in ``dtype`` over rate in ``over_dtype``: the median of paired ratios, the two products
    timed back to back (A B A B), so drift on a shared machine cancels within each pair."""
    import torch

    gen = torch.Generator(device=backend_named(backend).device).manual_seed(protocol.statistics.bootstrap_seed)
    base = torch.randn(2, m.n, m.n, device=backend_named(backend).device, generator=gen, dtype=torch.float64)
    a1, b1 = base[0].to(_torch_dtype(m.dtype)), base[1].to(_torch_dtype(m.dtype))
    a2, b2 = base[0].to(_torch_dtype(m.over_dtype)), base[1].to(_torch_dtype(m.over_dtype))
    num, den = (lambda: torch.matmul(a1, b1)), (lambda: torch.matmul(a2, b2))
    _median_seconds(num, backend, protocol, reps=1)  # warm-up of both products
    _median_seconds(den, backend, protocol, reps=1)
    ratios: list[float] = []
    for _ in range(backend_named(backend).paired_rounds(protocol)):
        t_num = _median_seconds(num, backend, protocol, reps=1, warm=False)
        t_den = _median_seconds(den, backend, protocol, reps=1, warm=False)
        ratios.append(t_den / t_num)
    return statistics.median(ratios)


def measure(m: Measure, backend: Backend, protocol: Protocol) -> float:
    """Run one anchor's workload on ``backend`` and return the figure in the anchor's unit.

    Runs in the measuring child (:func:`_child_measure`), never in the harness's own process.
    """
    import torch

    prev_threads = torch.get_num_threads()
    torch.set_num_threads(protocol.timing.cpu.threads)
    tf32 = backend_named(backend).matmul_tf32
    prev_tf32 = torch.backends.cuda.matmul.allow_tf32 if tf32 else None
    if tf32:
        torch.backends.cuda.matmul.allow_tf32 = protocol.correctness.allow_tf32
    try:
        if isinstance(m, HarnessCeiling):
            from harness.measure.device_facts import measure_ceilings_here

            return float(measure_ceilings_here(torch, backend)[m.quantity])
        if isinstance(m, CopyBandwidth):
            src = torch.empty(m.bytes // 4, dtype=torch.float32, device=backend_named(backend).device).uniform_()
            dst = torch.empty_like(src)
            seconds = _median_seconds(lambda: dst.copy_(src), backend, protocol)
            return 2.0 * src.numel() * 4 / seconds
        if isinstance(m, MatmulRate):
            return _matmul_rate(m.n, m.dtype, backend, protocol)
        return _matmul_rate_ratio(m, backend, protocol)
    finally:
        torch.set_num_threads(prev_threads)
        if prev_tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = prev_tf32


# ---------------------------------------------------------------------------------------- judging
class PriorMeasurement(_Frozen):
    """An earlier stored measurement of one anchor: when, and which explanation it carried."""

    measured_at: str
    explanation_sha256: str | None


def prior_measurements(store: Any, anchor_id: str) -> list[PriorMeasurement]:
    """Every stored measurement of ``anchor_id`` (any device), oldest first."""
    out: list[PriorMeasurement] = []
    for rep in store.reports(REPORT_KIND):
        body = rep["body"]
        for r in body.get("results", []):
            if r.get("id") == anchor_id:
                out.append(PriorMeasurement(measured_at=body.get("measured_at", rep["created_at"]),
                                            explanation_sha256=r.get("explanation_sha256")))
    return sorted(out, key=lambda p: p.measured_at)


def explanation_status(div: ExpectedDivergence | None, priors: list[PriorMeasurement],
                       now: datetime) -> tuple[ExplanationStatus, str]:
    """Was the divergence explained before the anchor was first measured?

    Post hoc when the registration date is in the future, after the first stored measurement, or when
    the first stored measurement did not carry this exact explanation (it was added or changed later).
    """
    if div is None:
        return "none", ""
    if div.registered > now.date():
        return "post_hoc", f"registered {div.registered}, a date after this measurement ({now.date()})"
    if priors:
        first = priors[0]
        first_day = datetime.fromisoformat(first.measured_at).date()
        if div.registered > first_day:
            return "post_hoc", (f"registered {div.registered}, after the anchor's first stored measurement "
                                f"({first.measured_at})")
        if first.explanation_sha256 != div.sha256:
            return "post_hoc", (f"the anchor's first stored measurement ({first.measured_at}) carried "
                                f"{'no explanation' if first.explanation_sha256 is None else 'another explanation'}; "
                                "this one was written afterwards")
    return "preregistered", f"registered {div.registered}, before the anchor's first measurement"


def judge(anchor: Anchor, measured: float, default_band: float, priors: list[PriorMeasurement],
          now: datetime) -> AnchorResult:
    """Place one measurement against its anchor's band (and a pre-registered divergence's band)."""
    band = anchor.band if anchor.band is not None else default_band
    div = anchor.expected_divergence
    status, why = explanation_status(div, priors, now)
    low, high = anchor.expected * (1 - band), anchor.expected * (1 + band)
    rel = measured / anchor.expected
    outcome: Outcome
    if low <= measured <= high:
        outcome = "agrees"
        detail = f"{measured:.4g} is within ±{band:.0%} of the published {anchor.expected:.4g}"
    elif div is not None and status == "preregistered" and \
            div.factor * anchor.expected * (1 - band) <= measured <= div.factor * anchor.expected * (1 + band):
        outcome = "explained_divergence"
        detail = (f"{measured:.4g} is {rel:.3f}x the published {anchor.expected:.4g}, outside ±{band:.0%}, but within "
                  f"±{band:.0%} of the pre-registered expectation {div.factor:g}x ({why})")
    else:
        outcome = "unexplained_divergence"
        detail = f"{measured:.4g} is {rel:.3f}x the published {anchor.expected:.4g}, outside ±{band:.0%}"
        if div is not None:
            inside_div = div.factor * anchor.expected * (1 - band) <= measured <= div.factor * anchor.expected * (1 + band)
            if status == "post_hoc":
                detail += f"; its explanation is post hoc ({why}) and does not count"
            elif not inside_div:
                detail += f"; also outside ±{band:.0%} of the pre-registered {div.factor:g}x expectation"
    return AnchorResult(
        id=anchor.id, unit=anchor.unit, measured=measured, expected=anchor.expected, band=band, low=low,
        high=high, measured_over_expected=rel, outcome=outcome, explanation=status,
        explanation_sha256=div.sha256 if div else None, explanation_reason=div.reason if div else "",
        detail=detail, workload=anchor.measure.model_dump(mode="json"), source=anchor.source)


# ---------------------------------------------------------------------------------------- running
def run_anchors(store: Any, backend: Backend, protocol: Protocol | None = None,
                anchors: LoadedAnchors | None = None, only: list[str] | None = None) -> AnchorReport:
    """Measure every anchor that applies to the local ``backend`` device, judge it, store the report.

    Raises:
        AnchorsError: the anchors file is malformed or not re-locked after an edit.
        DeviceUnavailableError: ``backend`` is cuda and no CUDA device is visible.
    """
    protocol = protocol or load_protocol()
    ref = protocol.ref()
    from harness.measure.device import available

    ok, why = available(backend)
    if not ok:
        raise DeviceUnavailableError(f"`atb anchor --device {backend}` cannot run here: {why}. Use --device cpu.")
    loaded = anchors or load_anchors()
    wanted = [a for a in loaded.file.anchors if only is None or a.id in only]
    facts = measure_in_child(backend, [], protocol)
    from harness.measure.device import fingerprint_from_facts

    fp = fingerprint_from_facts(facts["fingerprint"])
    now = datetime.now(timezone.utc)
    results: list[AnchorResult] = []
    skipped = [a.id for a in wanted if not applies(a, fp)]
    todo = [a for a in wanted if applies(a, fp)]
    if todo:
        print(f"anchors: measuring {', '.join(a.id for a in todo)} on {fp.summary()}", file=sys.stderr, flush=True)
        values = measure_in_child(backend, [a.measure for a in todo], protocol)["values"]
        now = datetime.now(timezone.utc)
        for anchor, value in zip(todo, values):
            results.append(judge(anchor, float(value), protocol.anchors.default_band,
                                 prior_measurements(store, anchor.id), now))
    counts = {k: sum(1 for r in results if r.outcome == k)
              for k in ("agrees", "explained_divergence", "unexplained_divergence")}
    report = AnchorReport(
        backend=backend, device=fp, device_sha256=fp.sha256, anchors_sha256=loaded.sha256,
        protocol_version=ref.version, protocol_sha256=ref.sha256, measured_at=now.isoformat(timespec="seconds"),
        results=results, not_applicable=skipped, counts=counts)
    body = report.model_dump(mode="json", exclude={"report_id"})
    rid = store.add_report(REPORT_KIND, f"{backend}:{fp.sha256}", body, ref)
    return report.model_copy(update={"report_id": rid})


def measure_in_child(backend: Backend, measures: list[Measure], protocol: Protocol) -> dict[str, Any]:
    """Fingerprint the device and run ``measures`` in a child process (the harness's own process never
    initialises CUDA, as in the runner), returning ``{"fingerprint": facts, "values": [...]}``.

    Raises:
        AnchorsError: the child failed or ran past ``protocol.limits.reference_timeout_s`` per workload.
    """
    payload = json.dumps({"backend": backend, "measures": [m.model_dump(mode="json") for m in measures],
                          "protocol": protocol.model_dump(mode="json")})
    timeout = protocol.limits.reference_timeout_s * (1 + len(measures))
    env_threads = str(protocol.timing.cpu.threads)
    env = {**os.environ, "OMP_NUM_THREADS": env_threads, "MKL_NUM_THREADS": env_threads}
    try:
        out = subprocess.run([sys.executable, "-m", "harness.science.anchors", "_measure"], input=payload, text=True,
                             capture_output=True, timeout=timeout, check=False, env=env)
    except subprocess.TimeoutExpired as exc:
        raise AnchorsError(f"the anchor measurement on {backend} ran past {timeout:g} s") from exc
    if out.returncode != 0:
        raise AnchorsError(f"the anchor measurement on {backend} failed (exit {out.returncode}): "
                           f"{out.stderr.strip()[-800:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def _child_measure() -> int:
    """Child side of :func:`measure_in_child`: read the workloads on stdin, print one JSON line."""
    import torch

    from harness.measure.device_facts import local_fingerprint_facts

    req = json.loads(sys.stdin.read())
    # The parent's verified protocol, passed by value: its parameters only (the parent stamps results),
    # so an edit of protocol.yaml while measuring cannot change what this child does.
    protocol = Protocol.model_validate(req["protocol"])
    backend = req["backend"]
    torch.set_num_threads(protocol.timing.cpu.threads)
    facts = local_fingerprint_facts(torch, backend, protocol.timing.cpu.threads)
    adapter: TypeAdapter[Any] = TypeAdapter(Measure)
    values = [measure(adapter.validate_python(m), backend, protocol) for m in req["measures"]]
    print(json.dumps({"fingerprint": facts, "values": values}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m harness.science.anchors relock``: pin the anchors file's digest after a reviewed edit."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["_measure"]:
        return _child_measure()
    if args != ["relock"]:
        print("usage: python -m harness.science.anchors relock", file=sys.stderr)
        return 2
    try:
        digest = relock()
    except AnchorsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"anchors locked at {digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
