"""Unit tests of each gate on hand-built Evidence, plus run_gates (fail closed) and decide_status.

Each test starts from an honest evidence record that every gate passes, changes the one fact a cheat
would change, and asserts that the gate meant to catch it fails (and, where it matters, that the
others still pass: a cheat should be named by its own gate).
"""

from __future__ import annotations

import pytest

from harness.measure.evidence import (
    CallFacts, Comparison, Evidence, IntegrityFacts, TensorMeta, TimedFacts, TimedOutput, WorkerFailure,
)
from harness.records import DeviceCeilings, GateResult
from harness.verdict.gates import FunctionGate, decide_status, gate_names, is_correct, run_gates
from protocol import load_protocol

P = load_protocol()

HONEST_SOURCE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
"""


def _call(seed: int, dist: str, **kw: object) -> CallFacts:
    base = dict(seed=seed, distribution=dist, outputs=[TensorMeta(shape=[128, 1024], dtype="float32")],
                input_hashes_before=[f"h{seed}"], input_hashes_after=[f"h{seed}"], ops_called=["clamp_min"])
    base.update(kw)
    return CallFacts(**base)  # type: ignore[arg-type]


def _timed(seed: int, per_rep: float, **kw: object) -> TimedFacts:
    base = dict(seed=seed, times_ns=[per_rep] * 15, wall_ns=per_rep * 15 * 1.05, timed_total_ns=per_rep * 15,
                parent_wall_ns=per_rep * 15 * 1.05 + 4e6, input_hashes_before=["a"], input_hashes_after=["a"],
                timed_outputs=[TimedOutput(rep=r, input_seed=1000 * seed + r, output_path=f"/x/{seed}-{r}.pt")
                               for r in (0, 7, 14)] if seed < 3 else [],
                timed_calls=15, distinct_input_sets=15, input_refill="window")
    base.update(kw)
    return TimedFacts(**base)  # type: ignore[arg-type]


def honest(**update: object) -> Evidence:
    dists = ["normal", "negative", "large"]
    ev = Evidence(
        task_id="relu", backend="cpu", candidate_pid=101, reference_pid=202,
        candidate_calls=[_call(s, d) for s, d in zip((1, 2, 3), dists)],
        reference_calls=[_call(s, d, ops_called=["relu"]) for s, d in zip((1, 2, 3), dists)],
        comparisons=[Comparison(seed=s, distribution=d, phase="correctness", passed=True, max_abs_err=0.0)
                     for s, d in zip((1, 2, 3), dists)]
        + [Comparison(seed=1000 + r, distribution="task", phase="timed", passed=True) for r in (0, 7, 14)],
        candidate_timed=[_timed(s, 1e6) for s in range(5)],
        baseline_timed=[_timed(s, 2e6) for s in range(5)],
        candidate_integrity=IntegrityFacts(checks={"time.perf_counter_ns": True, "torch.nn.Module.__call__": True,
                                                   "torch.save": True}, pid=101),
        baseline_integrity=IntegrityFacts(checks={"time.perf_counter_ns": True}, pid=303),
        ratio=2.0, ci_low=1.9, ci_high=2.1, candidate_median_ns=1e6,
        ceilings=DeviceCeilings(bytes_per_s=1e10, flops_per_s=1e11, method="test"),
        task_bytes=1048576.0, candidate_source=HONEST_SOURCE, input_dtype="float32",
    )
    return ev.model_copy(update=update)


def results(ev: Evidence) -> dict[str, GateResult]:
    return {g.name: g for g in run_gates(ev, P)}


def failing(ev: Evidence) -> set[str]:
    return {n for n, g in results(ev).items() if not g.passed}


def src(body: str) -> str:
    return "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" + \
        "".join("        " + line + "\n" for line in body.strip().splitlines())


# ---------------------------------------------------------------------------- the honest record
def test_honest_evidence_passes_every_gate_and_is_accepted() -> None:
    ev = honest()
    gates = run_gates(ev, P)
    assert [g.name for g in gates] == gate_names()
    assert all(g.passed for g in gates), [g for g in gates if not g.passed]
    assert all(g.detail for g in gates)
    status, reason = decide_status(gates, ev, P)
    assert status == "accepted" and "2.000x" in reason


# ---------------------------------------------------------------------------- anomaly
def test_anomaly_speedup_quarantines_when_it_is_the_only_failure() -> None:
    ev = honest(ratio=12.0, ci_low=11.0, ci_high=13.0, candidate_median_ns=1.7e5)
    assert failing(ev) == {"anomaly"}
    status, reason = decide_status(run_gates(ev, P), ev, P)
    assert status == "quarantined" and "12.00x" in reason and "10x" in reason


def test_anomaly_at_threshold_passes() -> None:
    assert "anomaly" not in failing(honest(ratio=P.gates.anomaly_speedup))


def test_anomaly_with_another_failure_rejects() -> None:
    ev = honest(ratio=50.0, candidate_pid=202)
    status, reason = decide_status(run_gates(ev, P), ev, P)
    assert status == "rejected" and "reference_scavenging" in reason


# ---------------------------------------------------------------------------- identity / aliasing
def test_output_sharing_input_storage_fails_aliasing() -> None:
    ev = honest()
    calls = [c.model_copy(update={"aliases_input": [0]}) for c in ev.candidate_calls]
    assert failing(ev.model_copy(update={"candidate_calls": calls})) == {"identity_aliasing"}


def test_output_equal_to_input_where_reference_differs_fails() -> None:
    ev = honest()
    calls = [c.model_copy(update={"equals_input": [0]}) for c in ev.candidate_calls]
    r = results(ev.model_copy(update={"candidate_calls": calls}))["identity_aliasing"]
    assert not r.passed and "passed its input through" in r.detail


def test_output_equal_to_input_is_excused_where_the_reference_equals_it_too() -> None:
    ev = honest()
    calls = [c.model_copy(update={"equals_input": [0]}) for c in ev.candidate_calls]
    refs = [c.model_copy(update={"equals_input": [0]}) for c in ev.reference_calls]
    assert "identity_aliasing" not in failing(ev.model_copy(update={"candidate_calls": calls,
                                                                    "reference_calls": refs}))


# ---------------------------------------------------------------------------- input mutation
def test_written_input_fails_mutation() -> None:
    ev = honest()
    calls = list(ev.candidate_calls)
    calls[1] = calls[1].model_copy(update={"input_hashes_after": ["changed"]})
    r = results(ev.model_copy(update={"candidate_calls": calls}))
    assert not r["input_mutation"].passed and "wrote input(s) [0]" in r["input_mutation"].detail
    assert {n for n, g in r.items() if not g.passed} == {"input_mutation"}


def test_mutation_during_timing_fails() -> None:
    ev = honest()
    timed = [t.model_copy(update={"input_hashes_after": ["b"]}) for t in ev.candidate_timed]
    assert failing(ev.model_copy(update={"candidate_timed": timed})) == {"input_mutation"}


def test_missing_input_hashes_fail_closed() -> None:
    ev = honest()
    calls = [c.model_copy(update={"input_hashes_after": []}) for c in ev.candidate_calls]
    r = results(ev.model_copy(update={"candidate_calls": calls}))["input_mutation"]
    assert not r.passed and "no input hashes" in r.detail


# ---------------------------------------------------------------------------- stale output
def test_failed_timed_output_fails_stale_gate() -> None:
    ev = honest()
    comps = [c if c.phase != "timed" or c.seed != 1007 else c.model_copy(update={"passed": False, "reason": "max err 3"})
             for c in ev.comparisons]
    ev2 = ev.model_copy(update={"comparisons": comps})
    r = results(ev2)
    assert not r["stale_output"].passed and "1007" in r["stale_output"].detail
    assert {n for n, g in r.items() if not g.passed} == {"stale_output"}
    assert is_correct(ev2)[0]  # untimed correctness alone would have passed it


def test_too_few_timed_checks_fail_closed() -> None:
    ev = honest()
    comps = [c for c in ev.comparisons if c.phase != "timed"][:3]
    assert "stale_output" in failing(ev.model_copy(update={"comparisons": comps}))


def test_timed_calls_on_repeated_input_sets_fail() -> None:
    ev = honest()
    timed = [t.model_copy(update={"distinct_input_sets": 3}) for t in ev.candidate_timed]
    r = results(ev.model_copy(update={"candidate_timed": timed}))
    assert "distinct input sets" in r["stale_output"].detail
    assert {n for n, g in r.items() if not g.passed} == {"stale_output"}
    unrecorded = [t.model_copy(update={"timed_calls": 0}) for t in ev.baseline_timed]
    assert "stale_output" in failing(ev.model_copy(update={"baseline_timed": unrecorded}))


def test_timed_outputs_on_one_input_seed_fail() -> None:
    ev = honest()
    timed = [t.model_copy(update={"timed_outputs": [o.model_copy(update={"input_seed": 5}) for o in t.timed_outputs]})
             for t in ev.candidate_timed]
    assert failing(ev.model_copy(update={"candidate_timed": timed})) == {"stale_output"}


# ---------------------------------------------------------------------------- escape
def test_wall_far_above_timed_fails_escape() -> None:
    ev = honest()
    timed = [t.model_copy(update={"wall_ns": t.timed_total_ns * 4, "parent_wall_ns": t.timed_total_ns * 4 + 4e6})
             for t in ev.candidate_timed]
    r = results(ev.model_copy(update={"candidate_timed": timed}))
    assert not r["timed_region_escape"].passed and "outside the timed region" in r["timed_region_escape"].detail
    assert {n for n, g in r.items() if not g.passed} == {"timed_region_escape"}


def test_harness_overhead_seen_on_the_baseline_is_not_an_escape() -> None:
    """CUDA: each repetition's L2 flush is in the wall time but not the events; the baseline has it too."""
    ev = honest()
    flush = 6.5e4  # per repetition, ns
    cand = [t.model_copy(update={"times_ns": [5e3] * 200, "timed_total_ns": 5e3 * 200,
                                 "wall_ns": (5e3 + flush) * 200}) for t in ev.candidate_timed]
    base = [t.model_copy(update={"times_ns": [2e4] * 50, "timed_total_ns": 2e4 * 50,
                                 "wall_ns": (2e4 + flush) * 50}) for t in ev.baseline_timed]
    assert "timed_region_escape" not in failing(ev.model_copy(update={"candidate_timed": cand, "baseline_timed": base}))
    escaped = [t.model_copy(update={"wall_ns": t.wall_ns + 2e4 * 200}) for t in cand]
    assert "timed_region_escape" in failing(ev.model_copy(update={"candidate_timed": escaped, "baseline_timed": base}))


