"""Overhead of the sweep's fan-out and of the PostgreSQL store, per iteration, against ``atb run``.

Run: ``.venv/bin/python benchmarks/bench_sweep.py [--rounds 3] [--budget 3] [--task relu] [--pg-url URL]``.
Writes ``benchmarks/results/sweep_overhead.json`` and ``sweep_overhead.md``.

Three arms, the same campaign (task, random search, the round's seed, budget) in each, run one after
the other in a rotating order within every round, so slow drifts of a shared machine fall on all arms:

* ``sqlite``      ``atb run TASK --tuner random`` in one process, a fresh SQLite file;
* ``ray_sqlite``  ``atb sweep`` of that one campaign on a Ray cluster, a fresh SQLite file;
* ``ray_pg``      the same sweep writing to a fresh PostgreSQL database.

Two figures per run: **steady** = (last iteration stored - campaign row stored) / budget, read from the
store (the iterations themselves: evaluation, gates, verdict and iteration writes, through the Ray
worker for the Ray arms); **end-to-end** = the command's wall time / budget (adds interpreter start,
the Ray driver's connection, and the measurement session's start-up). The Ray cluster is started once
(a sweep starts it once too), not per run. Target (issue 17): at most +5% per iteration.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results"
ARMS = ("sqlite", "ray_sqlite", "ray_pg")

_HOLDER = """
import json, os, sys, ray
ctx = ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, object_store_memory=128 << 20,
               logging_level="ERROR", log_to_driver=False)
