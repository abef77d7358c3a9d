"""What one compiled random-search point costs to evaluate, before and after issue 26's compile changes.

Three arms, side by side in one run, on compiled points of a KernelBench-format problem (default: the
tests' own fixture ``tests/fixtures/module_space/tiny_conv_relu.py``, not a KernelBench file):

* ``before``: the measuring child compiles in process with one thread and no shared cache
  (``ATB_COMPILE_THREADS=1``, ``ATB_COMPILE_CACHE=off``): what ``main`` does;
* ``after_cold``: parallel first-call compile (``ATB_COMPILE_THREADS`` unset: the CPU count, at most 8)
  and the rendered-point cache, whose entry for the point does not exist yet;
* ``after_warm``: the same point again, its cache entry now kept by ``after_cold``.

Each arm has its own measurement session (the compile thread count is fixed when a session opens); an
evaluation starts no spare worker (``prespawn_next=False``), so no arm's child start-up overlaps another
arm's evaluation. The arms' order rotates from point to point, so a drift of the shared host's load does
not fall on one arm. Reported per evaluation: whole ``evaluate_candidate`` wall time, the collector's
``load`` phase (the child's first call, where the compile happens), the verdict and the escape gate's
result; then medians and ratios against ``before``.

Usage::

    python benchmarks/compiled_point_cost.py --out benchmarks/results/compiled_point_cost_cpu.json

``--compare-keys``: what the compile cache's key is per, within one campaign. A sequence of DIFFERENT
compiled points of one problem (default: the first ``--n-points`` compiled points of the seeded
random-search draw of its module space, ``--seed``) is evaluated under two arms, each with its own fresh
cache root, alternating which arm goes first from point to point:

* ``per_rendering``: ``ATB_COMPILE_CACHE_KEY=rendering``, an entry per exact rendering (the earlier
  behaviour; within a campaign every point misses);
* ``per_problem``: ``ATB_COMPILE_CACHE_KEY=problem`` (the default), one entry per problem, merged file by
  file, so a later point is seeded with everything the earlier points of that arm compiled.

Both arms use one measurement session (parallel first-call compile, the default thread count) and start
no spare worker. Reported per evaluation: whole wall time, the ``load`` phase, the verdict, the cache's
record (files seeded, files new to the entry, files it held already); then medians, the ratio
per_problem / per_rendering of the medians (over all points and over the points after the first, which
no arm can seed), and whether both arms gave the same verdicts::

    python benchmarks/compiled_point_cost.py --compare-keys \
        --out benchmarks/results/compiled_point_cost_problem_cpu.json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.measure import compile_cache  # noqa: E402
from harness.measure.session import open_measurement_session  # noqa: E402
from harness.store import open_store  # noqa: E402
from harness.tasks import load_task  # noqa: E402
from harness.tasks._module_space import render_point  # noqa: E402
from harness.verdict.evaluate import evaluate_candidate  # noqa: E402
from protocol import load_protocol  # noqa: E402

ARMS = ("before", "after_cold", "after_warm")
DEFAULT_POINTS = [{"compile": "default"}, {"compile": "max-autotune"},
                  {"compile": "default", "inference_mode": True}]


class _Uses(logging.Handler):
    """Collects the compile cache's per-evaluation record (harness.measure.compile_cache logs one)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.uses: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if msg.startswith("compile cache: "):
            self.uses.append(json.loads(msg[len("compile cache: "):]))


