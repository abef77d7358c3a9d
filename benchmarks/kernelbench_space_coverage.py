"""Does random search have a space, and legal rendered points, on every KernelBench problem? (issue 26, CPU only)

The issue's target "Random search runs on every KernelBench problem of Level 1 and 2 (no problem without
a space)" has a part that needs no GPU: for each problem file, the module space the random arm searches
(:mod:`harness.tasks._module_space`, derived from the problem's cost count), the points the seeded sampler
draws from it (:class:`harness.tuning.search.RandomSearch`, the same sampler the campaign uses), and the
``ModelNew`` file each point renders to. For every problem of the chosen levels, on both torch backends'
spaces (cuda: what the H200 sweep searches; cpu), this script checks, per seeded point:

- ``legal``: the point satisfies its space's constraints and the renderer's universe (``full_point``);
- ``parses``: the rendered file compiles to Python bytecode and defines ``ModelNew``;
- ``scans_clean``: the gates' static source scans (precision, tampering, torch patches, threads,
  heap search) find nothing in the rendered file that they do not already find in the problem's own
  eager start candidate (``ModelNew = Model``): the rendering adds no finding;
- ``built_meta``: the rendered module imports, and ``Model`` and ``ModelNew`` build from
  ``get_init_inputs()`` on the **meta device** (shapes only: no memory, no arithmetic, nothing at
  KernelBench's GPU sizes is allocated) with the same parameter and buffer names and shapes; a compiled
  point's ``torch.compile`` call is made (its Inductor options are checked by this torch), nothing is
  compiled;
- ``forward_meta`` (uncompiled points without the CUDA-graph wrapper, where the reference's forward runs
  on meta): ``ModelNew``'s forward on meta inputs gives the reference's output shapes and dtypes.

What it does not check: that a compiled point compiles or computes the right values (that needs the
device; the sweep's verdicts are that measurement), or the CUDA-graph wrapper at run time.

The facts a space is derived from come from :func:`harness.tasks._cost.count_file`, what the harness's
own counting process (``python -m harness.tasks._cost``) runs for each file, run here in one child process
per level (task code never runs in this process); they are compared with the committed counts
(``benchmarks/results/kernelbench/sizes_levelN.json``) where those exist.

Usage::

    .venv/bin/python benchmarks/kernelbench_space_coverage.py --kb .kb/KernelBench --levels 1,2 \\
        --seed 1 --budget 10 --out benchmarks/results/kernelbench/space_coverage_cpu.json
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from kernelbench_sweep import problem_dir, problem_id, select_problems

PER_FILE_TIMEOUT_S = 120      # one problem's count, spaces, renders and meta builds in the child
MARK = "ATB_SPACE_COVERAGE "
BACKENDS = ("cuda", "cpu")


def point_label(point: dict[str, Any]) -> str:
    """A point's non-default knobs, ``compile=max-autotune,cuda_graph`` ('eager' for the start point)."""
    from harness.tasks._module_space import DEFAULTS

    parts = []
    for k, v in point.items():
        if v == DEFAULTS.get(k):
            continue
        parts.append(k if v is True else f"{k}={v}" if not isinstance(v, bool) else f"no_{k}")
    return ",".join(parts) or "eager"


# ----------------------------------------------------------------------------------- static scans
def scan_findings(source: str, input_dtype: str) -> list[str]:
    """What the gates' static scans (the source-only halves of five gates) find in ``source``."""
    from harness.verdict.gates import escape, precision, sabotage, scavenging, tampering
    from harness.verdict.gates._source import matching, scan_source

    scan = scan_source(source)
    if scan.parse_error:
        return [f"does not parse: {scan.parse_error}"]
    found: list[str] = []
    dtype = precision._dtype(input_dtype)
    rank = precision.RANK.get(dtype)
    if rank is not None:
        found += [f"precision: {p}" for p in precision._source_problems(scan, dtype, rank)]
    found += [f"tampering: {p}" for p in tampering._source_problems(scan)]
    found += [f"sabotage: {p}" for p in sabotage.torch_patches(scan)]
    spawns = matching(scan.calls, prefixes=escape.SPAWN_PREFIXES, suffixes=escape.SPAWN_SUFFIXES)
    if spawns:
        found.append(f"escape: starts threads or processes ({scan.where(spawns)})")
    heap = matching(scan.references, exact=scavenging.HEAP_REFS, suffixes=scavenging.HEAP_SUFFIXES)
    if heap:
        found.append(f"scavenging: heap or file search ({scan.where(heap)})")
    return found


