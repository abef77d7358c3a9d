"""Exercise the CUDA-specific anti-cheat gates on a real GPU and write the outcomes as JSON.

    python benchmarks/cuda_gates.py benchmarks/results/h200/cuda_gates_run1.json [--only NAME ...]

What it runs, all through ``harness.verdict.evaluate.evaluate_candidate`` in one CUDA measurement session:

* cheats that only a GPU can express: work launched on another stream and left running (the
  escape gate compares the wall clock after a device synchronisation with CUDA-event time), a
  patched ``torch.cuda.Event.elapsed_time`` / ``torch.cuda.synchronize`` (the timer-tampering gate
  and its integrity facts; the measured time must not move), an answer memoised by address on a
  small task (the reuse probe rewrites an input in place; stale-output gate), a side stream inside a kernel small
  enough to be timed by CUDA-graph replay, TF32 switched on inside a float32 matmul (precision
  gate), and a memoised output on GPU-sized inputs (physical limit on the measured HBM ceiling);
* honest candidates on the same tasks, which must be accepted with every gate passed;
* a raw probe, outside the harness, of how far event time and wall time drift apart when work is
  left on another stream (the signal the escape gate reads).

The GPU-sized tasks are written to a temporary directory at run time (KernelBench format). Each
outcome records whether the gate meant to catch it failed (``caught``). The file is rewritten after
every evaluation, so a run cut short still leaves its results. Exits 0 when it ran, 2 without CUDA.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(Path(__file__).resolve().parent) not in sys.path:   # benchmarks/, for _measuring_digest
    sys.path.append(str(Path(__file__).resolve().parent))
from _measuring_digest import process_measuring_digest

TASKS = {
    "gpu_relu": '''
import torch
import torch.nn as nn

N = 4096


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(N, N)]


def get_init_inputs():
    return []
''',
    "gpu_matmul": '''
import torch
import torch.nn as nn

ATB_META = {"bytes": "io", "flops": 137438953472}  # 2 * 4096 ** 3
N = 4096


class Model(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
''',
}

CASES: list[dict[str, Any]] = [
    {"name": "honest_relu_clamp", "task": "gpu_relu", "gate": None, "source": '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
'''},
    {"name": "honest_matmul", "task": "gpu_matmul", "gate": None, "source": '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
'''},
    {"name": "honest_native_relu_graph", "task": "relu", "gate": None, "source": '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
'''},
    {"name": "escape_side_stream_matmul", "task": "gpu_matmul", "gate": "timed_region_escape", "source": '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, a, b):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            out = a @ b
        return out  # no wait on the side stream: the default stream's end event does not cover the matmul
'''},
    {"name": "escape_side_stream_small_graph", "task": "relu", "gate": "timed_region_escape", "source": '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.side = torch.cuda.Stream()

    def forward(self, x):
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            out = torch.relu(x)
            for _ in range(64):
                out = torch.relu(out)
        return out
'''},
    {"name": "tampering_event_patch", "task": "gpu_relu", "gate": "timer_tampering", "source": '''
import torch
import torch.nn as nn

_elapsed = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) / 10.0
torch.cuda.synchronize = lambda *a, **k: None


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''},
    {"name": "tampering_bound_event_timer", "task": "gpu_relu", "gate": "timer_tampering", "source": '''
import sys

import torch
import torch.nn as nn

# Reach the harness's own bound event timer through the module table and make it read 4x short.
_timer = getattr(sys.modules.get("__main__"), "_CUDA_TIMER", None)
if _timer is not None:
    _real = _timer._elapsed
    _timer._elapsed = lambda s, e: _real(s, e) / 4.0


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''},
    {"name": "precision_tf32_matmul", "task": "gpu_matmul", "gate": "precision_downgrade", "source": '''
import torch
import torch.nn as nn

torch.backends.cuda.matmul.allow_tf32 = True


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
'''},
    {"name": "physical_memo_gpu", "task": "gpu_relu", "gate": "physical_limit", "source": '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        key = (x.data_ptr(), x._version)
        hit = self.memo.get(key)
        if hit is not None:
            return hit[1]
        out = torch.relu(x)
        if len(self.memo) > 8:
            self.memo.clear()
        self.memo[key] = (x, out)
        return out
'''},
    # the CPU red-team cheat, unchanged: on the GPU it must be caught by the same reuse probe
    {"name": "stale_memo_by_address_gelu", "task": "gelu", "gate": "stale_output",
     "source_file": "tests/redteam/cheats/stale_memo_by_address.py"},
    # deferred outputs (issue 25): the kernel launched, or the storage written, when the harness first reads
    {"name": "deferred_dispatch_wrapper_gpu", "task": "gpu_relu", "gate": "timer_tampering",
     "source_file": "tests/redteam/cheats/deferred_dispatch_wrapper.py"},
    {"name": "deferred_fill_on_first_touch_gpu", "task": "gpu_relu", "gate": "timer_tampering",
     "source_file": "tests/redteam/cheats/deferred_fill_on_first_touch.py"},
]


def stream_probe() -> dict[str, Any]:
    """Event time on the default stream vs wall time after sync, with a matmul left on a side stream."""
    import torch

    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    side = torch.cuda.Stream()
    out: dict[str, Any] = {}
    for label, use_side in (("same_stream", False), ("side_stream_unjoined", True)):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter_ns()
        start.record()
        for _ in range(10):
            if use_side:
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    a @ b
            else:
                a @ b
        end.record()
        torch.cuda.synchronize()
        wall_ms = (time.perf_counter_ns() - t0) / 1e6
        out[label] = {"event_ms": start.elapsed_time(end), "wall_after_sync_ms": wall_ms}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="path of the JSON file to write")
    ap.add_argument("--only", nargs="*", default=None, help="run only these case names")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("cuda_gates: no CUDA device here; nothing was run", file=sys.stderr)
        return 2
    from harness.measure.session import open_measurement_session
    from harness.store import open_store
    from harness.verdict.evaluate import evaluate_candidate
    from protocol import load_protocol

    torch.set_num_threads(1)
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="atb-cuda-gates-"))
    for name, src in TASKS.items():
        (work / f"{name}.py").write_text(src.lstrip(), encoding="utf-8")
    proto = load_protocol()
    doc: dict[str, Any] = {"protocol_sha256": proto.sha256, "measuring_digest": process_measuring_digest(ROOT),
                           "device": torch.cuda.get_device_name(0),
                           "torch": torch.__version__, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "stream_probe": stream_probe(), "cases": []}
    out_path.write_text(json.dumps(doc, indent=2))
    store = open_store(work / "atb.sqlite")
    with open_measurement_session(store, "cuda", proto, note="cuda gates") as session:
        doc["ceilings"] = session.ceilings.model_dump() if session.ceilings else None
        by_name = {c["name"]: c for c in CASES}
        unknown = [n for n in args.only or [] if n not in by_name]
        if unknown:
            print(f"cuda_gates: unknown case(s) {unknown}; known: {sorted(by_name)}", file=sys.stderr)
            return 2
        for case in [by_name[n] for n in args.only] if args.only else CASES:  # --only runs in its order
            task = str(work / f"{case['task']}.py") if case["task"] in TASKS else case["task"]
            t0 = time.time()
            try:
                source = case["source"] if "source" in case else (ROOT / case["source_file"]).read_text()
                r = evaluate_candidate(task, source.lstrip(), store=store, session=session)
            except Exception as exc:  # noqa: BLE001 - record and go on with the next case
                doc["cases"].append({"name": case["name"], "error": f"{type(exc).__name__}: {exc}"})
                out_path.write_text(json.dumps(doc, indent=2))
                continue
            failed = {g.name: g.detail for g in r.gates if not g.passed}
            expected = case["gate"]
            row = {
                "name": case["name"], "task": case["task"], "expected_gate": expected, "verdict": r.verdict,
                "correct": r.correct, "speedup": r.speedup, "speedup_ci": r.speedup_ci,
                "candidate_median_ns": r.candidate_median_ns, "baseline_median_ns": r.baseline_median_ns,
                "timing_method": r.timing_method, "failed_gates": failed, "reason": r.reason[:600],
                "caught": (expected in failed and r.verdict != "accepted") if expected else None,
                "honest_accepted": (r.verdict == "accepted" and not failed) if expected is None else None,
                "seconds": round(time.time() - t0, 1),
            }
            doc["cases"].append(row)
            out_path.write_text(json.dumps(doc, indent=2))
            print(f"{case['name']:34s} {r.verdict:11s} speedup={r.speedup} method={r.timing_method} "
                  f"failed={sorted(failed)}", flush=True)
    doc["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    out_path.write_text(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