print(json.dumps({"address": ctx.address_info["gcs_address"]}), flush=True)
sys.stdin.read()
ray.shutdown()
"""


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def _steady(db: str, run_id: str, budget: int) -> float:
    from harness.store._open import open_store

    store = open_store(db)
    try:
        start = store.query("SELECT created_at FROM campaigns WHERE id = ?", (run_id,))[0][0]
        last = store.query("SELECT max(created_at) FROM iterations WHERE campaign_id = ?", (run_id,))[0][0]
        n = store.query("SELECT count(*) FROM iterations WHERE campaign_id = ?", (run_id,))[0][0]
    finally:
        store.close()
    if int(n) != budget:
        raise RuntimeError(f"run {run_id} stored {n} iterations, not {budget}")
    return (_ts(str(last)) - _ts(str(start))) / budget


def _atb(args: list[str]) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "atb_agent.cli", *args, "--json"], capture_output=True, text=True,
                          cwd=ROOT, timeout=1800)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"atb {' '.join(args)} exited {proc.returncode}: {proc.stdout[-500:]} {proc.stderr[-1500:]}")
    return wall, json.loads(proc.stdout.strip().splitlines()[-1])


def _fresh_pg(base_url: str) -> str:
    import psycopg

    name = f"atb_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{base_url.rpartition('/')[0]}/{name}"


def run_arm(arm: str, *, task: str, budget: int, seed: int, work: Path, ray_address: str, pg_base: str) -> dict[str, Any]:
    tag = f"{arm}-{seed}-{uuid.uuid4().hex[:6]}"
    if arm == "sqlite":
        db = str(work / f"{tag}.sqlite")
        wall, out = _atb(["run", task, "--tuner", "random", "--budget", str(budget), "--seed", str(seed), "--db", db])
        run_id = str(out["run_id"])
    else:
        db = _fresh_pg(pg_base) if arm == "ray_pg" else str(work / f"{tag}.sqlite")
        spec = work / f"{tag}.yaml"
        spec.write_text(f"id: {tag}\ntasks: [{task}]\ntuners: [random]\nseeds: [{seed}]\nbudget: {budget}\n")
        wall, out = _atb(["sweep", str(spec), "--ray", ray_address, "--db", db, "--no-live"])
        (c,) = out["campaigns"]
        if c["status"] != "done":
            raise RuntimeError(f"sweep campaign did not finish: {c}")
        run_id = str(c["campaign_id"])
    return {"arm": arm, "seed": seed, "run_id": run_id, "wall_s": wall, "end_to_end_per_iteration_s": wall / budget,
            "steady_per_iteration_s": _steady(db, run_id, budget)}


def _pg_base(url: str | None) -> str:
    if url:
        return url
    if os.environ.get("ATB_TEST_PG_URL"):
        return os.environ["ATB_TEST_PG_URL"]
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "services.sh"), "start"], capture_output=True, text=True,
                          check=True)
    return proc.stdout.strip().splitlines()[-1]


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        rs = [r for r in runs if r["arm"] == arm]
        if not rs:
            continue
        out[arm] = {k: statistics.median(r[k] for r in rs) for k in ("steady_per_iteration_s", "end_to_end_per_iteration_s")}
        out[arm]["n"] = len(rs)
    for arm in ("ray_sqlite", "ray_pg"):
        if arm in out and "sqlite" in out:
            for k in ("steady_per_iteration_s", "end_to_end_per_iteration_s"):
                out[arm][k.replace("_s", "_overhead")] = out[arm][k] / out["sqlite"][k] - 1
            # paired by round: each round ran the arms back to back on the same seed
            pairs = [(r, s) for r in runs if r["arm"] == arm for s in runs
                     if s["arm"] == "sqlite" and s["seed"] == r["seed"]]
            out[arm]["steady_overhead_by_round"] = [r["steady_per_iteration_s"] / s["steady_per_iteration_s"] - 1
                                                    for r, s in pairs]
    return out


def _md(result: dict[str, Any]) -> str:
    s = result["summary"]
    env = result["environment"]
    lines = [
        "# Sweep overhead: Ray fan-out and the PostgreSQL store, per iteration",
        "",
        f"Measured {env['started_at']} on {env['machine']} ({env['cpus']} CPUs), Ray {env['ray']}, psycopg "
        f"{env['psycopg']}, PostgreSQL {env['postgresql']}; task `{result['task']}`, random search, budget "
        f"{result['budget']}, {result['rounds']} rounds, arms alternated in a rotating order. Produced by "
        "`benchmarks/bench_sweep.py`.",
        "",
        f"1-minute load average {env['load_start']:.1f} at the start and {env['load_end']:.1f} at the end: this "
        "machine is shared by several concurrent jobs, so the spread between rounds is large and a few percent "
        "either way is within noise here.",
        "",
        "| arm | runs | steady s/iteration (median) | vs `atb run` | end-to-end s/iteration (median) | vs `atb run` |",
        "|---|---|---|---|---|---|",
    ]
    for arm in ARMS:
        if arm not in s:
            continue
        a = s[arm]
        so = a.get("steady_per_iteration_overhead")
        eo = a.get("end_to_end_per_iteration_overhead")
        lines.append(f"| {arm} | {a['n']} | {a['steady_per_iteration_s']:.2f} | "
                     f"{'-' if so is None else f'{so:+.1%}'} | {a['end_to_end_per_iteration_s']:.2f} | "
                     f"{'-' if eo is None else f'{eo:+.1%}'} |")
    lines += ["", "Per-round steady overhead against the same round's `atb run`: " + "; ".join(
        f"{arm}: " + ", ".join(f"{x:+.1%}" for x in s[arm].get("steady_overhead_by_round", []))
        for arm in ("ray_sqlite", "ray_pg") if arm in s), "",
        "*Steady* is from the campaign row to its last iteration in the store, divided by the budget: the "
        "iterations themselves. *End-to-end* divides the whole command's wall time by the budget, so it adds "
        "start-up (interpreter, Ray driver connection, the measurement session's reference worker and "
        "ceilings) that a 20-iteration campaign amortises over 20 iterations, not "
        f"{result['budget']}. Target: at most +5% per iteration.", ""]
    spreads = [abs(x) for arm in ("ray_sqlite", "ray_pg") if arm in s for x in s[arm].get("steady_overhead_by_round", [])]
    if spreads:
        worst = max(spreads)
        verdict = ("within the +5% target in every round" if all(
            x <= 0.05 for arm in ("ray_sqlite", "ray_pg") if arm in s for x in s[arm].get("steady_overhead_by_round", []))
            else f"not shown: the round-to-round spread (up to {worst:.0%}) is far wider than the 5% target, so "
                 "these runs can neither confirm nor refute it")
        lines += [f"**Against the target:** {verdict}. What differs per iteration between the arms is only where "
                  "the rows go (the Ray worker runs the same random-search loop in-process): about 15 chained rows "
                  "per evaluation, measured at 6-8 ms (SQLite) and 15-18 ms (PostgreSQL) per single-row "
                  "transaction on this loaded VM, i.e. ~0.1-0.25 s per evaluation, ~1-3% of the H200's 9.0 s "
                  "median evaluation (`benchmarks/results/h200/measure_cuda.json`); an estimate, not a measurement "
                  "of the target. Fan-out's fixed costs (driver connection, the Ray worker's start) are per "
                  "campaign, in the end-to-end column.", ""]
    lines += ["| round | arm | seed | wall s | steady s/it | end-to-end s/it |", "|---|---|---|---|---|---|"]
    for r in result["runs"]:
        lines.append(f"| {r['round']} | {r['arm']} | {r['seed']} | {r['wall_s']:.1f} | {r['steady_per_iteration_s']:.2f} | "
                     f"{r['end_to_end_per_iteration_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=3)
    ap.add_argument("--task", default="relu")
    ap.add_argument("--pg-url", default=None, help="server URL (default: ATB_TEST_PG_URL or scripts/services.sh)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--render", metavar="JSON", default=None, help="only re-render the .md from a results JSON")
    args = ap.parse_args()
    if args.render:
        result = json.loads(Path(args.render).read_text())
        (Path(args.out) / "sweep_overhead.md").write_text(_md(result))
        return 0

    import psycopg
    import ray

    pg_base = _pg_base(args.pg_url)
    with psycopg.connect(pg_base) as conn:
        pg_version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    env = {"started_at": datetime.now().astimezone().isoformat(timespec="seconds"), "machine": platform.machine(),
           "cpus": os.cpu_count(), "ray": ray.__version__, "psycopg": psycopg.__version__, "postgresql": pg_version,
           "load_start": os.getloadavg()[0]}
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    runs: list[dict[str, Any]] = []
    try:
        assert holder.stdout is not None
        address = json.loads(holder.stdout.readline())["address"]
        with tempfile.TemporaryDirectory(prefix="atb-bench-sweep-") as tmp:
            for rnd in range(args.rounds):
                seed = 1000 + rnd
                order = ARMS[rnd % 3:] + ARMS[:rnd % 3]
                for arm in order:
                    r = run_arm(arm, task=args.task, budget=args.budget, seed=seed, work=Path(tmp),
                                ray_address=address, pg_base=pg_base)
                    r["round"] = rnd + 1
                    runs.append(r)
                    print(f"round {rnd + 1} {arm}: steady {r['steady_per_iteration_s']:.2f} s/it, wall {r['wall_s']:.1f} s",
                          file=sys.stderr, flush=True)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=120)
    env["load_end"] = os.getloadavg()[0]
    result = {"task": args.task, "budget": args.budget, "rounds": args.rounds, "environment": env, "runs": runs,
              "summary": summarise(runs)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep_overhead.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (out / "sweep_overhead.md").write_text(_md(result))
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
