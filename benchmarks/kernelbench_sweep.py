"""A/A over a whole KernelBench level, one JSON line per problem, resumable across device calls.

Why: issue 13 asks whether ``atb eval`` can run the benchmark its users run, at its own sizes, on the
GPU it exists for. For each problem the candidate is the problem's own reference exposed as
``ModelNew`` (an A/A check any harness should pass: accepted, CI containing 1.0), evaluated by
``atb eval PROBLEM CANDIDATE --device D --json`` in a subprocess with a per-problem timeout. As the
anchor, KernelBench's own ``eval_kernel_against_ref`` (imported from the checkout, never copied) is
timed on a sample of the same problems in the same device call, so the README can show
``atb eval wall / KernelBench eval wall`` side by side.

Usage (device calls of ~9 minutes each; re-run the same command until it prints ``done``)::

    python benchmarks/kernelbench_sweep.py --kb .kb/KernelBench --level 1 \\
        --out benchmarks/results/kernelbench/level1_h200.jsonl --device cuda \\
        --time-budget-s 530 --kb-anchor-sample 12

Every line carries ``kind``: ``atb_eval`` (one per problem) or ``kb_anchor`` (one per sampled
problem). On start, problems (and anchors) already in ``--out`` are skipped, so a call cut short by
the budget loses nothing; the script stops starting work when the budget would be overrun, and a
problem stopped by the budget (not by its own timeout) is not written, so the next call retries it.
``--sizes-out FILE.json`` only counts every selected problem's bytes and FLOPs (meta device) and exits.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(Path(__file__).resolve().parent) not in sys.path:   # benchmarks/, for _measuring_digest
    sys.path.append(str(Path(__file__).resolve().parent))
from _code_rev import checked_code_rev  # noqa: E402
from _measuring_digest import process_measuring_digest

ANCHOR_MARK = "ATB_KB_ANCHOR_RESULT "
# modules that KernelBench's package imports at import time only for its LLM-inference helpers
# (src/kernelbench/utils.py, eval.py); its evaluation path never calls them. Stubbed ONLY when missing.
IMPORT_ONLY_DEPS = ("dotenv", "openai", "litellm", "tqdm", "requests")
MIN_START_S = 25.0          # do not start an atb eval with less budget left than this
MARGIN_S = 8.0              # kept free at the end of the budget for writing and exiting


# ----------------------------------------------------------------------------------- selection
def problem_dir(kb: Path, level: int) -> Path:
    """The level's folder in a KernelBench checkout (``KB/KernelBench/levelN``; ``KB/levelN`` also works)."""
    for d in (kb / "KernelBench" / f"level{level}", kb / f"level{level}"):
        if d.is_dir():
            return d
    raise SystemExit(f"no level{level} folder under {kb} (expected {kb}/KernelBench/level{level}); "
                     "give --kb the root of a KernelBench checkout")


def problem_id(path: Path) -> int:
    m = re.match(r"(\d+)_", path.name)
    return int(m.group(1)) if m else 10**9


def select_problems(folder: Path, spec: str | None) -> list[Path]:
    """Problems by id ranges (``1-100``, ``1,5,9-12``) or by names (stems or ``NAME.py``), in id order."""
    files = sorted((p for p in folder.glob("*.py") if not p.name.startswith("_")),
                   key=lambda p: (problem_id(p), p.name))
    if not spec:
        return files
    chosen: list[Path] = []
    for part in (x.strip() for x in spec.split(",") if x.strip()):
        if re.fullmatch(r"\d+(-\d+)?", part):
            lo, _, hi = part.partition("-")
            ids = set(range(int(lo), int(hi or lo) + 1))
            chosen += [p for p in files if problem_id(p) in ids]
        else:
            hit = [p for p in files if p.stem == part.removesuffix(".py") or p.name == part]
            if not hit:
                raise SystemExit(f"no problem named {part!r} in {folder}")
            chosen += hit
    seen: set[Path] = set()
    return [p for p in sorted(chosen, key=lambda p: (problem_id(p), p.name)) if not (p in seen or seen.add(p))]


