"""Why launch-bound calls are timed by CUDA-graph replay (protocol 1.6.0, JUSTIFICATION 10).

Two plain processes (no harness) build the same KernelBench model and time it in alternating blocks
(A B B A ...), 16 blocks of 15 repetitions each behind an L2 flush, under five variants: ``base``
(events around the call), ``warm`` (a 50 ms device spin before each block), ``ahead`` (a device
sleep queued before the start event), ``warmahead`` (both) and ``graph`` (events around the replay
of a captured CUDA graph). Prints one JSON line: the ratio of the two processes' medians and each
process's coefficient of variation over blocks. Usage: ``python3 benchmarks/launch_bound_probe.py PROBLEM.py VARIANT``."""
import json, os, subprocess, sys, importlib.util
if sys.argv[1] == "child":
    import torch
    path, variant = sys.argv[2], sys.argv[3]
    spec = importlib.util.spec_from_file_location("m", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    torch.manual_seed(0); init = m.get_init_inputs(); torch.manual_seed(0); model = m.Model(*init).cuda()
    torch.manual_seed(1); inp = [t.cuda() if isinstance(t, torch.Tensor) else t for t in m.get_inputs()]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    with torch.no_grad():
        for _ in range(5): model(*inp)
    g = None
    if variant == "graph":
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(3): model(*inp)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g), torch.no_grad(): model(*inp)
    torch.cuda.synchronize(); print("ready", flush=True)
    for line in sys.stdin:
        n = int(line); ts = []
        if variant in ("warm", "warmahead"):
            torch.cuda._sleep(100_000_000); torch.cuda.synchronize()   # ~50 ms busy: clocks up
        with torch.no_grad():
            for _ in range(n):
                flush.zero_()
                if variant in ("ahead", "warmahead"): torch.cuda._sleep(4_000_000)
                s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
                s.record()
                if g is not None: g.replay()
                else: model(*inp)
                e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
        print(json.dumps(sorted(ts)[len(ts)//2]), flush=True)
    sys.exit(0)
path, variant = sys.argv[1], sys.argv[2]
ps = [subprocess.Popen([sys.executable, __file__, "child", path, variant], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(2)]
for p in ps: assert p.stdout.readline().strip() == "ready"
meds = {0: [], 1: []}
for b in range(16):
    for i in ((0, 1) if b % 2 == 0 else (1, 0)):
        ps[i].stdin.write("15\n"); ps[i].stdin.flush(); meds[i].append(json.loads(ps[i].stdout.readline()))
for p in ps: p.stdin.close(); p.wait()
md = lambda v: sorted(v)[len(v)//2]
import statistics as st
print(json.dumps({"problem": os.path.basename(path), "variant": variant, "ratio": round(md(meds[0]) / md(meds[1]), 4),
                  "p0_med": round(md(meds[0]), 3), "p1_med": round(md(meds[1]), 3), "cv0": round(st.pstdev(meds[0]) / st.mean(meds[0]), 4), "cv1": round(st.pstdev(meds[1]) / st.mean(meds[1]), 4)}))
