"""Issue 29 item 3 on a GPU: the anchors' former CUDA event loop against ``CudaBackend.median_seconds``, which
now times through the measuring child's ``CudaTimer`` (events behind the L2 flush), interleaved per round.

    python benchmarks/anchor_loop_check.py '{"warmup_ms":25.0,"rep_ms":100.0,"min_reps":10,"max_reps":500,
        "l2_flush_bytes":268435456,"cpu_warmup_reps":3}' [--rounds N]

The JSON carries the protocol's timing values (the GPU machine may lack pydantic/yaml; generate it with
``load_protocol()`` where the harness is installed). Prints one JSON object: per workload the old and new
medians of each round and the ratio new/old of their medians. Needs only torch and the harness's modules.
"""

from __future__ import annotations

import argparse
import json
import statistics
from types import SimpleNamespace
from typing import Any


def old_median_seconds(fn: Any, p: Any) -> float:
    """The anchors' CUDA loop before issue 29 item 3 (``harness/measure/backends/cuda.py`` at ``a64cccd``)."""
    import torch

    cu = p.timing.cuda
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    est_ms = max(start.elapsed_time(end), 1e-3)
    for _ in range(max(1, int(cu.warmup_ms / est_ms))):
        fn()
    reps = int(min(cu.max_reps, max(cu.min_reps, cu.rep_ms / est_ms)))
    times: list[float] = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main() -> None:
    import torch

    from harness.measure.backends import backend_named

    ap = argparse.ArgumentParser()
    ap.add_argument("timing")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    t = json.loads(args.timing)
    p = SimpleNamespace(timing=SimpleNamespace(
        cuda=SimpleNamespace(**{k: t[k] for k in ("warmup_ms", "rep_ms", "min_reps", "max_reps", "l2_flush_bytes")}),
        cpu=SimpleNamespace(warmup_reps=t["cpu_warmup_reps"])))
    new = backend_named("cuda").median_seconds
    big = torch.empty(2**31 // 4, device="cuda").uniform_()
    big_dst = torch.empty_like(big)
    small = torch.empty(16 * 2**20 // 4, device="cuda").uniform_()
    small_dst = torch.empty_like(small)
    a16, b16 = (torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    a32, b32 = (torch.randn(1024, 1024, device="cuda") for _ in range(2))
    work = {
        "copy_2GiB_fp32": (lambda: big_dst.copy_(big), 2.0 * big.numel() * 4),
        "copy_16MiB_fp32": (lambda: small_dst.copy_(small), 2.0 * small.numel() * 4),
        "matmul_8192_bf16": (lambda: torch.matmul(a16, b16), 2.0 * 8192**3),
        "matmul_1024_fp32": (lambda: torch.matmul(a32, b32), 2.0 * 1024**3),
    }
    out: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": args.rounds,
                           "workloads": {}}
    for name, (fn, units) in work.items():
        olds: list[float] = []
        news: list[float] = []
        for r in range(args.rounds):
            order: list[tuple[list[float], Any]] = [(olds, old_median_seconds), (news, new)]
            for sink, f in (order if r % 2 == 0 else order[::-1]):
                sink.append(f(fn, p))
        mo, mn = statistics.median(olds), statistics.median(news)
        out["workloads"][name] = {"old_s": olds, "new_s": news, "old_rate": units / mo, "new_rate": units / mn,
                                  "new_over_old_time": mn / mo}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
