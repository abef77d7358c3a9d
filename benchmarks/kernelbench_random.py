"""The seeded random-search arm over KernelBench problems: one campaign per problem, one JSON line per
problem as it finishes, resumable across device calls (issue 26).

Why: the paper's table puts an LLM tuner beside the baseline a careful engineer's autotuner gives for
free. For a KernelBench file that baseline is random search over the problem's module space
(``harness/tasks/_module_space.py``: ``torch.compile`` modes and Inductor options, a CUDA-graph
wrapper, ``channels_last``, ``cudnn.benchmark``, inference mode) on the unchanged model code, every
point measured by the same harness path as any candidate. Campaigns are run by calling the campaign
function (:func:`harness.tuning.search.random_search_task`) in a child process per problem, not
``atb sweep``: Ray is not installed on the H200 machine.

Usage (device calls of ~9 minutes; re-run the same command until it prints ``done``)::

    python benchmarks/kernelbench_random.py --kb .kb/KernelBench --level 1 --problems 1-100 \\
        --out $OUT/random_level1_h200.jsonl --stores $OUT/random_level1_stores \\
        --device cuda --budget 10 --seed 1 --time-budget-s 540

Resuming: each problem's campaign has a fixed id (level, problem, source digest, seed, budget) and its
own store (``--stores DIR/<campaign id>.sqlite``), so a call cut short by its budget resumes the same
campaign in the next call: copy the ``--out`` file and the stores folder back into the tree between
calls (``*.sqlite`` is git-ignored). A finished problem's row holds every iteration's figures and its
store is deleted (``--keep-stores`` keeps it): at most one store, the unfinished problem's (about a
megabyte), travels between calls. Finished problems (a row in ``--out``) are skipped. A campaign refused on resume (another device fingerprint,
protocol or code) is recorded as abandoned (``kind: random_abandoned``) and started again under the
next attempt's id. The renderer is ``benchmarks/render_kernelbench_random.py``.

Every row carries ``kind``: ``random_campaign`` (one per problem: code_rev, protocol digest, tuner,
seed, best speedup and interval, usable iterations, correct fraction, fast_1, each iteration's knobs
and verdict) or ``random_abandoned``. ``--check-spaces`` only derives every selected problem's module
space (the cost count on the meta device, no measurement) and prints one line per problem.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _code_rev import checked_code_rev  # noqa: E402
from _measuring_digest import process_measuring_digest
from kernelbench_sweep import (  # noqa: E402
    ROOT, append_line, child_env, count_sizes, now_utc, problem_dir, problem_id, report_end, run_bounded,
    select_problems,
)

RESULT_MARK = "ATB_KB_RANDOM_RESULT "
ERROR_MARK = "ATB_KB_RANDOM_ERROR "
MIN_START_S = 60.0      # do not start (or resume) a campaign with less budget left than this
MARGIN_S = 8.0          # kept free at the end of the budget for writing and exiting
TUNER = "random"


def code_rev() -> str:
    """The commit measured (``benchmarks/_code_rev.py``: a ``git archive`` snapshot names its own, and
    ``$ATB_CODE_REV`` must agree with it)."""
    return checked_code_rev(ROOT)


def campaign_id(level: int, problem: Path, seed: int, budget: int, attempt: int) -> str:
    """The fixed id of a problem's campaign: the same in every call, so a cut call resumes it."""
    from harness.records import sha256_text

    digest = sha256_text(problem.read_text(encoding="utf-8"))[:12]
    base = f"kbrandom-l{level}-{problem.stem}-{digest}-s{seed}-b{budget}"
    return base if attempt <= 1 else f"{base}-a{attempt}"