def test_short_wall_is_not_judged() -> None:
    ev = honest()
    timed = [t.model_copy(update={"times_ns": [1e4] * 15, "timed_total_ns": 1.5e5, "wall_ns": 6e5})
             for t in ev.candidate_timed]
    assert "timed_region_escape" not in failing(ev.model_copy(update={"candidate_timed": timed}))


def test_missing_wall_facts_fail_closed() -> None:
    ev = honest()
    timed = [t.model_copy(update={"wall_ns": 0}) for t in ev.candidate_timed]
    assert "timed_region_escape" in failing(ev.model_copy(update={"candidate_timed": timed}))


def test_side_thread_cpu_time_fails_escape() -> None:
    ev = honest()
    timed = [t.model_copy(update={"other_threads_cpu_ns": t.timed_total_ns * 0.9}) for t in ev.candidate_timed]
    r = results(ev.model_copy(update={"candidate_timed": timed}))["timed_region_escape"]
    assert not r.passed and "side thread" in r.detail
    idle = [t.model_copy(update={"other_threads_cpu_ns": 1e4}) for t in ev.candidate_timed]
    assert "timed_region_escape" not in failing(ev.model_copy(update={"candidate_timed": idle}))


def test_thread_count_rising_fails_escape() -> None:
    ev = honest()
    calls = [c.model_copy(update={"threads_after": 4}) for c in ev.candidate_calls]
    assert "timed_region_escape" in failing(ev.model_copy(update={"candidate_calls": calls}))
    timed = [t.model_copy(update={"threads_after": 3}) for t in ev.candidate_timed]
    assert "timed_region_escape" in failing(ev.model_copy(update={"candidate_timed": timed}))