def anchor_sample(problems: list[Path], k: int) -> list[Path]:
    """``k`` problems spread evenly over the selection (deterministic, so every resumed call agrees)."""
    if k <= 0 or not problems:
        return []
    if k >= len(problems):
        return list(problems)
    step = len(problems) / k
    return [problems[int(i * step)] for i in range(k)]


# ----------------------------------------------------------------------------------- records
def read_done(out: Path, max_attempts: int = 2) -> tuple[set[str], set[str]]:
    """Problems already settled and already anchored in ``out`` (a torn last line is ignored).

    A problem is settled by a verdict or by its own timeout. A run that broke without a verdict
    (``verdict: "error"``: ``atb eval`` exited non-zero) is an infrastructure failure, not a result,
    so it is retried until it has ``max_attempts`` rows; readers take the last row of each problem.
    An anchor row is never retried (its errors are facts about KernelBench's evaluation here).
    """
    evals: set[str] = set()
    anchors: set[str] = set()
    errors: dict[str, int] = {}
    if not out.exists():
        return evals, anchors
    for line in out.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        key = f"{row.get('level')}:{row.get('problem')}"
        if row.get("kind") == "atb_eval":
            if row.get("verdict") == "error":
                errors[key] = errors.get(key, 0) + 1
                if errors[key] >= max_attempts:
                    evals.add(key)
            else:
                evals.add(key)
        elif row.get("kind") == "kb_anchor":
            anchors.add(key)
    return evals, anchors