# ----------------------------------------------------------------------------------- records
def read_state(out: Path, max_attempts: int, arm: str = TUNER) -> tuple[set[str], dict[str, int], dict[str, int]]:
    """(settled problem keys, abandoned attempts per key, errors per key) from ``out`` (torn lines ignored).

    A problem is settled by a finished campaign row, or by ``max_attempts`` error rows (a campaign child
    that broke without a result is an infrastructure failure, retried). ``arm`` names the rows' kinds
    (``ARM_campaign``, ``ARM_abandoned``): this script's ``random``, ``kernelbench_llm``'s ``llm``."""
    settled: set[str] = set()
    abandoned: dict[str, int] = {}
    errors: dict[str, int] = {}
    if not out.exists():
        return settled, abandoned, errors
    for line in out.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        key = f"{row.get('level')}:{row.get('problem')}"
        if row.get("kind") == f"{arm}_abandoned":
            abandoned[key] = abandoned.get(key, 0) + 1
        elif row.get("kind") == f"{arm}_campaign":
            if row.get("outcome") == "error":
                errors[key] = errors.get(key, 0) + 1
                if errors[key] >= max_attempts:
                    settled.add(key)
            else:
                settled.add(key)
    return settled, abandoned, errors


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def campaign_row(store: Any, cid: str) -> dict[str, Any]:
    """The per-problem record of a finished campaign, read back from the store."""
    from harness.tuning.campaigns import get_iterations, summarize

    s = summarize(store, cid)
    its = get_iterations(store, cid)
    iterations: list[dict[str, Any]] = []
    correct = 0
    for it in its:
        verdict = store.verdict(it.verdict_id) if it.verdict_id else None
        ok = bool(verdict is not None and verdict.correct)
        correct += ok
        iterations.append({
            "idx": it.idx, "knobs": it.detail.get("knobs"), "status": it.status, "correct": ok,
            "speedup": it.speedup, "ci": [it.ci_low, it.ci_high] if it.ci_low is not None else None,
            "usable": it.usable, "unusable_reason": it.unusable_reason,
            "reason": (verdict.reason if verdict is not None else "")[:400],
            # the exception, where the reason is a traceback (a broken problem's reference, a failed compile),
            # which the first 400 characters cut off; the finished campaign's store is deleted
            "reason_last_line": _last_line(verdict.reason if verdict is not None else ""),
            "candidate_sha256": it.detail.get("candidate_sha256") or it.candidate_sha256,
        })
    usable = [i for i in iterations if i["usable"] and i["speedup"] is not None]
    best = next((i for i in iterations if s.best_iteration is not None and i["idx"] == s.best_iteration), None)
    config = s.campaign.config
    return {
        "campaign_id": cid, "tuner": s.campaign.tuner_spec, "seed": s.campaign.seed, "budget": s.campaign.budget,
        "protocol_sha256": s.campaign.protocol_sha256, "device_sha256": s.campaign.device_sha256,
        "outcome": s.outcome.status if s.outcome else "unfinished",
        "iterations_recorded": s.iterations_recorded, "usable_iterations": s.usable_iterations,
        "correct_iterations": correct,
        # verdicts whose failure is the problem's own (its reference did not import, build or run), not the point's
        "reference_failures": sum(1 for i in iterations if i["reason"].startswith("reference ")),
        "correct_fraction": correct / s.iterations_recorded if s.iterations_recorded else None,
        "best_speedup": s.best_speedup, "best_ci": list(s.best_ci) if s.best_ci else None,
        "best_iteration": s.best_iteration, "best_knobs": best["knobs"] if best else None,
        # KernelBench's fast_1: correct and faster than eager; here "usable" (correct, every gate passed,
        # interval within the usability bar) and a speedup above 1, and, stricter, its interval above 1
        "fast_1": any(i["speedup"] > 1.0 for i in usable),
        "fast_1_ci": any(i["ci"] is not None and i["ci"][0] > 1.0 for i in usable),
        "unusable_reasons": s.unusable_reasons,
        "knob_space": config.get("knob_space"), "module_space": config.get("module_space"),
        "iterations": iterations,
    }