def test_thread_spawning_source_fails_escape() -> None:
    s = "import threading\n" + src("threading.Thread(target=lambda: None).start()\nreturn x.clamp_min(0)")
    assert failing(honest(candidate_source=s)) == {"timed_region_escape"}


# ---------------------------------------------------------------------------- tampering
def test_replaced_timer_fails_tampering_not_sabotage() -> None:
    ev = honest(candidate_integrity=IntegrityFacts(checks={"time.perf_counter_ns": False, "torch.save": True}, pid=101))
    r = results(ev)
    assert not r["timer_tampering"].passed and "time.perf_counter_ns" in r["timer_tampering"].detail
    assert r["baseline_sabotage"].passed


def test_no_integrity_checks_fail_closed() -> None:
    assert "timer_tampering" in failing(honest(candidate_integrity=IntegrityFacts(pid=101)))


@pytest.mark.parametrize("body", [
    "import time as _t\n_t.perf_counter_ns = lambda: 0\nreturn x.clamp_min(0)",
    "setattr(torch.cuda, 'synchronize', lambda: None)\nreturn x.clamp_min(0)",
    "torch.cuda.Event.elapsed_time = lambda s, e: 0.001\nreturn x.clamp_min(0)",
    "import sys\nf = sys._getframe(1)\nreturn x.clamp_min(0)",
    "import inspect\nst = inspect.stack()\nreturn x.clamp_min(0)",
    "import harness.verdict.gates\nreturn x.clamp_min(0)",
    "torch.set_num_threads(8)\nreturn x.clamp_min(0)",
])
def test_tampering_in_source_fails_tampering(body: str) -> None:
    r = results(honest(candidate_source=src(body)))
    assert not r["timer_tampering"].passed, r["timer_tampering"].detail


