"""The re-measure study behind ``protocol/JUSTIFICATION.md``: do stored verdicts hold in a fresh session?

    python benchmarks/remeasure_study.py [--device cpu|cuda] [--tasks relu softmax layernorm]
                                         [--budget 4] [--seed 1] [--out benchmarks/results/remeasure_cpu.json]

For each task: ``atb run TASK --tuner random`` (a seeded random search), then ``atb remeasure RUN``
re-measures every stored verdict of that run in a fresh measurement session on the same device. The output splits the re-measured
verdicts by whether the *original* verdict met the protocol's usability bar (CI half-width relative
to the ratio), because the question the study answers is whether that bar separates verdicts that
reproduce from verdicts that do not. Load averages are recorded at the start, between the phases
and at the end: on a shared machine they are what the figures mean.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.store import open_store  # noqa: E402
from protocol import load_protocol  # noqa: E402


def _loadavg(label: str) -> str:
    try:
        return f"{label} {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {Path('/proc/loadavg').read_text().strip()}"
    except OSError:
        return f"{label} (no /proc/loadavg)"


def _atb(*argv: str) -> dict[str, Any]:
    """One ``atb ... --json`` call (the command-line contract the study's commands name)."""
    done = subprocess.run([sys.executable, "-m", "atb_agent.cli", *argv, "--json"], cwd=ROOT,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"atb {' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-400:]}")
    return json.loads(done.stdout)


def _group(devs: list[float]) -> dict[str, Any]:
    return {"n": len(devs), "median_abs_deviation": statistics.median(devs) if devs else None,
            "max_abs_deviation": max(devs) if devs else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--tasks", nargs="*", default=["relu", "softmax", "layernorm"])
    ap.add_argument("--budget", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    out = args.out or ROOT / "benchmarks" / "results" / f"remeasure_{args.device}.json"
    proto = load_protocol()
    bar = proto.usability.ci_relative_halfwidth_max
    db = Path(tempfile.mkdtemp(prefix="atb-remeasure-study-")) / "study.sqlite"
    loads = [_loadavg("start")]
    runs = [_atb("run", t, "--tuner", "random", "--budget", str(args.budget), "--seed", str(args.seed),
                 "--backend", args.device, "--db", str(db)) for t in args.tasks]
    loads.append(_loadavg("runs done"))
    reports = [_atb("remeasure", r["run_id"], "--db", str(db)) for r in runs]
    loads.append(_loadavg("end"))
    store = open_store(db)
    usable: list[float] = []
    unusable: list[float] = []
    for rep in reports:
        for item in rep["items"]:
            if item.get("relative_deviation") is None:
                continue
            half = store.verdict(item["original_verdict_id"]).ci_relative_halfwidth
            (usable if half is not None and half <= bar else unusable).append(item["relative_deviation"])
    doc = {
        "what": (f"re-measure study: seeded random search (budget {args.budget}, seed {args.seed}) on "
                 f"{', '.join(args.tasks)}, then every stored verdict re-measured in a fresh session on the same device"),
        "commands": [f"python benchmarks/remeasure_study.py --device {args.device} --tasks {' '.join(args.tasks)} "
                     f"--budget {args.budget} --seed {args.seed}",
                     f"= atb run TASK --tuner random --budget {args.budget} --seed {args.seed} --backend {args.device} "
                     "--db DB --json; atb remeasure RUN --db DB --json"],
        "protocol_version": proto.version, "protocol_sha256": proto.sha256,
        "conditions": {"host": platform.node(), "python": platform.python_version(), "loadavg_lines": loads},
        "by_original_usability": {f"usable (ci_relative_halfwidth <= {bar})": _group(usable),
                                  f"unusable (> {bar})": _group(unusable)},
        "runs": runs, "remeasures": reports,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(json.dumps(doc["by_original_usability"], indent=1))
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
