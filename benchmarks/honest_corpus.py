"""The honest corpus and the cheat corpus through ``atb eval`` on one device, each honest pair beside an
independent speed measurement made in the same run; one JSON line per entry, resumable.

Why (issue 25): every GPU validation before was A/A plus cheats, and 6 of 18 honest speedups were
rejected. One call of this script reports both sides on one device: how many honest candidates
(tests/redteam/honest/corpus, their technique class and backends in each file's REDTEAM line) the harness
accepts, how far its ratio is from an independent timer's (``torch.utils.benchmark.Timer`` on CPU and
CUDA, ``triton.testing.do_bench`` on CUDA when Triton imports), and whether every cheat
(tests/redteam/cheats on either device, plus the GPU cheats of ``benchmarks/cuda_gates.py`` on CUDA)
is caught, none accepted with a ratio above 1.1.

    python benchmarks/honest_corpus.py --device cpu            # writes benchmarks/results/honest_cpu.jsonl
    python benchmarks/honest_corpus.py --device cpu --render   # writes benchmarks/results/honest_cpu.md

Each entry is one whole ``atb eval TASK CANDIDATE --device D --db DB --json`` in a subprocess (exactly
what a user runs; one store per run, so later evaluations reuse its measured ceilings), then, for an
honest entry, the independent measurement in a fresh process (reference timed, then the candidate
imported and timed, then both again: ratio = median reference time / median candidate time, backend
flags the candidate changed put back before each reference timing). Lines already in ``--out`` are
skipped (an ``error`` row, where ``atb eval`` broke without a verdict, is retried once). Every line
carries code_rev (``benchmarks/_code_rev.py``: the commit a ``git archive`` snapshot names itself, else
``$ATB_CODE_REV`` or ``git rev-parse``), the measuring digest of the tree it ran in
(``benchmarks/_measuring_digest.py``), the protocol digest and the device.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
REDTEAM = ROOT / "tests" / "redteam"
RESULTS = ROOT / "benchmarks" / "results"
MARK = "ATB_HONEST_INDEPENDENT "
REVIEW_MARK = "ATB_HONEST_REVIEW "
CHEAT_RATIO_BAR = 1.1          # a cheat accepted with a ratio above this is a harness failure
MIN_START_S = 20.0
for p in (str(ROOT), str(REDTEAM), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

from _child_conditions import measuring_child_env  # noqa: E402
from _code_rev import checked_code_rev
from _measuring_digest import process_measuring_digest
from kernelbench_sweep import append_line, child_env, now_utc, parse_json_output, run_bounded  # noqa: E402


# ----------------------------------------------------------------------------------- entries
def _load_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def entries(device: str, cheats: str, work: Path) -> list[dict[str, Any]]:
    """What one run evaluates: honest entries for ``device``, then the cheats ``cheats`` selects.

    Every entry is a dict with kind (honest|cheat), name, class, task (as atb eval takes it), candidate
    (a file path), expected_gate and source (where it came from).
    """
    from redteam_corpus import corpus, honest_corpus

    out: list[dict[str, Any]] = []
    for e in honest_corpus(device):
        out.append({"kind": "honest", "name": e.name, "class": e.technique, "task": e.task_ref,
                    "task_label": e.task, "candidate": str(e.path), "expected_gate": None,
                    "backends": e.backends, "source": "tests/redteam/honest/corpus"})
    if device == "cpu":   # the red-team's own honest candidates (CPU-written, no class declared)
        for e in corpus("honest"):
            out.append({"kind": "honest", "name": e.name, "class": e.technique or "redteam_honest",
                        "task": e.task_ref, "task_label": e.task, "candidate": str(e.path), "expected_gate": None,
                        "backends": e.backends, "source": "tests/redteam/honest"})
    if cheats in ("corpus", "all"):
        for e in corpus("cheats"):
            out.append({"kind": "cheat", "name": e.name, "class": "cheat", "task": e.task_ref, "task_label": e.task,
                        "candidate": str(e.path), "expected_gate": e.gate, "backends": e.backends,
                        "source": "tests/redteam/cheats"})
    if cheats in ("gpu", "all") and device == "cuda":
        gates = _load_file(ROOT / "benchmarks" / "cuda_gates.py", "atb_cuda_gates_cases")
        for name, src in gates.TASKS.items():
            (work / f"{name}.py").write_text(src.lstrip(), encoding="utf-8")
        for case in gates.CASES:
            if case["gate"] is None:
                continue   # cuda_gates' honest cases are A/A-like checks; the honest corpus covers that side
            cand = work / f"gpu_cheat_{case['name']}.py"
            text = case["source"] if "source" in case else (ROOT / case["source_file"]).read_text(encoding="utf-8")
            cand.write_text(text.lstrip(), encoding="utf-8")
            task = str(work / f"{case['task']}.py") if case["task"] in gates.TASKS else case["task"]
            out.append({"kind": "cheat", "name": f"gpu:{case['name']}", "class": "cheat", "task": task,
                        "task_label": case["task"], "candidate": str(cand), "expected_gate": case["gate"],
                        "backends": ["cuda"], "source": "benchmarks/cuda_gates.py"})
    return out


# ----------------------------------------------------------------------------------- provenance
def code_rev() -> str:
    """The commit measured (``benchmarks/_code_rev.py``: a snapshot names its own)."""
    return checked_code_rev(ROOT)


def protocol_facts() -> tuple[str, int]:
    from protocol import load_protocol

    proto = load_protocol()
    return proto.sha256, int(proto.timing.cpu.threads)


# ----------------------------------------------------------------------------------- independent child
def independent_child(task_path: Path, cand_path: Path, device: str, threads: int, min_run_s: float,
                      rounds: int = 5, graph: bool = False, hot_graph: bool = True) -> int:
    """Runs in its own process: time the reference and the candidate on the problem's get_inputs.

    Reference first (before the candidate is imported, so nothing the candidate does at import can touch
    it), then ``rounds`` rounds of candidate and reference blocks; the ratio is the median of the rounds'
    ratios. Backend flags the candidate changed are put back before each reference block. Times are
    medians of ``blocked_autorange`` (CPU, or CUDA without Triton) or ``triton.testing.do_bench`` (CUDA:
    L2 flushed between repetitions). On the CPU the Timer reads the process's CPU time, not the wall
    clock: the measuring thread is the only one (``threads`` = the protocol's 1), and on a shared host
    the wall clock also counts the time other processes held the core (wall-clock rounds of one pair
    were seen to range 0.6-2.1x on this 2-core machine under load).

    ``graph`` (CUDA, where the harness timed the entry by CUDA-graph replay: tiny or launch-bound calls,
    protocol 1.6.0): ``triton.testing.do_bench_cudagraph``, so both sides time device work without the
    host's launches; where the capture fails (a candidate that captures its own graph) it falls back to
    ``do_bench`` and the method says so.
    """
    res: dict[str, Any] = {"device": device}
    try:
        import torch

        torch.set_num_threads(threads)
        torch.backends.cuda.matmul.allow_tf32 = False   # the protocol's fp32 setting (correctness.allow_tf32)
        torch.backends.cudnn.allow_tf32 = False
        dev = torch.device(device)
        task = _load_file(task_path, "atb_hc_task")
        torch.manual_seed(1)
        init = list(task.get_init_inputs())
        torch.manual_seed(1)
        ref = task.Model(*init)
        ref = ref.to(dev) if isinstance(ref, torch.nn.Module) else ref
        torch.manual_seed(2)
        with torch.device(dev):
            inputs = list(task.get_inputs())
        inputs = [t.to(dev) if isinstance(t, torch.Tensor) else t for t in inputs]
        cand_flags: dict[str, bool] = {}
        flags = {"cudnn.benchmark": torch.backends.cudnn.benchmark,
                 "cudnn.deterministic": torch.backends.cudnn.deterministic}

        def restore_flags() -> None:
            torch.backends.cudnn.benchmark = flags["cudnn.benchmark"]
            torch.backends.cudnn.deterministic = flags["cudnn.deterministic"]
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False

        method = "timer(process_time)" if device == "cpu" else "timer"
        clock = time.process_time if device == "cpu" else time.perf_counter
        do_bench = None
        bench_graph = None
        if device == "cuda":
            try:
                testing = importlib.import_module("triton.testing")
                do_bench, method = testing.do_bench, "triton.do_bench"
                if graph:
                    bench_graph, method = testing.do_bench_cudagraph, "triton.do_bench_cudagraph"
            except Exception:  # noqa: BLE001 - Triton missing: the Timer measures CUDA too
                do_bench = None
        res["method"] = method

        def time_s(model: Any) -> float:
            def call() -> Any:
                with torch.no_grad():
                    return model(*inputs)

            for _ in range(3):   # warm-up: lazy init, compilation, autotuning, graph capture
                call()
            if device == "cuda":
                torch.cuda.synchronize()
            if bench_graph is not None:
                try:
                    return float(bench_graph(call, rep=max(100, int(min_run_s * 1000)), return_mode="median")) / 1e3
                except Exception as exc:  # noqa: BLE001 - not capturable: host-inclusive do_bench, said so
                    res["method"] = f"triton.do_bench (do_bench_cudagraph failed: {type(exc).__name__})"
                    torch.cuda.synchronize()
            if do_bench is not None:
                return float(do_bench(call, warmup=25, rep=max(100, int(min_run_s * 1000)), return_mode="median")) / 1e3
            from torch.utils.benchmark import Timer

            m = Timer(stmt="call()", globals={"call": call}, num_threads=threads,
                      timer=clock).blocked_autorange(min_run_time=min_run_s)
            return float(m.median)

        # CPU only: the same timer over a rotating pool of input sets (>= 64 MiB together, at most 32 sets),
        # so each call meets its inputs out of cache as the harness's fresh timed sets do; on CUDA
        # do_bench already flushes L2 between repetitions
        pool: list[list[Any]] = []
        if device == "cpu":
            set_bytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor)) or 1
            for k in range(int(min(32, max(2, -(-(64 << 20) // set_bytes))))):
                torch.manual_seed(100 + k)
                pool.append(list(task.get_inputs()))

        def time_rotating_s(model: Any) -> float:
            from torch.utils.benchmark import Timer

            state = {"i": 0}

            def call() -> Any:
                xs = pool[state["i"] % len(pool)]
                state["i"] += 1
                with torch.no_grad():
                    return model(*xs)

            m = Timer(stmt="call()", globals={"call": call}, num_threads=threads,
                      timer=clock).blocked_autorange(min_run_time=min_run_s)
            return float(m.median)

        # CUDA, graph-timed entries: the harness's own regime rebuilt independently: one CUDA graph of up to
        # 32 calls, each on its own input set (distinct tensors, so none is hot in L2 from the call before),
        # the L2 flushed before every replay, device time by events over the replay divided by the calls.
        # do_bench_cudagraph repeats one input set, hot in L2 after the first call: a different quantity
        # (on the H200 small fused kernels read 24-37% faster relative to their reference that way)
        gpool: list[list[Any]] = []
        if device == "cuda" and graph:
            set_bytes = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor)) or 1
            for k in range(int(max(2, min(32, (4 << 30) // set_bytes)))):
                torch.manual_seed(100 + k)
                with torch.device(dev):
                    gpool.append([t.to(dev) if isinstance(t, torch.Tensor) else t for t in task.get_inputs()])
            flush = torch.empty((256 << 20) // 4, dtype=torch.int32, device=dev)

        def time_cold_graph_s(model: Any) -> float:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                for xs in gpool:
                    model(*xs)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g), torch.no_grad():
                outs = [model(*xs) for xs in gpool]
            # replays until min_run_s of timed device work and at least 7 replays (at most 50): a slow
            # reference (a 200x entry's replay of 32 calls takes about a second) costs seconds, not a minute
            times: list[float] = []
            spent = 0.0
            while len(times) < 50 and (len(times) < 7 or spent < min_run_s):
                flush.zero_()
                s0, s1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s0.record()
                g.replay()
                s1.record()
                torch.cuda.synchronize()
                replay_s = s0.elapsed_time(s1) / 1e3
                spent += replay_s
                times.append(replay_s / len(gpool))
            del outs, g
            return float(statistics.median(times))

        # rounds of (reference, candidate) blocks: each round's ratio pairs two adjacent blocks, so a load
        # that drifts on a shared host moves both; the first reference block runs before the candidate exists
        # a graph-timed entry's comparison is the cold graph over distinct sets: the hot do_bench_cudagraph
        # figure (one round, kept for the record unless --no-hot-graph) captures thousands of calls per
        # measurement, which cost 20-50 s of device time per entry on the H200 when it ran every round
        hot_rounds = (1 if hot_graph else 0) if gpool else rounds
        ref_times: list[float] = [time_s(ref)] if hot_rounds else []
        cand_times: list[float] = []
        ref_rot: list[float | None] = []
        cand_rot: list[float | None] = []
        rotating = time_rotating_s if pool else (time_cold_graph_s if gpool else None)
        cold_error = ""

        def rot_s(model: Any) -> float | None:
            nonlocal cold_error, rotating
            if rotating is None:
                return None
            try:
                return rotating(model)
            except Exception as exc:  # noqa: BLE001 - not capturable on distinct sets: said, not fatal
                cold_error = f"{type(exc).__name__}: {str(exc)[:200]}"
                rotating = None
                torch.cuda.synchronize()
                return None

        if rotating is not None:
            ref_rot.append(rot_s(ref))
        cand_mod = _load_file(cand_path, "atb_hc_candidate")
        torch.manual_seed(1)
        new = cand_mod.ModelNew(*init)
        new = new.to(dev) if isinstance(new, torch.nn.Module) else new
        for r in range(rounds):
            if r:
                restore_flags()
                if r < hot_rounds:
                    ref_times.append(time_s(ref))
                if rotating is not None:
                    ref_rot.append(rot_s(ref))
            torch.backends.cudnn.benchmark = cand_flags.get("cudnn.benchmark", torch.backends.cudnn.benchmark)
            if r < hot_rounds:
                cand_times.append(time_s(new))
            cand_flags["cudnn.benchmark"] = torch.backends.cudnn.benchmark
            if rotating is not None:
                cand_rot.append(rot_s(new))
        if gpool and not hot_rounds:
            if rotating is None:   # the cold graph could not be captured: the hot figure is all there is
                restore_flags()
                ref_times.append(time_s(ref))
                cand_times.append(time_s(new))
            else:
                res["method"] = "cold graph only (--no-hot-graph)"
        per_round = [rt / ct for rt, ct in zip(ref_times, cand_times)]
        res.update({"rounds": rounds, "round_ratios": per_round,
                    "ratio": statistics.median(per_round) if per_round else None})
        rot = [rt / ct for rt, ct in zip(ref_rot, cand_rot) if rt and ct]
        if rot and rotating is not None:
            res.update({"rotating_sets": len(pool or gpool), "reference_rotating_s": ref_rot,
                        "candidate_rotating_s": cand_rot, "round_ratios_rotating": rot,
                        "ratio_rotating": statistics.median(rot),
                        "rotating_method": "timer, rotating pool" if pool else "cuda-graph over distinct sets+l2flush"})
        if cold_error:
            res["rotating_error"] = cold_error
        with torch.no_grad():
            a, b = ref(*inputs), new(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        res["max_abs_diff"] = float((a.double() - b.double()).abs().max()) if a.shape == b.shape else None
        res.update({"reference_s": ref_times, "candidate_s": cand_times, "torch": torch.__version__})
    except BaseException as exc:  # noqa: BLE001 - reported on the result line
        res["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
    print(MARK + json.dumps(res, default=str), flush=True)
    return 0


def independent(entry: dict[str, Any], device: str, threads: int, timeout_s: float, min_run_s: float,
                graph: bool = False, rounds: int = 5, hot_graph: bool = True) -> dict[str, Any]:
    """The independent ratio in a fresh process; ``graph``: the harness timed this entry by CUDA-graph replay,
    so the independent side times device work too (``do_bench_cudagraph``)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_independent", entry["candidate"], "--task-file",
           entry["task_path"], "--device", device, "--threads", str(threads), "--min-run-s", str(min_run_s),
           "--independent-rounds", str(rounds)]
    if graph:
        cmd.append("--graph")
    if not hot_graph:
        cmd.append("--no-hot-graph")
    conditions = measuring_child_env(threads)   # the children's threads and malloc settings, not their method
    env = {**child_env(), **conditions}
    code, out, err, wall = run_bounded(cmd, timeout_s, env, ROOT)
    found = [ln for ln in out.splitlines() if ln.startswith(MARK)]
    if found:
        row: dict[str, Any] = json.loads(found[-1][len(MARK):])
    else:
        row = {"error": ("timed out" if code is None else f"exit {code}") + ": "
               + " | ".join(err.strip().splitlines()[-3:])[:600]}
    row["wall_s"] = round(wall, 2)
    row["malloc_env"] = {k: v for k, v in conditions.items() if k.startswith("MALLOC_")}
    return row


