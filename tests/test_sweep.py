"""``atb sweep`` on a real local Ray cluster: a grid completes, a stopped sweep resumes and repeats
nothing, a killed Ray worker's campaign resumes with each iteration stored exactly once.

One Ray cluster serves the module (start-up costs ~10 s): a helper process starts it with
``ray.init`` and holds it until its stdin closes, so the cluster's processes are ours to stop. The
sweeps themselves run as the real CLI (``atb sweep --ray ADDRESS``) in subprocesses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from sweep_cli import finish as _finish
from sweep_cli import ray_cluster
from sweep_cli import store_rows as _rows

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    with ray_cluster() as address:
        yield address


def _spec(tmp: Path, text: str) -> Path:
    p = tmp / "sweep.yaml"
    p.write_text(text)
    return p


def _sweep(spec: Path, db: str, address: str, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "atb_agent.cli", "sweep", str(spec), "--ray", address, "--db", db,
                             "--json", "--no-live"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _wait_for(cond: Any, proc: subprocess.Popen[str], timeout: float = 300) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        if proc.poll() is not None:
            raise AssertionError(f"the sweep ended (rc {proc.returncode}) before the awaited moment: "
                                 f"{proc.stderr.read()[-3000:] if proc.stderr else ''}")
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


def _iterations_once(db: Path | str, campaign_id: str, budget: int) -> list[tuple[Any, ...]]:
    rows = _rows(db, "SELECT idx, id, verdict_id, created_at FROM iterations WHERE campaign_id = ? ORDER BY idx",
                 (campaign_id,))
    assert [r[0] for r in rows] == list(range(budget)), f"iterations of {campaign_id}: {rows}"
    return rows


# ---------------------------------------------------------------------- spec errors: no Ray needed
@pytest.mark.parametrize("text, fragment", [
    ("tasks: [relu]\ntuners: [random]\nseeds: [1]\nbudget: 0\n", "budget"),
    ("tasks: [no_such_task]\ntuners: [random]\nseeds: [1]\nbudget: 2\n", "no_such_task"),
    ("tasks: [relu]\ntuners: ['openai:']\nseeds: [1]\nbudget: 2\n", "tuners"),
    ("tasks: ['kb/*.py']\ntuners: [random]\nseeds: [1]\nbudget: 2\n", "matches no file"),
    ("tasks: [relu]\ntuners: [random]\nseeds: [1, 1]\nbudget: 2\n", "seeds"),
    ("tasks: [relu\n", "not YAML"),
    ("tasks: [relu]\ntuners: [random]\nseeds: [1]\nbudget: 2\ngpus: 3\n", "gpus"),
])
def test_bad_spec_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, fragment: str) -> None:
    spec = _spec(tmp_path, text)
    assert main(["sweep", str(spec), "--db", str(tmp_path / "s.sqlite"), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert fragment in out["error"]


def test_random_search_over_a_file_without_knobs_uses_its_module_space(tmp_path: Path) -> None:
    """Issue 26: a KernelBench file declares no knobs; random search draws from its module space
    (harness/tasks/_module_space.py), so the spec resolves instead of being refused."""
    from atb_agent.sweep._spec import SweepSpec, resolve

    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "1_Square.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * x\n"
        "def get_inputs():\n    return [torch.randn(8)]\ndef get_init_inputs():\n    return []\n")
    resolved = resolve(SweepSpec(tasks=["kb/*.py"], tuners=["random"], seeds=[1], budget=2), tmp_path)
    assert [(k.task_id.split(":")[1], k.seed) for k in resolved.campaigns] == [("1_Square", 1)]


def test_an_engine_task_and_a_kernel_task_resolve_alike_for_random_search() -> None:
    """Tasks resolve through ``load_subject``: an engine task is searchable by ``random`` (its flag space)
    and each task's identity digest is its subject's (the kernel source's, the engine task's)."""
    from atb_agent.sweep._spec import SweepSpec, resolve
    from harness.engines import load_engine_task
    from harness.records import canonical_json, sha256_text
    from harness.tasks import load_task

    spec = SweepSpec(tasks=["relu", "llamacpp-tiny-1t"], tuners=["random"], seeds=[1, 2], budget=2)
    resolved = resolve(spec, Path("."))
    assert [(k.task_id, k.seed) for k in resolved.campaigns] == [
        ("relu", 1), ("relu", 2), ("llamacpp-tiny-1t", 1), ("llamacpp-tiny-1t", 2)]
    identity = {"tasks": [["relu", load_task("relu").source_sha256],
                          ["llamacpp-tiny-1t", load_engine_task("llamacpp-tiny-1t").sha256]],
                "tuners": ["random"], "seeds": [1, 2], "budget": 2, "backend": "cpu", "base_url": None}
    assert resolved.spec_sha256 == sha256_text(canonical_json(identity))


def test_a_replay_tuner_names_one_recording_per_task_and_each_is_checked_before_ray(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A recording replays only on its own task and budget (both are in the model's first request), so a
    replay tuner in a sweep over several tasks names one transcript per task with ``{task}``; each is
    checked when the spec loads, and the campaign runs with that task's transcript at its absolute path.
    Before this, the grid's other task started Ray and failed with a RequestMismatch, one campaign at a time."""
    import shutil

    from atb_agent.sweep import load_spec

    recorded = Path(__file__).resolve().parents[1] / "transcripts" / "recorded"
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(recorded / "live-smollm2-relu.jsonl", runs / "relu.jsonl")          # task relu, budget 3
    shutil.copy(recorded / "scripted-openai-docker.jsonl", runs / "gelu.jsonl")    # task gelu, budget 3
    grid = load_spec(_spec(tmp_path, f"tasks: [relu, gelu]\ntuners: [random, 'replay:{runs}/{{task}}.jsonl']\n"
                                     "seeds: [1, 2]\nbudget: 3\n"))
    replays = {(k.task_id, k.seed): k for k in grid.campaigns if k.tuner.startswith("replay:")}
    assert len(grid.campaigns) == 8 and len(replays) == 4
    assert replays[("relu", 1)].tuner == f"replay:{runs}/{{task}}.jsonl"          # the key: the spec as written
    assert replays[("relu", 1)].run_tuner == f"replay:{runs / 'relu.jsonl'}"
    assert replays[("gelu", 2)].run_tuner == f"replay:{runs / 'gelu.jsonl'}"
    assert all(k.run_tuner == "random" for k in grid.campaigns if k.tuner == "random")

    for text, fragment in (
            (f"tasks: [relu, gelu]\ntuners: ['replay:{runs}/relu.jsonl']\nseeds: [1]\nbudget: 3\n",
             "records task 'relu', and a recording replays only on its own task, not 'gelu'"),
            (f"tasks: [relu]\ntuners: ['replay:{runs}/{{task}}.jsonl']\nseeds: [1]\nbudget: 2\n",
             "records a budget of 3, the sweep's is 2"),
            (f"tasks: [relu, scale_shift]\ntuners: ['replay:{runs}/{{task}}.jsonl']\nseeds: [1]\nbudget: 3\n",
             f"no transcript at {runs / 'scale_shift.jsonl'}")):
        capsys.readouterr()
        assert main(["sweep", str(_spec(tmp_path, text)), "--db", str(tmp_path / "s.sqlite"), "--json"]) == 2
        assert fragment in json.loads(capsys.readouterr().out)["error"]
    assert not (tmp_path / "s.sqlite").exists(), "a refused spec opened the store"


