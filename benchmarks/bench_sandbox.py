"""Sandbox speed: container (and bwrap) start time, and the median round trip of a tool call.

Run: ``.venv/bin/python benchmarks/bench_sandbox.py [--starts N] [--calls N]``. Writes
``benchmarks/results/sandbox.json`` and ``sandbox.md``. Needs a Docker daemon and the sandbox image
(``atb sandbox build``); a backend that cannot run here is recorded as unavailable, not skipped silently.

"Start" is from asking for a sandbox until its first command has returned (what a run waits for).
A "round trip" is one ``ToolBox.call`` as the agent makes it: argument parsing, validation, the work,
the outcome. These figures are about the harness's overhead; none of them ever enters a verdict.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from protocol import load_protocol  # noqa: E402
from sandbox import Sandbox, SandboxLimits, SandboxUnavailableError  # noqa: E402
from tools import ToolBox  # noqa: E402

OUT = ROOT / "benchmarks" / "results"


def _open(backend: str, limits: SandboxLimits) -> Sandbox:
    if backend == "docker":
        from sandbox._docker import DockerSandbox

        return DockerSandbox(limits)
    from sandbox._bwrap import BwrapSandbox

    return BwrapSandbox(limits)


def _summary(xs: list[float]) -> dict[str, Any]:
    ys = sorted(xs)
    q = statistics.quantiles(ys, n=10) if len(ys) >= 2 else [ys[0]] * 9
    return {"n": len(ys), "median_s": statistics.median(ys), "p10_s": q[0], "p90_s": q[-1],
            "min_s": ys[0], "max_s": ys[-1]}


def bench_backend(backend: str, limits: SandboxLimits, starts: int, calls: int) -> dict[str, Any]:
    start_times: list[float] = []
    box: Sandbox | None = None
    try:
        for i in range(starts):
            t0 = time.perf_counter()
            sb = _open(backend, limits)
            r = sb.exec("true")
            start_times.append(time.perf_counter() - t0)
            assert r.ok, r
            if i < starts - 1:
                sb.close()
            else:
                box = sb
    except SandboxUnavailableError as exc:
        return {"available": False, "reason": str(exc)}
    assert box is not None
    try:
        tb = ToolBox(box, "benchmark task", lambda files: {"received": len(files)})
        source = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n" * 4
        tb.call("write_file", {"path": "candidate.py", "content": source})
        plan: dict[str, tuple[str, dict[str, Any]]] = {
            "read_file": ("read_file", {"path": "candidate.py"}),
            "write_file": ("write_file", {"path": "candidate.py", "content": source}),
            "list_files": ("list_files", {}),
            "edit_file": ("edit_file", {"path": "candidate.py", "replacements": [
                {"old": "return x", "new": "return x", "replace_all": True}]}),
            "run_in_sandbox(true)": ("run_in_sandbox", {"command": "true"}),
            "run_in_sandbox(python3 -c pass)": ("run_in_sandbox", {"command": "python3 -c pass"}),
            "submit (copy-out)": ("submit", {}),
        }
        trips: dict[str, Any] = {}
        for label, (name, args) in plan.items():
            n = calls if not name.startswith("run_in_sandbox") else max(5, calls // 2)
            xs = []
            for _ in range(n):
                t0 = time.perf_counter()
                out = tb.call(name, json.dumps(args))
                xs.append(time.perf_counter() - t0)
                assert not out.is_error, out.content
            trips[label] = _summary(xs)
        info = box.info()
    finally:
        box.close()
    return {"available": True, "start": _summary(start_times), "tool_call_round_trip": trips,
            "enforcement": info.enforcement, "torch_mounted": info.torch_mounted}


def _markdown(result: dict[str, Any]) -> str:
    lines = ["# Sandbox benchmark", "", f"Measured {result['measured_at']} on {result['host']['machine']} "
             f"({result['host']['cpus']} CPUs, kernel {result['host']['kernel']}, Docker {result['docker_version']}, "
             "vfs storage driver). Produced by `benchmarks/bench_sandbox.py`.",
             "", f"1-minute load average {result['host']['load_average_at_start'][0]:.1f} at the start and "
             f"{result['host']['load_average_at_end'][0]:.1f} at the end (the machine was shared): figures on an "
             "idle host are lower.", ""]
    for backend, r in result["backends"].items():
        lines.append(f"## {backend}")
        if not r["available"]:
            lines += [f"unavailable: {r['reason']}", ""]
            continue
        s = r["start"]
        lines += [f"Start (sandbox requested until its first command returned): median {s['median_s']:.2f} s "
                  f"(n={s['n']}, min {s['min_s']:.2f}, max {s['max_s']:.2f}).", "",
                  "| tool call | n | median ms | p10 ms | p90 ms |", "|---|---|---|---|---|"]
        for label, t in r["tool_call_round_trip"].items():
            lines.append(f"| {label} | {t['n']} | {t['median_s'] * 1e3:.2f} | {t['p10_s'] * 1e3:.2f} | "
                         f"{t['p90_s'] * 1e3:.2f} |")
        lines.append("")
    lines += ["File tools work on the bound workspace from the host (no process inside is started), so they",
              "cost microseconds to a millisecond; `run_in_sandbox` pays one `docker exec` (or one `bwrap`",
              "start). Container creation on vfs copies the root filesystem, hence seconds: a run starts one",
              "container and execs into it.", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--calls", type=int, default=50)
    args = ap.parse_args()
    limits = SandboxLimits.from_params(load_protocol().sandbox)
    docker_version = "unavailable"
    try:
        from sandbox._docker import docker_client

        docker_version = docker_client().version().get("Version", "?")
    except SandboxUnavailableError:
        pass
    import os

    result: dict[str, Any] = {
        "benchmark": "sandbox",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"machine": platform.machine(), "kernel": platform.release(), "cpus": os.cpu_count(),
                 "python": platform.python_version(), "load_average_at_start": list(os.getloadavg())},
        "docker_version": docker_version,
        "image": limits.image,
        "backends": {b: bench_backend(b, limits, args.starts, args.calls) for b in ("docker", "bwrap")},
    }
    result["host"]["load_average_at_end"] = list(os.getloadavg())
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sandbox.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    (OUT / "sandbox.md").write_text(_markdown(result))
    print(_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