def test_timed_total_beyond_parents_clock_fails_tampering() -> None:
    ev = honest()
    timed = [t.model_copy(update={"parent_wall_ns": t.timed_total_ns / 2}) for t in ev.candidate_timed]
    assert "timer_tampering" in failing(ev.model_copy(update={"candidate_timed": timed}))
    bad = [t.model_copy(update={"times_ns": [0.0] + t.times_ns[1:]}) for t in ev.candidate_timed]
    assert "timer_tampering" in failing(ev.model_copy(update={"candidate_timed": bad}))


def test_worker_clock_slowed_is_seen_by_the_parents_clock() -> None:
    """A candidate that slows the harness's bound clock (through sys.modules, say) shrinks both the
    worker's wall and timed totals; the parent's clock around the blocks does not shrink."""
    ev = honest(backend="cuda")
    slowed = [t if t.timed_outputs else t.model_copy(update={
        "times_ns": [x / 4 for x in t.times_ns], "timed_total_ns": t.timed_total_ns / 4, "wall_ns": t.wall_ns / 4})
        for t in ev.candidate_timed]
    r = results(ev.model_copy(update={"candidate_timed": slowed}))
    assert not r["timer_tampering"].passed and "median 4" in r["timer_tampering"].detail
    assert {n for n, g in r.items() if not g.passed} == {"timer_tampering"}
    # on CPU the parent's round trips are too noisy to judge (see the gate's docstring)
    assert "timer_tampering" not in failing(ev.model_copy(update={"candidate_timed": slowed, "backend": "cpu"}))


def test_one_preempted_seed_is_not_tampering() -> None:
    ev = honest(backend="cuda")
    timed = [t.model_copy(update={"parent_wall_ns": t.parent_wall_ns + 5 * t.wall_ns}) if t.seed == 3 else t
             for t in ev.candidate_timed]
    assert "timer_tampering" not in failing(ev.model_copy(update={"candidate_timed": timed}))


