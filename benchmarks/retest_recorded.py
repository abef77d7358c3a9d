"""Held-out retest of a certified best recorded in a results file, when its home store is gone.

    python benchmarks/retest_recorded.py RESULTS.json TASK --backend cpu|mlx|cuda [--out OUT.json]

``atb retest RUN`` needs the run's store, which the GPU evidence script deletes with its temporary
folder. The results file still holds the run's summary: its knob sequence, its best iteration and the
best candidate's sha256. This script re-renders the candidate from the knobs through the task's own
template, refuses to go on unless the rendered source hashes to the recorded sha256 (so the candidate
measured here is byte-for-byte the one certified at home), and measures it with the same legs as
``atb retest`` (``harness.science.retest.measure_torch`` / ``measure_mlx``), against a baseline re-derived on
this backend from the task's reference. Exits 1 when the rendered candidate does not match.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.science.retest import measure_mlx, measure_torch  # noqa: E402
from harness.store import open_store  # noqa: E402
from harness.tasks import load_task  # noqa: E402
from protocol import load_protocol  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a JSON file with a 'runs' list (atb run --json records)")
    ap.add_argument("task", help="the run's task (a native name, or the task file for a kb: task)")
    ap.add_argument("--backend", choices=["cpu", "mlx", "cuda"], required=True)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    loaded = load_task(args.task)
    runs = [r for r in json.loads(args.results.read_text())["runs"] if r.get("task") == loaded.id]
    certified = [r for r in runs if r.get("best_iteration")]
    if not certified:
        print(f"retest_recorded: no run of {loaded.id} with a certified best in {args.results}", file=sys.stderr)
        return 1
    home = max(certified, key=lambda r: r["best_speedup"])
    knobs = home["knob_sequence"][home["best_iteration"] - 1]
    source = loaded.render_candidate(knobs)
    sha = hashlib.sha256(source.encode()).hexdigest()
    if sha != home["best_candidate_sha256"]:
        print(f"retest_recorded: knobs {knobs} render to {sha[:12]}, not the recorded {home['best_candidate_sha256'][:12]}; "
              "the task's template changed since the run", file=sys.stderr)
        return 1
    proto = load_protocol()
    store = open_store(Path(tempfile.mkdtemp(prefix="atb-retest-recorded-")) / "retest.sqlite")
    if args.backend == "mlx":
        leg = measure_mlx(Path(loaded.path), source, proto)
    else:
        leg = measure_torch(store, args.task, source, args.backend, proto)
    store.close()
    doc = {"task_id": loaded.id, "run_id": home["run_id"], "candidate_sha256": sha, "knobs": knobs,
           "home_device_sha256": home["device_sha256"], "home_protocol_sha256": home["protocol_sha256"],
           "home_ratio": home["best_speedup"], "home_ci": home["best_ci"],
           "held_out_backend": args.backend, "held_out_ratio": leg.ratio,
           "held_out_ci": [leg.ci_low, leg.ci_high] if leg.ci_low is not None else None,
           "held_out": leg.ratio is not None and leg.device_sha256 != home["device_sha256"],
           "direction_kept": None if leg.ratio is None else (leg.ratio > 1.0) == (home["best_speedup"] > 1.0),
           "protocol_sha256": proto.sha256, "leg": leg.model_dump(mode="json")}
    text = json.dumps(doc, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
