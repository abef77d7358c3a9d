"""Diagnostic: does pinning each process to its own core or interleaving finer steady a launch-bound A/A?
(protocol 1.6.0, JUSTIFICATION 10; the answer measured on the H200 was no). Usage:
``python3 benchmarks/launch_bound_pinning_probe.py PROBLEM.py REPS_PER_BLOCK BLOCKS PIN(0|1)``.
args: problem reps_per_block blocks pin(0/1) ; prints per-process block medians, cores seen and ratio."""
import json, os, subprocess, sys, importlib.util
if sys.argv[1] == "child":
    import torch
    path, core = sys.argv[2], int(sys.argv[3])
    if core >= 0: os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    spec = importlib.util.spec_from_file_location("m", path); m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
    torch.manual_seed(0); init = m.get_init_inputs(); torch.manual_seed(0); model = m.Model(*init).cuda()
    torch.manual_seed(1); inp = [t.cuda() if isinstance(t, torch.Tensor) else t for t in m.get_inputs()]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    with torch.no_grad():
        for _ in range(5): model(*inp)
    torch.cuda.synchronize(); print("ready", flush=True)
    for line in sys.stdin:
        n = int(line); ts = []
        with torch.no_grad():
            for _ in range(n):
                flush.zero_()
                s = torch.cuda.Event(enable_timing=True); e = torch.cuda.Event(enable_timing=True)
                s.record(); model(*inp); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
        cpu = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[36])
        print(json.dumps([sorted(ts)[len(ts)//2], cpu]), flush=True)
    sys.exit(0)
path, reps, blocks, pin = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
cores = [2, 6] if pin else [-1, -1]
ps = [subprocess.Popen([sys.executable, __file__, "child", path, str(cores[i])], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for i in range(2)]
for p in ps: assert p.stdout.readline().strip() == "ready"
meds = {0: [], 1: []}; cpus = {0: set(), 1: set()}
for b in range(blocks):
    for i in ((0, 1) if b % 2 == 0 else (1, 0)):
        ps[i].stdin.write(f"{reps}\n"); ps[i].stdin.flush(); t, c = json.loads(ps[i].stdout.readline()); meds[i].append(t); cpus[i].add(c)
for p in ps: p.stdin.close(); p.wait()
md = lambda v: sorted(v)[len(v)//2]
import statistics as st
print(json.dumps({"problem": os.path.basename(path), "reps": reps, "blocks": blocks, "pin": pin, "ratio": md(meds[0]) / md(meds[1]),
                  "p0_med": md(meds[0]), "p1_med": md(meds[1]), "cv0": st.pstdev(meds[0]) / st.mean(meds[0]), "cv1": st.pstdev(meds[1]) / st.mean(meds[1]),
                  "cpus0": sorted(cpus[0]), "cpus1": sorted(cpus[1])}))