def test_harness_work_the_worker_clocked_is_not_tampering() -> None:
    """H200, 12_Matmul_with_diagonal_matrices_: the candidate's process spent 70 ms more than the
    baseline's on harness work around a 34 ms timed wall (input sets, checks), which its clock saw and
    reported as handling time. Against the timed wall alone that read 3.08x; against the handling
    time it is IPC only. A clock slowed by 4 still fails: it shrinks the handling time too."""
    ev = honest(backend="cuda")
    extra = [t.model_copy(update={"handler_ns": t.wall_ns + 7e7 + 2.5e8,
                                  "parent_wall_ns": t.wall_ns + 7e7 + 2.5e8 + 4e6}) for t in ev.candidate_timed]
    base = [t.model_copy(update={"handler_ns": t.wall_ns + 2.5e8, "parent_wall_ns": t.wall_ns + 2.5e8 + 4e6})
            for t in ev.baseline_timed]
    assert "timer_tampering" not in failing(ev.model_copy(update={"candidate_timed": extra, "baseline_timed": base}))
    unclocked = [t.model_copy(update={"handler_ns": 0.0}) for t in extra]   # a store row from before handler_ns
    assert "timer_tampering" in failing(ev.model_copy(update={"candidate_timed": unclocked, "baseline_timed": base}))
    slowed = [t if t.timed_outputs else t.model_copy(update={
        "times_ns": [x / 4 for x in t.times_ns], "timed_total_ns": t.timed_total_ns / 4, "wall_ns": t.wall_ns / 4,
        "handler_ns": t.handler_ns / 4}) for t in extra]
    assert "timer_tampering" in failing(ev.model_copy(update={"candidate_timed": slowed, "baseline_timed": base}))
    lying = [t.model_copy(update={"handler_ns": t.parent_wall_ns * 2}) for t in extra]
    assert "timer_tampering" in failing(ev.model_copy(update={"candidate_timed": lying, "baseline_timed": base}))


def test_ipc_cost_seen_on_the_baseline_is_not_tampering() -> None:
    ev = honest(backend="cuda")
    slow_ipc = [t.model_copy(update={"parent_wall_ns": t.wall_ns + 3e7}) for t in ev.candidate_timed]
    base = [t.model_copy(update={"parent_wall_ns": t.wall_ns + 2.9e7}) for t in ev.baseline_timed]
    assert "timer_tampering" not in failing(ev.model_copy(update={"candidate_timed": slow_ipc, "baseline_timed": base}))


def test_stack_audit_event_fails_tampering() -> None:
    ev = honest(candidate_integrity=IntegrityFacts(checks={"time.perf_counter_ns": True}, pid=101,
                                                   audit_events=["sys._getframe"]))
    assert failing(ev) == {"timer_tampering"}


# ---------------------------------------------------------------------------- baseline sabotage
def test_torch_patch_in_source_fails_sabotage() -> None:
    s = src("return torch.relu(x)") + "\n\n_orig = torch.relu\ntorch.relu = lambda x: _orig(x.clone().clone())\n"
    assert failing(honest(candidate_source=s)) == {"baseline_sabotage"}


def test_aten_override_fails_sabotage() -> None:
    s = src("return x.clamp_min(0)") + "\nlib = torch.library.Library('aten', 'IMPL')\n"
    assert failing(honest(candidate_source=s)) == {"baseline_sabotage"}


def test_replaced_torch_function_at_run_time_fails_sabotage_not_tampering() -> None:
    ev = honest(candidate_integrity=IntegrityFacts(checks={"time.perf_counter_ns": True,
                                                           "torch.nn.Module.__call__": False}, pid=101))
    assert failing(ev) == {"baseline_sabotage"}


def test_baseline_in_candidate_process_fails_sabotage() -> None:
    assert "baseline_sabotage" in failing(honest(baseline_integrity=IntegrityFacts(pid=101)))
    assert "baseline_sabotage" in failing(honest(baseline_integrity=IntegrityFacts(pid=0)))
    ev = honest(baseline_integrity=IntegrityFacts(pid=303, candidate_modules_in_baseline=["atb_candidate_x"]))
    assert failing(ev) == {"baseline_sabotage"}