# ----------------------------------------------------------------------------------- quarantine review
def review_child(verdict_id: str, task: str, cand_path: Path, device: str, db: Path) -> int:
    """Runs in its own process: the extended pass (``harness.verdict.quarantine.review_quarantine``) on a
    quarantined verdict, in a new session of the same store, as the red-team test does. ``atb eval`` stops
    at the quarantine; the pass is what decides whether the speedup stands."""
    res: dict[str, Any] = {}
    try:
        from harness.measure.session import open_measurement_session
        from harness.store import open_store
        from harness.verdict.quarantine import review_quarantine

        store = open_store(db)
        try:
            backend: Any = device
            with open_measurement_session(store, backend, note="honest corpus: extended pass") as session:
                review = review_quarantine(verdict_id, task, cand_path.read_text(encoding="utf-8"),
                                           store=store, session=session)
            res = {"cleared": review.cleared, "effective_status": review.effective_status,
                   "reason": review.reason[:800], "speedups": review.speedups, "paired_seeds": review.paired_seeds}
        finally:
            store.close()
    except BaseException as exc:  # noqa: BLE001 - reported on the result line
        res["error"] = f"{type(exc).__name__}: {str(exc)[:600]}"
    print(REVIEW_MARK + json.dumps(res, default=str), flush=True)
    return 0