# ----------------------------------------------------------------------------------- the child
class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout(f"over {PER_FILE_TIMEOUT_S} s")


def _signature(torch: Any, module: Any) -> list[tuple[str, list[int]]]:
    return [(n, list(t.shape)) for n, t in list(module.named_parameters()) + list(module.named_buffers())]


def _outs(torch: Any, obj: Any) -> list[tuple[list[int], str]]:
    from harness.tasks._cost import _tensors

    return [(list(t.shape), str(t.dtype)) for t in _tensors(obj, torch)]


def _meta_check(torch: Any, path: Path, name: str, point: dict[str, Any], forward: bool) -> dict[str, Any]:
    """Import a rendered file and build Model and ModelNew on meta; run both forwards when asked."""
    from harness.tasks._cost import import_task_module

    res: dict[str, Any] = {"built_meta": False}
    mod = import_task_module(torch, path, name)
    before = torch.backends.cudnn.benchmark
    try:
        with torch.device("meta"):
            torch.manual_seed(0)
            init = list(mod.get_init_inputs())
            torch.manual_seed(0)
            ref = mod.Model(*init)
            torch.manual_seed(0)
            new = mod.ModelNew(*init)
        if not isinstance(new, mod.Model):
            raise TypeError(f"ModelNew is {type(new).__name__}, not a Model")
        if isinstance(ref, torch.nn.Module) and _signature(torch, ref) != _signature(torch, new):
            raise ValueError("ModelNew's parameters/buffers differ from Model's")
        res["built_meta"] = True
        if forward:
            with torch.device("meta"):
                torch.manual_seed(0)
                inputs = list(mod.get_inputs())
            with torch.no_grad():
                want = _outs(torch, ref(*inputs))
                got = _outs(torch, new(*inputs))
            res["forward_meta"] = got == want
            if got != want:
                res["error"] = f"outputs {got} where the reference gives {want}"
    finally:
        torch.backends.cudnn.benchmark = before     # a cudnn_benchmark point sets the global flag
    return res


