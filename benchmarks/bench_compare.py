"""The output comparison with and without its screen, side by side in one run (issue 13).

``python benchmarks/bench_compare.py --device cuda --out FILE.jsonl`` times ``compare_tensors`` on
a correct candidate output (the reference plus float32-rounding noise) and on a wrong one, at each
size, first with the screen (what the harness runs) and then with the exact float64 pass alone, and
writes one JSON line per (size, dtype, case) as it finishes. It also checks that both give the same
judgement on NaN, infinity, overflow and near-bar outputs on that device (CUDA reductions are not
the CPU's), and records the answer. On a CPU use small sizes (``--elements 1e6,1e7``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from harness.measure import correctness  # noqa: E402
from harness.measure.correctness import compare_tensors  # noqa: E402

TOLS = {"float64": {"atol": 1e-9, "rtol": 1e-7, "rel_l2": 1e-9},
        "float32": {"atol": 1e-4, "rtol": 1e-4, "rel_l2": 2e-5},
        "float16": {"atol": 1e-3, "rtol": 1e-3, "rel_l2": 1e-3},
        "bfloat16": {"atol": 1e-2, "rtol": 1e-2, "rel_l2": 8e-3}}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _time(fn: Any, device: str, reps: int) -> tuple[float, Any]:
    out = fn()   # warm-up
    times = []
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        out = fn()
        _sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _exact(ref: Any, cand: Any) -> Any:
    screen = correctness._screen
    correctness._screen = lambda *a, **k: None  # type: ignore[assignment]
    try:
        return compare_tensors(ref, cand, TOLS)
    finally:
        correctness._screen = screen  # type: ignore[assignment]


def _agreement(device: str) -> dict[str, Any]:
    g = torch.Generator(device=device).manual_seed(11)
    r = torch.randn(1 << 22, generator=g, device=device)
    bar = 1e-4 * max(1.0, float(r.square().mean().sqrt()))
    cases: dict[str, tuple[Any, Any]] = {}
    for name, idx, val in (("nan", 77, math.nan), ("inf", 78, math.inf), ("past the bar", 79, None),
                           ("at 0.995 of the bar", 80, None)):
        c = r.clone()
        if val is None:
            c[idx] += 3 * bar if name == "past the bar" else 0.995 * bar
        else:
            c[idx] = val
        cases[name] = (r, c)
    cases["overflowing norm"] = (torch.full((1 << 20,), 3e19, device=device), torch.full((1 << 20,), 3e19, device=device))
    cases["reference zeros"] = (torch.zeros(1 << 20, device=device), torch.zeros(1 << 20, device=device))
    out = {}
    for name, (a, b) in cases.items():
        fast, exact = compare_tensors(a, b, TOLS), _exact(a, b)
        out[name] = {"fast": fast.passed, "exact": exact.passed, "same": fast.passed == exact.passed
                     and fast.reason == exact.reason}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--elements", default="1e6,1e7", help="comma-separated element counts (floats allowed: 1.5e9)")
    ap.add_argument("--dtypes", default="float32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    dev = args.device
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", encoding="utf-8") as f:
        agree = _agreement(dev)
        f.write(json.dumps({"kind": "agreement", "device": dev, "cases": agree,
                            "all_same": all(v["same"] for v in agree.values())}) + "\n")
        f.flush()
        for dtype_name in args.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            for n in (int(float(x)) for x in args.elements.split(",")):
                g = torch.Generator(device=dev).manual_seed(n)
                ref = torch.randn(n, generator=g, device=dev).to(dtype)
                good = (ref.float() * (1 + 1e-7)).to(dtype) if dtype != torch.float64 else ref * (1 + 1e-12)
                bad = ref + 1.0
                for case, cand in (("correct", good), ("wrong", bad)):
                    t_fast, c_fast = _time(lambda: compare_tensors(ref, cand, TOLS), dev, args.reps)
                    t_exact, c_exact = _time(lambda: _exact(ref, cand), dev, args.reps)
                    f.write(json.dumps({"kind": "compare", "device": dev, "dtype": dtype_name, "elements": n,
                                        "bytes_per_output": n * ref.element_size(), "case": case,
                                        "screened_s": round(t_fast, 5), "exact_s": round(t_exact, 5),
                                        "exact_over_screened": round(t_exact / t_fast, 2) if t_fast > 0 else None,
                                        "same_judgement": c_fast.passed == c_exact.passed,
                                        "passed": c_fast.passed}) + "\n")
                    f.flush()
                del ref, good, bad
                if dev == "cuda":
                    torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
