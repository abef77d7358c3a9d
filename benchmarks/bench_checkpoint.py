"""What signed checkpoints cost (issue 27): one per campaign end, and a full verify of a large store.

``python benchmarks/bench_checkpoint.py [--rows 100000] [--repeats 30] [--pg URL] [--out benchmarks/results/checkpoint_cpu]``

* **checkpoint**: ``store.checkpoint(key_dir)`` as the campaign-end hook runs it (load the key, read the
  head, sign, store the ``store_checkpoint`` row in its own transaction, append to the key folder's
  log), timed ``--repeats`` times on a store of ``--rows`` rows. Target: under 5 ms.
* **verify**: ``verify_path`` (SQLite) / ``store.verify`` (PostgreSQL) of that store: schema, the whole
  chain, every row replayed through the rules, and the checkpoint check; and the checkpoint check
  alone (``check_checkpoints`` on the walked chain), so its share is visible. Target: under 10 s.

The store is filled the way the harness writes: measurement sets of 5 seeds with their verdicts
(7 rows each: 2 sets, 5 + 5 measurements would be 12; here 1 candidate set + 1 baseline set + 10
measurement rows + 1 verdict = 13 rows per verdict), topped up with ``reports`` rows to ``--rows``,
every row through the hash chain. PostgreSQL runs only when ``--pg`` (or ``ATB_TEST_PG_URL``) names a
server; its store gets a fresh database. Writes ``OUT.json`` and ``OUT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.records import (  # noqa: E402
    DeviceFingerprint, GateResult, MeasurementSample, MeasurementSet, Verdict, sha256_text, utc_now,
)
from harness.verdict.gates import gate_names  # noqa: E402
from protocol import load_protocol  # noqa: E402

PROTO = load_protocol()
REF = PROTO.ref()


def _fill(store: Any, rows: int, verdict_share: float = 0.5) -> int:
    """Fill ``store`` to about ``rows`` chained rows; returns the chain head."""
    fp = DeviceFingerprint(backend="cpu", cpu_model="bench", cpu_count=2, torch_version="2.13.0")
    sid = store.open_session(fp, REF)
    dev = store.session(sid)["device_sha256"]
    seeds = list(range(PROTO.seeds.paired_seeds))
    per_verdict = 2 + 2 * len(seeds) + 1
    n_verdicts = int(rows * verdict_share) // per_verdict
    batch = 200
    done = 0
    while done < n_verdicts:
        with store.transaction() as c:
            for _ in range(min(batch, n_verdicts - done)):
                ratio = 1.25
                sets = {}
                for arm, base in (("candidate", 100.0), ("baseline", 125.0)):
                    sets[arm] = MeasurementSet(
                        session_id=sid, device_sha256=dev, protocol=REF, task_id="relu",
                        subject_sha256=sha256_text(f"{arm}{done}"), arm=arm,  # type: ignore[arg-type]
                        samples=[MeasurementSample(seed=s, values=[base, base], round_lengths=[2]) for s in seeds])
                    store._insert_measurement_set(c, sets[arm])
                v = Verdict(session_id=sid, device_sha256=dev, protocol=REF, task_id="relu",
                            candidate_sha256=sha256_text(f"candidate{done}"),
                            baseline_sha256=sha256_text(f"baseline{done}"), baseline_label="bench",
                            status="accepted", correct=True, reason="", ratio=ratio, ci_low=ratio, ci_high=ratio,
                            gates=[GateResult(name=n, passed=True) for n in gate_names()],
                            candidate_set_id=sets["candidate"].id, baseline_set_id=sets["baseline"].id)
                store._insert(c, "verdicts", {
                    "id": v.id, "session_id": sid, "device_sha256": dev, "task_id": "relu", "kind": "kernel",
                    "candidate_sha256": v.candidate_sha256, "baseline_sha256": v.baseline_sha256,
                    "baseline_label": "bench", "status": "accepted", "correct": 1, "reason": "", "ratio": ratio,
                    "ci_low": ratio, "ci_high": ratio, "candidate_set_id": v.candidate_set_id,
                    "baseline_set_id": v.baseline_set_id,
                    "gates_json": json.dumps([g.model_dump() for g in v.gates]), "detail_json": "{}",
                    "created_at": utc_now(), "protocol_version": REF.version, "protocol_sha256": REF.sha256})
                done += 1
    head = store.chain_head()[0]
    while head < rows:
        with store.transaction() as c:
            for i in range(min(batch * 5, rows - head)):
                store._insert(c, "reports", {"id": f"bench-{head + i}", "kind": "bench", "subject": "s",
                                             "body_json": json.dumps({"i": head + i}), "created_at": utc_now(),
                                             "protocol_version": REF.version, "protocol_sha256": REF.sha256})
        head = store.chain_head()[0]
    return int(head)


def _bench(kind: str, store: Any, verify: Any, rows: int, repeats: int, key_dir: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    head = _fill(store, rows)
    fill_s = time.perf_counter() - t0
    store.checkpoint(key_dir)   # the first makes the key: not counted
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        store.checkpoint(key_dir)
        times.append((time.perf_counter() - t) * 1000)
    plain = []               # one ordinary row in its own transaction: the store's own commit cost
    for i in range(repeats):
        t = time.perf_counter()
        store.add_report("bench_row", "s", {"i": i}, REF)
        plain.append((time.perf_counter() - t) * 1000)
    t, c = time.perf_counter(), time.process_time()
    result = verify()
    verify_s = time.perf_counter() - t
    verify_cpu_s = time.process_time() - c
    from harness.store._checkpoint import ChainIndex, check_checkpoints
    from harness.store._verify import chain_and_rule_problems

    index = ChainIndex()
    walk_conn = store.conn if kind == "sqlite" else store.x
    t = time.perf_counter()
    chain_and_rule_problems(walk_conn, index)
    walk_s = time.perf_counter() - t
    t = time.perf_counter()
    check_checkpoints(index, key_dir)
    check_s = time.perf_counter() - t
    return {"store": kind, "rows": result.rows_checked, "head_after_fill": head, "fill_s": round(fill_s, 2),
            "checkpoint_ms": {"median": round(statistics.median(times), 3), "p90": round(sorted(times)[int(0.9 * len(times)) - 1], 3),
                              "min": round(min(times), 3), "max": round(max(times), 3), "n": len(times)},
            "plain_row_ms": {"median": round(statistics.median(plain), 3), "n": len(plain)},
            "verify_s": round(verify_s, 3), "verify_client_cpu_s": round(verify_cpu_s, 3), "verify_ok": result.ok,
            "verify_problems": [p.line() for p in result.problems[:3]],
            "checkpoint_report": result.checkpoint.model_dump() if result.checkpoint else None,
            "chain_walk_s": round(walk_s, 3), "checkpoint_check_s": round(check_s, 4),
            "targets": {"checkpoint_ms": 5.0, "verify_s": 10.0},
            "meets": {"checkpoint": statistics.median(times) < 5.0, "verify": verify_s < 10.0}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--pg", default=os.environ.get("ATB_TEST_PG_URL"))
    ap.add_argument("--out", default="benchmarks/results/checkpoint_cpu")
    ap.add_argument("--stores", default="sqlite,postgresql", help="which stores to run (postgresql needs --pg)")
    args = ap.parse_args()
    from harness.store import open_store, verify_path

    results: list[dict[str, Any]] = []
    load_start = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="atb-bench-cp-") as tmp:
        key_dir = Path(tmp) / "keys"
        db = Path(tmp) / "atb.sqlite"
        if "sqlite" in args.stores:
            store = open_store(db)
            try:
                r = _bench("sqlite", store, lambda: verify_path(db, key_dir), args.rows, args.repeats, key_dir)
            finally:
                store.close()
            results.append(r)
            print(json.dumps(r), flush=True)
        if args.pg and "postgresql" in args.stores:
            import psycopg

            name = f"atb_bench_{uuid.uuid4().hex[:10]}"
            with psycopg.connect(args.pg, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            url = args.pg.rpartition("/")[0] + "/" + name
            try:
                pg = open_store(url)
                try:
                    r = _bench("postgresql", pg, lambda: pg.verify(key_dir), args.rows, args.repeats, key_dir)
                finally:
                    pg.close()
                results.append(r)
                print(json.dumps(r), flush=True)
            finally:
                with psycopg.connect(args.pg, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    meta = {"when": utc_now(), "machine": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "note": "2 shared cores (about 8 engineers); run under nice",
            "protocol": REF.version, "load_average_start": load_start,
            "load_average_end": [round(x, 2) for x in os.getloadavg()]}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "results": results}, indent=2, sort_keys=True) + "\n")
    lines = ["# Signed checkpoints: cost (issue 27)", "",
             f"{meta['when']}, {meta['machine']}, {meta['cpus']} CPUs ({meta['note']}), protocol {meta['protocol']}; "
             f"load average (1, 5, 15 min) {meta['load_average_start']} at the start, {meta['load_average_end']} at the end.",
             "Command: `python benchmarks/bench_checkpoint.py" + (f" --rows {args.rows}" if args.rows != 100_000 else "")
             + "`", "",
             "| store | rows | checkpoint median (ms) | p90 | one plain row, own transaction (ms) | target | full verify (s) | verify, this process's CPU (s) | of which checkpoint check (s) | target |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        cp = r["checkpoint_ms"]
        lines.append(f"| {r['store']} | {r['rows']} | {cp['median']} | {cp['p90']} | {r['plain_row_ms']['median']} | < 5 ms "
                     f"({'met' if r['meets']['checkpoint'] else 'NOT met'}) | {r['verify_s']} | {r['verify_client_cpu_s']} | "
                     f"{r['checkpoint_check_s']} | < 10 s ({'met' if r['meets']['verify'] else 'NOT met'}) |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