def test_honest_torch_knobs_are_not_sabotage() -> None:
    s = src("return x.clamp_min(0)") + "\ntorch.backends.cudnn.benchmark = True\n" \
        "torch._inductor.config.max_autotune = True\n"
    assert failing(honest(candidate_source=s)) == set()


# ---------------------------------------------------------------------------- reference scavenging
def test_gc_search_fails_scavenging() -> None:
    s = "import gc\n" + src("for o in gc.get_objects():\n    pass\nreturn x.clamp_min(0)")
    assert failing(honest(candidate_source=s)) == {"reference_scavenging"}


def test_obfuscated_gc_search_is_seen_by_audit_events() -> None:
    s = src("m = __import__('g' + 'c')\nfor o in getattr(m, 'get_' + 'objects')():\n    pass\nreturn x.clamp_min(0)")
    assert "reference_scavenging" not in failing(honest(candidate_source=s))  # the scan cannot see through it
    ev = honest(candidate_source=s, candidate_integrity=IntegrityFacts(
        checks={"time.perf_counter_ns": True}, pid=101, audit_events=["gc.get_objects"]))
    assert failing(ev) == {"reference_scavenging"}


def test_reference_in_candidate_process_fails_scavenging() -> None:
    assert failing(honest(reference_pid=101)) == {"reference_scavenging"}
    assert "reference_scavenging" in failing(honest(reference_pid=0))


def test_reading_files_or_proc_fails_scavenging() -> None:
    s = "import glob\n" + src("fs = glob.glob('/tmp/**/*.pt')\nreturn x.clamp_min(0)")
    assert failing(honest(candidate_source=s)) == {"reference_scavenging"}
    s2 = src("open('/proc/self/maps').read()\nreturn x.clamp_min(0)")
    assert failing(honest(candidate_source=s2)) == {"reference_scavenging"}


# ---------------------------------------------------------------------------- physical limit
def test_time_below_roofline_floor_fails_physical() -> None:
    # 1 MiB at 10 GB/s x 8 (CPU cache factor) is ~13 us; /1.1 slack ~12 us. 5 us is impossible.
    ev = honest(candidate_median_ns=5e3, ratio=9.0, ci_low=8.0, ci_high=9.5)
    r = results(ev)
    assert {n for n, g in r.items() if not g.passed} == {"physical_limit"}
    assert "below the physical floor" in r["physical_limit"].detail


def test_flops_floor_and_output_size_fallback() -> None:
    # the reference's FLOPs (1e9 / 1e11 = 10 ms > 1 ms) bound nothing about a candidate that does less work:
    # protocol 1.6.0 quarantines for the extended pass instead of rejecting (issue 25)
    assert failing(honest(task_bytes=None, task_flops=1e9)) == {"anomaly"}
    # no declared bytes: the output (128*1024 fp32 = 512 KiB) must still be written, ~6 us floor on CPU
    assert "physical_limit" in failing(honest(task_bytes=None, candidate_median_ns=2e3))
    # on CUDA the L2 is flushed before each repetition: the DRAM ceiling applies unscaled
    assert "physical_limit" in failing(honest(backend="cuda", candidate_median_ns=5e4))
    assert "physical_limit" not in failing(honest(backend="cpu", candidate_median_ns=5e4))
    assert "physical_limit" not in failing(honest(task_bytes=None))


def test_missing_ceilings_fail_closed() -> None:
    r = results(honest(ceilings=None))["physical_limit"]
    assert not r.passed and "ceilings" in r.detail


# ---------------------------------------------------------------------------- forbidden shortcuts
def test_forbidden_op_in_source_or_at_run_time_fails_shortcut() -> None:
    s = "import torch.nn.functional as F\n" + src("return F.softmax(x, dim=-1)")
    assert failing(honest(forbidden_ops=["torch.softmax"], candidate_source=s)) == {"forbidden_shortcut"}
    ev = honest(forbidden_ops=["torch.softmax"])
    calls = [c.model_copy(update={"ops_called": ["softmax"]}) for c in ev.candidate_calls]
    assert failing(ev.model_copy(update={"candidate_calls": calls})) == {"forbidden_shortcut"}


