"""Which harness call leaves the max-autotune candidate slower: time it after each input class."""
import json, statistics, sys, os, importlib.util
import torch
sys.path.insert(0, os.getcwd())
from harness.measure.timing._cuda import CudaTimer
from harness.measure.runner._inputs import make_inputs, CLASS_DISTRIBUTIONS
torch._logging.set_logs(recompiles=True, perf_hints=True)

def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path); m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m); return m
task = load("tests/redteam/tasks/hc_tiny_mlp.py", "task_mod")
cmod = load("tests/redteam/honest/corpus/compile_max_autotune_tiny_mlp.py", "cand_mod")
torch.set_default_device("cuda")
torch.manual_seed(1); ref = task.Model().cuda()
torch.manual_seed(1); cand = cmod.ModelNew().cuda()
torch.set_default_device(None)
timer = CudaTimer(torch, 256 << 20)
seedc = [100]
def block(model, reps=300):
    cur = {}
    def before(rep):
        seedc[0] += 1
        cur["x"] = make_inputs(torch, task.get_inputs, seedc[0], "task", 1e4, "cuda")
    def call(rep):
        with torch.no_grad():
            return model(*cur["x"])
    b = timer.time_block(call, reps, set(), before, None)
    return round(statistics.median(b.times_ns) / 1e3, 2)
res = []
def log(k, v):
    res.append((k, v)); print("DIAG", k, v, flush=True)
with torch.no_grad():
    x = make_inputs(torch, task.get_inputs, 1, "task", 1e4, "cuda")
    for _ in range(5): ref(*x); cand(*x)
torch.cuda.synchronize()
log("ref", block(ref)); log("cand", block(cand))
for dist in CLASS_DISTRIBUTIONS:
    xs = make_inputs(torch, task.get_inputs, 7, dist, 1e4, "cuda")
    with torch.no_grad():
        cand(*xs); cand(*xs)
    torch.cuda.synchronize()
    log(f"cand after {dist} (shape {tuple(xs[0].shape)} stride {xs[0].stride()})", block(cand))
    with torch.no_grad():
        ref(*xs)
    log(f"ref after {dist}", block(ref))
print("JSON", json.dumps(res))
