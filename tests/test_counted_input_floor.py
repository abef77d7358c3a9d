"""Protocol 1.7.0 (issue 25, JUSTIFICATION 16): a problem file's counted input bytes are a quarantine
trigger, its output's bytes the hard floor; declared bytes stay hard; a CUDA graph holds as many calls as
its static sets fit the budget.

Why: on the H200 the honest sorted-row median (one gather per row, ~5 us over 128 MB of sorted rows)
was rejected: timed by events because 32 static sets of 128 MB did not fit the 1 GB graph budget, and,
timed right, it is below the 128 MB read floor that a problem's counted inputs imply.
"""

from __future__ import annotations

import pytest

from harness.measure.evidence import CallFacts, Comparison, Evidence, TensorMeta, TimedFacts
from harness.measure.timing._cuda import graph_replays_fitting
from harness.records import DeviceCeilings
from harness.verdict.gates import decide_status, run_gates
from harness.verdict.gates.physical import hard_floor_bytes, input_trigger
from protocol import load_protocol

P = load_protocol()
ROWS, COLS = 4096, 8192
IN_BYTES = 4.0 * ROWS * COLS                 # 128 MiB of sorted fp32 rows
OUT_BYTES = 4.0 * ROWS                       # one median per row
CEIL = DeviceCeilings(bytes_per_s=4.3e12, flops_per_s=7.9e14, method="test")
READ_NS = (IN_BYTES + OUT_BYTES) / CEIL.bytes_per_s * 1e9 / P.gates.physical_limit_slack   # ~28 us
WRITE_NS = OUT_BYTES / CEIL.bytes_per_s * 1e9 / P.gates.physical_limit_slack              # ~3.5 ns


def _evidence(candidate_ns: float, ratio: float, source: str = "io:meta") -> Evidence:
    reps = [TimedFacts(seed=s, times_ns=[candidate_ns] * 10, wall_ns=candidate_ns * 10, timed_total_ns=candidate_ns * 10)
            for s in range(5)]
    base = [TimedFacts(seed=s, times_ns=[candidate_ns * ratio] * 10, wall_ns=candidate_ns * ratio * 10,
                       timed_total_ns=candidate_ns * ratio * 10) for s in range(5)]
    out = CallFacts(seed=1, distribution="task", outputs=[TensorMeta(shape=[ROWS], dtype="torch.float32")])
    return Evidence(task_id="kb:sorted_median", backend="cuda", candidate_timed=reps, baseline_timed=base,
                    ratio=ratio, ci_low=ratio * 0.97, ci_high=ratio * 1.03, candidate_median_ns=candidate_ns,
                    ceilings=CEIL, task_bytes=IN_BYTES + OUT_BYTES, task_bytes_source=source,
                    reference_calls=[out],
                    comparisons=[Comparison(seed=1, distribution="task", phase="correctness", passed=True)])


def _two(ev: Evidence, protocol=P) -> dict[str, tuple[bool, str]]:
    return {g.name: (g.passed, g.detail) for g in run_gates(ev, protocol) if g.name in ("physical_limit", "anomaly")}


def test_below_counted_inputs_is_quarantine_not_rejection() -> None:
    ev = _evidence(5e3, 8.0)                 # 5 us: below the 28 us read floor, far above the write floor
    assert WRITE_NS < 5e3 < READ_NS
    g = _two(ev)
    assert g["physical_limit"][0], g["physical_limit"][1]
    assert "counted inputs' read time" in g["physical_limit"][1]
    assert not g["anomaly"][0] and "reads less than every input" in g["anomaly"][1]
    assert hard_floor_bytes(ev, P)[0] == OUT_BYTES and input_trigger(ev, P) is not None
    gates = [x for x in run_gates(ev, P) if x.name in ("physical_limit", "anomaly")]
    status, reason = decide_status(gates, ev, P)
    assert status == "quarantined" and "reads less than every input" in reason, reason


def test_above_counted_inputs_needs_no_second_look() -> None:
    g = _two(_evidence(READ_NS * 1.2, 3.0))
    assert g["physical_limit"][0] and g["anomaly"][0], g
    assert input_trigger(_evidence(READ_NS * 1.2, 3.0), P) is None


def test_below_the_output_bytes_is_still_impossible() -> None:
    g = _two(_evidence(WRITE_NS * 0.5, 9.0))
    assert not g["physical_limit"][0] and "below the physical floor" in g["physical_limit"][1]


@pytest.mark.parametrize("source", ["declared", ""])
def test_declared_bytes_stay_a_hard_floor(source: str) -> None:
    """A task's author who declares its bytes (or gives them with the task) states what must be moved."""
    ev = _evidence(5e3, 8.0, source=source)
    g = _two(ev)
    assert not g["physical_limit"][0] and "below the physical floor" in g["physical_limit"][1]
    assert input_trigger(ev, P) is None


def test_the_rule_before_1_7_0_rejects() -> None:
    old = P.model_copy(update={"gates": P.gates.model_copy(update={"physical_counted_inputs": "reject"})})
    g = _two(_evidence(5e3, 8.0), old)
    assert not g["physical_limit"][0] and "below the physical floor" in g["physical_limit"][1]


def test_a_graph_holds_as_many_calls_as_fit_the_budget() -> None:
    cuda = P.timing.cuda.model_dump()
    budget = P.timing.cuda.graph_static_sets_max_bytes
    assert P.timing.cuda.graph_replays_min == 4
    assert graph_replays_fitting(1 << 20, cuda, budget) == P.timing.cuda.graph_replays        # small sets: 32
    assert graph_replays_fitting(128 << 20, cuda, budget) == 8                                  # the sorted rows
    assert graph_replays_fitting(300 << 20, cuda, budget) == 0                                  # 3 fit: events
    before = {**cuda, "graph_replays_min": None}                                                # 1.6.0's rule
    assert graph_replays_fitting(128 << 20, before, budget) == 0
    assert graph_replays_fitting(32 << 20, before, budget) == 32
