"""Does the measuring child's confinement change what ``torch.compile(mode="max-autotune")`` builds?

Issue 25: ``compile_max_autotune_tiny_mlp`` reads 1.25x in the harness and 1.75x under ``do_bench``,
while the harness's own timing loop reads 1.71x in one unconfined process
(``probe_max_autotune_pair.py``). This probe runs one small script -- load the corpus's own pair
(``tests/redteam/tasks/hc_tiny_mlp.py`` and ``tests/redteam/honest/corpus/compile_max_autotune_tiny_mlp.py``,
staged beside it) and time reference and candidate with ``triton.testing.do_bench`` and by host time per
call -- six ways (:data:`MODES`): unconfined; inside the candidate child's bwrap confinement
(``harness.measure.runner._confine.plan``, the argv a CUDA child gets); confined without the seccomp filter,
or with ``/sys`` bound (``ATB_CONFINE_CUDA``); unconfined beside an idle second CUDA process (as the other
arm's child waits); and unconfined with only the environment a child gets (``CHILD_ENV_ALLOW``). Each run
also records its speculation-control lines: a seccomp filter can switch the store-bypass mitigation on,
which slows interpreted code. It lists the names (only) of the
variables a child does not get, and keeps Inductor's autotuning report from each run's stderr, so a
difference in chosen kernels or in failed benchmarks shows.

Run on a GPU host from the repository root: ``python3 benchmarks/probe_max_autotune_confined.py OUT.json``.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _child_like import run_child_like  # noqa: E402

PAIR = r'''
import importlib.util, json, statistics, time, torch
from pathlib import Path
import triton.testing as tt
HERE = Path(__file__).resolve().parent
def load(name):
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod); return mod
task, candidate = load("task"), load("candidate")   # the honest corpus's own pair, staged beside this script
torch.manual_seed(0); ref = task.Model().cuda()
torch.manual_seed(0); cand = candidate.ModelNew().cuda()
x = task.get_inputs()[0].cuda()
t0 = time.perf_counter()
with torch.no_grad():
    for _ in range(5):
        ref(x); cand(x)
torch.cuda.synchronize()
compile_s = time.perf_counter() - t0
out = {"compile_s": round(compile_s, 2)}
with torch.no_grad():
    for arm, call in (("ref", ref), ("cand", cand)):
        out[arm + "_us"] = round(tt.do_bench(lambda: call(x), return_mode="median") * 1e3, 2)
    for arm, call in (("ref", ref), ("cand", cand)):   # host time inside one call, the device idle before it
        ts = []
        for _ in range(200):
            torch.cuda.synchronize()
            t1 = time.perf_counter_ns(); call(x); ts.append(time.perf_counter_ns() - t1)
        out[arm + "_host_us"] = round(statistics.median(ts) / 1e3, 2)
out["ratio"] = round(out["ref_us"] / out["cand_us"], 3)
try:   # a seccomp filter can force the store-bypass mitigation on, which slows interpreted code
    out["proc_status"] = [ln for ln in open("/proc/self/status").read().splitlines()
                          if ln.startswith(("Speculation", "Seccomp", "NoNewPrivs", "Cpus_allowed_list"))]
except OSError as exc:
    out["proc_status"] = [repr(exc)]
print("JSON", json.dumps(out), flush=True)
'''


ROOT = Path(__file__).resolve().parents[1]
#: the pair as the honest corpus has it (task and candidate), staged into the child's work folder
PAIR_FILES = {"task.py": (ROOT / "tests/redteam/tasks/hc_tiny_mlp.py").read_text(),
              "candidate.py": (ROOT / "tests/redteam/honest/corpus/compile_max_autotune_tiny_mlp.py").read_text()}


#: most telling first (each mode is written out as it ends, so a cut run keeps the first ones). "confined+X":
#: the CUDA confinement less relaxation X (``ATB_CONFINE_CUDA``); "idle-peer": unconfined, with a second
#: process holding a CUDA context and waiting on a pipe meanwhile, as the other arm's child does.
MODES = ("unconfined", "confined", "confined+noseccomp", "confined+sys", "unconfined+idle-peer",
         "unconfined+child-env")
LAST_MODE = MODES[-1]   # scripts/gpu_rows.sh reads the probe as done when this mode is in its file
IDLE_PEER = "import sys, torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize(); print('up', flush=True); sys.stdin.read()"


def run(mode: str, timeout_s: float) -> dict:
    import subprocess

    confined = mode.startswith("confined")
    relax = mode.split("+", 1)[1] if confined and "+" in mode else ""
    peer = None
    if mode == "unconfined+idle-peer":
        peer = subprocess.Popen([sys.executable, "-c", IDLE_PEER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        peer.stdout.readline()   # its context exists before the pair starts
    try:
        facts = run_child_like(PAIR, [], backend="cuda", files=PAIR_FILES,
                               child_env=mode not in ("unconfined", "unconfined+idle-peer"),
                               confined=confined, relax=relax,
                               extra_env={"TORCHINDUCTOR_CACHE_DIR": "{scratch}/inductor",
                                          "TRITON_CACHE_DIR": "{scratch}/triton"},
                               timeout_s=timeout_s)
    finally:
        if peer is not None:
            peer.stdin.close()
            peer.wait(30)
    se = facts.pop("stderr")
    facts.pop("stdout")
    row: dict = {"mode": mode, **facts}
    lines = se.splitlines()
    row["autotune_lines"] = [ln for ln in lines if re.search(r"AUTOTUNE|triton_mm|mm_|extern_|SingleProcess", ln)][:80]
    row["error_lines"] = [ln for ln in lines if re.search(r"rror|ailed|xception|arning", ln)][:40]
    row["stderr_tail"] = lines[-15:]
    return row


def main() -> None:
    out = Path(sys.argv[1])
    rows = []
    from harness.measure.runner._worker import CHILD_ENV_ALLOW

    dropped = sorted(k for k in os.environ if k not in CHILD_ENV_ALLOW and not k.startswith("ATB_"))
    print("environment names a child does not get:", dropped, flush=True)
    vulns = {}
    for f in sorted(Path("/sys/devices/system/cpu/vulnerabilities").glob("*")):
        try:
            vulns[f.name] = f.read_text().strip()
        except OSError:
            pass
    rows.append({"mode": "environment", "names_children_do_not_get": dropped, "cpu_vulnerabilities": vulns,
                 "kernel": os.uname().release})
    for mode in MODES:
        row = run(mode, 240)
        rows.append(row)
        print(mode, row.get("descriptor"), "rc", row["rc"], "ratio", row.get("ratio"), "ref", row.get("ref_us"),
              "cand", row.get("cand_us"), "host us", row.get("ref_host_us"), row.get("cand_host_us"), "compile", row.get("compile_s"), row.get("proc_status"), "autotune lines",
              len(row["autotune_lines"]), "error lines", len(row["error_lines"]), flush=True)
        out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