# ----------------------------------------------------------------------------------- campaign child
def campaign_child(args: argparse.Namespace) -> int:
    """Runs in its own process (killed at the call's budget): one problem's campaign, started or resumed."""
    from harness.errors import HarnessError
    from harness.store import open_store
    from harness.tuning.campaigns import CampaignError
    from harness.tuning.search import random_search_task
    from protocol import load_protocol

    proto = load_protocol()
    with open_store(args.db) as store:
        def progress(idx: int, knobs: dict[str, Any], result: Any) -> None:
            print(f"  iteration {idx + 1}/{args.budget} {knobs}: {getattr(result, 'verdict', '?')} "
                  f"speedup {getattr(result, 'speedup', None)} {str(getattr(result, 'reason', ''))[:160]}", flush=True)

        existed = store.campaign(args.campaign_id) is not None
        try:
            random_search_task(args.campaign_child, store=store, protocol=proto, budget=args.budget, seed=args.seed,
                               backend=args.device, campaign_id=args.campaign_id, on_iteration=progress)
        except HarnessError as exc:   # a refused resume (device, protocol, sequence) or no space: the parent decides
            refused = existed and isinstance(exc, CampaignError)
            print(ERROR_MARK + json.dumps({"error": f"{type(exc).__name__}: {exc}"[:1000], "refused_resume": refused}),
                  flush=True)
            return 3
        row = campaign_row(store, args.campaign_id)
    row.update({"protocol_version": proto.version, "protocol_draft": bool(getattr(proto, "draft", False))})
    print(RESULT_MARK + json.dumps(row, default=str), flush=True)
    return 0


def fold_wal(db: Path) -> None:
    """Fold a killed child's write-ahead log into the store file (opening and closing it does), so the
    one file carries the campaign to the next call."""
    from harness.store import open_store

    try:
        open_store(db).close()
    except Exception as exc:  # noqa: BLE001 - the next call's resume reports a broken store itself
        print(f"warning: could not fold the write-ahead log of {db}: {exc}", file=sys.stderr)


def remove_store(db: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _marked(out: str, mark: str) -> dict[str, Any] | None:
    found = [ln for ln in out.splitlines() if ln.startswith(mark)]
    return json.loads(found[-1][len(mark):]) if found else None


# ----------------------------------------------------------------------------------- spaces only
def check_spaces(problems: list[Path], level: int) -> int:
    """Derive every problem's module space on cpu and cuda from one counting process (meta device; a
    real CPU run only where the forward fails on meta and the inputs are small); nothing is measured."""
    from harness.tasks import CountedCost
    from harness.tasks._module_space import ModuleFacts, build_module_space

    counted = count_sizes(problems, timeout_s=1800.0)   # a level-3 batch on a 2-core host took over 600 s
    failed = 0
    for p in problems:
        try:
            raw = counted.get(p.stem)
            facts = ModuleFacts.from_count(CountedCost.model_validate(raw) if raw is not None else None)
            spaces = {b: build_module_space(facts, b).space for b in ("cpu", "cuda")}
            print(json.dumps({"level": level, "problem": p.stem, "facts": facts.model_dump(mode="json"),
                              "knobs": {b: [k.name for k in s.knobs] for b, s in spaces.items()},
                              "size": {b: s.size() for b, s in spaces.items()}}), flush=True)
        except Exception as exc:  # noqa: BLE001 - report every problem, then fail at the end
            failed += 1
            print(json.dumps({"level": level, "problem": p.stem, "error": f"{type(exc).__name__}: {exc}"[:400]}),
                  flush=True)
    print(f"{len(problems) - failed}/{len(problems)} problems of level {level} have a module space", flush=True)
    return 1 if failed else 0


def smoke_points(problem: Path, device: str) -> list[dict[str, Any]]:
    """Outside the harness, in this process: build ModelNew for each knob of the problem's space turned
    on alone (and all of them together where the constraints allow) under the same seed as Model, run
    both on ``get_inputs()`` and compare. A quick check of the rendering on a device before a sweep
    spends its budget; the sweep's verdicts are the measurement."""
    import importlib.util
    import random as _random

    import torch

    from harness.measure.cost import count_task
    from harness.tasks import load_task
    from harness.tasks._module_space import DEFAULTS, module_space, render_point

    task = load_task(problem)
    space = module_space(task, device, count_task).space
    points: list[dict[str, Any]] = []
    for knob in space.knobs:
        for value in knob.values():
            point = {k.name: DEFAULTS[k.name] for k in space.knobs}
            point[knob.name] = value
            if value != DEFAULTS[knob.name] and not space.violations(point):
                points.append(point)
    rng = _random.Random(0)
    points += [space.sample(rng) for _ in range(2)]
    results: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        t0 = time.perf_counter()
        row: dict[str, Any] = {"problem": problem.stem, "device": device, "point": point}
        try:
            path = Path(tempfile.mkdtemp()) / f"atb_smoke_{i}.py"
            path.write_text(render_point(task, point), encoding="utf-8")
            spec = importlib.util.spec_from_file_location(f"atb_smoke_{problem.stem}_{i}", path)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            torch.manual_seed(7)
            init = list(mod.get_init_inputs())
            torch.manual_seed(7)
            ref = mod.Model(*init).to(device)
            torch.manual_seed(7)
            new = mod.ModelNew(*init).to(device)
            torch.manual_seed(8)
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
            with torch.no_grad():
                want = ref(*inputs)
                got = new(*inputs)
                got = new(*inputs)      # a second call: graphs replay, compiled code is reused
            wants = want if isinstance(want, (tuple, list)) else [want]
            gots = got if isinstance(got, (tuple, list)) else [got]
            worst = 0.0
            for a, b in zip(wants, gots):
                torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4)
                worst = max(worst, float((a.double() - b.double()).abs().max()) if a.numel() else 0.0)
            row.update(ok=True, max_abs_diff=worst)
        except Exception as exc:  # noqa: BLE001 - every point is reported
            row.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:600])
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        results.append(row)
        print(json.dumps(row, default=str), flush=True)
    return results