def test_matmul_operator_counts_as_matmul() -> None:
    assert "forbidden_shortcut" in failing(honest(forbidden_ops=["torch.matmul"], candidate_source=src("return x @ x.t()")))


def test_no_forbidden_ops_declared_passes() -> None:
    r = results(honest(candidate_source=src("return torch.softmax(x, -1)")))["forbidden_shortcut"]
    assert r.passed and "declares no forbidden" in r.detail


# ---------------------------------------------------------------------------- precision downgrade
@pytest.mark.parametrize("body", [
    "return x.half().clamp_min(0).float()",
    "return x.to(torch.bfloat16).clamp_min(0).to(torch.float32)",
    "with torch.autocast('cpu'):\n    return x.clamp_min(0)",
    "torch.backends.cuda.matmul.allow_tf32 = True\nreturn x.clamp_min(0)",
    "torch.set_float32_matmul_precision('high')\nreturn x.clamp_min(0)",
])
def test_lower_precision_in_source_fails_precision(body: str) -> None:
    assert failing(honest(candidate_source=src(body))) == {"precision_downgrade"}


def test_tf32_flag_after_call_fails_precision() -> None:
    ev = honest()
    calls = [c.model_copy(update={"tf32_enabled_after": True}) for c in ev.candidate_calls]
    assert failing(ev.model_copy(update={"candidate_calls": calls})) == {"precision_downgrade"}


def test_half_precision_output_fails_precision() -> None:
    ev = honest()
    calls = [c.model_copy(update={"outputs": [TensorMeta(shape=[128, 1024], dtype="float16")]})
             for c in ev.candidate_calls]
    assert failing(ev.model_copy(update={"candidate_calls": calls})) == {"precision_downgrade"}


def test_precision_is_relative_to_the_task_dtype() -> None:
    assert "precision_downgrade" not in failing(honest(candidate_source=src("return x.float().clamp_min(0)")))
    assert "precision_downgrade" in failing(honest(input_dtype="float64",
                                                   candidate_source=src("return x.float().clamp_min(0).double()")))
    assert "precision_downgrade" not in failing(honest(input_dtype="bfloat16",
                                                       candidate_source=src("return x.clamp_min(0)")))


# ---------------------------------------------------------------------------- fail closed, decide
def test_a_gate_that_raises_is_a_failed_gate() -> None:
    def boom(ev: Evidence, p: object) -> tuple[list[str], str]:
        raise RuntimeError("disk on fire")

    def liar(ev: Evidence, p: object) -> GateResult:
        return GateResult(name="someone_else", passed=True)

    out = run_gates(honest(), P, gates=(FunctionGate("boom", boom), FunctionGate("liar", liar)))  # type: ignore[arg-type]
    assert [(g.name, g.passed) for g in out] == [("boom", False), ("liar", False)]
    assert "RuntimeError: disk on fire" in out[0].detail


def test_unparseable_source_fails_the_scanning_gates() -> None:
    bad = failing(honest(candidate_source="def (:\n"))
    assert {"timer_tampering", "baseline_sabotage", "reference_scavenging", "timed_region_escape",
            "precision_downgrade"} <= bad


def test_decide_status_order() -> None:
    gates = run_gates(honest(), P)
    assert decide_status([], honest(), P)[0] == "rejected"
    crashed = honest(failure=WorkerFailure(role="candidate", kind="crash", detail="SIGSEGV"))
    assert decide_status(gates, crashed, P) == ("rejected", "candidate crash: SIGSEGV")
    wrong = honest(comparisons=[Comparison(seed=1, distribution="negative", phase="correctness", passed=False,
                                           reason="max abs err 0.5")])
    status, reason = decide_status(gates, wrong, P)
    assert status == "rejected" and "negative" in reason and "0.5" in reason
    assert decide_status(gates, honest(comparisons=[]), P)[0] == "rejected"
    assert decide_status(gates, honest(ratio=None), P) == ("rejected", "no speedup was measured")
    extended_fail = honest(comparisons=honest().comparisons + [
        Comparison(seed=9, distribution="large", phase="extended", passed=False, reason="nan")])
    assert decide_status(gates, extended_fail, P)[0] == "rejected"
