"""``atb sweep --local``: the same sweep without Ray, as processes of this machine (a GPU host without Ray).

The sweeps run as the real CLI in subprocesses, on a Python path where ``import ray`` fails, so nothing
here can lean on Ray being installed: a KernelBench-format grid completes, its rows export and render, and
a rerun repeats nothing; a campaign process killed mid-campaign is started again and resumes, each
iteration stored once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from atb_agent.sweep import DevicesSpec
from atb_agent.sweep._local import LOCAL_ADDRESS, device_slots, visible_gpus
from benchmark_scripts import load_benchmark
from sweep_cli import finish as _finish
from sweep_cli import store_rows as _rows

REPO = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------- placement: no process needed
def test_one_slot_per_visible_gpu_and_cpus_per_campaign_on_cpu() -> None:
    cuda = DevicesSpec(backend="cuda")
    assert device_slots(cuda, gpus=["0", "1", "3"]) == ["0", "1", "3"]
    assert device_slots(DevicesSpec(backend="cuda", max_concurrent=2), gpus=["0", "1", "3"]) == ["0", "1"]
    assert device_slots(cuda, gpus=[]) == ["0"]          # nvidia-smi missing: the one default device
    assert device_slots(DevicesSpec(backend="cpu"), cpu_count=16) == [None] * 16
    assert device_slots(DevicesSpec(backend="cpu", cpus_per_campaign=4), cpu_count=16) == [None] * 4
    assert device_slots(DevicesSpec(backend="cpu", cpus_per_campaign=4), cpu_count=2) == [None]
    assert device_slots(DevicesSpec(backend="cpu", max_concurrent=1), cpu_count=16) == [None]


@pytest.mark.parametrize("env, want", [("2,3", ["2", "3"]), ("", []), ("-1", []), ("GPU-abc, 1", ["GPU-abc", "1"])])
def test_visible_gpus_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch, env: str, want: list[str]) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    assert visible_gpus() == want


def test_local_with_a_ray_address_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text("tasks: [relu]\ntuners: [random]\nseeds: [1]\nbudget: 1\n")
    rc = main(["sweep", str(spec), "--local", "--ray", "127.0.0.1:6379", "--db", str(tmp_path / "x.sqlite"),
               "--json", "--no-live"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert rc == 2 and "--local" in error and "--ray" in error and "\n" not in error
    assert not (tmp_path / "x.sqlite").exists(), "bad input must be refused before the store is touched"


# ---------------------------------------------------------------------- real sweeps, no Ray importable
@pytest.fixture()
def no_ray(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import ray`` fails, as on the GPU hosts this project is lent."""
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('no Ray on this host (tests/test_sweep_local.py)')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "noray"), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _sweep(spec: Path, db: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "atb_agent.cli", "sweep", str(spec), "--local", "--db", str(db),
                             "--json", "--no-live"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=str(spec.parent))