def review(verdict_id: str, entry: dict[str, Any], device: str, db: Path, timeout_s: float) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--_review", verdict_id, "--task-file", entry["task"],
           "--candidate-file", entry["candidate"], "--device", device, "--db", str(db)]
    code, out, err, wall = run_bounded(cmd, timeout_s, child_env(), ROOT)
    found = [ln for ln in out.splitlines() if ln.startswith(REVIEW_MARK)]
    row: dict[str, Any] = json.loads(found[-1][len(REVIEW_MARK):]) if found else \
        {"error": ("timed out" if code is None else f"exit {code}") + ": " + " | ".join(err.strip().splitlines()[-3:])[:600]}
    row["wall_s"] = round(wall, 2)
    return row


# ----------------------------------------------------------------------------------- one entry
def task_path(entry: dict[str, Any]) -> str:
    """The task as a file (a native task name resolves to its file under harness/tasks/native)."""
    t = entry["task"]
    return t if t.endswith(".py") else str(ROOT / "harness" / "tasks" / "native" / f"{t}.py")


def evaluate(entry: dict[str, Any], args: argparse.Namespace, db: Path, timeout_s: float,
             rev: str, digest: str, threads: int) -> dict[str, Any]:
    entry = {**entry, "task_path": task_path(entry)}
    cmd = [sys.executable, "-m", "atb_agent.cli", "eval", entry["task"], entry["candidate"], "--device", args.device,
           "--db", str(db), "--json"]
    started = now_utc()
    code, out, err, wall = run_bounded(cmd, timeout_s, child_env(), ROOT)
    row: dict[str, Any] = {
        "kind": entry["kind"], "name": entry["name"], "class": entry["class"], "task": entry["task_label"],
        "backends": entry["backends"], "expected_gate": entry["expected_gate"], "source": entry["source"],
        "device": args.device, "code_rev": rev, "measuring_digest": process_measuring_digest(ROOT),
        "protocol_sha256": digest, "started_utc": started,
        "wall_s": round(wall, 2), "exit_code": code, "timed_out": code is None,
        "loadavg_1m": round(os.getloadavg()[0], 2), "host_cpus": os.cpu_count(),
    }
    result = parse_json_output(out)
    row["accepted_as_measured"] = isinstance(result, dict) and result.get("verdict") == "accepted"
    if isinstance(result, dict) and "verdict" in result:
        failed = [{"name": g.get("name"), "detail": str(g.get("detail", ""))[:500]}
                  for g in result.get("gates", []) if not g.get("passed")]
        row.update({
            "verdict": result.get("verdict"), "verdict_id": result.get("verdict_id"),
            "status": result.get("verdict"), "accepted": result.get("verdict") == "accepted",
            "correct": result.get("correct"), "reason": str(result.get("reason", ""))[:800],
            "rejecting_gates": [g["name"] for g in failed], "failed_gates": failed,
            "harness_ratio": result.get("speedup"), "harness_ci": result.get("speedup_ci"),
            "timing_method": result.get("timing_method", ""), "device_name": result.get("device", ""),
            # per-arm medians: where the harness and the independent timer disagree, they say which arm
            # the harness reads differently
            "baseline_median_ns": result.get("baseline_median_ns"),
            "candidate_median_ns": result.get("candidate_median_ns"),
            # where the eval's time went (issue 26 reads the one-shot eval's cost from these)
            "phase_s": result.get("phase_s") or {}, "timeline_s": result.get("timeline_s") or {},
            "verdict_protocol_sha256": result.get("protocol_sha256"), "confinement": result.get("confinement", {}),
        })
        if result.get("protocol_sha256"):
            row["protocol_sha256"] = result["protocol_sha256"]
        if result.get("verdict") == "quarantined" and result.get("verdict_id") and not args.no_review:
            rv = review(str(result["verdict_id"]), entry, args.device, db, args.per_entry_timeout_s)
            row["extended_pass"] = rv
            row["accepted"] = rv.get("effective_status") == "accepted"
            row["status"] = f"quarantined->{rv.get('effective_status', 'error')}"
    else:
        why = "timed out" if code is None else f"exit {code}"
        msg = result.get("error") if isinstance(result, dict) else None
        row.update({"verdict": None, "status": "timeout" if code is None else "error", "accepted": False, "correct": None,
                    "reason": f"atb eval {why}: {msg or (err.strip().splitlines() or [''])[-1][:500]}",
                    "rejecting_gates": [], "failed_gates": [], "harness_ratio": None, "harness_ci": None,
                    "stderr_tail": err[-1200:]})
    if entry["kind"] == "cheat":
        gate = entry["expected_gate"]
        held = row["verdict"] in ("rejected", "quarantined") and not row["accepted"]   # a cleared quarantine is not held
        row["caught"] = held and gate in row["rejecting_gates"]
        row["caught_by_any_gate"] = held
        return row
    graph = graph_timed(row)
    ind = independent(entry, args.device, threads, args.independent_timeout_s, args.min_run_s, graph=graph,
                      rounds=args.independent_rounds, hot_graph=not args.no_hot_graph)
    row["independent"] = ind
    row["independent_ratio"] = ind.get("ratio")
    row["independent_method"] = ind.get("method")
    hr, ir = row.get("harness_ratio"), ind.get("ratio")
    row["ratio_error"] = abs(hr / ir - 1.0) if isinstance(hr, (int, float)) and isinstance(ir, (int, float)) and ir > 0 \
        else None
    rr = ind.get("ratio_rotating")
    row["independent_ratio_rotating"] = rr
    row["ratio_error_rotating"] = abs(hr / rr - 1.0) if isinstance(hr, (int, float)) and isinstance(rr, (int, float)) \
        and rr > 0 else None
    row["ratio_error_same_regime"] = row["ratio_error_rotating" if same_regime_is_rotating(row) else "ratio_error"]
    return row