def _rev() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def render_markdown(out: dict[str, Any]) -> str:
    """The results file's table: one row per evaluation, then the arms' sums and ratios."""
    s = out["summary"]
    lines = [f"# Compiled random-search points: cost before and after issue 26 ({out['device']})", "",
             (f"`benchmarks/compiled_point_cost.py` at `{out['code_rev']}`, {out['started_utc']} to "
              f"{out['finished_utc']}; task `{out['task']}`; torch {out['torch']}; {out['cpu_count']} CPUs; "
              f"compile threads before {out['compile_threads']['before']}, after {out['compile_threads']['after']}; "
              f"1-min load average {out['loadavg_before'][0]} before, {out['loadavg_after'][0]} after "
              "(the host is shared)."), "",
             "| point | config | arm | whole eval (s) | load phase (s) | verdict | escape gate | cache |",
             "|---|---|---|---|---|---|---|---|"]
    for r in out["rows"]:
        c = r["cache"]
        cache = (f"hit ({c['seeded_files']} files)" if c.get("seeded_files") else
                 f"miss, kept {c.get('kept_files', 0)} files" if c.get("key") else c.get("why_not", ""))
        cfg = ", ".join(f"{k}={v}" for k, v in r["config"].items())
        lines.append(f"| {r['point']} | {cfg} | {r['arm']} | {r['wall_s']:.2f} | {r['load_s']:.2f} | {r['status']} "
                     f"| {'passed' if r['escape_passed'] else 'FAILED'} | {cache} |")
    lines += ["", ("| arm | evaluations | sum of load phases (s) | sum of whole evals (s) | load vs before | "
                   "whole eval vs before | accepted | escape gate passed |"), "|---|---|---|---|---|---|---|---|"]
    for arm in ARMS:
        a = s[arm]
        lines.append(f"| {arm} | {a['n']} | {a['sum_load_s']:.2f} | {a['sum_wall_s']:.2f} | "
                     f"{a.get('ratio_sum_load_vs_before', 1.0)} | {a.get('ratio_sum_wall_vs_before', 1.0)} | "
                     f"{a['accepted']}/{a['n']} | {a['escape_passed']}/{a['n']} |")
    return "\n".join(lines) + "\n"


KEY_ARMS = ("per_rendering", "per_problem")
KEY_OF_ARM = {"per_rendering": "rendering", "per_problem": "problem"}


def _med(xs: list[float]) -> float | None:
    return round(statistics.median(xs), 2) if xs else None


