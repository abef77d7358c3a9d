"""Diagnose compile_max_autotune_tiny_mlp: harness event loop vs do_bench, before/after the capture probe."""
import json, statistics, sys, time, os
import torch, torch.nn as nn
sys.path.insert(0, os.getcwd())
from harness.measure.timing._cuda import CudaTimer
import triton.testing as tt
import logging
torch._logging.set_logs(perf_hints=True, cudagraphs=True)

W, D = 256, 8
def mk(compiled):
    torch.manual_seed(0)
    layers = []
    for _ in range(D):
        layers += [nn.Linear(W, W), nn.GELU()]
    net = nn.Sequential(*layers).cuda()
    if compiled:
        fn = torch.compile(net, mode="max-autotune")
        def f(x):
            torch.compiler.cudagraph_mark_step_begin()
            return fn(x).clone()
        return f
    return net

def fresh():
    return torch.randn(32, W, device="cuda")

res = {}
def log(k, v):
    res[k] = v; print(k, v, flush=True)

timer = CudaTimer(torch, 256 << 20)
def harness_block(call, reps=200):
    cur = {}
    def before(rep):
        cur["x"] = fresh()
    def cr(rep):
        with torch.no_grad():
            return call(cur["x"])
    b = timer.time_block(cr, reps, set(), before, None)
    return statistics.median(b.times_ns) / 1e3

def host_per_call(call, n=200):
    x = fresh(); torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        with torch.no_grad():
            call(x)
        ts.append(time.perf_counter_ns() - t0)
        torch.cuda.synchronize()
    return statistics.median(ts) / 1e3

def dobench(call, grad=False):
    x = fresh()
    if grad:
        return tt.do_bench(lambda: call(x), return_mode="median") * 1e3
    with torch.no_grad():
        return tt.do_bench(lambda: call(x), return_mode="median") * 1e3

ref = mk(False); cand = mk(True)
x = fresh()
with torch.no_grad():
    for _ in range(5): ref(x); cand(x)
torch.cuda.synchronize()
for arm, call in (("ref", ref), ("cand", cand)):
    log(f"{arm}.dobench_nograd", dobench(call))
    log(f"{arm}.harness_block", harness_block(call))
    log(f"{arm}.host_us", host_per_call(call))
# the probe as the harness runs it, then again
for arm, call in (("ref", ref), ("cand", cand)):
    static = [fresh()]
    def call_on(b):
        with torch.no_grad():
            return call(static[b])
    g = timer.capture_graphs(call_on, 1, 8)
    log(f"{arm}.probe", {"captured": g is not None, "error": timer.probe_error[:300], "clean": timer.probe_clean})
    log(f"{arm}.harness_block_after_probe", harness_block(call))
    log(f"{arm}.host_us_after_probe", host_per_call(call))
    log(f"{arm}.dobench_after_probe", dobench(call))
# a fresh compiled candidate in this same process with grad enabled (as an independent timer might call it)
cand2 = mk(True)
log("cand2.dobench_grad", dobench(cand2, grad=True))
log("cand2.dobench_nograd", dobench(cand2))
log("cand2.harness_block", harness_block(cand2))
print("JSON", json.dumps(res))
