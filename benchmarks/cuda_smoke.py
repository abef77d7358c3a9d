"""CUDA smoke of the evaluation path: a KernelBench problem with a KernelBench-style candidate, an
identity candidate (wrong on negatives) and a candidate that exits, in one CUDA session; prints one JSON
object per evaluation and writes them to the path given as the first argument.

Usage: ``python benchmarks/cuda_smoke.py OUT.json [--device cuda|cpu]``
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.verdict.evaluate import evaluate_candidate  # noqa: E402
from harness.measure.session import open_measurement_session  # noqa: E402
from harness.store import open_store  # noqa: E402
from protocol import load_protocol  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "kernelbench"
EXITS = "import os\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        os._exit(7)\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    args = ap.parse_args()
    proto = load_protocol()
    store = open_store(Path(tempfile.mkdtemp(prefix="atb-smoke-")) / "smoke.sqlite")
    cases = {"kernelbench_relu_clamp": (FIX / "19_ReLU.py", (FIX / "19_ReLU_new.py").read_text()),
             "kernelbench_relu_identity": (FIX / "19_ReLU.py", (FIX / "19_ReLU_identity.py").read_text()),
             "native_relu_exits": ("relu", EXITS)}
    results = {}
    with open_measurement_session(store, args.device, proto, note="cuda_smoke") as ctx:
        for name, (task, source) in cases.items():
            res = evaluate_candidate(task if isinstance(task, str) else task, source, store=store, session=ctx)
            row = res.model_dump(mode="json", include={"verdict", "correct", "speedup", "speedup_ci",
                                                       "speedup_vs_start", "strawman", "roofline_fraction",
                                                       "device", "timing_method", "reason", "phase_s",
                                                       "candidate_median_ns", "baseline_median_ns"})
            row["failed_gates"] = [g.name for g in res.gates if not g.passed]
            results[name] = row
            print(name, json.dumps(row, sort_keys=True), flush=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
