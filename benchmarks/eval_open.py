"""One-shot ``atb eval`` before and after, side by side: where a session's opening goes (issue 26 item 4).

Each run is one whole ``python -m atb_agent.cli eval TASK CANDIDATE --device cpu --json`` process with
``PYTHONPATH=<its tree>`` (so its measuring children import that tree too), timed from outside (the wall
clock around the process) and from inside (the ``timeline_s``, ``phase_s`` and ``op_s`` its JSON carries).
The arms run in ABBA blocks (A, B, B, A, then again), so a drift of the host's load hits both alike; the
1-minute load average is recorded before each run.

Cases:

* ``kb``: this project's own KernelBench-format fixture ``tests/fixtures/kernelbench_bad_input/good_scale.py``
  (not a KernelBench file) against a small hand-written ``ModelNew`` (written into the work folder); its
  start is its eager reference, so two measuring children (reference, candidate).
* ``native``: the native task ``relu`` with its own start candidate (three children: reference,
  candidate, start).
* ``prespawn``: ``atb eval`` of a task file that does not exist: it exits 2 where the task is loaded, after
  every import that precedes the children's spawn and before any child starts. Its CPU time (user + system,
  from ``getrusage``) is what the parent spends before its first spawn, less the task load; it is not
  disturbed by children and less by the host's load than a wall time.

Store modes: ``warm`` (one store per arm and case, given ``--warmup`` unrecorded runs first, so each
recorded run reuses the stored ceilings, as a store that has seen ``reuse_after_sessions`` sessions does)
or ``fresh`` (a new store per run: every run measures the ceilings).

Usage::

    git archive BEFORE_COMMIT | tar -x -C /tmp/atb-before
    python benchmarks/eval_open.py --arm before=/tmp/atb-before --arm after=. --case kb --store warm \\
        --blocks 4 --work /tmp/eval_open --out benchmarks/results/eval_open_cpu.json

Several ``--case``/``--store`` pairs may be given as ``--plan kb:warm:4 --plan native:warm:2``. The first
``--arm`` is A (the denominator of every ratio). Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ABBA = (0, 1, 1, 0)
ROOT = Path(__file__).resolve().parents[1]
KB_TASK = "tests/fixtures/kernelbench_bad_input/good_scale.py"
KB_CANDIDATE = '''"""A hand-written candidate for AutoTuneBench's own fixture good_scale.py (x * scale + 1)."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(torch.ones_like(x), x, self.scale)
'''


def _load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def case_args(case: str, tree: Path, work: Path) -> list[str]:
    """TASK and CANDIDATE for ``atb eval`` in ``case`` (the task file is the arm's own copy)."""
    if case == "kb":
        cand = work / "good_scale_candidate.py"
        cand.write_text(KB_CANDIDATE, encoding="utf-8")
        return [str(tree / KB_TASK), str(cand)]
    if case == "native":
        return ["relu", "start"]
    if case == "prespawn":
        return [str(work / "no-such-task.py"), str(work / "no-such-candidate.py")]
    raise SystemExit(f"unknown case {case!r} (kb or native)")


def run_one(tree: Path, argv: list[str], db: Path, cwd: Path, timeout_s: float) -> dict[str, Any]:
    """One whole ``atb eval`` process; its wall time from outside and its JSON's timings."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(tree)
    cmd = [sys.executable, "-m", "atb_agent.cli", "eval", *argv, "--device", "cpu", "--db", str(db), "--json"]
    load = _load1()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
    wall = time.monotonic() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    row: dict[str, Any] = {"wall_s": round(wall, 3), "exit_code": out.returncode, "load1_before": load,
                           "parent_cpu_s": round(cpu, 4)}
    try:
        res = json.loads(out.stdout)
    except ValueError:
        row["error"] = (out.stdout + out.stderr)[-2000:]
        return row
    row.update(verdict=res.get("verdict"), reason=str(res.get("reason", ""))[:200],
               confinement=res.get("confinement"), timeline_s=res.get("timeline_s", {}),
               phase_s={k: round(v, 4) for k, v in res.get("phase_s", {}).items()},
               op_s={k: v for k, v in res.get("op_s", {}).items() if k.count(".") == 1})
    return row


def breakdown(row: dict[str, Any]) -> dict[str, float | None]:
    """Where one run's time went, in seconds (see ``STAGES``); None where its tree does not record it."""
    t: dict[str, float] = row.get("timeline_s") or {}
    op: dict[str, float] = row.get("op_s") or {}
    ph: dict[str, float] = row.get("phase_s") or {}

    def d(a: str, b: str) -> float | None:
        return t[b] - t[a] if a in t and b in t else None

    begin = t.get("session_begin")
    rel = {k[5:]: begin + v for k, v in t.items() if k.startswith("open.") and begin is not None
           and not k.startswith("open.reference.")}
    cand_ready = t.get("candidate.ready")
    roles = ("reference", "candidate", "start")
    out: dict[str, float | None] = {
        "parent_imports": t.get("cli_start"),
        "prep_to_first_spawn": d("cli_start", "reference.spawned") or d("cli_start", "workers_spawned"),
        "reference_startup": d("reference.spawned", "reference.ready"),
        "reference_import_torch": t.get("reference.import_torch_s") or t.get("open.reference.import_torch"),
        "candidate_startup": d("candidate.spawned", "candidate.ready"),
        "candidate_import_torch": t.get("candidate.import_torch_s"),
        "parent_store_and_imports": d("workers_spawned", "session_begin"),
        "wait_reference_ready": (rel["reference_ready"] - begin) if "reference_ready" in rel and begin else None,
        "handshake_fingerprint": (rel["fingerprint"] - rel["reference_ready"]) if "fingerprint" in rel else None,
        "wait_others_ready": (rel["others_ready"] - rel["fingerprint"]) if "others_ready" in rel else None,
        "ceilings": (rel["ceilings"] - rel.get("others_ready", rel["fingerprint"])) if "ceilings" in rel else None,
        "session_open_at": t.get("session_open"),
        "measure_total": d("session_open", "measured"),
        "phase_load": ph.get("load"),
        "candidate_load_wait": op.get("candidate.load"),
        "phase_correctness": ph.get("correctness"),
        "phase_timing": ph.get("timing"),
        "reference_work": sum(v for k, v in op.items() if k.startswith("reference.")) or None,
        "candidate_work": sum(v for k, v in op.items() if k.startswith("candidate.") and k != "candidate.load") or None,
        "start_work": sum(v for k, v in op.items() if k.startswith("start.") and k != "start.load") or None,
        "cost_wait": op.get("harness.cost_wait"),
        "gates": op.get("harness.judge"),
        "store_verdict": op.get("harness.store"),
        "close": d("measured", "closed"),
        "exit_after_close": (row["wall_s"] - t["closed"]) if "closed" in t else None,
        "whole_eval": row.get("wall_s"),
    }
    if cand_ready is None and "open" in rel:
        out["candidate_spawned_after_open"] = 1.0
    for role in roles:
        if f"{role}.spawned" in t:
            out[f"{role}_spawned_at"] = t[f"{role}.spawned"]
    return out


def summarise(rows: list[dict[str, Any]], arms: list[str]) -> dict[str, Any]:
    """Per arm, the median of every breakdown stage; the ratio B/A of the medians of each."""
    per: dict[str, dict[str, float | None]] = {}
    if rows and all(r.get("exit_code") == 2 for r in rows):     # the prespawn case: CPU and wall to exit 2
        for arm in arms:
            mine = [r for r in rows if r["arm"] == arm]
            per[arm] = {"n": len(mine), "parent_cpu_s": _r(_median([r["parent_cpu_s"] for r in mine])),
                        "parent_cpu_s_min": _r(min(r["parent_cpu_s"] for r in mine)),
                        "whole_eval": _r(_median([r["wall_s"] for r in mine]))}
        a, b = arms
        return {"median": per, "ratio_b_over_a": {k: _r(per[b][k] / per[a][k]) for k in per[a]
                                                  if k != "n" and per[a][k]}}
    for arm in arms:
        ok = [r for r in rows if r["arm"] == arm and r.get("exit_code") == 0 and "timeline_s" in r]
        stages = [breakdown(r) for r in ok]
        keys = sorted({k for s in stages for k in s})
        per[arm] = {"n": len(ok), **{k: _r(_median([s.get(k) for s in stages])) for k in keys}}
    a, b = arms
    ratios = {k: _r(per[b][k] / per[a][k]) for k in per[a]
              if k != "n" and isinstance(per[a].get(k), float) and isinstance(per[b].get(k), float) and per[a][k]}
    # paired: each ABBA block's B runs over its A runs (the same minutes of host load)
    blocks: dict[int, dict[str, list[float]]] = {}
    for r in rows:
        if r.get("exit_code") == 0:
            blocks.setdefault(r["block"], {}).setdefault(r["arm"], []).append(r["wall_s"])
    paired = [statistics.mean(v[b]) / statistics.mean(v[a]) for v in blocks.values() if v.get(a) and v.get(b)]
    return {"median": per, "ratio_b_over_a": ratios,
            "paired_block_ratio_median": _r(_median(list(paired))), "paired_block_ratios": [_r(x) for x in paired]}


# the breakdown's stages in the order a one-shot eval goes through them, with what each one is
STAGES = [
    ("parent_imports", "process start to `run_eval` (interpreter, CLI parser, harness imports)"),
    ("prep_to_first_spawn", "task load, FLOP-count process spawn, protocol load, bwrap probe, to the reference spawn"),
    ("reference_spawned_at", "the reference child spawned (s since process start)"),
    ("candidate_spawned_at", "the candidate child spawned early (after: s since process start)"),
    ("reference_startup", "reference child: spawn to ready (bwrap, interpreter, import torch, device init)"),
    ("reference_import_torch", "of which `import torch` and the child's own modules"),
    ("candidate_startup", "candidate child: spawn to ready (spawned early only in after)"),
    ("candidate_import_torch", "of which `import torch`"),
    ("parent_store_and_imports", "parent after the spawn: store open, verdict modules (overlaps the children)"),
    ("wait_reference_ready", "session open: waiting for the reference's ready line"),
    ("handshake_fingerprint", "ready to fingerprint reply"),
    ("wait_others_ready", "after: the CPU ceilings wait for the other arms' start-up"),
    ("ceilings", "ceilings: measured (fresh store) or read from the store (warm)"),
    ("session_open_at", "session open (s since process start)"),
    ("phase_load", "evaluation: load phase (before: includes the candidate child's whole start-up)"),
    ("candidate_load_wait", "of which the wait on the candidate's load reply"),
    ("phase_correctness", "correctness phase"),
    ("phase_timing", "timing phase"),
    ("reference_work", "reference child: all commands (load, check, prepare, block, ...)"),
    ("candidate_work", "candidate child: all commands but load"),
    ("start_work", "start child: all commands but load"),
    ("cost_wait", "wait for the FLOP count after the measurement"),
    ("gates", "gates and their decision (`harness.judge`)"),
    ("store_verdict", "storing the verdict (`harness.store`)"),
    ("measure_total", "session open to verdict stored"),
    ("close", "session close"),
    ("exit_after_close", "process exit after close"),
    ("whole_eval", "the whole `atb eval` process, timed from outside"),
]


def render(results: dict[str, Any]) -> str:
    """Markdown tables of a results file: per case, the median of each stage per arm and their ratio."""
    names = results.get("arm_order") or sorted(results["arms"], reverse=True)   # A first ("before", "after")
    a, b = names
    lines = [f"Arms: {a} = `{results['arms'][a]['rev']}`, {b} = `{results['arms'][b]['rev']}`; "
             f"{results['started_utc']} to {results.get('finished_utc', '?')}; {results['host']}.", ""]
    for key, c in results["cases"].items():
        ma, mb = c["median"][a], c["median"][b]
        loads = [r["load1_before"] for r in c["runs"]]
        lines += [f"### {key} (n = {ma['n']} + {mb['n']}; 1-min load {min(loads):.1f}-{max(loads):.1f})", ""]
        if "parent_cpu_s" in ma:
            lines += [f"| | {a} | {b} | {b}/{a} |", "|---|---|---|---|"]
            for k in ("parent_cpu_s", "parent_cpu_s_min", "whole_eval"):
                lines.append(f"| {k} | {ma[k]} | {mb[k]} | {c['ratio_b_over_a'].get(k)} |")
            lines.append("")
            continue
        lines += [f"| stage (median s) | {a} | {b} | {b}/{a} | what |", "|---|---|---|---|---|"]
        for k, what in STAGES:
            if ma.get(k) is None and mb.get(k) is None:
                continue
            lines.append(f"| {k} | {ma.get(k)} | {mb.get(k)} | {c['ratio_b_over_a'].get(k, '')} | {what} |")
        lines += ["", f"Paired ABBA block ratios of the whole eval ({b}/{a}): {c['paired_block_ratios']}, median "
                  f"{c['paired_block_ratio_median']}.", ""]
    return "\n".join(lines)


def _revision(tree: Path) -> str:
    """The tree's commit (a ``git archive`` copy: its ``REVISION`` file) and whether it has local edits."""
    if (tree / "REVISION").exists():
        return (tree / "REVISION").read_text().strip()
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (rev.stdout.strip() or "unknown") + ("+local-edits" if dirty else "")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", action="append", default=[], help="NAME=TREE (twice; the first is A)")
    p.add_argument("--render", type=Path, help="print a results file's tables as Markdown and stop")
    p.add_argument("--plan", action="append", default=[], help="CASE:STORE:BLOCKS, e.g. kb:warm:4 (repeatable)")
    p.add_argument("--warmup", type=int, default=3, help="unrecorded runs per arm before a warm store's runs")
    p.add_argument("--work", type=Path, default=Path("/tmp/atb_eval_open"))
    p.add_argument("--out", type=Path, help="results JSON")
    p.add_argument("--timeout-s", type=float, default=300.0)
    args = p.parse_args()
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    if args.out is None:
        raise SystemExit("give --out")
    arms = [a.split("=", 1) for a in args.arm]
    if len(arms) != 2:
        raise SystemExit("give exactly two --arm NAME=TREE")
    names = [n for n, _ in arms]
    trees = {n: Path(t).resolve() for n, t in arms}
    revs = {n: _revision(tree) for n, tree in trees.items()}
    plans = args.plan or ["kb:warm:4"]
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"arms": {n: {"tree": str(t), "rev": revs[n]} for n, t in trees.items()},
                               "arm_order": names,
                               "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                               "command": " ".join([Path(sys.executable).name, *sys.argv]), "cases": {}}
    for plan in plans:
        case, store_mode, n_blocks = plan.split(":")
        work = args.work / f"{case}-{store_mode}"
        work.mkdir(parents=True, exist_ok=True)
        argv = {n: case_args(case, trees[n], work) for n in names}
        rows: list[dict[str, Any]] = []
        if store_mode == "warm" and case != "prespawn":
            for i in range(args.warmup):
                for n in names:
                    r = run_one(trees[n], argv[n], work / f"{n}.sqlite", work, args.timeout_s)
                    print(f"[{case}:{store_mode}] warm-up {i} {n}: {r['wall_s']} s exit {r['exit_code']}", flush=True)
        k = 0
        for block in range(int(n_blocks)):
            for pos in ABBA:
                n = names[pos]
                db = work / (f"{n}.sqlite" if store_mode == "warm" else f"{n}-{k}.sqlite")
                r = run_one(trees[n], argv[n], db, work, args.timeout_s)
                r.update(arm=n, block=block, index=k)
                rows.append(r)
                k += 1
                print(f"[{case}:{store_mode}] block {block} {n}: {r['wall_s']} s exit {r['exit_code']} "
                      f"{r.get('verdict')} load {r['load1_before']}", flush=True)
        results["cases"][f"{case}:{store_mode}"] = {"runs": rows, **summarise(rows, names)}
        args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    results["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.out.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    for key, c in results["cases"].items():
        a, b = names
        print(f"{key}: whole eval median {c['median'][a].get('whole_eval')} s ({a}, n={c['median'][a]['n']}) vs "
              f"{c['median'][b].get('whole_eval')} s ({b}, n={c['median'][b]['n']}): ratio "
              f"{c['ratio_b_over_a'].get('whole_eval')}; paired block ratio {c.get('paired_block_ratio_median')}"
              + (f"; parent CPU {c['median'][a]['parent_cpu_s']} vs {c['median'][b]['parent_cpu_s']} s"
                 if "parent_cpu_s" in c["median"][a] else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
