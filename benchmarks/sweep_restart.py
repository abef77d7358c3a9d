"""Issue 28's sweep target: a sweep of 2 tasks x {random, openai:smollm2, replay:...} x 2 seeds on PostgreSQL
under Ray completes, stopped and restarted once, nothing repeated, nothing lost.

Run: ``.venv/bin/python benchmarks/sweep_restart.py [--pg-url URL] [--signal TERM|INT] [--stop-at N]
[--out benchmarks/results/sweep_restart_cpu]``. Needs PostgreSQL (``source scripts/services.sh`` exports
``ATB_TEST_PG_URL``), Docker (the sandbox) and the cached SmolLM2 model and llama-server (``scripts/setup.sh``).

What runs, all of it real on this machine's CPU:

* the model: SmolLM2-135M-Instruct served by ``atb model serve`` (llama-server on loopback), the
  ``openai:smollm2`` tuner calling it through the official OpenAI SDK;
* the replay tuner: ``replay:RUNS/{task}.jsonl``, one recording per task (a recording replays only on its
  own task and budget): ``relu`` is ``transcripts/recorded/live-smollm2-relu.jsonl`` (a live SmolLM2 run),
  ``gelu`` is ``transcripts/recorded/scripted-openai-docker.jsonl`` (scripted turns over the OpenAI wire
  format); both record a budget of 3, so the sweep's budget is 3;
* ``atb sweep SPEC --db postgresql://... --json --no-live`` as a subprocess, with the local Ray cluster it
  starts itself (two CPUs: two campaigns at a time), into a fresh database on the PostgreSQL server.

The stop: once ``--stop-at`` iterations are stored and an LLM or replay campaign is part-way (at least one
iteration stored, no outcome), the driver gets SIGTERM (``--signal``), as a scheduler or Ctrl-C would stop
it; it cancels its Ray tasks and shuts its cluster down. Then the same command runs again to the end.

What is checked, from the store (through its read methods) and the transcripts:

* every (task, tuner, seed) of the grid has exactly one campaign, finished (``completed``, or
  ``infrastructure_defect`` for a run whose model calls were truncated: finished and kept, excluded from
  comparisons), none ``aborted``;
* each campaign stores iterations 0..budget-1, each exactly once; every iteration stored before the stop is
  still there, unchanged (same verdict, same time stored: kept, not redone);
* the campaigns the stop interrupted were taken up again (two attempts) and resumed, not restarted;
* every LLM and replay campaign's transcript replays byte-for-byte (``replay_transcript``: every request
  identical to the recorded one, every recorded verdict checked against the signed store rows).

Writes ``OUT.md`` and ``OUT.jsonl`` (one line per campaign, then a summary line). Exit 0 when every check
holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ATB = [sys.executable, "-m", "atb_agent.cli"]
RECORDED = ROOT / "transcripts" / "recorded"
REPLAYS = {"relu": RECORDED / "live-smollm2-relu.jsonl", "gelu": RECORDED / "scripted-openai-docker.jsonl"}
BUDGET = 3                              # the recordings' budget: a replay tuner runs only with its own
SEEDS = (0, 1)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _fresh_pg(base_url: str) -> str:
    import psycopg

    name = f"atb_sweep_restart_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = base_url.rpartition("/")
    return f"{base}/{name}"


def _model_server(env: dict[str, str]) -> tuple[str, bool, dict[str, Any]]:
    """The SmolLM2 server's base URL, whether this run started it, and what it is."""
    out = subprocess.run([*ATB, "model", "serve", "--json"], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300, check=False)
    if out.returncode != 0:
        raise SystemExit(f"atb model serve failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    info = json.loads(out.stdout)
    return str(info["base_url"]), not info.get("already_running", False), info


def _snapshot(db: str, keys: list[Any]) -> dict[str, Any]:
    """Key -> its campaigns, each with its outcome and iterations, read through the store's methods."""
    from atb_agent.sweep._ledger import ATTEMPT_KIND, CONFIG_KEY
    from harness.store._open import open_store

    by_id = {k.campaign_id: k.key for k in keys}
    wanted = {k.key for k in keys}
    out: dict[str, Any] = {k.key: {"campaigns": [], "attempts": 0} for k in keys}
    store = open_store(db)
    try:
        for row in store.campaigns():
            key = by_id.get(row.id) or (row.config.get(CONFIG_KEY) if isinstance(row.config, dict) else None)
            if key not in wanted:
                continue
            outcome = store.campaign_outcome(row.id)
            out[key]["campaigns"].append({
                "campaign_id": row.id, "tuner_spec": row.tuner_spec, "created_at": row.created_at,
                "outcome": outcome.status if outcome is not None else None,
                "iterations": [{"idx": it.idx, "verdict_id": it.verdict_id, "candidate": it.candidate_sha256,
                                "created_at": it.created_at, "usable": it.usable, "model_calls": it.model_calls,
                                "truncated_calls": it.truncated_calls} for it in store.iterations(row.id)]})
        for key, n in store.report_counts(ATTEMPT_KIND).items():
            if key in out:
                out[key]["attempts"] = n
    finally:
        store.close()
    return out


def _stored(snap: dict[str, Any]) -> int:
    return sum(len(c["iterations"]) for v in snap.values() for c in v["campaigns"])


def _part_way_llm(snap: dict[str, Any]) -> list[str]:
    """Keys of LLM or replay campaigns with some iterations stored and no outcome yet."""
    return [key for key, v in snap.items() if "|random|" not in key
            for c in v["campaigns"] if c["outcome"] is None and 0 < len(c["iterations"]) < BUDGET]


def _stale_sandboxes() -> list[str]:
    """Sandbox containers on this host whose owner process is gone (what a killed campaign leaves)."""
    from sandbox._docker import docker_client
    from sandbox._identity import LABEL, LABEL_OWNER_PID

    client = docker_client()
    try:
        out = []
        for c in client.containers.list(all=True, filters={"label": f"{LABEL}=1"}):
            owner = c.labels.get(LABEL_OWNER_PID, "")
            if not owner.isdigit() or not Path(f"/proc/{owner}").exists():
                out.append(c.name)
        return out
    finally:
        client.close()


def _sweep(spec: Path, db: str, env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    # its own session: the signal goes to the driver alone, as `kill PID` would send it
    return subprocess.Popen([*ATB, "sweep", str(spec), "--db", db, "--json", "--no-live"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=log.open("w"), text=True, start_new_session=True)


def _replay(transcript: Path, db: str) -> dict[str, Any]:
    """Byte-for-byte replay of one campaign's transcript, its verdicts checked against the signed store."""
    from atb_agent.replay import replay_transcript
    from atb_agent.services import HarnessServices
    from transcripts import read_transcript

    task = read_transcript(transcript).header.task
    from harness.tuning.subjects import load_subject

    subject = load_subject(task)
    services = HarnessServices("cpu")
    t0 = time.monotonic()
    try:
        rep = replay_transcript(transcript, evidence_db=db,
                                toolbox_factory=lambda inbox, brief: services.toolbox(subject, brief, inbox))
    except Exception as exc:  # noqa: BLE001 - a failed replay is a failed check, reported
        return {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:600]}"}
    finally:
        services.close()
    return {"ok": rep.ok and rep.requests_identical == rep.model_calls, "model_calls": rep.model_calls,
            "requests_identical": rep.requests_identical, "submissions_checked": rep.submissions_checked,
            "verdict_evidence": rep.verdict_evidence, "evidence_problems": rep.evidence_problems,
            "wall_s": round(time.monotonic() - t0, 1)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from atb_agent.sweep import load_spec

    pg_base = args.pg_url or os.environ.get("ATB_TEST_PG_URL")
    if not pg_base:
        raise SystemExit("no PostgreSQL: pass --pg-url or `source scripts/services.sh` (ATB_TEST_PG_URL)")
    work = Path(tempfile.mkdtemp(prefix="atb-sweep-restart-"))
    env = {**os.environ, "ATB_KEY_DIR": str(work / "keys"), "ATB_TRANSCRIPTS_DIR": str(work)}
    os.environ.update({"ATB_KEY_DIR": env["ATB_KEY_DIR"]})           # this process checks the signatures too
    db = _fresh_pg(pg_base)
    base_url, started_model, model = _model_server(env)
    runs = work / "runs"
    runs.mkdir()
    for task, src in REPLAYS.items():
        shutil.copy(src, runs / f"{task}.jsonl")
    spec = work / "sweep.yaml"
    spec.write_text(f"tasks: [relu, gelu]\ntuners: [random, 'openai:smollm2', 'replay:{runs}/{{task}}.jsonl']\n"
                    f"seeds: [{', '.join(map(str, SEEDS))}]\nbudget: {BUDGET}\nbase_url: {base_url}\nmax_retries: 2\n",
                    encoding="utf-8")
    sweep = load_spec(spec)
    keys = sweep.campaigns
    total = len(keys) * BUDGET
    stop_at = args.stop_at or total // 3
    result: dict[str, Any] = {"started_at": _now(), "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                              "platform": platform.platform()}, "model": {k: model.get(k) for k in (
                                  "about", "gguf_sha256", "server_version", "max_output_tokens", "temperature")},
                              "sweep_id": sweep.sweep_id, "campaigns": len(keys), "budget": BUDGET,
                              "iterations_expected": total, "signal": args.signal, "stop_at": stop_at,
                              "store": db.rsplit("@", 1)[-1], "work": str(work)}
    sig = signal.SIGTERM if args.signal == "TERM" else signal.SIGINT
    t_all = time.monotonic()
    try:
        # ---- first run: stopped part-way
        first = _sweep(spec, db, env, work / "first.stderr")
        t0 = time.monotonic()
        snap: dict[str, Any] = {}
        while first.poll() is None and time.monotonic() - t0 < args.timeout:
            snap = _snapshot(db, keys)
            if _stored(snap) >= stop_at and _part_way_llm(snap):
                break
            time.sleep(0.5)
        if first.poll() is not None:
            out, _ = first.communicate()
            result["first"] = {"rc": first.returncode, "stopped": False, "wall_s": round(time.monotonic() - t0, 1),
                               "stderr_tail": (work / "first.stderr").read_text()[-2000:]}
            result["checks"] = {"ok": False, "problems": ["the first run ended before it could be stopped part-way"]}
            return result
        part_way = _part_way_llm(snap)
        stopped_at = time.monotonic()
        first.send_signal(sig)
        out, _ = first.communicate(timeout=300)
        result["first"] = {"rc": first.returncode, "stopped": True, "stored_when_signalled": _stored(snap),
                           "part_way_llm_when_signalled": part_way, "seconds_to_stop": round(time.monotonic() - stopped_at, 1),
                           "wall_s": round(time.monotonic() - t0, 1), "stdout": out.strip()[-500:]}
        at_stop = _snapshot(db, keys)
        result["first"]["stale_sandboxes_after_stop"] = _stale_sandboxes()
        result["first"]["stderr_tail"] = "\n".join(
            x for x in (work / "first.stderr").read_text().splitlines() if not x.startswith("[sweep "))[-1500:]
        result["first"]["stored_at_stop"] = _stored(at_stop)
        result["first"]["finished_at_stop"] = sum(c["outcome"] is not None for v in at_stop.values()
                                                  for c in v["campaigns"])

        # ---- second run: the same command, to the end
        second = _sweep(spec, db, env, work / "second.stderr")
        t1 = time.monotonic()
        out, _ = second.communicate(timeout=args.timeout)
        lines = [x for x in out.splitlines() if x.strip()]
        tally = json.loads(lines[-1]) if lines else {}
        result["second"] = {"rc": second.returncode, "wall_s": round(time.monotonic() - t1, 1),
                            "restarted": tally.get("restarted"), "done": tally.get("done"), "failed": tally.get("failed"),
                            "stderr_tail": (work / "second.stderr").read_text()[-1500:] if second.returncode else ""}
        result["wall_s"] = round(time.monotonic() - t_all, 1)
        final = _snapshot(db, keys)
        result["rows"], result["checks"] = _check(keys, at_stop, final, tally, work, db,
                                                  result["first"]["stale_sandboxes_after_stop"])
    finally:
        if started_model:
            subprocess.run([*ATB, "model", "stop"], capture_output=True, env=env, cwd=ROOT, timeout=60, check=False)
    return result


def _check(keys: list[Any], at_stop: dict[str, Any], final: dict[str, Any], tally: dict[str, Any], work: Path,
           db: str, at_stop_stale: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    problems: list[str] = []            # the sweep's own promises: once, nothing repeated, nothing lost
    replay_problems: list[str] = []     # transcripts that do not replay byte-for-byte
    for k in keys:
        camps = final[k.key]["campaigns"]
        before = at_stop[k.key]["campaigns"]
        row: dict[str, Any] = {"key": k.key, "task": k.task_id, "tuner": k.tuner, "seed": k.seed,
                               "campaigns": len(camps), "attempts": final[k.key]["attempts"],
                               "stored_before_stop": sum(len(c["iterations"]) for c in before),
                               "finished_before_stop": any(c["outcome"] is not None for c in before)}
        if len(camps) != 1:
            problems.append(f"{k.key}: {len(camps)} campaigns ({[c['outcome'] for c in camps]}), not one")
        if not camps:
            rows.append(row)
            continue
        c = camps[-1]
        idxs = [it["idx"] for it in c["iterations"]]
        row.update(campaign_id=c["campaign_id"], outcome=c["outcome"], iterations=len(idxs),
                   usable=sum(it["usable"] for it in c["iterations"]),
                   model_calls=sum(it["model_calls"] for it in c["iterations"]),
                   truncated_calls=sum(it["truncated_calls"] for it in c["iterations"]))
        if c["outcome"] not in ("completed", "infrastructure_defect"):
            problems.append(f"{k.key}: outcome {c['outcome']!r}")
        if sorted(idxs) != list(range(BUDGET)) or len(set(idxs)) != len(idxs):
            problems.append(f"{k.key}: iteration indices {idxs}, not 0..{BUDGET - 1} once each")
        every = [it["idx"] for cc in camps for it in cc["iterations"]]
        if len(every) != len(set(every)):
            problems.append(f"{k.key}: an iteration index was stored twice across its campaigns: {sorted(every)}")
        now = {(cc["campaign_id"], it["idx"]): it for cc in camps for it in cc["iterations"]}
        for cc in before:
            for it in cc["iterations"]:
                if now.get((cc["campaign_id"], it["idx"])) != it:
                    problems.append(f"{k.key}: iteration {it['idx']} stored before the stop changed or vanished")
        if row["stored_before_stop"] and not row["finished_before_stop"] and row["attempts"] < 2:
            problems.append(f"{k.key}: interrupted but taken up only {row['attempts']} time(s)")
        if "|random|" not in k.key:
            transcript = work / "transcripts" / f"{c['campaign_id']}.jsonl"
            rep = _replay(transcript, db) if transcript.is_file() else {"ok": False, "error": f"no {transcript}"}
            row["replay"] = rep
            if not rep["ok"] or rep.get("submissions_checked") != BUDGET:
                replay_problems.append(f"{k.key}: transcript replay {rep}")
        rows.append(row)
    stale = at_stop_stale
    if stale:
        problems.append(f"sandbox containers left running after the stop: {stale}")
    if tally.get("done") != len(keys) or tally.get("failed") != 0 or tally.get("restarted") is not True:
        problems.append(f"the second run's tally: done {tally.get('done')}, failed {tally.get('failed')}, "
                        f"restarted {tally.get('restarted')}")
    interrupted = [r["key"] for r in rows if r["stored_before_stop"] and not r["finished_before_stop"]]
    checks = {"ok": not problems and not replay_problems, "sweep_ok": not problems, "problems": problems,
              "replay_problems": replay_problems, "interrupted_part_way": interrupted,
              "campaigns_finished": sum(1 for r in rows if r.get("outcome") in ("completed", "infrastructure_defect")),
              "iterations_stored": sum(r.get("iterations", 0) for r in rows),
              "transcripts_replayed": sum(1 for r in rows if r.get("replay", {}).get("ok"))}
    return rows, checks


def _split_problems(checks: dict[str, Any]) -> None:
    """Results written before the two kinds of problem were kept apart: split them the same way."""
    if "replay_problems" not in checks:
        every = checks.get("problems", [])
        checks["replay_problems"] = [p for p in every if ": transcript replay " in p]
        checks["problems"] = [p for p in every if ": transcript replay " not in p]
        checks["sweep_ok"] = not checks["problems"]


def _write(res: dict[str, Any], out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_suffix(".jsonl").open("w", encoding="utf-8") as fh:
        for r in res.get("rows", []):
            fh.write(json.dumps({"kind": "campaign", **r}, sort_keys=True) + "\n")
        fh.write(json.dumps({"kind": "summary", **{k: v for k, v in res.items() if k != "rows"}}, sort_keys=True) + "\n")
    out.with_suffix(".md").write_text(_md(res), encoding="utf-8")


def _read(jsonl: Path) -> dict[str, Any]:
    lines = [json.loads(x) for x in jsonl.read_text(encoding="utf-8").splitlines() if x.strip()]
    res = {k: v for k, v in lines[-1].items() if k != "kind"}
    res["rows"] = [{k: v for k, v in x.items() if k != "kind"} for x in lines[:-1]]
    return res


def _md(res: dict[str, Any]) -> str:
    c = res.get("checks", {})
    f, s = res.get("first", {}), res.get("second", {})
    m = res["machine"]
    setup = (f"Run {res['started_at']} by `benchmarks/sweep_restart.py` on {m['cpu_count']} CPU cores ({m['platform']}), "
             f"Python {m['python']}. Model: {res['model'].get('about')}, served by llama-server (`atb model serve`, "
             f"output cap {res['model'].get('max_output_tokens')} tokens, temperature {res['model'].get('temperature')}). "
             "Store: a fresh PostgreSQL 15 database. Ray: the local cluster `atb sweep` starts (two CPUs, two campaigns "
             "at a time). Sandbox: Docker.")
    replayed = sum(1 for r in res.get("rows", []) if "replay" in r)
    _split_problems(c)
    verdict = ("every check held" if c.get("ok") else
               "the sweep's checks held; a transcript replay failed" if c.get("sweep_ok") else "CHECKS FAILED")
    headline = (f"**Result: {verdict}.** {res['campaigns']} campaigns x budget {res['budget']} = "
                f"{res['iterations_expected']} iterations; {c.get('campaigns_finished')} campaigns finished, "
                f"{c.get('iterations_stored')} iterations stored, {c.get('transcripts_replayed')} of {replayed} "
                "LLM/replay transcripts replayed byte-for-byte.")
    first = (f"| first run | {f.get('wall_s')} s | SIG{res['signal']} to the driver once {f.get('stored_when_signalled')} "
             f"iterations were stored with {len(f.get('part_way_llm_when_signalled', []))} LLM/replay campaign(s) "
             f"part-way; it exited {f.get('seconds_to_stop')} s later (exit {f.get('rc')}); {f.get('stored_at_stop')} "
             f"iterations and {f.get('finished_at_stop')} finished campaigns stored at the stop; sandbox containers "
             f"left behind: {len(f.get('stale_sandboxes_after_stop', [])) or 'none'} |")
    second = (f"| second run | {s.get('wall_s')} s | the same command: restarted={s.get('restarted')}, done "
              f"{s.get('done')}, failed {s.get('failed')} (exit {s.get('rc')}) |")
    lines = [
        "# Sweep stopped and restarted: 2 tasks x {random, openai:smollm2, replay} x 2 seeds, PostgreSQL, Ray (CPU)",
        "", setup, "", headline, "",
        "| phase | wall | what happened |", "|---|---:|---|", first, second,
        f"| total | {res.get('wall_s')} s | both runs, from the first start to the second's end |", "",
        ("| task | tuner | seed | campaigns | outcome | iterations | stored before stop | attempts | usable | "
         "model calls (truncated) | transcript replay |"),
        "|---|---|---:|---:|---|---:|---:|---:|---:|---|---|",
    ]
    for r in res.get("rows", []):
        rep = r.get("replay")
        if rep is None:
            rep_s = "-"
        elif rep.get("ok"):
            rep_s = (f"{rep.get('requests_identical')}/{rep.get('model_calls')} requests identical, "
                     f"{rep.get('submissions_checked')} submissions, verdicts: {rep.get('verdict_evidence')}")
        else:
            rep_s = f"FAILED: {rep.get('error', rep)}"
        tuner = r["tuner"] if not r["tuner"].startswith("replay:") else "replay:RUNS/{task}.jsonl"
        before = f"{r['stored_before_stop']}{' (finished)' if r['finished_before_stop'] else ''}"
        lines.append(f"| {r['task']} | {tuner} | {r['seed']} | {r['campaigns']} | {r.get('outcome')} | "
                     f"{r.get('iterations')} | {before} | {r['attempts']} | {r.get('usable')} | "
                     f"{r.get('model_calls')} ({r.get('truncated_calls')}) | {rep_s} |")
    lines += ["", "## Checks", ""]
    interrupted = ", ".join(c.get("interrupted_part_way", [])) or "none"
    held = [
        ("- every (task, tuner, seed) has exactly one campaign, finished; none aborted, none started twice; the "
         "stopped driver left no sandbox container of its cancelled campaigns running;"),
        (f"- each campaign stores iterations 0..{res['budget'] - 1} exactly once; every iteration stored before the "
         "stop is unchanged after the restart (same verdict, same time stored);"),
        f"- interrupted part-way and resumed (two attempts, one campaign): {interrupted};",
        ("- every LLM and replay campaign's transcript replays with every request identical to the recorded one and "
         "its verdicts checked against the signed store rows."),
    ]
    if c.get("problems"):
        lines += [f"- FAILED: {p}" for p in c["problems"]]
    else:
        lines += held[:3]
        lines += [f"- FAILED: {p}" for p in c.get("replay_problems", [])] or held[3:]
    lines += ["", "## What this does not show", "",
              ("- One stop, by a signal to the driver; a killed Ray worker is `tests/test_sweep_llm_postgres.py`'s "
               "case; a killed node or a lost PostgreSQL connection is not tried here."),
              ("- SmolLM2-135M is a weak tuner: its `infrastructure_defect` outcomes (truncated calls) and unusable "
               "iterations say nothing about LLM tuning; the run shows that every path is real."),
              "- The `gelu` recording is scripted turns over the OpenAI wire format, not a live model.",
              "- Timings are of a shared two-core machine, one run."]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg-url", help="a PostgreSQL server (default $ATB_TEST_PG_URL); the run gets a fresh database")
    ap.add_argument("--signal", choices=["TERM", "INT"], default="TERM", help="how the driver is stopped")
    ap.add_argument("--stop-at", type=int, default=0, help="iterations stored before the stop (default: a third)")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds each run may take")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "sweep_restart_cpu"))
    ap.add_argument("--render", action="store_true", help="only write OUT.md again from OUT.jsonl (no run)")
    args = ap.parse_args()
    out = Path(args.out)
    if args.render:
        res = _read(out.with_suffix(".jsonl"))
        _split_problems(res.get("checks", {}))
        _write(res, out)
    else:
        res = run(args)
        _write(res, out)
    print(json.dumps(res.get("checks", {}), indent=1))
    return 0 if res.get("checks", {}).get("ok") else 1


if __name__ == "__main__":
    raise SystemExit(main())