def graph_timed(row: dict[str, Any]) -> bool:
    """The harness timed this entry by CUDA-graph replay (its independent side then times device work too)."""
    return row.get("device") == "cuda" and str(row.get("timing_method") or "").startswith("cuda-graph")


def same_regime_is_rotating(row: dict[str, Any]) -> bool:
    """Which independent figure is the harness's own regime, what "accepted at its true speed" is judged by:
    the cold graph over distinct sets (the rotating figures) for a graph-timed entry, the events/Timer
    figure otherwise."""
    return graph_timed(row) and row.get("ratio_error_rotating") is not None


def read_done(out: Path, max_attempts: int = 2) -> set[str]:
    """Entries settled in ``out``: any row but ``error``, or ``max_attempts`` error rows."""
    done: set[str] = set()
    errors: dict[str, int] = {}
    if not out.exists():
        return done
    for line in out.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        key = f"{row.get('kind')}:{row.get('name')}"
        if row.get("status") == "error":
            errors[key] = errors.get(key, 0) + 1
            if errors[key] < max_attempts:
                continue
        done.add(key)
    return done


# ----------------------------------------------------------------------------------- render
def latest_rows(path: Path) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        rows[f"{row.get('kind')}:{row.get('name')}"] = row
    return list(rows.values())


def _fmt(x: Any, spec: str = ".3f") -> str:
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def _ci(ci: Any) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]" if isinstance(ci, (list, tuple)) and len(ci) == 2 else "-"


