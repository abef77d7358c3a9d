"""Where an `atb ab` run's time went, from what it stored: per arm and iteration, model generation (the
server's own `timings` in each recorded response), evaluation (the rest of the iteration: text protocol
tool calls, the harness's measurement), and each run's start (measuring session and sandbox).

    python benchmarks/results/ab_smollm2/timing.py OUT/atb.sqlite [OUT/transcripts] > timing.json
"""

from __future__ import annotations

import base64
import json
import sqlite3
import sys
from datetime import datetime
from pathlib import Path
from typing import Any


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def main(db_path: str, transcripts: str | None = None) -> dict[str, Any]:
    db = sqlite3.connect(db_path)
    tdir = Path(transcripts) if transcripts else Path(db_path).parent / "transcripts"
    runs: list[dict[str, Any]] = []
    prev_end: float | None = None
    for cid, arm, seed, session, created in db.execute(
            "select id, arm, seed, session_id, created_at from campaigns order by created_at"):
        started = _t(db.execute("select started_at from sessions where id=?", (session,)).fetchone()[0])
        outcome = db.execute("select created_at, status, truncated_fraction from campaign_outcomes where campaign_id=?",
                             (cid,)).fetchone()
        verdicts = [_t(v) for (v,) in db.execute("select created_at from iterations where campaign_id=? order by idx",
                                                  (cid,))]
        records = [json.loads(line) for line in (tdir / f"{cid}.jsonl").read_text().splitlines()]
        header_at = _t(records[0]["data"]["created_at"])
        calls: dict[int, list[dict[str, Any]]] = {}
        for r in records:
            if r["kind"] == "model_call":
                body = json.loads(base64.b64decode(r["data"]["response"]["body_b64"]))
                tm = body.get("timings", {})
                calls.setdefault(r["data"]["iteration"], []).append({
                    "model_s": round((tm.get("prompt_ms", 0) + tm.get("predicted_ms", 0)) / 1000, 2),
                    "completion_tokens": body["usage"]["completion_tokens"],
                    "finish_reason": body["choices"][0]["finish_reason"]})
        iters = []
        last = header_at
        for idx, at in enumerate(verdicts):
            model_s = sum(c["model_s"] for c in calls.get(idx, []))
            iters.append({"iteration": idx, "wall_s": round(at - last, 2), "model_s": round(model_s, 2),
                          "evaluation_s": round(at - last - model_s, 2), "calls": calls.get(idx, [])})
            last = at
        runs.append({"run": cid, "arm": arm, "seed": seed, "outcome": outcome[1], "truncated_fraction": outcome[2],
                     "gap_before_s": None if prev_end is None else round(started - prev_end, 2),
                     "start_s": round(header_at - started, 2), "wall_s": round(_t(outcome[0]) - started, 2),
                     "iterations": iters})
        prev_end = _t(outcome[0])
    model = sum(i["model_s"] for r in runs for i in r["iterations"])
    evaluation = sum(i["evaluation_s"] for r in runs for i in r["iterations"])
    start = sum(r["start_s"] for r in runs)
    return {"runs": runs, "totals_s": {"model": round(model, 1), "evaluation": round(evaluation, 1),
                                       "run_start": round(start, 1),
                                       "runs_wall": round(sum(r["wall_s"] for r in runs), 1)}}


if __name__ == "__main__":
    json.dump(main(*sys.argv[1:3]), sys.stdout, indent=1)
    print()
