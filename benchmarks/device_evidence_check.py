"""Checks device-resident evidence on a GPU machine: CUDA IPC one way, and `atb eval` wall times.

1. ``--ipc``: a producer process exports a CUDA tensor with ``harness.measure.backends._share.export_output``
   (what the candidate child does); this process maps it with ``open_output`` (what the reference
   child does) and checks the values. Prints one JSON line.
2. ``--problems FILE...``: for each KernelBench-format problem file, an A/A evaluation (the problem's
   own ``Model`` aliased as ``ModelNew``, written to a temporary file) through the CLI, at the
   problem's own sizes, under a wall-clock limit. One JSON line per problem: wall time, exit code,
   verdict, speedup and CI, phase times, reason; and the GPU processes left afterwards (orphans).

Usage: ``python benchmarks/device_evidence_check.py --ipc --problems P.py ... --device cuda
[--timeout 200] [--out DIR]``. Results also go to ``DIR/device_evidence.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _producer() -> None:
    import torch

    from harness.measure.backends._share import export_output

    t = torch.arange(1 << 20, device="cuda", dtype=torch.float32) * 2 + 1
    desc, keep = export_output(torch, [t[16:].view(-1, 16)], "")
    print(json.dumps(desc), flush=True)
    sys.stdin.readline()
    del keep


def ipc_probe() -> dict[str, object]:
    import torch

    from harness.measure.backends._share import open_output

    proc = subprocess.Popen([sys.executable, __file__, "--producer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, cwd=str(ROOT))
    try:
        assert proc.stdout is not None and proc.stdin is not None
        desc = json.loads(proc.stdout.readline())
        t0 = time.perf_counter()
        got = open_output(torch, desc)
        want = (torch.arange(1 << 20, device="cuda", dtype=torch.float32) * 2 + 1)[16:].view(-1, 16)
        ok = bool(torch.equal(got, want))
        ms = (time.perf_counter() - t0) * 1e3
        del got
        torch.cuda.ipc_collect()
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(timeout=30)
        return {"ipc_ok": ok, "open_ms": ms, "shape": desc["cuda"][0]["shape"], "producer_rc": proc.returncode}
    finally:
        if proc.poll() is None:
            proc.kill()


def gpu_apps() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "nvidia-smi unavailable"


def eval_aa(problem: Path, device: str, timeout: float) -> dict[str, object]:
    src = problem.read_text(encoding="utf-8") + "\n\nModelNew = Model\n"
    with tempfile.TemporaryDirectory(prefix="atb-aa-") as tmp:
        cand = Path(tmp) / f"aa_{problem.stem}.py"
        cand.write_text(src, encoding="utf-8")
        t0 = time.perf_counter()
        try:
            p = subprocess.run([sys.executable, "-m", "atb_agent.cli", "eval", str(problem), str(cand),
                                "--device", device, "--json", "--db", str(Path(tmp) / "atb.sqlite")], capture_output=True, text=True, timeout=timeout,
                               cwd=str(ROOT))
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, out, err = 124, (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or ""), ""
        wall = time.perf_counter() - t0
    row: dict[str, object] = {"problem": problem.name, "rc": rc, "wall_s": round(wall, 2)}
    try:
        res = json.loads(out)
        row.update({k: res.get(k) for k in ("verdict", "speedup", "speedup_ci", "timing_method", "phase_s",
                                              "candidate_median_ns")})
        row["reason"] = str(res.get("reason", ""))[:600]
        row["failed_gates"] = {g["name"]: str(g.get("detail", ""))[:700] for g in res.get("gates", [])
                               if not g.get("passed")}
    except (ValueError, AttributeError):
        row["stdout_tail"] = out[-800:]
        row["stderr_tail"] = err[-1500:]
    row["gpu_apps_after"] = gpu_apps()
    return row


def main() -> int:
    if "--producer" in sys.argv:
        _producer()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ipc", action="store_true")
    ap.add_argument("--problems", nargs="*", type=Path, default=[])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--timeout", type=float, default=200.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    if args.ipc:
        rows.append({"ipc_probe": ipc_probe()})
        print(json.dumps(rows[-1]), flush=True)
    for prob in args.problems:
        rows.append(eval_aa(prob, args.device, args.timeout))
        print(json.dumps(rows[-1]), flush=True)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        with (args.out / "device_evidence.jsonl").open("a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
