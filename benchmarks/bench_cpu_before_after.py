"""Interleaved before/after runs of ``benchmarks/bench_measure.py`` from two source trees.

Each run is one full ``bench_measure.py --device cpu`` invocation with cwd = its tree and
``PYTHONPATH=<its tree>`` (so its measuring children import that tree too). The runs go in ABBA
blocks (A, B, B, A, then again for each further block), so a slow drift of the host's load hits
both arms alike. For every run the driver records its UTC start/end, the 1-minute load average
before and after (and sampled every few seconds while it runs), the output paths, and the medians
that bench_measure's JSON gives; from the run's own store (``--db``) it adds what each verdict
recorded: the confinement of the measuring children (trees that have one) and the per-phase times.

Resumable: one JSON line per finished run goes to ``<work>/runs.jsonl``; a rerun skips every run
index already there with exit status 0.

Usage::

    python benchmarks/bench_cpu_before_after.py --arm before=/tmp/ba_before --arm after=/tmp/ba_after \\
        --blocks 2 --work /tmp/ba_runs --out benchmarks/results/measure_cpu_before_after.json

The first ``--arm`` is the reference (A, the denominator of the ratios); the second is B.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ABBA = (0, 1, 1, 0)  # arm index per position within one block


def _utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _median(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def _ratio(b: float | None, a: float | None) -> float | None:
    return None if a in (None, 0) or b is None else b / a


class _LoadSampler(threading.Thread):
    """Samples the 1-minute load average every ``period`` seconds while a run goes on."""

    def __init__(self, period: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.period, self.samples, self._halt = period, [], threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.period):
            self.samples.append(_load1())

    def stop(self) -> list[float]:
        self._halt.set()
        self.join()
        return self.samples


def _runs_from_json(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Every evaluation of a bench_measure JSON, in order (task, repeat)."""
    out = []
    for row in data.get("rows", []):
        for k, run in enumerate(row.get("runs", [])):
            out.append({"task": row["task"], "repeat": k, **run})
    return out


def _bench_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The figures of one bench_measure JSON. Both trees' bench_measure.py (b4e948f, 724dfff) write the
    same fields; where a summary field is missing, it is recomputed from the rows, and a field neither
    has stays None."""
    s = data.get("summary", {})
    evals = _runs_from_json(data)
    walls = [e["eval_wall_s"] for e in evals if e.get("eval_wall_s") is not None]
    bares = [e["bare_timed_s"] for e in evals if e.get("bare_timed_s")]  # 0.0 means "no evidence"
    overhead_s = [e["eval_wall_s"] - e["bare_timed_s"] for e in evals
                  if e.get("eval_wall_s") is not None and e.get("bare_timed_s")]
    verdicts = s.get("verdicts")
    if verdicts is None:
        verdicts = {}
        for e in evals:
            verdicts[e["verdict"]] = verdicts.get(e["verdict"], 0) + 1
    return {
        "n_evals": len(evals),
        "median_eval_wall_s": s.get("median_eval_wall_s", _median(walls)),
        "sum_eval_wall_s": sum(walls),
        "median_bare_timed_s": s["median_bare_timed_s"] if "median_bare_timed_s" in s else _median(bares),
        "sum_bare_timed_s": sum(bares) if bares else None,
        "median_overhead_ratio": s.get("median_overhead_ratio"),
        "median_wall_minus_bare_s": _median(overhead_s),
        "median_rel_abs_deviation_pct": s.get("median_rel_abs_deviation_pct"),
        "session_open_s": s.get("session_open_s"),
        "verdicts": verdicts,
        "failed_gates": sorted({g for e in evals for g in e.get("failed_gates", [])}),
        "bench_load_average_at_start": s.get("load_average"),
        "protocol_version": s.get("protocol_version"),
        "torch_threads": (s.get("device") or {}).get("torch_threads"),
        "per_eval": [{"task": e["task"], "repeat": e["repeat"], "eval_wall_s": e.get("eval_wall_s"),
                      "bare_timed_s": e.get("bare_timed_s"), "verdict": e.get("verdict"),
                      "speedup": e.get("speedup")} for e in evals],
    }


def _store_fields(db: Path) -> dict[str, Any]:
    """What the verdicts in the run's store say: confinement (key absent before issue 14) and the
    collector's per-phase seconds (load, correctness, timing, integrity; in both trees)."""
    if not db.exists():
        return {"store": "missing"}
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        # insertion order: rowid (b4e948f's schema has no chain_seq column; both have the implicit rowid)
        rows = con.execute("SELECT task_id, status, detail_json FROM verdicts ORDER BY rowid").fetchall()
    finally:
        con.close()
    conf: dict[str, int] = {}
    phases: dict[str, list[float]] = {}
    transport: dict[str, int] = {}
    for _task, _status, detail_json in rows:
        d = json.loads(detail_json or "{}")
        c = d.get("confinement")
        if c is None:
            key = "no confinement field (tree predates confined children)"
            conf[key] = conf.get(key, 0) + 1
        else:
            for arm, how in sorted(c.items()):
                key = f"{arm}: {how}"
                conf[key] = conf.get(key, 0) + 1
        for name, sec in (d.get("phase_s") or {}).items():
            phases.setdefault(name, []).append(float(sec))
        t = d.get("output_transport")
        if t is not None:
            transport[t] = transport.get(t, 0) + 1
    n = len(rows)
    non_timing = [sum(v for k, v in (json.loads(r[2] or "{}").get("phase_s") or {}).items() if k != "timing")
                  for r in rows]
    return {
        "n_verdicts": n,
        "per_verdict_phase_s": [json.loads(r[2] or "{}").get("phase_s") or {} for r in rows],
        "confinement": conf,
        "all_confined": bool(n) and all(k.split(": ", 1)[-1].startswith("bwrap:") for k in conf)
        if not any(k.startswith("no confinement") for k in conf) else None,
        "output_transport": transport or None,
        "median_phase_s": {k: _median(v) for k, v in sorted(phases.items())},
        "median_non_timing_phases_s": _median(non_timing),
    }