def test_unknown_store_scheme_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = _spec(tmp_path, "tasks: [relu]\ntuners: [random]\nseeds: [1]\nbudget: 2\n")
    assert main(["sweep", str(spec), "--db", "mysql://x@y/z", "--json"]) == 2
    assert "unknown store scheme" in json.loads(capsys.readouterr().out)["error"]


# ---------------------------------------------------------------------- on Ray
def test_four_campaign_sweep_on_postgres_stopped_and_restarted_completes_repeating_none(
        ray_address: str, tmp_path: Path, pg_db: str) -> None:
    """Issue 17's target: 4 campaigns over 2 native tasks on this CPU, under Ray, against PostgreSQL;
    stopped after its first stored iteration and run again, it finishes without repeating anything."""
    db = pg_db
    # swish rather than relu (128 x 8192): two small native tasks, fewer seconds per harness measurement
    spec = _spec(tmp_path, "tasks: [swish, scale_shift]\ntuners: [random]\nseeds: [1, 2]\nbudget: 2\n")
    first = _sweep(spec, db, ray_address)
    stored = _wait_for(lambda: _rows(db, "SELECT campaign_id, idx, id FROM iterations"), first)
    first.send_signal(signal.SIGTERM)                 # stop the driver after the first stored iteration
    first.communicate(timeout=120)
    assert first.returncode != 0, "a sweep stopped midway must not report success"
    before = _rows(db, "SELECT campaign_id, idx, id, verdict_id FROM iterations")
    outcomes_before = {r[0] for r in _rows(db, "SELECT campaign_id FROM campaign_outcomes")}
    assert len(outcomes_before) < 4, "the sweep had finished before it was stopped; the test proves nothing"
    assert stored

    rc, out, err = _finish(_sweep(spec, db, ray_address))
    assert rc == 0, err[-3000:]
    assert out["restarted"] is True and out["done"] == 4 and out["failed"] == 0
    assert len(out["campaigns"]) == 4 and {c["task_id"] for c in out["campaigns"]} == {"swish", "scale_shift"}
    for c in out["campaigns"]:
        assert c["outcome"] == "completed" and c["iterations"] == 2
        _iterations_once(db, c["campaign_id"], 2)
        if c["campaign_id"] in outcomes_before:
            assert not c["ran_now"], f"{c['key']} had finished and was run again"
    # what was stored before the stop is still there, unchanged (kept, not redone)
    after = {(r[0], r[1]): (r[2], r[3]) for r in _rows(db, "SELECT campaign_id, idx, id, verdict_id FROM iterations")}
    for cid, idx, rid, vid in before:
        assert after[(cid, idx)] == (rid, vid)
    assert len(_rows(db, "SELECT id FROM campaigns")) == 4, "a campaign was started twice"
    assert "usable iterations" in err, "no progress table on stderr"
    from harness.store import open_store

    with open_store(db) as store:
        verified = store.verify()
    assert verified.ok, verified.first_problem
    # every attempt recorded the node it ran on
    for (body,) in _rows(db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'"):
        node = json.loads(body)["node"]
        assert node["hostname"] and node["ray_node_id"] and node["cpu_count"] > 0
    # a third run finds nothing to do and starts no Ray task
    rc, again, _ = _finish(_sweep(spec, db, ray_address))
    assert rc == 0 and not any(c["ran_now"] for c in again["campaigns"])
    assert again["ray_address"].startswith("not started")


def test_killed_ray_worker_campaign_resumes_storing_each_iteration_once(ray_address: str, tmp_path: Path) -> None:
    db = tmp_path / "kill.sqlite"
    budget = 2                                      # swish, not relu (128 x 8192): a cheaper measurement
    spec = _spec(tmp_path, f"tasks: [swish]\ntuners: [random]\nseeds: [7]\nbudget: {budget}\nmax_retries: 2\n")
    proc = _sweep(spec, str(db), ray_address)
    first = _wait_for(lambda: _rows(db, "SELECT campaign_id, idx, id, verdict_id, created_at FROM iterations"), proc)
    (cid, idx0, rid0, vid0, at0), = first
    attempt = json.loads(_rows(db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'")[0][0])
    assert attempt["campaign_id"] == cid
    assert not _rows(db, "SELECT 1 FROM campaign_outcomes WHERE campaign_id = ?", (cid,)), "finished before the kill"
    os.kill(attempt["pid"], signal.SIGKILL)          # the Ray worker running the campaign, mid-campaign
    killed_at_iterations = len(_rows(db, "SELECT 1 FROM iterations WHERE campaign_id = ?", (cid,)))
    assert killed_at_iterations < budget, "the campaign finished before the kill landed; the test proves nothing"

    rc, out, err = _finish(proc)
    assert rc == 0, err[-3000:]
    (c,) = out["campaigns"]
    assert c["campaign_id"] == cid and c["outcome"] == "completed" and c["attempts"] == 2
    rows = _iterations_once(db, cid, budget)
    assert rows[0][1:] == (rid0, vid0, at0), "iteration 0 was stored again after the resume"
    pids = [json.loads(b)["pid"] for (b,) in _rows(db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'")]
    assert len(pids) == 2 and pids[0] == attempt["pid"] and pids[1] != pids[0]
    assert len(_rows(db, "SELECT id FROM campaigns")) == 1


# ---------------------------------------------------------------------- identity and progress: no Ray needed
def test_a_sweep_is_identified_by_its_spec_and_an_edited_spec_cannot_reuse_its_id(tmp_path: Path) -> None:
    from atb_agent.sweep import SweepError, load_spec
    from atb_agent.sweep._ledger import register_sweep
    from harness.store import open_store
    from protocol import load_protocol

    ref = load_protocol().ref()
    a = load_spec(_spec(tmp_path, "tasks: [relu, gelu]\ntuners: [random]\nseeds: [1, 2]\nbudget: 2\n"))
    again = load_spec(tmp_path / "sweep.yaml")
    assert a.sweep_id == again.sweep_id and len(a.campaigns) == 4
    assert len({k.campaign_id for k in a.campaigns}) == 4            # one id per (sweep, task, tuner, seed)
    other = load_spec(_spec(tmp_path, "tasks: [relu, gelu]\ntuners: [random]\nseeds: [1, 2]\nbudget: 3\n"))
    assert other.sweep_id != a.sweep_id
    named = load_spec(_spec(tmp_path, "id: mine\ntasks: [relu]\ntuners: [random]\nseeds: [1]\nbudget: 2\n"))
    edited = load_spec(_spec(tmp_path, "id: mine\ntasks: [relu]\ntuners: [random]\nseeds: [1]\nbudget: 5\n"))
    with open_store(tmp_path / "s.sqlite") as store:
        assert register_sweep(store, named, ref) is False
        assert register_sweep(store, named, ref) is True              # the same spec again: a restart
        with pytest.raises(SweepError, match="another spec"):
            register_sweep(store, edited, ref)


def test_progress_table_live_and_as_lines() -> None:
    import io

    from atb_agent.sweep import ProgressRow, ProgressTable

    rows = [ProgressRow(label="random", campaigns=4, done=1, running=2, pending=1, iterations=5, usable=2)]
    live = io.StringIO()
    t = ProgressTable("sweep x", stream=live, live=True)
    t.update(rows)
    t.close()
    assert "usable" in live.getvalue() and "random" in live.getvalue()
    lines = io.StringIO()
    t = ProgressTable("sweep x", stream=lines, live=False)
    t.update(rows)
    t.update(rows)                                                   # unchanged: no second line
    t.update([rows[0].model_copy(update={"done": 2, "running": 1})])
    t.close()
    out = lines.getvalue().splitlines()
    assert len(out) == 2 and "total 2/4 done, 1 running" in out[1] and "usable iterations 2/5" in out[1]


def _sandbox_containers_of(pid: int) -> list[str]:
    from sandbox._docker import docker_client
    from sandbox._identity import LABEL_OWNER_PID

    client = docker_client()
    try:
        return [c.name for c in client.containers.list(all=True, filters={"label": f"{LABEL_OWNER_PID}={pid}"})]
    finally:
        client.close()


@pytest.mark.usefixtures("docker_sandbox_ready")
def test_a_stopped_replay_campaign_resumes_as_one_campaign_and_its_transcript_replays(
        ray_address: str, tmp_path: Path) -> None:
    """A sweep's ``replay:`` campaign interrupted part-way (the driver stopped) is resumed on the restart, like
    an LLM campaign: one campaign, each iteration stored once, and its transcript replays byte-for-byte. The
    stopping driver removes the sandbox container its force-cancelled worker left (it used to stay up).
    Before, the restart closed it as ``aborted`` and began a fresh one from the first recorded call, so the
    key had two campaigns and iteration 0 was measured and stored twice (benchmarks/sweep_restart.py found it)."""
    import shutil

    from atb_agent.replay import replay_transcript
    from atb_agent.services import HarnessServices
    from harness.tuning.subjects import load_subject

    budget = 3                                              # the recording's
    runs = tmp_path / "runs"
    runs.mkdir()
    shutil.copy(Path(__file__).resolve().parents[1] / "transcripts" / "recorded" / "scripted-openai-docker.jsonl",
                runs / "gelu.jsonl")
    db = tmp_path / "replay.sqlite"
    spec = _spec(tmp_path, f"tasks: [gelu]\ntuners: ['replay:{runs}/{{task}}.jsonl']\nseeds: [5]\nbudget: {budget}\n")
    first = _sweep(spec, str(db), ray_address)
    stored = _wait_for(lambda: _rows(db, "SELECT campaign_id, idx, id, verdict_id, created_at FROM iterations"), first)
    first.send_signal(signal.SIGTERM)                      # stop the driver part-way through the replay campaign
    _, stopped_err = first.communicate(timeout=240)
    (cid, *_), = stored
    # the force-cancelled worker could not close its sandbox: the stopping driver removed its container
    worker = json.loads(_rows(db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'")[0][0])["pid"]
    assert not _sandbox_containers_of(worker), stopped_err[-2000:]
    assert "sandbox container(s)" in stopped_err and "left by 1 cancelled campaign(s)" in stopped_err
    before = _rows(db, "SELECT campaign_id, idx, id, verdict_id, created_at FROM iterations")
    assert len(before) < budget and not _rows(db, "SELECT 1 FROM campaign_outcomes"), "finished before the stop"

    rc, out, err = _finish(_sweep(spec, str(db), ray_address))
    assert rc == 0, err[-3000:]
    (c,) = out["campaigns"]
    assert c["campaign_id"] == cid and c["outcome"] == "completed" and c["attempts"] == 2, c
    assert _rows(db, "SELECT id, tuner_spec FROM campaigns") == [(cid, f"replay:{runs / 'gelu.jsonl'}")]
    rows = _iterations_once(db, cid, budget)
    for _, idx, rid, vid, at in before:                    # kept, not measured again
        assert rows[idx][1:] == (rid, vid, at)

    services, task = HarnessServices("cpu"), load_subject("gelu")
    try:
        report = replay_transcript(tmp_path / "transcripts" / f"{cid}.jsonl", evidence_db=db,
                                   toolbox_factory=lambda inbox, brief: services.toolbox(task, brief, inbox))
    finally:
        services.close()
    assert report.requests_identical == report.model_calls == 5 and report.submissions_checked == budget, report
