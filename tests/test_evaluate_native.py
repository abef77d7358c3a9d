"""evaluate_candidate end to end on CPU: honest, crashing, incorrect and in-place candidates; fail-closed
gates; refused cross-session use. One measurement session is shared by the module (workers reused)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.errors import CandidateError, IncomparableError
from harness.measure.evidence import Evidence
from harness.measure.session import MeasurementContext, open_measurement_session
from harness.store import ResultStore, open_store
from harness.tasks import load_task
from harness.verdict.evaluate import EvalResult, evaluate_candidate, run_gates_fail_closed
from protocol import load_protocol

P = load_protocol()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResultStore]:
    s = open_store(tmp_path_factory.mktemp("eval") / "atb.sqlite")
    yield s
    s.close()


@pytest.fixture(scope="module")
def ctx(store: ResultStore) -> Iterator[MeasurementContext]:
    with open_measurement_session(store, "cpu", P, note="tests") as c:
        yield c


def _eval(task: str, source: str, store: ResultStore, ctx: MeasurementContext) -> EvalResult:
    return evaluate_candidate(task, source, store=store, session=ctx, protocol=P)


def test_session_records_fingerprint_and_ceilings(store: ResultStore, ctx: MeasurementContext) -> None:
    assert ctx.fingerprint.backend == "cpu" and ctx.fingerprint.torch_threads == P.timing.cpu.threads
    assert ctx.ceilings is not None and ctx.ceilings.bytes_per_s > 0 and ctx.ceilings.flops_per_s > 0
    assert store.ceilings_for_device(ctx.device_sha256) is not None
    assert store.session(ctx.session_id)["device_sha256"] == ctx.device_sha256


def test_honest_start_is_measured_and_ingested(store: ResultStore, ctx: MeasurementContext) -> None:
    task = load_task("relu")
    res = _eval("relu", task.render_candidate({"impl": "clamp", "layout": "keep"}), store, ctx)
    assert res.correct, res.reason
    assert res.verdict == "accepted", [(g.name, g.detail) for g in res.gates if not g.passed]
    assert res.speedup is not None and res.speedup_ci is not None
    assert res.speedup_ci[0] <= res.speedup <= res.speedup_ci[1]
    assert res.speedup_vs_start is not None and res.roofline_fraction is not None
    assert len(res.seeds) == P.seeds.paired_seeds and len(set(res.seeds)) == len(res.seeds)
    assert len(res.correctness_seeds) == P.seeds.correctness_trials
    stored = store.verdict(res.verdict_id)
    assert stored.status == "accepted" and stored.baseline_label == "eager-reference"
    assert stored.seeds == sorted(res.seeds) and stored.ratio == res.speedup
    samples = store.measurement_set_samples(stored.candidate_set_id or "")
    assert sorted(samples) == sorted(res.seeds)
    ev = res.evidence
    assert ev is not None and ev.candidate_pid != ev.reference_pid
    assert {c.distribution for c in ev.comparisons} >= {"task", *P.correctness.distributions}
    assert sum(1 for c in ev.comparisons if c.phase == "timed") >= P.gates.timed_output_checks
    assert all(t.parent_wall_ns >= t.wall_ns > 0 for t in ev.candidate_timed)
    assert ev.baseline_integrity.candidate_modules_in_baseline == []
    assert len(ev.start_timed) == P.seeds.paired_seeds
    # a second evaluation draws fresh seeds
    again = _eval("relu", task.start_source(), store, ctx)
    assert again.correct and not set(again.seeds) & set(res.seeds)


def test_crashing_candidates_are_rejected_and_the_harness_goes_on(store: ResultStore, ctx: MeasurementContext) -> None:
    exits = ("import os\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
             "    def forward(self, x):\n        os._exit(7)\n")
    res = _eval("relu", exits, store, ctx)
    assert res.verdict == "rejected" and not res.correct
    assert "candidate exit" in res.reason and "exit status 7" in res.reason
    assert store.verdict(res.verdict_id).status == "rejected"
    broken = "import torch\nclass ModelNew(:\n"
    res2 = _eval("relu", broken, store, ctx)
    assert res2.verdict == "rejected" and "import_error" in res2.reason
    raises = ("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        if x.min() < -3:\n            raise RuntimeError('edge')\n"
              "        return torch.relu(x)\n")
    res3 = _eval("relu", raises, store, ctx)
    assert res3.verdict == "rejected" and "edge" in res3.reason


def test_incorrect_and_input_mutating_candidates_are_rejected(store: ResultStore, ctx: MeasurementContext) -> None:
    softmax = load_task("softmax")
    naive = _eval("softmax", softmax.render_candidate({"impl": "naive", "layout": "keep"}), store, ctx)
    assert naive.verdict == "rejected" and not naive.correct and "large" in naive.reason
    shift = load_task("scale_shift")
    inplace = _eval("scale_shift", shift.render_candidate({"impl": "input_inplace", "layout": "keep"}), store, ctx)
    assert inplace.verdict == "rejected"
    ev = inplace.evidence
    assert ev is not None
    assert any(c.input_hashes_before != c.input_hashes_after for c in ev.candidate_calls)
    assert any(c.aliases_input for c in ev.candidate_calls)


def test_gates_fail_closed_when_a_gate_raises_or_none_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.verdict.evaluate as evaluate

    ev = Evidence(task_id="relu", backend="cpu")

    def broken(evidence: Evidence, protocol: object) -> list[object]:
        raise RuntimeError("a gate broke")
    monkeypatch.setattr(evaluate, "run_gates", broken)
    gates = run_gates_fail_closed(ev, P)
    assert [g.name for g in gates] == ["gates_error"] and not gates[0].passed and "a gate broke" in gates[0].detail
    monkeypatch.setattr(evaluate, "run_gates", lambda evidence, protocol: [])
    assert [(g.name, g.passed) for g in run_gates_fail_closed(ev, P)] == [("gates_empty", False)]


def test_refusals(store: ResultStore, ctx: MeasurementContext, tmp_path: Path) -> None:
    with pytest.raises(CandidateError, match="candidate_source_max_bytes"):
        _eval("relu", "#" * (P.limits.candidate_source_max_bytes + 1), store, ctx)
    other = open_store(tmp_path / "other.sqlite")
    try:
        with pytest.raises(IncomparableError, match="belongs to"):
            evaluate_candidate("relu", load_task("relu").start_source(), store=other, session=ctx, protocol=P)
    finally:
        other.close()


def test_a_failing_evaluation_leaves_no_scratch_behind(store: ResultStore, ctx: MeasurementContext,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.verdict.evaluate as evaluate

    def broken(evidence: Evidence, protocol: object) -> list[object]:
        raise KeyboardInterrupt   # not an Exception: fail-closed does not swallow it, the evaluation aborts
    monkeypatch.setattr(evaluate, "run_gates", broken)
    before = set(ctx.workdir.glob("eval-*"))
    with pytest.raises(KeyboardInterrupt):
        _eval("relu", load_task("relu").start_source(), store, ctx)
    assert set(ctx.workdir.glob("eval-*")) == before


def test_kernel_and_engine_results_share_one_shape() -> None:
    """Campaigns, search and reports read one set of fields whichever subject was measured."""
    from harness.verdict.engine import EngineEvalResult
    from harness.verdict.result import VerdictResult

    shared = set(VerdictResult.model_fields)
    assert issubclass(EvalResult, VerdictResult) and issubclass(EngineEvalResult, VerdictResult)
    assert shared <= set(EvalResult.model_fields) and shared <= set(EngineEvalResult.model_fields)
    for name in shared:   # neither subject redefines a shared field
        base = repr(VerdictResult.model_fields[name])
        assert repr(EvalResult.model_fields[name]) == base and repr(EngineEvalResult.model_fields[name]) == base, name