def check_problem(torch: Any, path: Path, seed: int, budget: int, scratch: Path) -> dict[str, Any]:
    """Everything this script checks for one problem file (see the module docstring)."""
    from harness.records import sha256_text
    from harness.tasks import load_task
    from harness.tasks._cost import count_file
    from harness.tasks._module_space import (
        ModuleFacts,
        build_module_space,
        full_point,
        render_point,
    )
    from harness.tuning.search import RandomSearch

    t0 = time.perf_counter()
    row: dict[str, Any] = {"problem": path.stem, "id": problem_id(path)}
    task = load_task(path)
    row["source_sha256"] = task.source_sha256[:12]
    counted = count_file(torch, path)     # what the counting process runs: an import failure is a finding, not an exception
    facts = ModuleFacts.from_count(counted)
    row["count"] = {"method": counted.method.split(" (")[0], "inputs": [list(i) for i in counted.inputs],
                    "ops": sorted(counted.flops_by_op)}
    row["facts"] = facts.model_dump(mode="json", exclude={"input_ranks", "input_dtypes", "count_method"})
    input_dtype = counted.inputs[0][1] if counted.inputs else "float32"
    start_findings = set(scan_findings(task.start_source(), input_dtype))
    row["start_scan_findings"] = sorted(start_findings)
    meta_forward_ok = counted.method == "flop_counter:meta"
    row["spaces"] = {}
    n = 0
    for backend in BACKENDS:
        ms = build_module_space(facts, backend)
        space = ms.space
        points = RandomSearch(space, seed).sequence(budget)
        entries: list[dict[str, Any]] = []
        for point in points:
            e: dict[str, Any] = {"point": point_label(point)}
            try:
                full_point(point)
                e["legal"] = not space.violations(point)
            except Exception as exc:  # noqa: BLE001 - an illegal point is a finding
                e["legal"], e["error"] = False, f"{type(exc).__name__}: {exc}"[:300]
            try:
                text = render_point(task, point)
                e["sha256"] = sha256_text(text)[:12]
                tree = ast.parse(text)
                compile(tree, f"<{path.stem} {e['point']}>", "exec")
                e["parses"] = any(isinstance(s, ast.ClassDef) and s.name == "ModelNew" for s in tree.body) or \
                    any(isinstance(s, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ModelNew"
                                                         for t in s.targets) for s in tree.body)
            except Exception as exc:  # noqa: BLE001
                e["parses"], e["error"] = False, f"{type(exc).__name__}: {exc}"[:300]
                entries.append(e)
                continue
            extra = sorted(set(scan_findings(text, input_dtype)) - start_findings)
            e["scans_clean"] = not extra
            if extra:
                e["scan_findings"] = extra
            forward = meta_forward_ok and point["compile"] == "off" and not point.get("cuda_graph", False)
            rendered = scratch / f"{path.stem}_{backend}_{n}.py"
            n += 1
            rendered.write_text(text, encoding="utf-8")
            e["built_meta"] = False
            try:
                e.update(_meta_check(torch, rendered, f"atb_cov_r{n}_{abs(hash(str(path))):x}", point, forward))
            except _Timeout:
                raise
            except Exception as exc:  # noqa: BLE001
                e["error"] = f"{type(exc).__name__}: {exc}"[:300]
            entries.append(e)
        row["spaces"][backend] = {"knobs": [k.name for k in space.knobs], "size": space.size(),
                                  "distinct_points": len({e.get("sha256") for e in entries}), "points": entries}
    row["wall_s"] = round(time.perf_counter() - t0, 2)
    return row


def child(paths: list[Path], seed: int, budget: int) -> int:
    import torch

    torch.set_num_threads(1)
    signal.signal(signal.SIGALRM, _alarm)
    with tempfile.TemporaryDirectory(prefix="atb-cov-") as tmp:
        for p in paths:
            signal.alarm(PER_FILE_TIMEOUT_S)
            try:
                row = check_problem(torch, p, seed, budget, Path(tmp))
            except BaseException as exc:   # every problem gets a row (its timeout included); the child goes on
                if isinstance(exc, KeyboardInterrupt):
                    raise
                row = {"problem": p.stem, "id": problem_id(p), "error": f"{type(exc).__name__}: {exc}"[:400]}
            finally:
                signal.alarm(0)
            print(MARK + json.dumps(row, default=str), flush=True)
    return 0


# ----------------------------------------------------------------------------------- the parent
def run_level(paths: list[Path], seed: int, budget: int) -> list[dict[str, Any]]:
    """All problems of a level through child processes; a child that dies is restarted after the
    problem it died on (which gets an error row)."""
    rows: dict[str, dict[str, Any]] = {}
    todo = list(paths)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": f"{ROOT}:{ROOT / 'benchmarks'}"}
    while todo:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--_child", *map(str, todo),
                               "--seed", str(seed), "--budget", str(budget)],
                              check=False, capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=PER_FILE_TIMEOUT_S * len(todo) + 120)
        for line in proc.stdout.splitlines():
            if line.startswith(MARK):
                row = json.loads(line[len(MARK):])
                rows[row["problem"]] = row
                print(f"  {row['problem']}: {'error ' + row['error'][:120] if 'error' in row and 'spaces' not in row else 'ok'}",
                      file=sys.stderr, flush=True)
        left = [p for p in todo if p.stem not in rows]
        if left:
            tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
            rows[left[0].stem] = {"problem": left[0].stem, "id": problem_id(left[0]),
                                  "error": f"the checking process died on it (exit {proc.returncode}): {tail}"[:400]}
            left = left[1:]
        todo = left
    return [rows[p.stem] for p in paths]