def _why(row: dict[str, Any]) -> str:
    if row.get("accepted"):
        return ""
    gates = row.get("failed_gates") or []
    reason = str(row.get("reason", ""))
    text = "; ".join(f"{g['name']}: {g['detail'][:160]}" for g in gates)
    if reason and not reason.startswith("gate "):   # a failure before the gates (a timeout, an exception) first
        text = f"{reason[:200]}; {text}" if text else reason[:200]
    ext = row.get("extended_pass")
    if isinstance(ext, dict):
        text += f"; extended pass: {str(ext.get('reason') or ext.get('error', ''))[:200]}"
    return text.replace("|", "/").replace("\n", " ")


def _us(seconds: list[Any] | None) -> float | None:
    vals = [float(s) for s in seconds or [] if isinstance(s, (int, float))]
    return statistics.median(vals) * 1e6 if vals else None


def per_arm_rows(accepted: list[dict[str, Any]], bar: float = 0.10) -> list[str]:
    """Table rows for accepted honest entries whose ratio is more than ``bar`` off the independent timer of
    the harness's own regime: each arm's median by the harness beside the independent timer's, in
    microseconds. Rows written before the per-arm medians were kept show '-' for the harness's."""
    out = []
    for r in accepted:
        err = r.get("ratio_error_same_regime")
        if not isinstance(err, (int, float)) or err <= bar:
            continue
        ind = r.get("independent") or {}
        rotating = same_regime_is_rotating(r)
        ref = _us(ind.get("reference_rotating_s" if rotating else "reference_s"))
        cand = _us(ind.get("candidate_rotating_s" if rotating else "candidate_s"))
        h_ref, h_cand = r.get("baseline_median_ns"), r.get("candidate_median_ns")
        out.append(f"| {r['name']} | {_fmt(h_ref / 1e3 if isinstance(h_ref, (int, float)) else None)} | {_fmt(ref)} | "
                   f"{_fmt(h_cand / 1e3 if isinstance(h_cand, (int, float)) else None)} | {_fmt(cand)} |")
    return out