def render_keys_markdown(out: dict[str, Any]) -> str:
    """The --compare-keys results file: one row per evaluation, then the medians and ratios."""
    s = out["summary"]
    lines = [f"# Compile cache keyed per problem vs per rendering, within one campaign ({out['device']})", "",
             (f"`{out['command']}` at `{out['code_rev']}`, {out['started_utc']} to {out['finished_utc']}; task "
              f"`{out['task']}`; points: the first {len(out['points'])} compiled points of the seed-{out['seed']} "
              f"draw of its module space; torch {out['torch']}; {out['cpu_count']} CPUs; compile threads "
              f"{out['compile_threads']}; load average (1/5/15 min) {out['loadavg_before']} before, "
              f"{out['loadavg_after']} after (the host is shared)."), "",
             "| point | config | arm | whole eval (s) | load phase (s) | verdict | seeded | new to entry | entry had | "
             "1-min load |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in out["rows"]:
        c = r["cache"]
        cfg = ", ".join(f"{k}={v}" for k, v in r["config"].items())
        lines.append(f"| {r['point']} | {cfg} | {r['arm']} | {r['wall_s']:.2f} | {r['load_s']:.2f} | {r['status']} | "
                     f"{c.get('seeded_files', '')} | {c.get('kept_files', '')} | {c.get('already_files', '')} | "
                     f"{r['loadavg_1m_after']} |")
    lines += ["", "| arm | evaluations | median load (s) | median whole eval (s) | median load, points 1+ (s) | "
              "median whole eval, points 1+ (s) | sum load (s) | sum whole eval (s) |",
              "|---|---|---|---|---|---|---|---|"]
    for arm in KEY_ARMS:
        a = s[arm]
        lines.append(f"| {arm} | {a['n']} | {a['median_load_s']} | {a['median_wall_s']} | {a['median_load_s_after_first']} "
                     f"| {a['median_wall_s_after_first']} | {a['sum_load_s']} | {a['sum_wall_s']} |")
    r = s["ratio_per_problem_vs_per_rendering"]
    lines += ["", (f"per_problem / per_rendering: median load {r['median_load']}, median whole eval {r['median_wall']}; "
                   f"points 1+: load {r['median_load_after_first']}, whole eval {r['median_wall_after_first']}; "
                   f"per point (load) {r['load_per_point']}, (whole eval) {r['wall_per_point']}."),
              f"Same verdicts in both arms: {s['same_verdicts']}."]
    return "\n".join(lines) + "\n"


def _files(root: Path) -> dict[str, int]:
    """Relative path -> size of the regular files under ``root`` (a cache root: its entries' files)."""
    if not root.is_dir():
        return {}
    return {str(f.relative_to(root)): f.stat().st_size for f in sorted(root.rglob("*"))
            if f.is_file() and not f.is_symlink() and not f.relative_to(root).parts[0].startswith(".")}


def compare_keys(args: argparse.Namespace) -> int:
    """The --compare-keys run (see the module's docstring)."""
    from harness.tuning.search import RandomSearch
    from harness.tuning.subjects import load_subject

    task = load_task(args.task)
    if args.points_given:
        points = json.loads(args.points)
    else:
        subject = load_subject(Path(args.task))   # unbound: the CPU's module space
        draw = RandomSearch(subject.search_space(), args.seed).sequence(64)
        points = [p for p in draw if p.get("compile", "off") != "off"][:args.n_points]
    proto = load_protocol()
    uses = _Uses()
    logging.getLogger(compile_cache.__name__).addHandler(uses)
    logging.getLogger(compile_cache.__name__).setLevel(logging.INFO)
    rows: list[dict[str, Any]] = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="atb-bench-compile-keys-") as tmp:
        roots = {arm: Path(tmp) / f"cache-{arm}" for arm in KEY_ARMS}
        store = open_store(Path(tmp) / "bench.sqlite")
        os.environ.pop("ATB_COMPILE_THREADS", None)
        session = open_measurement_session(store, args.device, proto, note="compiled_point_cost compare-keys")
        threads = int(session.config["compile_threads"])
        try:
            for i, point in enumerate(points):
                source = render_point(task, point)
                order = KEY_ARMS if i % 2 == 0 else KEY_ARMS[::-1]
                for arm in order:
                    os.environ[compile_cache.ENV] = str(roots[arm])
                    os.environ[compile_cache.KEY_ENV] = KEY_OF_ARM[arm]
                    n_uses = len(uses.uses)
                    had = _files(roots[arm])
                    t0 = time.perf_counter()
                    res = evaluate_candidate(task, source, store=store, session=session, protocol=proto,
                                             prespawn_next=False)
                    wall = time.perf_counter() - t0
                    use = uses.uses[n_uses] if len(uses.uses) > n_uses else {}
                    # what this evaluation added to its arm's cache (the entry's path part dropped)
                    added = sorted("/".join(Path(f).parts[1:]) for f in set(_files(roots[arm])) - set(had))
                    escape = next((g for g in res.gates if g.name == "timed_region_escape"), None)
                    row = {"point": i, "config": point, "arm": arm, "wall_s": round(wall, 2),
                           "load_s": round(res.phase_s.get("load", float("nan")), 2),
                           "phase_s": {k: round(v, 2) for k, v in res.phase_s.items()},
                           "status": res.verdict, "reason": res.reason[:300], "speedup": res.speedup,
                           "escape_passed": None if escape is None else escape.passed,
                           "cache": use, "added_files": added, "loadavg_1m_after": round(os.getloadavg()[0], 2)}
                    rows.append(row)
                    print(f"point {i} {arm:13s} wall {wall:7.2f} s  load {row['load_s']:7.2f} s  {res.verdict}  "
                          f"cache={use}", flush=True)
        finally:
            session.close()
            os.environ.pop(compile_cache.ENV, None)
            os.environ.pop(compile_cache.KEY_ENV, None)
    summary: dict[str, Any] = {}
    for arm in KEY_ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        later = [r for r in mine if r["point"] > 0]
        summary[arm] = {"n": len(mine), "median_load_s": _med([r["load_s"] for r in mine]),
                        "median_wall_s": _med([r["wall_s"] for r in mine]),
                        "median_load_s_after_first": _med([r["load_s"] for r in later]),
                        "median_wall_s_after_first": _med([r["wall_s"] for r in later]),
                        "sum_load_s": round(sum(r["load_s"] for r in mine), 2),
                        "sum_wall_s": round(sum(r["wall_s"] for r in mine), 2),
                        "verdicts": [r["status"] for r in sorted(mine, key=lambda r: r["point"])]}
    pr, pp = summary["per_rendering"], summary["per_problem"]

    def per_point(field: str) -> list[float | None]:
        return [_ratio(next(r[field] for r in rows if r["point"] == i and r["arm"] == "per_problem"),
                       next(r[field] for r in rows if r["point"] == i and r["arm"] == "per_rendering"))
                for i in range(len(points))]

    summary["ratio_per_problem_vs_per_rendering"] = {
        "median_load": _ratio(pp["median_load_s"], pr["median_load_s"]),
        "median_wall": _ratio(pp["median_wall_s"], pr["median_wall_s"]),
        "median_load_after_first": _ratio(pp["median_load_s_after_first"], pr["median_load_s_after_first"]),
        "median_wall_after_first": _ratio(pp["median_wall_s_after_first"], pr["median_wall_s_after_first"]),
        "load_per_point": per_point("load_s"), "wall_per_point": per_point("wall_s")}
    summary["same_verdicts"] = pr["verdicts"] == pp["verdicts"]
    out = {"benchmark": "compiled_point_cost --compare-keys", "command": " ".join(["python", *sys.argv]),
           "started_utc": started, "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "code_rev": _rev(), "task": str(Path(args.task).resolve().relative_to(ROOT))
           if Path(args.task).resolve().is_relative_to(ROOT) else args.task, "seed": args.seed, "points": points,
           "device": args.device, "compile_threads": threads, "cpu_count": os.cpu_count(),
           "platform": platform.platform(), "python": platform.python_version(),
           "torch": __import__("importlib.metadata").metadata.version("torch"),
           "loadavg_before": [round(x, 2) for x in load_before],
           "loadavg_after": [round(x, 2) for x in os.getloadavg()], "summary": summary, "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    Path(args.out).with_suffix(".md").write_text(render_keys_markdown(out))
    print(json.dumps(summary, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default=str(ROOT / "tests/fixtures/module_space/tiny_conv_relu.py"))
    ap.add_argument("--points", help="JSON list of module-space points (default: three fixed points; with "
                    "--compare-keys, the seeded draw's first compiled points)")
    ap.add_argument("--compare-keys", action="store_true",
                    help="compare the compile cache keyed per rendering with per problem (see the docstring)")
    ap.add_argument("--seed", type=int, default=0, help="--compare-keys: the random-search seed of the draw")
    ap.add_argument("--n-points", type=int, default=6, help="--compare-keys: how many compiled points")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", help="results JSON (default: benchmarks/results/compiled_point_cost_cpu.json, with "
                    "--compare-keys compiled_point_cost_problem_cpu.json)")
    ap.add_argument("--render", help="only write the .md beside this results JSON")
    args = ap.parse_args()
    args.points_given = args.points is not None
    if args.out is None:
        name = "compiled_point_cost_problem_cpu.json" if args.compare_keys else "compiled_point_cost_cpu.json"
        args.out = str(ROOT / "benchmarks/results" / name)
    if args.render:
        got = json.loads(Path(args.render).read_text())
        md = render_keys_markdown(got) if "compare-keys" in got["benchmark"] else render_markdown(got)
        Path(args.render).with_suffix(".md").write_text(md)
        return 0
    if args.compare_keys:
        return compare_keys(args)
    points = json.loads(args.points) if args.points_given else DEFAULT_POINTS
    task = load_task(args.task)
    proto = load_protocol()
    uses = _Uses()
    logging.getLogger(compile_cache.__name__).addHandler(uses)
    logging.getLogger(compile_cache.__name__).setLevel(logging.INFO)
    rows: list[dict[str, Any]] = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="atb-bench-compile-") as tmp:
        cache_root = Path(tmp) / "compile-cache"
        store = open_store(Path(tmp) / "bench.sqlite")
        os.environ["ATB_COMPILE_THREADS"] = "1"
        before = open_measurement_session(store, args.device, proto, note="compiled_point_cost before")
        os.environ.pop("ATB_COMPILE_THREADS")
        after = open_measurement_session(store, args.device, proto, note="compiled_point_cost after")
        threads = {"before": int(before.config["compile_threads"]), "after": int(after.config["compile_threads"])}
        try:
            for i, point in enumerate(points):
                source = render_point(task, point)
                order = ARMS[i % 3:] + ARMS[:i % 3]
                if order.index("after_warm") < order.index("after_cold"):   # warm needs cold's entry
                    order = tuple(a for a in order if a != "after_warm") + ("after_warm",)
                for arm in order:
                    os.environ[compile_cache.ENV] = "off" if arm == "before" else str(cache_root)
                    session = before if arm == "before" else after
                    n_uses = len(uses.uses)
                    t0 = time.perf_counter()
                    res = evaluate_candidate(task, source, store=store, session=session, protocol=proto,
                                             prespawn_next=False)
                    wall = time.perf_counter() - t0
                    use = uses.uses[n_uses] if len(uses.uses) > n_uses else {}
                    escape = next((g for g in res.gates if g.name == "timed_region_escape"), None)
                    row = {"point": i, "config": point, "arm": arm, "wall_s": round(wall, 2),
                           "load_s": round(res.phase_s.get("load", float("nan")), 2),
                           "phase_s": {k: round(v, 2) for k, v in res.phase_s.items()},
                           "op_s": {k: round(v, 2) for k, v in res.op_s.items() if v >= 0.5},
                           "status": res.verdict, "reason": res.reason[:300], "speedup": res.speedup,
                           "escape_passed": None if escape is None else escape.passed,
                           "escape_detail": "" if escape is None else escape.detail[:300],
                           "cache": use, "loadavg_1m_after": round(os.getloadavg()[0], 2)}
                    rows.append(row)
                    print(f"point {i} {arm:10s} wall {wall:7.2f} s  load {row['load_s']:7.2f} s  {res.verdict}  "
                          f"escape={row['escape_passed']}  cache={use}", flush=True)
        finally:
            before.close()
            after.close()
            os.environ.pop(compile_cache.ENV, None)
    summary: dict[str, Any] = {}
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        summary[arm] = {"n": len(mine), "median_wall_s": round(statistics.median(r["wall_s"] for r in mine), 2),
                        "median_load_s": round(statistics.median(r["load_s"] for r in mine), 2),
                        "sum_load_s": round(sum(r["load_s"] for r in mine), 2),
                        "sum_wall_s": round(sum(r["wall_s"] for r in mine), 2),
                        "accepted": sum(r["status"] == "accepted" for r in mine),
                        "escape_passed": sum(bool(r["escape_passed"]) for r in mine)}
    for arm in ("after_cold", "after_warm"):
        summary[arm]["ratio_sum_load_vs_before"] = _ratio(summary[arm]["sum_load_s"], summary["before"]["sum_load_s"])
        summary[arm]["ratio_sum_wall_vs_before"] = _ratio(summary[arm]["sum_wall_s"], summary["before"]["sum_wall_s"])
        per = [_ratio(a["load_s"], b["load_s"]) for a, b in
               ((next(r for r in rows if r["point"] == p and r["arm"] == arm),
                 next(r for r in rows if r["point"] == p and r["arm"] == "before")) for p in range(len(points)))]
        summary[arm]["load_ratio_per_point"] = per
    out = {"benchmark": "compiled_point_cost", "started_utc": started,
           "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "code_rev": _rev(),
           "task": str(Path(args.task).resolve().relative_to(ROOT)) if Path(args.task).resolve().is_relative_to(ROOT)
           else args.task, "device": args.device, "compile_threads": threads, "cpu_count": os.cpu_count(),
           "platform": platform.platform(), "python": platform.python_version(),
           "torch": __import__("importlib.metadata").metadata.version("torch"),
           "loadavg_before": [round(x, 2) for x in load_before],
           "loadavg_after": [round(x, 2) for x in os.getloadavg()], "summary": summary, "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    Path(args.out).with_suffix(".md").write_text(render_markdown(out))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
