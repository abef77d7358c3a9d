"""Real llama-server processes on the seeded tiny model: probe, launch, workload, trial, store, CLI,
random search. Skipped with the reason when the binary is not built (`atb engine build llama-cpp`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.engines import (
    EngineLaunchFailed, LlamaServerAdapter, build_llama_server, cached_binary, load_engine_task, render_config,
)
from harness.measure.serving.client import run_workload
from harness.measure.serving.process import EngineProcess, free_port
from harness.measure.serving.session import open_engine_session
from harness.measure.serving.trial import prepare_model
from harness.measure.serving.workload import make_workload
from harness.tuning.search import random_search_task
from harness.tuning.subjects import EngineSubject
from harness.verdict.engine import evaluate_engine_candidate
from harness.store import ResultStore, open_store
from protocol import load_protocol

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(cached_binary() is None,
                       reason="llama-server is not built here: run `atb engine build llama-cpp` (about 7 min)"),
]

PROTO = load_protocol()
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def task():
    return load_engine_task("llamacpp-tiny")


@pytest.fixture(scope="module")
def fast_task_path() -> Path:
    """llamacpp-tiny-1t: one generation thread fixed for both arms. On a shared 2-core machine the
    engine's default (all cores, busy-polling) is slow and noisy, and these tests check plumbing."""
    from harness.engines.task import TASKS_DIR

    return TASKS_DIR / "llamacpp_tiny_1t.yaml"


@pytest.fixture(scope="module")
def fast_task(fast_task_path: Path):
    return load_engine_task(fast_task_path)


@pytest.fixture()
def store(tmp_path: Path) -> ResultStore:
    return open_store(str(tmp_path / "atb.sqlite"))


def test_build_reuses_the_cached_binary() -> None:
    res = build_llama_server()
    assert res.reused and "version" in res.version_text and res.seconds < 30


def test_probe_finds_every_flag_of_the_space_in_help() -> None:
    probe = LlamaServerAdapter().probe()
    assert "version" in probe.version_text
    assert probe.space_flags_missing == []
    assert "--parallel" in probe.flags_in_help and "--spec-type" in probe.flags_in_help


def test_tiny_model_serves_stable_greedy_completions(task, tmp_path: Path) -> None:
    model = prepare_model(task)
    spec = task.adapter().launch({}, model=model.arg, host="127.0.0.1", port=free_port(), fixed_args=task.fixed_args)
    w = make_workload(task.workload, 42, PROTO.engine.requests_per_trial)
    with EngineProcess(spec, tmp_path / "e.log") as proc:
        proc.wait_ready(PROTO.engine.startup_timeout_s)
        a = run_workload(proc.base_url, task.served_model_name, w, 60)
        b = run_workload(proc.base_url, task.served_model_name, w, 60)
    assert all(r.ok for r in a.results), [r.error for r in a.results]
    # Greedy decoding is stable but not bit-exact across batch compositions and prompt-cache reuse
    # (random weights have near-ties): the protocol's output-match bar is what must hold.
    same = sum(x.text == y.text for x, y in zip(a.results, b.results)) / len(a.results)
    assert same >= PROTO.engine.output_match_min_fraction
    assert len({r.text for r in a.results}) > len(a.results) // 2  # completions depend on the prompt
    assert [r.completion_tokens for r in a.results] == [q.max_tokens for q in w.requests]


def test_default_launch_failure_raises_with_the_engine_log(task, store: ResultStore, tmp_path: Path) -> None:
    data = task.model_dump(mode="json")
    data["fixed_args"] = task.fixed_args + ["--no-such-flag-xyz"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps(data))
    session = open_engine_session(store, PROTO)
    with pytest.raises(EngineLaunchFailed) as err:
        evaluate_engine_candidate(bad, "{}", store=store, session=session, protocol=PROTO)
    assert "no-such-flag-xyz" in err.value.log_excerpt


def test_engine_trial_end_to_end_through_the_store(fast_task, store: ResultStore) -> None:
    session = open_engine_session(store, PROTO)
    res = evaluate_engine_candidate(fast_task, '{"parallel": 2, "cont_batching": true}', store=store, session=session,
                                    protocol=PROTO)
    names = [g.name for g in res.gates]
    assert names[:3] == ["engine_launch", "engine_alive", "failed_requests"], res.reason
    assert res.speedup is not None and res.speedup_ci is not None
    assert res.speedup_ci[0] <= res.speedup <= res.speedup_ci[1]
    assert len(res.seeds) == PROTO.seeds.paired_seeds
    assert res.metrics["baseline"]["requests"] == \
        PROTO.engine.requests_per_trial * PROTO.seeds.paired_seeds * PROTO.engine.reps_per_seed
    samples = store.measurement_set_samples(store.verdict(res.verdict_id).candidate_set_id)
    assert sorted(samples) == res.seeds and all(len(v) == PROTO.engine.reps_per_seed for v in samples.values())
    assert res.metrics["candidate"]["failed"] == 0
    v = store.verdict(res.verdict_id)
    assert v.kind == "engine" and v.baseline_label == "engine-default" and v.ratio == res.speedup
    assert "--parallel" in v.detail["argv"]["candidate"] and "--parallel" not in v.detail["argv"]["baseline"]


def test_cli_eval_prints_one_json_object(fast_task_path: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "flags.json"
    cfg.write_text('{"cache_prompt": false}')
    p = subprocess.run([sys.executable, "-m", "atb_agent.cli", "engine", "eval", str(fast_task_path), str(cfg), "--json",
                        "--db", str(tmp_path / "atb.sqlite")], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["verdict"] in ("accepted", "rejected", "quarantined") and out["verdict_id"]
    assert out["engine"] == "llama-server" and out["config"] == {"cache_prompt": False}


def test_random_search_runs_real_trials(fast_task, store: ResultStore) -> None:
    """The `atb search` path: the seeded random search through the engine subject (its own session).

    Plumbing, not the protocol's numbers (those are checked by the end-to-end trial above): each trial is
    kept short (1 repetition x 8 requests per paired seed, 1 warm-up request; the store's rules hold the
    paired seeds at the protocol's count)."""
    proto = PROTO.model_copy(update={"engine": PROTO.engine.model_copy(
        update={"requests_per_trial": 8, "reps_per_seed": 1, "warmup_requests": 1})})
    summary = random_search_task(EngineSubject(fast_task), store=store, protocol=proto, budget=2, seed=3)
    rows = store.query("SELECT status, kind FROM verdicts")
    assert len(rows) == 2 and all(r["kind"] == "engine" for r in rows)
    from harness.records import sha256_text
    from harness.tuning.search import RandomSearch

    assert summary.iterations_recorded == 2 and summary.campaign.kind == "engine"
    expected = [sha256_text(render_config(c)) for c in RandomSearch(fast_task.flag_space(), 3).sequence(2)]
    stored = [r["candidate_sha256"] for r in store.query("SELECT candidate_sha256 FROM verdicts ORDER BY created_at")]
    assert stored == expected