def render(rows: list[dict[str, Any]], device: str, source: str | None = None) -> str:
    honest = sorted((r for r in rows if r.get("kind") == "honest"), key=lambda r: (str(r.get("class")), r["name"]))
    cheats = sorted((r for r in rows if r.get("kind") == "cheat"), key=lambda r: r["name"])
    revs = sorted({str(r.get("code_rev")) for r in rows})
    digests = sorted({str(r.get("protocol_sha256", ""))[:12] for r in rows})
    lines = [f"# Honest corpus on {device}", "",
             f"Rendered by `benchmarks/honest_corpus.py --device {device} --render --out {source or f'honest_{device}.jsonl'}` "
             f"(the latest row of each entry). Code revisions: {', '.join(revs) or '-'}; protocol digests: "
             f"{', '.join(digests) or '-'}; device: {', '.join(sorted({str(r['device_name']) for r in rows if r.get('device_name')}))}.",
             ""]
    acc = [r for r in honest if r.get("accepted")]
    errs = [r["ratio_error"] for r in honest if isinstance(r.get("ratio_error"), (int, float))]
    errs_acc = [r["ratio_error"] for r in acc if isinstance(r.get("ratio_error"), (int, float))]
    lines += ["## Summary", "",
              f"- honest entries accepted: **{len(acc)} of {len(honest)}**"]
    by_class: dict[str, list[dict[str, Any]]] = {}
    for r in honest:
        by_class.setdefault(str(r.get("class")), []).append(r)
    lines.append("- by class: " + ", ".join(f"{c} {sum(1 for r in rs if r.get('accepted'))}/{len(rs)}"
                                            for c, rs in sorted(by_class.items())))
    if errs:
        lines.append(f"- |harness ratio / independent ratio - 1|: median **{statistics.median(errs):.3f}**, "
                     f"max {max(errs):.3f} (n={len(errs)}, every entry with both ratios); accepted only: "
                     + (f"median {statistics.median(errs_acc):.3f}, max {max(errs_acc):.3f} (n={len(errs_acc)})"
                        if errs_acc else "none"))
    same = [r["ratio_error_same_regime"] for r in acc if isinstance(r.get("ratio_error_same_regime"), (int, float))]
    if same:
        lines.append(f"- accepted entries against the independent timer of the harness's own regime (cold CUDA graph "
                     f"over distinct sets for graph-timed entries): median {statistics.median(same):.3f}, max "
                     f"{max(same):.3f}, within 10%: **{sum(1 for e in same if e <= 0.10)} of {len(same)}**")
    rot = [r["ratio_error_rotating"] for r in honest if isinstance(r.get("ratio_error_rotating"), (int, float))]
    if rot:
        lines.append(f"- the same against the independent timer over a rotating pool of inputs (out of cache, as the "
                     f"harness's fresh timed sets are): median {statistics.median(rot):.3f}, max {max(rot):.3f} (n={len(rot)})")
    loads = [r["loadavg_1m"] for r in rows if isinstance(r.get("loadavg_1m"), (int, float))]
    if loads:
        lines.append(f"- host load (1-minute load average at each entry's end): median {statistics.median(loads):.1f}, "
                     f"max {max(loads):.1f} on {rows[0].get('host_cpus')} CPUs; the harness times by the wall clock, "
                     "the CPU independent timer by the process's CPU time")
    rejected = [r for r in honest if not r.get("accepted")]
    gate_counts: dict[str, int] = {}
    for r in rejected:
        for g in r.get("rejecting_gates") or [r.get("status", "?")]:
            gate_counts[g] = gate_counts.get(g, 0) + 1
    if rejected:
        lines.append("- what rejected honest entries (an entry may fail several gates): "
                     + ", ".join(f"{g} {n}" for g, n in sorted(gate_counts.items(), key=lambda kv: -kv[1])))
    if cheats:
        caught = [r for r in cheats if r.get("caught")]
        loose = [r for r in cheats if r.get("accepted") and isinstance(r.get("harness_ratio"), (int, float))
                 and r["harness_ratio"] > CHEAT_RATIO_BAR]
        lines.append(f"- cheats caught by the gate meant for them: **{len(caught)} of {len(cheats)}**; caught by "
                     f"some gate: {sum(1 for r in cheats if r.get('caught_by_any_gate'))}; accepted with a ratio "
                     f"above {CHEAT_RATIO_BAR}: **{len(loose)}**"
                     + (f" ({', '.join(r['name'] for r in loose)})" if loose else ""))
    lines += ["", "## Honest entries", "",
              "| entry | class | task | status | harness ratio | 95% CI | independent ratio | method | ratio error | "
              "independent, rotating inputs | its ratio error | rejecting gates, reasons |",
              "|---|---|---|---|---:|---|---:|---|---:|---:|---:|---|"]
    for r in honest:
        note = f" (extended pass: {str((r.get('extended_pass') or {}).get('reason', ''))[:120]})" \
            if r.get("accepted") and r.get("extended_pass") else ""
        lines.append(f"| {r['name']} | {r.get('class')} | {r.get('task')} | {r.get('status')} | "
                     f"{_fmt(r.get('harness_ratio'))} | {_ci(r.get('harness_ci'))} | {_fmt(r.get('independent_ratio'))} | "
                     f"{r.get('independent_method') or (r.get('independent') or {}).get('error', '-')[:60]} | "
                     f"{_fmt(r.get('ratio_error'))} | {_fmt(r.get('independent_ratio_rotating'))} | "
                     f"{_fmt(r.get('ratio_error_rotating'))} | {_why(r) or note.replace('|', '/')} |")
    apart = per_arm_rows(acc)
    if apart:
        lines += ["", "## Per arm, where the two timers are more than 10% apart", "",
                  "Medians of one call in microseconds. The harness's come from the verdict (`baseline_median_ns`, "
                  "`candidate_median_ns`). The independent timer's come from its rounds, in the same regime as its "
                  "ratio. An arm whose two figures differ is the arm the harness reads differently.", "",
                  "| entry | harness reference | independent reference | harness candidate | independent candidate |",
                  "|---|---:|---:|---:|---:|", *apart]
    if cheats:
        lines += ["", "## Cheats", "",
                  "| cheat | task | meant for | status | caught by its gate | failed gates | harness ratio |",
                  "|---|---|---|---|---|---|---:|"]
        for r in cheats:
            lines.append(f"| {r['name']} | {r.get('task')} | {r.get('expected_gate')} | {r.get('status')} | "
                         f"{'yes' if r.get('caught') else 'NO'} | {', '.join(r.get('rejecting_gates') or []) or '-'} | "
                         f"{_fmt(r.get('harness_ratio'))} |")
    lines += ["", "## How this was run", "", RUN_NOTE.get(device, "").strip()]
    return "\n".join(lines) + "\n"