def append_line(out: Path, row: dict[str, Any]) -> None:
    """One whole line per write, flushed and synced: a kill between lines never leaves a torn record."""
    data = (json.dumps(row, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(out, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":   # a line torn by an earlier kill: close it off
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def now_utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ----------------------------------------------------------------------------------- processes
def _descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (read from /proc), so a timeout kills the measuring children too."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            found.append(c)
            stack.append(c)
    return found


def kill_tree(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process, its process group and every descendant found (only what this script started)."""
    victims = _descendants(proc.pid)
    for sig_target in [proc.pid, *victims]:
        try:
            os.kill(sig_target, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def run_bounded(cmd: list[str], timeout_s: float, env: dict[str, str], cwd: Path) -> tuple[int | None, str, str, float]:
    """Run ``cmd`` in its own session; (exit code or None on timeout, stdout, stderr, wall seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=str(cwd),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=max(1.0, timeout_s))
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = proc.communicate()
        code = None
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.perf_counter() - t0


def child_env() -> dict[str, str]:
    """The project importable in every child (a checkout run with PYTHONPATH, or an installed venv)."""
    env = dict(os.environ)
    parts = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# ----------------------------------------------------------------------------------- sizes
def count_sizes(paths: list[Path], timeout_s: float = 600.0) -> dict[str, dict[str, Any]]:
    """Bytes and FLOPs of each problem, counted on the meta device by ``harness.tasks._cost`` (one process)."""
    if not paths:
        return {}
    code, out, err, _ = run_bounded([sys.executable, "-m", "harness.tasks._cost", *map(str, paths)], timeout_s,
                                    {**child_env(), "CUDA_VISIBLE_DEVICES": ""}, ROOT)
    sizes: dict[str, dict[str, Any]] = {}
    for line in out.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        sizes[Path(row["path"]).stem] = row["cost"]
    if code != 0 and not sizes:
        print(f"warning: counting sizes failed (exit {code}): {err.strip()[-300:]}", file=sys.stderr)
    return sizes


def committed_sizes(level: int) -> dict[str, dict[str, Any]]:
    """The sizes committed beside the results (``sizes_levelN.json``, written by ``--sizes-out``), by
    problem stem: counting 100 problems again on the meta device costs a device call tens of seconds."""
    f = ROOT / "benchmarks" / "results" / "kernelbench" / f"sizes_level{level}.json"
    try:
        doc = json.loads(f.read_text())
    except (OSError, ValueError):
        return {}
    return {str(r["problem"]): dict(r) for r in doc.get("problems", []) if r.get("input_bytes") is not None}


def write_sizes(paths: list[Path], level: int, dest: Path) -> None:
    sizes = count_sizes(paths)
    rows = []
    for p in paths:
        c = sizes.get(p.stem, {"method": "bytes_only:not counted"})
        rows.append({"problem": p.stem, "id": problem_id(p), "level": level,
                     "input_bytes": c.get("input_bytes"), "output_bytes": c.get("output_bytes"),
                     "flops": c.get("flops"), "flops_total": c.get("flops_total"),
                     "flops_by_op": c.get("flops_by_op", {}), "method": c.get("method"), "note": c.get("note", ""),
                     "inputs": c.get("inputs", []), "outputs": c.get("outputs", [])})
    doc = {"level": level, "counted_with": "harness.tasks._cost (torch FlopCounterMode on the meta device)",
           "flops_meaning": "flops: matrix-product and attention FLOPs (what the physical floor uses); "
                            "flops_total: every FLOP the counter found, direct-convolution FLOPs included",
           "torch": next((c.get("torch_version") for c in sizes.values() if c.get("torch_version")), ""),
           "problems": rows}
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {dest} ({len(rows)} problems)")


# ----------------------------------------------------------------------------------- one problem
def aa_candidate(problem: Path, work: Path) -> Path:
    """The A/A candidate: the problem's own text with ``ModelNew = Model`` appended (imports nothing of ours)."""
    text = problem.read_text(encoding="utf-8").rstrip() + "\n\n\nModelNew = Model\n"
    dest = work / f"aa_{problem.stem}.py"
    dest.write_text(text, encoding="utf-8")
    return dest


def _ci_contains_one(ci: Any) -> bool | None:
    if not (isinstance(ci, (list, tuple)) and len(ci) == 2 and all(isinstance(x, (int, float)) for x in ci)):
        return None
    return bool(ci[0] <= 1.0 <= ci[1])


def parse_json_output(out: str) -> dict[str, Any] | None:
    """``atb eval --json``'s object: the whole stdout, else the last line that is a JSON object."""
    candidates = [out] + list(reversed(out.strip().splitlines()))
    for text in candidates:
        text = text.strip()
        if not text.startswith("{"):
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    return None


def eval_one(problem: Path, level: int, args: argparse.Namespace, work: Path, db: Path, timeout_s: float,
             size: dict[str, Any]) -> dict[str, Any]:
    cand = aa_candidate(problem, work)
    cmd = [sys.executable, "-m", "atb_agent.cli", "eval", str(problem), str(cand), "--device", args.device,
           "--db", str(db), "--json"]
    started = now_utc()
    code, out, err, wall = run_bounded(cmd, timeout_s, child_env(), ROOT)
    row: dict[str, Any] = {
        "kind": "atb_eval", "problem": problem.stem, "id": problem_id(problem), "level": level,
        "code_rev": args.code_rev, "measuring_digest": process_measuring_digest(ROOT),
        "device": args.device, "started_utc": started, "wall_s": round(wall, 3), "exit_code": code,
        "timed_out": code is None, "timeout_s": round(timeout_s, 1),
        "input_bytes": size.get("input_bytes"), "output_bytes": size.get("output_bytes"),
        "flops": size.get("flops"), "flops_total": size.get("flops_total"), "size_method": size.get("method"),
    }
    result = parse_json_output(out)
    if isinstance(result, dict) and "verdict" in result:
        ci = result.get("speedup_ci")
        row.update({
            "verdict": result.get("verdict"), "correct": result.get("correct"), "speedup": result.get("speedup"),
            "ci": ci, "ci_contains_1": _ci_contains_one(ci), "usable_ci": result.get("usable_ci"),
            "reason": result.get("reason", ""), "phase_s": result.get("phase_s", {}),
            "timing_method": result.get("timing_method", ""), "device_name": result.get("device", ""),
            "candidate_median_ns": result.get("candidate_median_ns"),
            "baseline_median_ns": result.get("baseline_median_ns"),
            "roofline_fraction": result.get("roofline_fraction"),
            "failed_gates": [{"name": g.get("name"), "detail": str(g.get("detail", ""))[:400]}
                             for g in result.get("gates", []) if not g.get("passed")],
            "physical_gate": next((str(g.get("detail", ""))[:400] for g in result.get("gates", [])
                                   if g.get("name") == "physical_limit"), None),
            "verdict_id": result.get("verdict_id"), "protocol_sha256": result.get("protocol_sha256"),
            "op_s": result.get("op_s", {}), "output_transport": result.get("output_transport", ""),
            "timeline_s": result.get("timeline_s", {}),
            "confinement": result.get("confinement", {}),
        })
    else:
        why = "timed out" if code is None else f"exit {code}"
        err_msg = result.get("error") if isinstance(result, dict) else None
        row.update({"verdict": "timeout" if code is None else "error", "correct": None, "speedup": None,
                    "ci": None, "ci_contains_1": None,
                    "reason": f"atb eval {why}: {err_msg or (err.strip().splitlines() or [''])[-1][:400]}",
                    "stderr_tail": err[-1500:]})
    return row


def anchor_one(problem: Path, level: int, args: argparse.Namespace, timeout_s: float) -> dict[str, Any]:
    """Time KernelBench's own evaluation of the A/A pair in a fresh process (its imports included)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_anchor-child", str(problem), "--kb", str(args.kb),
           "--anchor-correct-trials", str(args.anchor_correct_trials),
           "--anchor-perf-trials", str(args.anchor_perf_trials)]
    started = now_utc()
    code, out, err, wall = run_bounded(cmd, timeout_s, child_env(), ROOT)
    row: dict[str, Any] = {"kind": "kb_anchor", "problem": problem.stem, "id": problem_id(problem), "level": level,
                           "code_rev": args.code_rev,
                           "measuring_digest": process_measuring_digest(ROOT),
                           "device": args.device, "started_utc": started, "process_wall_s": round(wall, 3),
                           "exit_code": code, "timed_out": code is None, "timeout_s": round(timeout_s, 1)}
    found = [ln for ln in out.splitlines() if ln.startswith(ANCHOR_MARK)]
    if found:
        row.update(json.loads(found[-1][len(ANCHOR_MARK):]))
    else:
        row["error"] = ("timed out" if code is None else f"exit {code}") + ": " + \
            " | ".join(err.strip().splitlines()[-3:])[:600]
    return row


# ----------------------------------------------------------------------------------- anchor child
def _stub_import_only_deps() -> list[str]:
    """Install empty stand-ins for import-only dependencies that are missing; return their names."""
    import importlib.util
    import types

    stubbed: list[str] = []

    def _unavailable(name: str) -> Any:
        def call(*_a: Any, **_k: Any) -> Any:
            raise RuntimeError(f"{name} is not installed here; the KernelBench anchor stubbed it (import only)")
        return call

    for name in IMPORT_ONLY_DEPS:
        if importlib.util.find_spec(name) is not None:
            continue
        mod = types.ModuleType(name)
        if name == "dotenv":
            mod.load_dotenv = lambda *a, **k: False  # type: ignore[attr-defined]
        elif name == "openai":
            mod.OpenAI = _unavailable("openai.OpenAI")  # type: ignore[attr-defined]
        elif name == "litellm":
            mod.completion = _unavailable("litellm.completion")  # type: ignore[attr-defined]
        elif name == "tqdm":
            mod.tqdm = lambda it=None, *a, **k: it  # type: ignore[attr-defined]
        sys.modules[name] = mod
        stubbed.append(name)
    return stubbed


def anchor_child(problem: Path, kb: Path, correct_trials: int, perf_trials: int) -> int:
    """Runs in its own process: import KernelBench's eval from the checkout and time one A/A evaluation."""
    t_start = time.perf_counter()
    res: dict[str, Any] = {"kb_settings": {"num_correct_trials": correct_trials, "num_perf_trials": perf_trials,
                                           "measure_performance": True, "timing_method": "cuda_event",
                                           "precision": "fp32", "backend": "cuda", "seed_num": 42}}
    try:
        res["stubbed_import_only"] = _stub_import_only_deps()
        sys.path.insert(0, str(kb / "src"))
        import torch

        t_imp = time.perf_counter()
        from kernelbench.eval import eval_kernel_against_ref  # imported from the checkout, never copied
        res["kb_import_s"] = round(time.perf_counter() - t_imp, 3)
        res["torch"] = torch.__version__
        ref = problem.read_text(encoding="utf-8")
        custom = ref.rstrip() + "\n\n\nModelNew = Model\n"
        t0 = time.perf_counter()
        out = eval_kernel_against_ref(ref, custom, seed_num=42, num_correct_trials=correct_trials,
                                      num_perf_trials=perf_trials, measure_performance=True,
                                      timing_method="cuda_event", device=0, backend="cuda",
                                      precision=torch.float32)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        res["kb_eval_wall_s"] = round(time.perf_counter() - t0, 3)
        if out is None:
            res["error"] = "eval_kernel_against_ref returned None (it asks for a retry)"
        else:
            res.update({"compiled": out.compiled, "correctness": out.correctness, "runtime_ms": out.runtime,
                        "ref_runtime_ms": out.ref_runtime,
                        "kb_speedup": (out.ref_runtime / out.runtime) if out.runtime and out.runtime > 0 else None,
                        "metadata": {k: str(v)[:300] for k, v in (out.metadata or {}).items()}})
    except BaseException as exc:  # noqa: BLE001 - everything is reported on the result line
        res["error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
    res["child_wall_s"] = round(time.perf_counter() - t_start, 3)
    print(ANCHOR_MARK + json.dumps(res, default=str), flush=True)
    return 0


# ----------------------------------------------------------------------------------- main loop
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", type=Path, required=True, help="root of a KernelBench checkout (never copied)")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--problems", default=None, help="ids or ranges (1-100, 1,5,9-12) or names; default all")
    p.add_argument("--out", type=Path, help="JSON-lines results file (appended; resumable)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--db", type=Path, default=None,
                   help="store for this sweep run (default: a fresh one in a temporary folder per run)")
    p.add_argument("--time-budget-s", type=float, default=530.0,
                   help="stop starting work so the whole call ends within this many seconds")
    p.add_argument("--per-problem-timeout-s", type=float, default=240.0)
    p.add_argument("--kb-anchor-sample", type=int, default=0, help="time KernelBench's own eval on K sampled problems")
    p.add_argument("--anchor-only", action="store_true",
                   help="run only KernelBench's own evaluation on the --kb-anchor-sample problems (no atb eval)")
    p.add_argument("--anchor-timeout-s", type=float, default=180.0)
    p.add_argument("--anchor-correct-trials", type=int, default=5, help="KernelBench's default (5)")
    p.add_argument("--anchor-perf-trials", type=int, default=100, help="KernelBench's default (100)")
    p.add_argument("--max-attempts", type=int, default=2,
                   help="tries per problem when atb eval breaks without a verdict (exit code non-zero)")
    p.add_argument("--max-io-bytes", type=float, default=None,
                   help="only problems whose counted inputs+outputs are at most this (e.g. a CPU run)")
    p.add_argument("--sizes-out", type=Path, default=None,
                   help="only count bytes/FLOPs of the selection into this JSON")
    p.add_argument("--_anchor-child", dest="anchor_child", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.anchor_child is None and args.sizes_out is None and args.out is None:
        p.error("--out is required (or --sizes-out)")
    return args


def report_end(n_problems: int, n_left: int, stopped: bool, t_begin: float, level: int, out: Path) -> int:
    """The last line of a resumable sweep's call (this script's and the campaign arms'): what is left and
    how to resume, or that the level is done. Always 0: a call cut by its budget is not a failure."""
    if stopped or n_left:
        print(f"stopped: {n_left} problems left; run the same command again to resume "
              f"({time.perf_counter() - t_begin:.0f} s used)", flush=True)
        return 0
    print(f"done: all {n_problems} problems of level {level} in {out}", flush=True)
    return 0


def sweep(args: argparse.Namespace) -> int:
    # once per call, for every row; a snapshot whose ATB_CODE_REV names another commit stops here, before measuring
    args.code_rev = checked_code_rev(ROOT)
    t_begin = time.perf_counter()
    deadline = t_begin + args.time_budget_s - MARGIN_S
    folder = problem_dir(args.kb, args.level)
    problems = select_problems(folder, args.problems)
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.gettempdir()) / f"atb_kb_sweep_{out.stem}_{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    db = args.db or work / "store.sqlite"
    done_evals, done_anchors = read_done(out, args.max_attempts)
    anchors = {p.stem for p in anchor_sample(problems, args.kb_anchor_sample)}
    key = lambda p: f"{args.level}:{p.stem}"  # noqa: E731
    n_before = len(done_evals)
    if args.anchor_only:   # only KernelBench's own evaluation, on the sampled problems
        problems = [p for p in problems if p.stem in anchors]
        done_evals |= {key(p) for p in problems}
    todo = [p for p in problems if key(p) not in done_evals or (p.stem in anchors and key(p) not in done_anchors)]
    print(f"level {args.level}: {len(problems)} selected, {n_before} evaluated before, "
          f"{len(todo)} to do; anchors {sorted(anchors)}; out {out}; store {db}", flush=True)
    sizes = committed_sizes(args.level)   # counted once on the meta device (sizes_levelN.json)
    uncounted = [p for p in todo if p.stem not in sizes]
    if uncounted:
        sizes.update(count_sizes(uncounted, timeout_s=max(10.0, min(180.0, deadline - time.perf_counter()
                                                                     - MIN_START_S))))
    stopped = False
    for p in todo:
        size = sizes.get(p.stem, {})
        io = (size.get("input_bytes") or 0) + (size.get("output_bytes") or 0)
        if args.max_io_bytes is not None and (size.get("input_bytes") is None or io > args.max_io_bytes):
            print(f"skip {p.stem}: inputs+outputs {io / 2**20:.0f} MiB above --max-io-bytes", flush=True)
            continue
        if key(p) not in done_evals:
            left = deadline - time.perf_counter()
            if left < MIN_START_S:
                stopped = True
                break
            timeout = min(args.per_problem_timeout_s, left)
            row = eval_one(p, args.level, args, work, db, timeout, size)
            cut_by_budget = row["timed_out"] and timeout < args.per_problem_timeout_s
            if cut_by_budget:
                print(f"{p.stem}: cut by the time budget after {row['wall_s']} s; not recorded, retried next call",
                      flush=True)
                stopped = True
                break
            append_line(out, row)
            done_evals.add(key(p))
            print(f"{p.stem}: {row['verdict']} speedup {row.get('speedup')} ci {row.get('ci')} "
                  f"wall {row['wall_s']} s", flush=True)
        if p.stem in anchors and key(p) not in done_anchors:
            left = deadline - time.perf_counter()
            if left < MIN_START_S:
                stopped = True
                break
            timeout = min(args.anchor_timeout_s, left)
            arow = anchor_one(p, args.level, args, timeout)
            if arow["timed_out"] and timeout < args.anchor_timeout_s:
                print(f"{p.stem}: anchor cut by the time budget; retried next call", flush=True)
                stopped = True
                break
            append_line(out, arow)
            done_anchors.add(key(p))
            print(f"{p.stem}: kb anchor eval {arow.get('kb_eval_wall_s')} s (process {arow['process_wall_s']} s) "
                  f"{arow.get('error', '')}", flush=True)
    remaining = [p for p in problems if key(p) not in done_evals or (p.stem in anchors and key(p) not in done_anchors)]
    return report_end(len(problems), len(remaining), stopped, t_begin, args.level, out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.anchor_child is not None:
        return anchor_child(args.anchor_child, args.kb, args.anchor_correct_trials, args.anchor_perf_trials)
    if args.sizes_out is not None:
        write_sizes(select_problems(problem_dir(args.kb, args.level), args.problems), args.level, args.sizes_out)
        return 0
    return sweep(args)


if __name__ == "__main__":
    sys.exit(main())
