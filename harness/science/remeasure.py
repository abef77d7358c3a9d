"""Variance characterisation: re-measure every stored verdict of a run in a fresh measurement session.

Why: a verdict is only as good as its reproducibility. The protocol's usability bar (CI half-width)
and noise floor are justified by how much a ratio moves when the same candidate is measured again,
from scratch, in another session on the same device (the paper reported 53 of 53 verdicts keeping
their direction and a 0.60% median absolute deviation of the ratio).

Definitions (also stored in each report's ``definition``):

* a verdict's *direction* is the side of 1.0 its ratio (baseline time / candidate time) lies on:
  faster (> 1), slower (< 1) or exactly even; it is *kept* when the re-measured ratio lies on the same
  side;
* the *relative deviation* of one verdict is ``|r_new - r_old| / r_old``; the report gives its
  median over the run's verdicts (the "median absolute deviation of the ratio"), its 90th
  percentile and maximum;
* a direction flip where both ratios lie within the protocol's noise floor of 1.0 is counted
  separately: it is noise around parity, not a reversed result.

A remeasure runs on the run's own device fingerprint only; another device is a retest
(:mod:`harness.science.retest`), and this module refuses it.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.errors import IncomparableError
from harness.records import Backend
from harness.store import SqliteStore
from protocol import Protocol, load_protocol

REPORT_KIND = "remeasure"
DEFINITION = ("direction = side of 1.0 of the ratio (baseline/candidate); kept = same side on re-measurement; "
              "relative deviation = |r_new - r_old| / r_old per verdict; median_abs_deviation = median of "
              "those over the run's verdicts with a ratio in both sessions")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RemeasuredVerdict(_Frozen):
    iteration: int
    candidate_sha256: str
    original_verdict_id: str
    new_verdict_id: str | None
    original_status: str
    new_status: str
    original_ratio: float | None
    new_ratio: float | None
    relative_deviation: float | None
    direction_kept: bool | None
    within_noise_of_parity: bool | None
    new_reason: str = ""


class RemeasureReport(_Frozen):
    """What ``atb remeasure`` prints and stores (report kind ``remeasure``)."""

    report_id: str | None = None
    run_id: str
    task_id: str
    backend: Backend
    device_sha256: str
    device: str
    original_session_id: str
    session_id: str
    remeasured: int = Field(description="verdicts re-measured")
    compared: int = Field(description="verdicts with a ratio in both sessions")
    direction_kept: int
    direction_flips_within_noise: int
    status_kept: int
    median_abs_deviation: float | None
    p90_abs_deviation: float | None
    max_abs_deviation: float | None
    noise_floor: float
    usability_bar: float
    definition: str = DEFINITION
    items: list[RemeasuredVerdict]
    protocol_version: str
    protocol_sha256: str


def _side(r: float) -> int:
    return (r > 1.0) - (r < 1.0)


def remeasure_run(store: SqliteStore, run_id: str, protocol: Protocol | None = None,
                  task_path: str | Path | None = None) -> RemeasureReport:
    """Re-measure every verdict of ``run_id`` in one fresh session on the run's device; store the report.

    Raises:
        NotFound: no such run.
        IncomparableError: this machine's device fingerprint is not the run's (use ``atb retest``).
        TaskError: the task cannot be found (a KernelBench file needs ``task_path``).
        DeviceUnavailableError: the run's backend is not available here.
    """
    from harness.measure.session import open_measurement_session
    from harness.science.retest import _is_native, resolve_task_file
    from harness.tuning.campaigns import get_campaign, get_iterations
    from harness.verdict.evaluate import evaluate_candidate

    p = protocol or load_protocol()
    info = get_campaign(store, run_id)
    home = store.device(info.device_sha256)
    task: str | Path = info.task_id
    if task_path is not None or not _is_native(info.task_id):
        task = resolve_task_file(store, info.task_id, task_path)
    stored = [(it.idx, store.verdict(it.verdict_id)) for it in get_iterations(store, run_id) if it.verdict_id]
    noise = p.noise.noise_floor
    items: list[RemeasuredVerdict] = []
    with open_measurement_session(store, home.backend, p, note=f"remeasure of {run_id}") as ctx:
        if ctx.fingerprint.sha256 != info.device_sha256:
            raise IncomparableError(
                f"run {run_id} was measured on {home.summary()} ({info.device_sha256[:12]}…), this machine is "
                f"{ctx.fingerprint.summary()} ({ctx.fingerprint.sha256[:12]}…): a re-measurement must use the "
                "same device fingerprint; to measure on another device use `atb retest`")
        session_id = ctx.session_id
        for idx, v in stored:
            res = evaluate_candidate(task, store.candidate_content(v.candidate_sha256), store=store, session=ctx,
                                     protocol=p)
            r0, r1 = v.ratio, res.speedup
            dev = abs(r1 - r0) / r0 if r0 is not None and r1 is not None else None
            items.append(RemeasuredVerdict(
                iteration=idx, candidate_sha256=v.candidate_sha256, original_verdict_id=v.id,
                new_verdict_id=res.verdict_id, original_status=store.effective_status(v.id),
                new_status=res.verdict, original_ratio=r0, new_ratio=r1, relative_deviation=dev,
                direction_kept=None if r0 is None or r1 is None else _side(r0) == _side(r1),
                within_noise_of_parity=None if r0 is None or r1 is None
                else abs(r0 - 1) < noise and abs(r1 - 1) < noise,
                new_reason=res.reason[:300]))
    devs = [i.relative_deviation for i in items if i.relative_deviation is not None]
    ref = p.ref()
    report = RemeasureReport(
        run_id=run_id, task_id=info.task_id, backend=home.backend, device_sha256=info.device_sha256,
        device=home.summary(), original_session_id=info.session_id, session_id=session_id,
        remeasured=len(items), compared=len(devs),
        direction_kept=sum(1 for i in items if i.direction_kept),
        direction_flips_within_noise=sum(1 for i in items if i.direction_kept is False and i.within_noise_of_parity),
        status_kept=sum(1 for i in items if i.original_status == i.new_status),
        median_abs_deviation=statistics.median(devs) if devs else None,
        p90_abs_deviation=float(np.quantile(devs, 0.9)) if devs else None,
        max_abs_deviation=max(devs) if devs else None,
        noise_floor=noise, usability_bar=p.usability.ci_relative_halfwidth_max, items=items,
        protocol_version=ref.version, protocol_sha256=ref.sha256)
    rid = store.add_report(REPORT_KIND, run_id, report.model_dump(mode="json", exclude={"report_id"}), ref)
    return report.model_copy(update={"report_id": rid})