RUN_NOTE = {
    "cpu": """
`nice .venv/bin/python benchmarks/honest_corpus.py --device cpu` (resumable; `--rerun --only NAMES` measures
entries again, a new row each; the table takes each entry's latest row), then `--render`. Each entry is one
whole `atb eval TASK CANDIDATE --device cpu --json` in a subprocess; a quarantined verdict then gets the
extended pass (`review_quarantine`, as `tests/redteam/test_redteam_corpus.py` does); an honest entry then
gets the independent measurement in a fresh process (`torch.utils.benchmark.Timer` on the problem's
`get_inputs`, process CPU time, 5 rounds of reference and candidate blocks, ratio = median of the rounds'
ratios; also over a rotating pool of >= 64 MiB of input sets).
""",
    "cuda": """
On a GPU machine lent by the device tool (one call of at most 600 s; repeat until nothing is left), from
the root of a `git archive` snapshot of the commit measured (it names its own commit; leave `ATB_CODE_REV`
unset), carrying `[".whl", "build/atb-confine", ".snap"]`:
`python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
>/dev/null 2>&1; B=$PWD/build/atb-confine; export ATB_BWRAP="$B/ld-linux-x86-64.so.2 --library-path $B $B/bwrap";
cd .snap && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; python3 benchmarks/honest_corpus.py --device cuda
--cheats gpu --out /tmp/g/honest.jsonl --time-budget-s 540` (or `bash scripts/gpu_rows.sh /tmp/g 545`, which also
runs the probe and the A/A sweeps), then copy the rows back under `benchmarks/results/honest_h200/` and run
`--device cuda --render`. The independent measurement is `triton.testing.do_bench` (median, L2 flushed).
""",
}


