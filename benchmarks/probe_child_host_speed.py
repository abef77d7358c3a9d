"""Is host code slower inside a measuring child, and if so, which part of the child makes it so?

Issue 25: on an H100 under protocol 1.8.0 both arms of the launch-bound ``compile_max_autotune_tiny_mlp``
pair read 1.7-2.0x slower in the harness's children than under ``do_bench`` in a plain process of the same
call (reference 334 against 200 us per call), which can only be host time for the eager reference. This
probe times host-bound work -- a small eager MLP (16 torch calls on a 32x256 input, CPU) and a pure-Python
loop -- in four kinds of process, interleaved, three rounds each:

* ``plain``: a fresh interpreter;
* ``audit``: the same with an audit hook like the child's (``sys.addaudithook``, a frame lookup per event);
* ``confined``: inside the children's bwrap confinement (``harness.measure.runner._confine.plan``: user, PID,
  network and IPC namespaces, read-only binds, the seccomp filter);
* ``confined+audit``: both.

It runs on any machine with bwrap (CPU here; on a GPU host the same modes isolate what the CUDA probe
``probe_max_autotune_confined.py`` cannot). ``python benchmarks/probe_child_host_speed.py OUT.json``.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _child_like import run_child_like  # noqa: E402

WORK = r'''
import json, sys, time
AUDIT = sys.argv[1] == "1"
if AUDIT:
    _guard = [False]
    _files = {"/nonexistent/candidate.py"}
    _getframe = sys._getframe
    def _audit(event, args):
        if _guard[0]:
            return
        _guard[0] = True
        try:
            f = _getframe(1)
            if f is not None and f.f_code.co_filename in _files:
                pass
        finally:
            _guard[0] = False
    sys.addaudithook(_audit)
import torch, torch.nn as nn
torch.set_num_threads(1)
torch.manual_seed(0)
layers = []
for _ in range(8):
    layers += [nn.Linear(256, 256), nn.GELU()]
net = nn.Sequential(*layers)
x = torch.randn(32, 256)
def mlp_us(n=400):
    ts = []
    with torch.no_grad():
        for _ in range(50):
            net(x)
        for _ in range(n):
            t0 = time.perf_counter_ns(); net(x); ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts) / 1e3
def small_ops_us(n=2000):
    a = torch.ones(8)
    ts = []
    for _ in range(200):
        torch.add(a, a)
    for _ in range(n):
        t0 = time.perf_counter_ns()
        for _ in range(16):
            torch.add(a, a)
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts) / 1e3
def python_us(n=200):
    def f(i):
        return i * 2 + 1
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        s = 0
        for i in range(2000):
            s += f(i)
        ts.append(time.perf_counter_ns() - t0)
    return statistics.median(ts) / 1e3
import statistics
print("JSON", json.dumps({"mlp_us": mlp_us(), "small_ops16_us": small_ops_us(), "python_loop_us": python_us()}))
'''


def run(mode: str) -> dict:
    facts = run_child_like(WORK, ["1" if mode.endswith("audit") else "0"], backend="cpu", child_env=False,
                           confined=mode.startswith("confined"))
    err = facts.pop("stderr")
    facts.pop("stdout")
    row: dict = {"mode": mode, **facts}
    if row["rc"]:
        row["stderr_tail"] = err.splitlines()[-5:]
    return row


def main() -> None:
    out = Path(sys.argv[1])
    modes = ("plain", "audit", "confined", "confined+audit")
    rows = []
    t0 = time.time()
    for rnd in range(3):
        for mode in modes:
            row = run(mode)
            row["round"] = rnd
            rows.append(row)
            print(rnd, mode, row.get("descriptor"), {k: round(v, 2) for k, v in row.items() if k.endswith("_us")},
                  flush=True)
    summary = {}
    for mode in modes:
        got = [r for r in rows if r["mode"] == mode and "mlp_us" in r]
        summary[mode] = {k: round(statistics.median(r[k] for r in got), 2)
                         for k in ("mlp_us", "small_ops16_us", "python_loop_us")} if got else None
    doc = {"host": os.uname().nodename, "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
           "wall_s": round(time.time() - t0, 1), "medians_over_rounds": summary, "rows": rows}
    out.write_text(json.dumps(doc, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
