"""Serving metrics of one workload run.

Throughputs divide successful work by the wall-clock span of the *whole* run, failed requests included,
and ``failed`` counts every request that did not complete: a configuration cannot look fast by failing
its slow requests. Latency percentiles are over successful requests (a failed request has no TTFT).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from harness.measure.serving.client import WorkloadRun

PERCENTILES = (50, 90, 99)


class LatencySummary(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None


def _summary(values: list[float]) -> LatencySummary:
    if not values:
        return LatencySummary(mean=None, p50=None, p90=None, p99=None)
    arr = np.asarray(values, dtype=float)
    p = np.percentile(arr, PERCENTILES)
    return LatencySummary(mean=float(arr.mean()), p50=float(p[0]), p90=float(p[1]), p99=float(p[2]))


class WorkloadMetrics(BaseModel):
    """The serving metrics of one run; ``request_throughput`` (requests/s) is the trial's score."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    requests: int
    completed: int
    failed: int
    failed_fraction: float
    duration_s: float
    request_throughput: float
    output_token_throughput: float
    output_tokens: int
    ttft_s: LatencySummary
    tpot_s: LatencySummary
    e2e_s: LatencySummary


def compute_metrics(run: WorkloadRun) -> WorkloadMetrics:
    """Metrics of ``run``; every request, failed or not, is in ``requests``."""
    ok = [r for r in run.results if r.ok]
    n = len(run.results)
    tokens = sum(r.completion_tokens for r in ok)
    return WorkloadMetrics(
        seed=run.seed, requests=n, completed=len(ok), failed=n - len(ok), failed_fraction=(n - len(ok)) / n,
        duration_s=run.duration_s, request_throughput=len(ok) / run.duration_s,
        output_token_throughput=tokens / run.duration_s, output_tokens=tokens,
        ttft_s=_summary([r.ttft_s for r in ok if r.ttft_s is not None]),
        tpot_s=_summary([t for t in (r.tpot_s for r in ok) if t is not None]),
        e2e_s=_summary([r.e2e_s for r in ok if r.e2e_s is not None]),
    )