# ----------------------------------------------------------------------------------- main loop
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", type=Path, help="root of a KernelBench checkout (never copied)")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--problems", default=None, help="ids or ranges (1-100, 1,5,9-12) or names; default all")
    p.add_argument("--out", type=Path, help="JSON-lines results file (appended; resumable)")
    p.add_argument("--stores", type=Path, default=None,
                   help="folder of one store per campaign, kept across calls for resuming "
                        "(default: beside --out, named <out stem>_stores)")
    p.add_argument("--keep-stores", action="store_true", help="keep a finished campaign's store")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--budget", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--time-budget-s", type=float, default=540.0,
                   help="stop starting work so the whole call ends within this many seconds")
    p.add_argument("--max-attempts", type=int, default=2,
                   help="tries per problem when the campaign child breaks without a result")
    p.add_argument("--check-spaces", action="store_true", help="only derive each problem's module space and exit")
    p.add_argument("--smoke", action="store_true",
                   help="only run each knob's point of each selected problem against Model in this process "
                        "(no harness, no store) and print one JSON line per point")
    p.add_argument("--_campaign-child", dest="campaign_child", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_campaign-id", dest="campaign_id", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_db", dest="db", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.campaign_child is None:
        if args.kb is None:
            p.error("--kb is required")
        if not (args.check_spaces or args.smoke) and args.out is None:
            p.error("--out is required (or --check-spaces, --smoke)")
    if args.budget <= 0:
        p.error("--budget must be positive")
    return args


def sweep(args: argparse.Namespace) -> int:
    t_begin = time.perf_counter()
    deadline = t_begin + args.time_budget_s - MARGIN_S
    problems = select_problems(problem_dir(args.kb, args.level), args.problems)
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    stores: Path = args.stores or out.parent / f"{out.stem}_stores"
    stores.mkdir(parents=True, exist_ok=True)
    rev = code_rev()
    settled, abandoned, errors = read_state(out, args.max_attempts)
    key = lambda p: f"{args.level}:{p.stem}"  # noqa: E731
    todo = [p for p in problems if key(p) not in settled]
    print(f"level {args.level}: {len(problems)} selected, {len(problems) - len(todo)} finished before, "
          f"{len(todo)} to do; {TUNER} seed {args.seed} budget {args.budget} on {args.device}; out {out}; stores {stores}",
          flush=True)
    stopped = False
    for p in todo:
        left = deadline - time.perf_counter()
        if left < MIN_START_S:
            stopped = True
            break
        attempt = abandoned.get(key(p), 0) + 1
        cid = campaign_id(args.level, p, args.seed, args.budget, attempt)
        db = stores / f"{cid}.sqlite"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--_campaign-child", str(p), "--_campaign-id", cid,
               "--_db", str(db), "--device", args.device, "--budget", str(args.budget), "--seed", str(args.seed)]
        started = now_utc()
        print(f"{p.stem}: campaign {cid} ({left:.0f} s left in this call)", flush=True)
        code, stdout, stderr, wall = run_bounded(cmd, left, child_env(), ROOT)
        for line in stdout.splitlines():
            if line.startswith("  iteration"):
                print(line, flush=True)
        base = {"problem": p.stem, "id": problem_id(p), "level": args.level, "code_rev": rev, "device": args.device,
                "measuring_digest": process_measuring_digest(ROOT),
                "tuner": TUNER, "seed": args.seed, "budget": args.budget, "campaign_id": cid,
                "started_utc": started, "wall_s": round(wall, 3)}
        if code is None:   # cut by this call's budget: the campaign resumes under the same id next call
            print(f"{p.stem}: cut by the time budget after {wall:.0f} s; resumed next call from {db}", flush=True)
            fold_wal(db)
            stopped = True
            break
        result = _marked(stdout, RESULT_MARK)
        refused = _marked(stdout, ERROR_MARK)
        if result is not None:
            row = {**base, "kind": "random_campaign", **result}
            append_line(out, row)
            settled.add(key(p))
            if not args.keep_stores:
                remove_store(db)
            print(f"{p.stem}: {row['outcome']}, {row['usable_iterations']}/{row['budget']} usable, best "
                  f"{row['best_speedup']} {row['best_ci']}, correct {row['correct_fraction']}, fast_1 {row['fast_1']}",
                  flush=True)
        elif refused is not None and refused.get("refused_resume"):
            append_line(out, {**base, "kind": "random_abandoned", "reason": refused["error"]})
            if not args.keep_stores:
                remove_store(db)
            abandoned[key(p)] = attempt
            print(f"{p.stem}: campaign {cid} abandoned ({refused['error'][:200]}); next attempt next", flush=True)
        else:
            why = refused["error"] if refused is not None else \
                f"exit {code}: {(stderr.strip().splitlines() or [''])[-1][:400]}"
            append_line(out, {**base, "kind": "random_campaign", "outcome": "error", "reason": why,
                              "stderr_tail": stderr[-1500:]})
            errors[key(p)] = errors.get(key(p), 0) + 1
            print(f"{p.stem}: error ({why[:200]})", flush=True)
    remaining = [p for p in problems if key(p) not in read_state(out, args.max_attempts)[0]]
    return report_end(len(problems), len(remaining), stopped, t_begin, args.level, out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.campaign_child is not None:
        return campaign_child(args)
    if args.check_spaces:
        return check_spaces(select_problems(problem_dir(args.kb, args.level), args.problems), args.level)
    if args.smoke:
        rows = [r for p in select_problems(problem_dir(args.kb, args.level), args.problems)
                for r in smoke_points(p, args.device)]
        bad = [r for r in rows if not r["ok"]]
        print(f"{len(rows) - len(bad)}/{len(rows)} points compute what Model computes", flush=True)
        return 1 if bad else 0
    missing = missing_campaign_modules()
    if missing:
        print(f"error: a campaign needs {', '.join(missing)} (its end signs the store's checkpoint); install or "
              "carry their wheels before spending device time", file=sys.stderr)
        return 2
    return sweep(args)


def missing_campaign_modules() -> list[str]:
    """Modules a campaign needs only at its end (why: on a GPU machine a campaign measured four points and
    then failed on ``import cryptography`` when it signed its store, losing its row)."""
    import importlib.util

    return [m for m in ("cryptography",) if importlib.util.find_spec(m) is None]


if __name__ == "__main__":
    sys.exit(main())
