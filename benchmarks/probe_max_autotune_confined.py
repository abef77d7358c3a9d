"""Does the measuring child's confinement change what ``torch.compile(mode="max-autotune")`` builds?

Issue 25: ``compile_max_autotune_tiny_mlp`` reads 1.25x in the harness and 1.75x under ``do_bench``,
while the harness's own timing loop reads 1.71x in one unconfined process
(``probe_max_autotune_pair.py``). This probe runs one small script -- load the corpus's own pair
(``tests/redteam/tasks/hc_tiny_mlp.py`` and ``tests/redteam/honest/corpus/compile_max_autotune_tiny_mlp.py``,
staged beside it) and time reference and candidate with ``triton.testing.do_bench`` and by host time per
call -- four ways: unconfined; unconfined with only the environment a child gets (``CHILD_ENV_ALLOW``);
inside the candidate child's bwrap confinement (``harness.measure.runner._confine.plan``, the argv a CUDA
child gets); and confined with ``/sys`` bound (``ATB_CONFINE_CUDA=sys``). It lists the names (only) of the
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


def run(mode: str, timeout_s: float) -> dict:
    facts = run_child_like(PAIR, [], backend="cuda", files=PAIR_FILES, child_env=mode != "unconfined",
                           confined=mode.startswith("confined"), relax="sys" if mode == "confined+sys" else "",
                           extra_env={"TORCHINDUCTOR_CACHE_DIR": "{scratch}/inductor",
                                      "TRITON_CACHE_DIR": "{scratch}/triton"},
                           timeout_s=timeout_s)
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
    for mode in ("unconfined", "unconfined+child-env", "confined", "confined+sys"):
        row = run(mode, 240)
        rows.append(row)
        print(mode, row.get("descriptor"), "rc", row["rc"], "ratio", row.get("ratio"), "ref", row.get("ref_us"),
              "cand", row.get("cand_us"), "host us", row.get("ref_host_us"), row.get("cand_host_us"), "compile", row.get("compile_s"), row.get("proc_status"), "autotune lines",
              len(row["autotune_lines"]), "error lines", len(row["error_lines"]), flush=True)
        out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