def _one_run(idx: int, label: str, tree: Path, work: Path, python: str, timeout: float,
             tasks: list[str] | None) -> dict[str, Any]:
    name = f"run{idx:02d}_{label}"
    out_json = work / f"{name}.json"
    db = work / name / "bench.sqlite"
    if db.parent.exists():
        shutil.rmtree(db.parent)
    db.parent.mkdir(parents=True)
    for stale in (out_json, out_json.with_suffix(".md"), out_json.with_suffix(".rows.jsonl")):
        stale.unlink(missing_ok=True)
    cmd = [python, str(tree / "benchmarks" / "bench_measure.py"), "--device", "cpu", "--out", str(out_json),
           "--db", str(db)] + (["--tasks", *tasks] if tasks else [])
    env = dict(os.environ, PYTHONPATH=str(tree))
    log = work / f"{name}.log"
    rec: dict[str, Any] = {"idx": idx, "label": label, "tree": str(tree), "cmd": cmd, "cwd": str(tree),
                           "env_PYTHONPATH": str(tree), "ATB_BWRAP": os.environ.get("ATB_BWRAP"),
                           "bwrap_on_path": shutil.which("bwrap"), "out_json": str(out_json), "db": str(db),
                           "log": str(log)}
    rec["load1_before"] = _load1()
    rec["start_utc"] = _utc()
    sampler = _LoadSampler()
    sampler.start()
    t0 = time.perf_counter()
    with log.open("w") as f:
        p = subprocess.Popen(cmd, cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # only the group this driver started
            p.wait()
            rc = -9
    rec["process_wall_s"] = time.perf_counter() - t0
    rec["end_utc"] = _utc()
    samples = sampler.stop()
    rec["load1_after"] = _load1()
    rec["load1_during_mean"] = statistics.fmean(samples) if samples else None
    rec["load1_during_max"] = max(samples) if samples else None
    rec["rc"] = rc
    if rc == 0 and out_json.exists():
        rec["bench"] = _bench_fields(json.loads(out_json.read_text()))
        try:
            rec["store"] = _store_fields(db)
        except (sqlite3.Error, ValueError) as e:  # the run's figures stand without the store's extras
            rec["store"] = {"error": repr(e)}
    return rec


def _summarise(recs: list[dict[str, Any]], labels: list[str]) -> dict[str, Any]:
    ok = [r for r in recs if r.get("rc") == 0 and "bench" in r]
    a_lab, b_lab = labels

    def col(rs: list[dict[str, Any]], key: str) -> list[float]:
        return [r["bench"][key] for r in rs if r["bench"].get(key) is not None]

    per_label = {}
    for lab in labels:
        rs = [r for r in ok if r["label"] == lab]
        pooled_wall = [e["eval_wall_s"] for r in rs for e in r["bench"]["per_eval"]]
        pooled_bare = [e["bare_timed_s"] for r in rs for e in r["bench"]["per_eval"] if e["bare_timed_s"]]
        per_label[lab] = {
            "runs": [r["idx"] for r in rs],
            "median_of_run_median_eval_wall_s": _median(col(rs, "median_eval_wall_s")),
            "median_of_run_median_bare_timed_s": _median(col(rs, "median_bare_timed_s")),
            "median_of_run_median_wall_minus_bare_s": _median(col(rs, "median_wall_minus_bare_s")),
            "median_of_run_median_overhead_ratio": _median(col(rs, "median_overhead_ratio")),
            "median_of_run_process_wall_s": _median([r["process_wall_s"] for r in rs]),
            "pooled_median_eval_wall_s": _median(pooled_wall),
            "pooled_median_bare_timed_s": _median(pooled_bare),
            "median_timing_phase_s": _median([r["store"]["median_phase_s"].get("timing") for r in rs
                                              if r.get("store", {}).get("median_phase_s")]),
            "median_non_timing_phases_s": _median([r["store"].get("median_non_timing_phases_s") for r in rs
                                                   if r.get("store")]),
        }
    # per evaluation (verdicts are stored in evaluation order): where the wall time went. "timing_minus_bare"
    # is the harness's own work inside the timing phase; "other" is the wall time outside the four phases.
    parts: dict[str, dict[str, list[float]]] = {lab: {} for lab in labels}
    for r in ok:
        phs = (r.get("store") or {}).get("per_verdict_phase_s")
        evs = r["bench"]["per_eval"]
        if not phs or len(phs) != len(evs):
            continue
        for e, ph in zip(evs, phs):
            got = {"eval_wall_s": e["eval_wall_s"], "bare_timed_s": e["bare_timed_s"],
                   "timing_phase_s": ph.get("timing"), "load_phase_s": ph.get("load"),
                   "correctness_phase_s": ph.get("correctness"), "integrity_phase_s": ph.get("integrity"),
                   "outside_phases_s": e["eval_wall_s"] - sum(ph.values()),
                   "timing_minus_bare_s": None if ph.get("timing") is None else ph["timing"] - e["bare_timed_s"]}
            for k, v in got.items():
                if v is not None:
                    parts[r["label"]].setdefault(k, []).append(v)
    decomposition = {k: {"n": {lab: len(parts[lab].get(k, [])) for lab in labels},
                         "median": {lab: _median(parts[lab].get(k, [])) for lab in labels},
                         "mean": {lab: statistics.fmean(parts[lab][k]) if parts[lab].get(k) else None
                                  for lab in labels}}
                     for k in sorted({k for lab in labels for k in parts[lab]})}
    for v in decomposition.values():
        ma, mb = v["mean"][a_lab], v["mean"][b_lab]
        v[f"mean_diff_{b_lab}_minus_{a_lab}"] = None if ma is None or mb is None else mb - ma
    blocks = []
    for blk in sorted({r["idx"] // len(ABBA) for r in ok}):
        rs = [r for r in ok if r["idx"] // len(ABBA) == blk]
        a = [r for r in rs if r["label"] == a_lab]
        b = [r for r in rs if r["label"] == b_lab]
        if not a or not b:
            continue
        entry = {"block": blk, "runs": [r["idx"] for r in rs], "complete": len(rs) == len(ABBA)}
        for key in ("median_eval_wall_s", "median_bare_timed_s", "median_wall_minus_bare_s"):
            entry[f"ratio_{key}"] = _ratio(statistics.fmean(col(b, key)) if col(b, key) else None,
                                           statistics.fmean(col(a, key)) if col(a, key) else None)
        blocks.append(entry)
    overall = {}
    for key in ("median_eval_wall_s", "median_bare_timed_s", "median_wall_minus_bare_s"):
        overall[f"ratio_{key}"] = _ratio(per_label[b_lab][f"median_of_run_{key}"],
                                         per_label[a_lab][f"median_of_run_{key}"])
    overall["ratio_pooled_median_eval_wall_s"] = _ratio(per_label[b_lab]["pooled_median_eval_wall_s"],
                                                        per_label[a_lab]["pooled_median_eval_wall_s"])
    overall["ratio_process_wall_s"] = _ratio(per_label[b_lab]["median_of_run_process_wall_s"],
                                             per_label[a_lab]["median_of_run_process_wall_s"])
    # per task: median over all of an arm's evaluations of that task, then B over A
    per_task = {}
    for lab in labels:
        for r in ok:
            if r["label"] != lab:
                continue
            for e in r["bench"]["per_eval"]:
                per_task.setdefault(e["task"], {}).setdefault(lab, []).append(e["eval_wall_s"])
    task_ratios = {t: _ratio(_median(v.get(b_lab, [])), _median(v.get(a_lab, []))) for t, v in sorted(per_task.items())}
    return {"labels": {"A (denominator)": a_lab, "B": b_lab}, "order": "ABBA blocks", "per_label": per_label,
            "per_block": blocks, "overall": overall, "per_eval_decomposition_s": decomposition, "per_task_eval_wall_ratio": task_ratios,
            "n_runs_ok": len(ok), "n_runs_failed": len([r for r in recs if r.get("rc") != 0])}


def _row(r: dict[str, Any]) -> str:
    b, s = r.get("bench", {}), r.get("store", {})

    def f(x: Any, nd: int = 2) -> str:
        return "n/a" if x is None else f"{x:.{nd}f}"
    return (f"run{r['idx']:02d} {r['label']:<7} {r['start_utc']} load {r['load1_before']:.2f}->{r['load1_after']:.2f} "
            f"(mean {f(r.get('load1_during_mean'))}) rc={r['rc']} wall={f(b.get('median_eval_wall_s'))} "
            f"bare={f(b.get('median_bare_timed_s'), 3)} wall-bare={f(b.get('median_wall_minus_bare_s'))} "
            f"timing={f((s.get('median_phase_s') or {}).get('timing'))} verdicts={b.get('verdicts')} "
            f"confined={s.get('all_confined')}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, help="LABEL=TREE; give exactly two, A first")
    ap.add_argument("--blocks", type=int, default=2, help="ABBA blocks (4 runs each)")
    ap.add_argument("--work", type=Path, required=True, help="folder for each run's JSON, log, store, runs.jsonl")
    ap.add_argument("--out", type=Path, required=True, help="summary JSON")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--tasks", nargs="*", default=None, help="passed to bench_measure in every run (default: all)")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per run before it is killed")
    args = ap.parse_args()
    if len(args.arm) != 2:
        ap.error("give exactly two --arm LABEL=TREE")
    arms = []
    for spec in args.arm:
        lab, _, tree = spec.partition("=")
        arms.append((lab, Path(tree).resolve()))
    labels = [a[0] for a in arms]
    args.work.mkdir(parents=True, exist_ok=True)
    jl = args.work / "runs.jsonl"
    done: dict[int, dict[str, Any]] = {}
    if jl.exists():
        for line in jl.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                done[r["idx"]] = r  # the last line for an index wins
    schedule = [(blk * len(ABBA) + pos, arms[ABBA[pos]]) for blk in range(args.blocks) for pos in range(len(ABBA))]
    for idx, (lab, tree) in schedule:
        prev = done.get(idx)
        if prev is not None and prev.get("rc") == 0:
            if prev["label"] != lab:
                raise SystemExit(f"runs.jsonl has run {idx} as {prev['label']}, schedule says {lab}")
            print(f"skip run{idx:02d} {lab} (done)", flush=True)
            continue
        print(f"run{idx:02d} {lab} start {_utc()} load {_load1():.2f}", flush=True)
        rec = _one_run(idx, lab, tree, args.work, args.python, args.timeout, args.tasks)
        with jl.open("a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
        done[idx] = rec
        print(_row(rec), flush=True)
    recs = [done[i] for i, _ in schedule if i in done]
    for r in recs:  # re-read each finished run's store (if still there) so that a newer summary sees every field
        if r.get("rc") == 0 and Path(r["db"]).exists():
            try:
                r["store"] = _store_fields(Path(r["db"]))
            except (sqlite3.Error, ValueError) as e:
                r["store"] = {"error": repr(e)}
    summary = _summarise(recs, labels)
    result = {"created_at": _utc(), "driver": "benchmarks/bench_cpu_before_after.py",
              "arms": {lab: str(tree) for lab, tree in arms}, "blocks": args.blocks, "tasks": args.tasks, "work": str(args.work),
              "summary": summary, "runs": recs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    for r in recs:
        print(_row(r))
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0 if summary["n_runs_failed"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