def committed_facts_agree(level: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Compare the counted inputs and ops with the committed count of the same snapshot, where it exists."""
    f = ROOT / "benchmarks" / "results" / "kernelbench" / f"sizes_level{level}.json"
    try:
        committed = {r["problem"]: r for r in json.loads(f.read_text())["problems"]}
    except (OSError, ValueError, KeyError):
        return {"committed_count": None}
    same = differ = missing = 0
    differing: list[str] = []
    for row in rows:
        c = committed.get(row["problem"])
        if c is None or "count" not in row:
            missing += 1
            continue
        ok = [list(i) for i in c.get("inputs", [])] == row["count"]["inputs"] and \
            sorted(c.get("flops_by_op", {})) == row["count"]["ops"]
        same += ok
        differ += not ok
        if not ok:
            differing.append(row["problem"])
    return {"committed_count": f.name, "agree": same, "differ": differ, "not_compared": missing,
            "differing": differing}


def summarise(level: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"problems": len(rows),
                           "with_space": {b: sum(1 for r in rows if b in r.get("spaces", {})) for b in BACKENDS},
                           "problem_errors": [f"{r['problem']}: {r['error']}" for r in rows if "spaces" not in r]}
    for b in BACKENDS:
        pts = [e for r in rows for e in r.get("spaces", {}).get(b, {}).get("points", [])]
        fwd = [e for e in pts if "forward_meta" in e]
        bad = [f"{r['problem']} [{e['point']}]: {e.get('error') or e.get('scan_findings')}"
               for r in rows for e in r.get("spaces", {}).get(b, {}).get("points", [])
               if not (e.get("legal") and e.get("parses") and e.get("scans_clean") and e.get("built_meta")
                       and e.get("forward_meta", True))]
        out[b] = {
            "points_rendered": sum(1 for e in pts if "sha256" in e),
            "points_legal": sum(1 for e in pts if e.get("legal")),
            "points_parse": sum(1 for e in pts if e.get("parses")),
            "points_scan_clean": sum(1 for e in pts if e.get("scans_clean")),
            "points_built_meta": sum(1 for e in pts if e.get("built_meta")),
            "points_forward_checked": len(fwd), "points_forward_ok": sum(1 for e in fwd if e["forward_meta"]),
            "points_compiled": sum(1 for e in pts if "compile=" in e["point"]),
            "points_max_autotune": sum(1 for e in pts if "compile=max-autotune" in e["point"]),
            "points_cuda_graph": sum(1 for e in pts if "cuda_graph" in e["point"].split(",")),
            "distinct_points": sum(r["spaces"][b]["distinct_points"] for r in rows if b in r.get("spaces", {})),
            "space_sizes": sorted({r["spaces"][b]["size"] for r in rows if b in r.get("spaces", {})}),
            "failures": bad,
        }
    out["count_methods"] = {}
    for r in rows:
        m = r.get("count", {}).get("method", "none")
        out["count_methods"][m] = out["count_methods"].get(m, 0) + 1
    out["start_scan_findings"] = {r["problem"]: r["start_scan_findings"] for r in rows if r.get("start_scan_findings")}
    out["facts_vs_committed_count"] = committed_facts_agree(level, rows)
    return out


def _point_ok(e: dict[str, Any]) -> bool:
    return bool(e.get("legal") and e.get("parses") and e.get("scans_clean") and e.get("built_meta")
                and e.get("forward_meta", True))


def compact(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Rows for the committed file: each distinct seeded point sequence once (problems whose spaces are the
    same draw the same points), and per problem and backend only its sequence's key, how many points passed
    every check, a digest over its rendered files' digests, and what failed."""
    from harness.records import sha256_text

    sequences: dict[str, Any] = {}
    out: list[dict[str, Any]] = []
    for r in rows:
        c: dict[str, Any] = {k: r[k] for k in ("level", "problem", "id", "source_sha256", "count", "facts", "start_scan_findings",
                               "wall_s", "error") if k in r and r[k] not in ([], None)}
        for b, sp in r.get("spaces", {}).items():
            labels = [e["point"] for e in sp["points"]]
            key = sha256_text(json.dumps([b, sp["knobs"], labels]))[:8]
            sequences.setdefault(key, {"backend": b, "knobs": sp["knobs"], "size": sp["size"], "points": labels})
            c.setdefault("spaces", {})[b] = {
                "sequence": key, "ok": sum(1 for e in sp["points"] if _point_ok(e)), "of": len(sp["points"]),
                "distinct": sp["distinct_points"],
                "forward_meta_checked": sum(1 for e in sp["points"] if "forward_meta" in e),
                "renders_sha256": sha256_text("".join(str(e.get("sha256")) for e in sp["points"]))[:12],
                "failures": [{"point": e["point"], "error": e.get("error") or e.get("scan_findings")}
                             for e in sp["points"] if not _point_ok(e)],
            }
        out.append(c)
    return sequences, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kb", type=Path, default=ROOT / ".kb" / "KernelBench")
    p.add_argument("--levels", default="1,2")
    p.add_argument("--problems", default=None, help="ids or ranges within each level (default: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget", type=int, default=10)
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--full", action="store_true", help="write every point's checks (default: compact rows)")
    p.add_argument("--_child", dest="child", nargs="+", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child is not None:
        return child(args.child, args.seed, args.budget)
    import torch

    t0 = time.perf_counter()
    levels: dict[str, Any] = {}
    all_rows: list[dict[str, Any]] = []
    for level in (int(x) for x in args.levels.split(",")):
        paths = select_problems(problem_dir(args.kb, level), args.problems)
        print(f"level {level}: {len(paths)} problems", file=sys.stderr, flush=True)
        rows = run_level(paths, args.seed, args.budget)
        for r in rows:
            r["level"] = level
        levels[str(level)] = summarise(level, rows)
        all_rows += rows
    from harness.records import sha256_text
    from harness.tasks._module_space import _TEMPLATE, RENDERER

    doc = {
        "what": "random-search module spaces of KernelBench problems, their seeded points rendered to ModelNew "
                "files and checked on the CPU (meta device); see benchmarks/kernelbench_space_coverage.py",
        "seed": args.seed, "budget": args.budget, "backends": list(BACKENDS),
        "renderer": RENDERER, "renderer_sha256": sha256_text(_TEMPLATE)[:12],
        "problems": {lv: s["problems"] for lv, s in levels.items()},
        "problems_sha256": sha256_text("".join(sorted(r.get("source_sha256", "?") for r in all_rows)))[:12],
        "torch": str(torch.__version__), "python": platform.python_version(),
        "wall_s": round(time.perf_counter() - t0, 1),
        "levels": levels,
    }
    if args.full:
        doc["rows"] = all_rows
        text = json.dumps(doc, indent=1, default=str)
    else:
        doc["sequences"], doc["rows"] = compact(all_rows)
        text = "{\n" + ",\n".join(f"{json.dumps(k)}: {json.dumps(v, default=str)}" for k, v in doc.items()
                                    if k != "rows")
        text += ',\n"rows": [\n' + ",\n".join(json.dumps(r, default=str) for r in doc["rows"]) + "\n]\n}"
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    for name, s in levels.items():
        print(f"level {name}: space on cuda {s['with_space']['cuda']}/{s['problems']}, cpu "
              f"{s['with_space']['cpu']}/{s['problems']}; cuda points rendered {s['cuda']['points_rendered']}, legal "
              f"{s['cuda']['points_legal']}, parse {s['cuda']['points_parse']}, built on meta "
              f"{s['cuda']['points_built_meta']}, forward on meta {s['cuda']['points_forward_ok']}/"
              f"{s['cuda']['points_forward_checked']}; failures {len(s['cuda']['failures'])} cuda, "
              f"{len(s['cpu']['failures'])} cpu", flush=True)
    failed = any(s["problem_errors"] or s["cuda"]["failures"] or s["cpu"]["failures"] for s in levels.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