@pytest.mark.slow
def test_a_local_kernelbench_sweep_without_ray_completes_exports_its_table_rows_and_a_rerun_repeats_nothing(
        tmp_path: Path, no_ray: dict[str, str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    probe = subprocess.run([sys.executable, "-c", "import ray"], env=no_ray, capture_output=True, text=True, check=False)
    assert probe.returncode != 0 and "no Ray on this host" in probe.stderr, "the fixture did not hide Ray"
    level = tmp_path / "kb" / "level1"
    level.mkdir(parents=True)
    (level / "7_good_scale.py").write_text(
        (REPO / "tests" / "fixtures" / "kernelbench_bad_input" / "good_scale.py").read_text(encoding="utf-8"))
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"tasks: ['{level}/*.py']\ntuners: [random]\nseeds: [1, 2]\nbudget: 1\ndevices: {{max_concurrent: 1}}\n")
    db = tmp_path / "local.sqlite"
    proc = _sweep(spec, db, no_ray)
    rc, out, err = _finish(proc)
    assert rc == 0, err[-3000:]
    assert out["executor"] == "local" and out["ray_address"] == LOCAL_ADDRESS and out["ray_version"] == ""
    assert out["done"] == 2 and out["failed"] == 0 and out["iterations"] == 2
    assert all(c["status"] == "done" and c["ran_now"] and c["attempts"] == 1 for c in out["campaigns"])
    bodies = [json.loads(b) for (b,) in _rows(db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'")]
    assert len(bodies) == 2
    pids = {b["pid"] for b in bodies}
    assert len(pids) == 2 and proc.pid not in pids, "each campaign runs in a process of its own, not the driver"
    assert all(b["node"]["ray_node_id"] == "" for b in bodies)

    # the paper table's rows from the sweep's store, once each, rendered
    monkeypatch.setattr(sys, "path", list(sys.path))     # the scripts put benchmarks/ on it
    kernelbench_sweep_rows = load_benchmark("kernelbench_sweep_rows")
    render_kernelbench_arms = load_benchmark("render_kernelbench_arms")
    rows = tmp_path / "rows.jsonl"
    assert kernelbench_sweep_rows.main([str(spec), "--db", str(db), "--out", str(rows)]) == 0
    assert kernelbench_sweep_rows.main([str(spec), "--db", str(db), "--out", str(rows)]) == 0   # nothing twice
    got = sorted((json.loads(x) for x in rows.read_text().splitlines()), key=lambda r: r["seed"])
    assert [r["campaign_id"] for r in got] == [c["campaign_id"] for c in sorted(out["campaigns"], key=lambda c: c["seed"])]
    usable = {c["campaign_id"]: c["usable"] for c in out["campaigns"]}
    for r in got:
        assert r["kind"] == "random_campaign" and r["driver"] == "atb sweep" and r["measuring_digest"]
        assert r["usable_iterations"] == usable[r["campaign_id"]]
        assert (r["problem"], r["id"], r["level"], r["device"], r["budget"]) == ("7_good_scale", 7, 1, "cpu", 1)
        assert r["outcome"] == "completed" and r["iterations_recorded"] == 1 == len(r["iterations"])
    table = render_kernelbench_arms.render(render_kernelbench_arms.read_rows([rows]))
    assert "| 7_good_scale |" in table and "random (seed 1, budget 1, cpu, level 1)" in table
    # a tree whose protocol is not the one the store's campaigns ran under stamps no row
    monkeypatch.setattr(kernelbench_sweep_rows, "tree_protocol_sha256", lambda: "0" * 64)
    capsys.readouterr()
    assert kernelbench_sweep_rows.main([str(spec), "--db", str(db), "--out", str(tmp_path / "other.jsonl")]) == 2
    assert "ran under protocol" in capsys.readouterr().err and not (tmp_path / "other.jsonl").exists()

    rc, again, err = _finish(_sweep(spec, db, no_ray))
    assert rc == 0, err[-3000:]
    assert again["ray_address"].startswith("not started") and not any(c["ran_now"] for c in again["campaigns"])
    assert len(_rows(db, "SELECT 1 FROM reports WHERE kind = 'sweep_attempt'")) == 2


@pytest.mark.slow
def test_a_killed_campaign_process_is_started_again_and_resumes_storing_each_iteration_once(
        tmp_path: Path, no_ray: dict[str, str]) -> None:
    budget = 2
    spec = tmp_path / "sweep.yaml"
    spec.write_text(f"tasks: [relu]\ntuners: [random]\nseeds: [7]\nbudget: {budget}\nmax_retries: 2\n")
    db = tmp_path / "kill.sqlite"
    proc = _sweep(spec, db, no_ray)
    end = time.monotonic() + 300
    first: list[tuple[Any, ...]] = []
    while not first:
        assert proc.poll() is None, f"the sweep ended before its first iteration: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < end, "no iteration was stored in 300 s"
        first = _rows(db, "SELECT campaign_id, idx, id, verdict_id, created_at FROM iterations")
        time.sleep(0.1)
    (cid, _idx0, rid0, vid0, at0), = first
    attempt = json.loads(_rows(db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'")[0][0])
    assert attempt["campaign_id"] == cid and attempt["pid"] != proc.pid
    os.kill(attempt["pid"], signal.SIGKILL)          # the campaign's process, mid-campaign
    killed_at = len(_rows(db, "SELECT 1 FROM iterations WHERE campaign_id = ?", (cid,)))
    assert killed_at < budget, "the campaign finished before the kill landed; the test proves nothing"

    rc, out, err = _finish(proc)
    assert rc == 0, err[-3000:]
    (c,) = out["campaigns"]
    assert c["campaign_id"] == cid and c["outcome"] == "completed" and c["attempts"] == 2
    rows = _rows(db, "SELECT idx, id, verdict_id, created_at FROM iterations WHERE campaign_id = ? ORDER BY idx", (cid,))
    assert [r[0] for r in rows] == list(range(budget))
    assert rows[0][1:] == (rid0, vid0, at0), "iteration 0 was stored again after the resume"
    pids = [json.loads(b)["pid"] for (b,) in _rows(db, "SELECT body_json FROM reports WHERE kind = 'sweep_attempt'")]
    assert len(pids) == 2 and pids[0] == attempt["pid"] and pids[1] != pids[0]