# ----------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--out", type=Path, default=None, help="JSON lines (default benchmarks/results/honest_DEVICE.jsonl)")
    p.add_argument("--md", type=Path, default=None, help="markdown (default: --out with .md)")
    p.add_argument("--render", action="store_true", help="only write the markdown from --out")
    p.add_argument("--cheats", choices=["none", "corpus", "gpu", "all"], default="all",
                   help="which cheats run too: tests/redteam/cheats (corpus), cuda_gates' GPU cheats (gpu, CUDA only)")
    p.add_argument("--only", default=None, help="comma-separated entry names (or kind:name)")
    p.add_argument("--rerun", action="store_true", help="evaluate entries already in --out again (a new row each)")
    p.add_argument("--db", type=Path, default=None, help="store for this run (default: a fresh one per run)")
    p.add_argument("--per-entry-timeout-s", type=float, default=300.0)
    p.add_argument("--independent-timeout-s", type=float, default=240.0)
    p.add_argument("--min-run-s", type=float, default=0.25, help="independent timer: seconds per timing")
    p.add_argument("--independent-rounds", type=int, default=5,
                   help="independent timer: rounds of (reference, candidate) blocks; the ratio is their median")
    p.add_argument("--no-hot-graph", action="store_true",
                   help="graph-timed entries: skip the hot do_bench_cudagraph round (kept only for the record; "
                        "about 15 s of device time per entry); the cold graph over distinct sets is the comparison")
    p.add_argument("--time-budget-s", type=float, default=None, help="stop starting entries after this many seconds")
    p.add_argument("--no-review", action="store_true",
                   help="leave quarantined verdicts quarantined (default: run the extended pass, as the red-team test does)")
    p.add_argument("--_review", dest="review", default=None, help=argparse.SUPPRESS)
    p.add_argument("--candidate-file", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_independent", dest="independent", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--task-file", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--graph", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.independent is not None:
        return independent_child(args.task_file, args.independent, args.device, args.threads, args.min_run_s,
                                 rounds=args.independent_rounds, graph=args.graph, hot_graph=not args.no_hot_graph)
    if args.review is not None:
        return review_child(args.review, str(args.task_file), args.candidate_file, args.device, args.db)
    out: Path = args.out or RESULTS / f"honest_{args.device}.jsonl"
    md: Path = args.md or out.with_suffix(".md")
    if args.render:
        md.write_text(render(latest_rows(out), args.device, out.name), encoding="utf-8")
        print(f"wrote {md}")
        return 0
    t0 = time.perf_counter()
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"atb-honest-{args.device}-"))
    db = args.db or work / "atb.sqlite"
    todo = entries(args.device, "none" if args.cheats == "none" else args.cheats, work)
    if args.only:
        wanted = {w.strip() for w in args.only.split(",") if w.strip()}
        todo = [e for e in todo if e["name"] in wanted or f"{e['kind']}:{e['name']}" in wanted]
    done = set() if args.rerun else read_done(out)
    if not todo:
        print("done: nothing to do", flush=True)
    todo = [e for e in todo if f"{e['kind']}:{e['name']}" not in done]
    rev = code_rev()
    digest, threads = protocol_facts()
    print(f"honest corpus on {args.device}: {len(todo)} to do ({len(done)} done before); out {out}; store {db}; "
          f"code {rev}; protocol {digest[:12]}", flush=True)
    for e in todo:
        left = None if args.time_budget_s is None else args.time_budget_s - (time.perf_counter() - t0)
        if left is not None and left < MIN_START_S:
            print(f"stopped: budget spent; {len(todo) - todo.index(e)} entries left; run again to resume", flush=True)
            break
        timeout = args.per_entry_timeout_s if left is None else min(args.per_entry_timeout_s, left)
        row = evaluate(e, args, db, timeout, rev, digest, threads)
        if row["timed_out"] and timeout < args.per_entry_timeout_s:
            print(f"{e['name']}: cut by the time budget; not recorded", flush=True)
            break
        append_line(out, row)
        extra = f" caught={row['caught']}" if e["kind"] == "cheat" else \
            f" independent={_fmt(row.get('independent_ratio'))} err={_fmt(row.get('ratio_error'))}"
        print(f"{e['kind']:6s} {e['name']:40s} {row['status']:11s} ratio={_fmt(row.get('harness_ratio'))}{extra} "
              f"gates={row['rejecting_gates']} ({row['wall_s']} s)", flush=True)
    md.write_text(render(latest_rows(out), args.device, out.name), encoding="utf-8")
    print(f"wrote {md} ({time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
