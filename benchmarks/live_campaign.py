"""Live campaigns of the real model (SmolLM2-135M served here by llama-server) against seeded random search.

Two studies, both through the user's path (``atb model serve``, ``atb run``), on CPU:

* ``campaign`` (default): for each task, ``random`` and ``openai:smollm2`` with the same budget and seed.
  Reported per LLM iteration: how it reached the harness (a native ``submit`` call, the declared text
  protocol, or the workspace submitted as it stood), the model turns' stop reasons and truncation, the
  verdict, and why an unusable iteration was unusable.
* ``engine``: an engine flag search on the real model (``llamacpp-smollm2``): the default against itself,
  an n-gram speculation configuration, and seeded random search over the flags; ratios with their CIs.
* ``prompt``: the real model with the ``standard`` prompt and with the ``small-model/1`` prompt, same tasks,
  seeds and budget; reported: the fraction of iterations that reach ``submit`` (natively or by the text
  protocol, not forced) with a candidate that builds (the harness could import it and construct
  ``ModelNew``: its verdict is not an import/construction failure). The model's outputs are never edited.

Usage:
  python benchmarks/live_campaign.py campaign --tasks relu,scale_shift --budget 10 --seed 1
  python benchmarks/live_campaign.py prompt --tasks relu,gelu --budget 2 --seeds 1,2
  python benchmarks/live_campaign.py engine --budget 2 --seed 1
Results: benchmarks/results/live_campaign.{json,md}, live_prompt.{json,md} and engine_real_model.{json,md}. The machine's load average
is recorded before and after: on a shared machine the wall times (not the verdict routes) move with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ATB = [sys.executable, "-m", "atb_agent.cli"]
_NOT_BUILT = re.compile(r"import_error|SyntaxError|IndentationError|no ModelNew|has no attribute 'ModelNew'|"
                        r"construct|init_error|__init__|not UTF-8", re.IGNORECASE)


def _atb(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    p = subprocess.run([*ATB, *args, "--json"], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
    try:
        out = json.loads(p.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        out = {"ok": False, "error": (p.stderr or p.stdout)[-800:]}
    out["_exit"] = p.returncode
    return out


def _route(calls: list[Any]) -> str:
    ids = {c.call_id for c in calls}
    if "text-protocol-submit" in ids:
        return "text protocol"
    if "forced-submit" in ids:
        return "forced (workspace as it stood)"
    if any(c.name == "submit" for c in calls):
        return "native submit"
    return "none"


def analyse_llm_run(db: Path, run_id: str) -> list[dict[str, Any]]:
    """Per iteration of a live run: route to the harness, model turns, verdict, usability and why not."""
    from harness.store import open_store
    from harness.tuning.campaigns import get_iterations
    from transcripts import ModelTurnData, read_transcript

    t = read_transcript(db.parent / "transcripts" / f"{run_id}.jsonl")
    turns = t.of_kind("model_turn", ModelTurnData)
    calls = t.tool_calls()
    verdicts = {v.iteration: v.verdict for v in t.verdicts()}
    with open_store(db) as store:
        its = {it.idx: it for it in get_iterations(store, run_id)}
    rows = []
    for idx in sorted(its):
        mine = [m for m in turns if m.iteration == idx]
        my_calls = [c for c in calls if c.iteration == idx]
        v = verdicts.get(idx, {})
        reason = str(v.get("reason", ""))
        route = _route(my_calls)
        built = v.get("status") not in (None, "no_submission") and (bool(v.get("correct")) or not _NOT_BUILT.search(reason))
        it = its[idx]
        rows.append({
            "iteration": idx + 1, "route": route,
            "model_calls": len(mine), "stop_reasons": [m.stop_reason for m in mine],
            "truncated_calls": sum(m.truncation.truncated for m in mine),
            "output_tokens": [m.output_tokens for m in mine],
            "native_tool_calls": [c["name"] for m in mine for c in m.tool_calls],
            "verdict": v.get("status"), "correct": bool(v.get("correct")), "speedup": it.speedup,
            "reached_submit_and_builds": route in ("native submit", "text protocol") and built,
            "builds": built, "usable": it.usable, "unusable_reason": "" if it.usable else it.unusable_reason,
            "verdict_reason": " ".join(reason.split())[:300],
        })
    return rows


def _stored_run(db: Path, task: str, tuner: str, seed: int, prompt: str | None = None) -> dict[str, Any]:
    """The run's payload read from the store, for a CLI call that failed after the campaign was stored
    (``atb run`` exits 1 if, say, the sandbox's teardown times out on a loaded machine)."""
    from atb_agent.cli._run import _run_payload
    from harness.store import open_store
    from harness.tuning.campaigns import list_campaigns

    with open_store(db) as store:
        mine = [c for c in list_campaigns(store) if c.task_id == task and c.tuner_spec == tuner and c.seed == seed
                and (prompt is None or c.config.get("prompt") == prompt)]
    return _run_payload(str(db), mine[-1].id) if mine else {}


def _with_fallback(out: dict[str, Any], db: Path, task: str, tuner: str, seed: int,
                   prompt: str | None = None) -> dict[str, Any]:
    if out.get("run_id"):
        return out
    found = _stored_run(db, task, tuner, seed, prompt)
    return {**found, "cli_error": out.get("error", ""), "cli_exit": out.get("_exit")} if found else out


def campaign_from_store(db: Path, tasks: list[str], budget: int, seed: int) -> dict[str, Any]:
    """The campaign study's document rebuilt from its store (for a study stopped before it wrote its
    JSON): every stored run of the tasks, finished or not (an unfinished run says so)."""
    results = []
    for task in tasks:
        rnd = _stored_run(db, task, "random", seed)
        llm = _stored_run(db, task, "openai:smollm2", seed)
        if not rnd and not llm:
            continue
        entry: dict[str, Any] = {"task": task, "budget": budget, "seed": seed, "random": rnd or {"error": "not run"},
                                 "llm": llm or {"error": "not run"}, "random_wall_s": None, "llm_wall_s": None}
        if llm.get("run_id"):
            entry["llm_iterations"] = analyse_llm_run(db, llm["run_id"])
        if rnd.get("run_id") and llm.get("run_id") and llm.get("outcome") != "unfinished":
            entry["compare"] = _atb("compare", rnd["run_id"], llm["run_id"], "--db", str(db))
        results.append(entry)
    return {"study": "campaign", "store": str(db), "before": _env_info(), "after_load_average": list(os.getloadavg()),
            "results": results, "note": "rebuilt from the store after the study was stopped"}


def reanalyse(path: Path) -> dict[str, Any]:
    """Fill in runs a failed CLI call left without analysis, from the store the JSON names."""
    doc = json.loads(path.read_text())
    db = Path(doc["store"])
    if doc["study"] == "campaign":
        for r in doc["results"]:
            r["random"] = _with_fallback(r["random"], db, r["task"], "random", r["seed"])
            r["llm"] = _with_fallback(r["llm"], db, r["task"], "openai:smollm2", r["seed"])
            if r["llm"].get("run_id") and not r.get("llm_iterations"):
                r["llm_iterations"] = analyse_llm_run(db, r["llm"]["run_id"])
            if r["random"].get("run_id") and r["llm"].get("run_id") and not r.get("compare", {}).get("verdict"):
                r["compare"] = _atb("compare", r["random"]["run_id"], r["llm"]["run_id"], "--db", str(db))
    else:
        for run in doc["runs"]:
            run["run"] = _with_fallback(run["run"], db, run["task"], "openai:smollm2", run["seed"], run["prompt"])
            if run["run"].get("run_id") and not run["iterations"]:
                run["iterations"] = analyse_llm_run(db, run["run"]["run_id"])
        doc["summary"] = prompt_summary(doc["runs"])
    return doc


def _serve() -> tuple[str, bool]:
    from atb_agent.model_server import serve

    state, was_running = serve("smollm2")
    return state.identity.base_url, was_running


def _stop() -> None:
    from atb_agent.model_server import stop

    stop("smollm2")


def _env_info() -> dict[str, Any]:
    from atb_agent.model_server import read_state

    st = read_state("smollm2")
    return {"machine": platform.platform(), "cpus": os.cpu_count(), "load_average": list(os.getloadavg()),
            "model_server": json.loads(st.identity.model_dump_json()) if st else None}


def campaign(args: argparse.Namespace) -> dict[str, Any]:
    base_url, was_running = _serve()
    work = Path(tempfile.mkdtemp(prefix="atb-live-campaign-"))
    db = work / "atb.sqlite"
    before = _env_info()
    results = []
    try:
        for task in args.tasks:
            t0 = time.monotonic()
            rnd = _atb("run", task, "--tuner", "random", "--budget", str(args.budget), "--seed", str(args.seed),
                       "--db", str(db))
            t1 = time.monotonic()
            llm = _atb("run", task, "--tuner", "openai:smollm2", "--base-url", base_url, "--budget", str(args.budget),
                       "--seed", str(args.seed), "--db", str(db))
            t2 = time.monotonic()
            rnd = _with_fallback(rnd, db, task, "random", args.seed)
            llm = _with_fallback(llm, db, task, "openai:smollm2", args.seed)
            entry: dict[str, Any] = {"task": task, "budget": args.budget, "seed": args.seed,
                                     "random": rnd, "llm": llm, "random_wall_s": round(t1 - t0, 1),
                                     "llm_wall_s": round(t2 - t1, 1)}
            if llm.get("run_id"):
                entry["llm_iterations"] = analyse_llm_run(db, llm["run_id"])
            if rnd.get("run_id") and llm.get("run_id"):
                entry["compare"] = _atb("compare", rnd["run_id"], llm["run_id"], "--db", str(db))
            results.append(entry)
            print(f"{task}: random {rnd.get('usable_iterations')}/{args.budget} usable, "
                  f"llm {llm.get('usable_iterations')}/{args.budget} usable ({llm.get('outcome')})", file=sys.stderr)
    finally:
        if not was_running:
            _stop()
    return {"study": "campaign", "store": str(db), "before": before, "after_load_average": list(os.getloadavg()),
            "results": results}


def prompt_runs_from_store(db: Path) -> list[dict[str, Any]]:
    """Every finished live run in the prompt study's store, with its prompt variant (campaign config)."""
    from atb_agent.cli._run import _run_payload
    from harness.store import open_store
    from harness.tuning.campaigns import list_campaigns

    with open_store(db) as store:
        found = [c for c in list_campaigns(store) if c.tuner_spec == "openai:smollm2"]
    runs = []
    for c in found:
        payload = _run_payload(str(db), c.id)
        if payload["outcome"] == "unfinished":
            continue
        runs.append({"prompt": c.config.get("prompt", "standard"), "task": c.task_id, "seed": c.seed, "run": payload,
                     "model_server": c.config.get("model_server"), "iterations": analyse_llm_run(db, c.id)})
    return runs


def paired_only(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs whose (task, seed) was run under both prompts: the before/after compares like with like."""
    keys = {v: {(r["task"], r["seed"]) for r in runs if r["prompt"] == v} for v in ("standard", "small-model/1")}
    both = keys["standard"] & keys["small-model/1"]
    return [r for r in runs if (r["task"], r["seed"]) in both]


def prompt_study(args: argparse.Namespace) -> dict[str, Any]:
    base_url, was_running = _serve()
    work = args.store.parent if args.store else Path(tempfile.mkdtemp(prefix="atb-live-prompt-"))
    db = args.store or work / "atb.sqlite"
    before = _env_info()
    runs = []
    try:
        for variant in args.variants:
            for task in args.tasks:
                for seed in args.seeds:
                    out = _atb("run", task, "--tuner", "openai:smollm2", "--base-url", base_url, "--budget",
                               str(args.budget), "--seed", str(seed), "--db", str(db), env={"ATB_PROMPT": variant})
                    out = _with_fallback(out, db, task, "openai:smollm2", seed, variant)
                    rows = analyse_llm_run(db, out["run_id"]) if out.get("run_id") else []
                    runs.append({"prompt": variant, "task": task, "seed": seed, "run": out, "iterations": rows})
                    reached = sum(r["reached_submit_and_builds"] for r in rows)
                    print(f"{variant} {task} seed {seed}: {reached}/{len(rows)} reach submit with a candidate that builds",
                          file=sys.stderr)
    finally:
        if not was_running:
            _stop()
    runs = paired_only(prompt_runs_from_store(db))
    return {"study": "prompt", "store": str(db), "before": before, "after_load_average": list(os.getloadavg()),
            "tasks": sorted({r["task"] for r in runs}), "seeds": sorted({r["seed"] for r in runs}),
            "budget": args.budget, "summary": prompt_summary(runs), "runs": runs}


def prompt_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary = {}
    for variant in ("standard", "small-model/1"):
        rows = [r for run in runs if run["prompt"] == variant for r in run["iterations"]]
        summary[variant] = {"iterations": len(rows), "reached_submit_and_builds": sum(r["reached_submit_and_builds"] for r in rows),
                            "fraction": (sum(r["reached_submit_and_builds"] for r in rows) / len(rows)) if rows else None,
                            "routes": {k: sum(r["route"] == k for r in rows) for k in sorted({r["route"] for r in rows})},
                            "truncated_calls": sum(r["truncated_calls"] for r in rows),
                            "model_calls": sum(r["model_calls"] for r in rows)}
    return summary


def engine_study(args: argparse.Namespace) -> dict[str, Any]:
    """An engine flag search on the real model: seeded random search over llamacpp-smollm2's flags
    (``atb run llamacpp-smollm2 --tuner random``), one hand-picked n-gram speculation configuration, and
    the default measured against itself (the true ratio is 1.0), all in one engine session."""
    from harness.engines import load_engine_task, render_config
    from harness.measure.serving.session import open_engine_session
    from harness.verdict.engine import evaluate_engine_candidate
    from harness.store import open_store
    from protocol import load_protocol

    proto = load_protocol()
    task = load_engine_task("llamacpp-smollm2")
    work = Path(tempfile.mkdtemp(prefix="atb-live-engine-"))
    db = work / "atb.sqlite"
    before = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_average": list(os.getloadavg())}
    trials = []
    store = open_store(db)
    session = open_engine_session(store, proto, note="live_campaign engine study: SmolLM2-135M")
    try:
        for label, config in (("default vs itself", {}), ("ngram-simple speculation", {"spec_type": "ngram-simple"})):
            t0 = time.monotonic()
            res = evaluate_engine_candidate(task, render_config(config), store=store, session=session, protocol=proto,
                                            progress=lambda m: print(f"  [{label}] {m}", file=sys.stderr))
            trials.append({"label": label, "config": config, "verdict": res.verdict, "ratio": res.speedup,
                           "ci": list(res.speedup_ci) if res.speedup_ci else None, "reason": res.reason,
                           "baseline_rps": res.metrics["baseline"].get("request_throughput"),
                           "candidate_rps": res.metrics["candidate"].get("request_throughput"),
                           "failed_gates": [g.name for g in res.gates if not g.passed],
                           "output_match": next((g.detail for g in res.gates if g.name == "output_match"), None),
                           "wall_s": round(time.monotonic() - t0, 1)})
            print(f"{label}: ratio {res.speedup} ci {res.speedup_ci} ({res.verdict})", file=sys.stderr)
            if args.partial is not None:          # keep what is measured if the study is cut short
                args.partial({"study": "engine", "task": task.id, "task_sha256": task.sha256, "store": str(db),
                              "before": before, "after_load_average": list(os.getloadavg()),
                              "protocol": {"version": proto.version, "sha256": proto.sha256}, "trials": trials,
                              "search": {"error": "not run yet (study cut short)"}, "search_iterations": [],
                              "search_wall_s": 0})
    finally:
        store.close()
    t0 = time.monotonic()
    rnd = _atb("run", "llamacpp-smollm2", "--tuner", "random", "--budget", str(args.budget), "--seed", str(args.seed),
               "--db", str(work / "search.sqlite"))
    search_wall = round(time.monotonic() - t0, 1)
    iterations = []
    if rnd.get("run_id"):
        from harness.tuning.campaigns import get_iterations

        with open_store(work / "search.sqlite") as s2:
            for it in get_iterations(s2, rnd["run_id"]):
                iterations.append({"iteration": it.idx + 1, "knobs": it.detail.get("knobs"), "status": it.status,
                                   "ratio": it.speedup, "ci": [it.ci_low, it.ci_high] if it.ci_low else None,
                                   "usable": it.usable, "unusable_reason": it.unusable_reason})
    return {"study": "engine", "task": task.id, "task_sha256": task.sha256, "store": str(db), "before": before,
            "after_load_average": list(os.getloadavg()), "protocol": {"version": proto.version, "sha256": proto.sha256},
            "trials": trials, "search": rnd, "search_iterations": iterations, "search_wall_s": search_wall}


def render_engine(doc: dict[str, Any]) -> str:
    lines = ["# Engine flag search on the real model: llama-server serving SmolLM2-135M-Instruct (CPU)", "",
             f"Task `{doc['task']}` (a real 135M model, Q4_1 GGUF, served locally; one generation thread fixed for "
             f"both arms). Protocol {doc['protocol']['version']} ({doc['protocol']['sha256'][:12]}). Machine: "
             f"{doc['before']['machine']}, {doc['before']['cpus']} CPUs; load average "
             f"{doc['before']['load_average'][0]:.2f} before, {doc['after_load_average'][0]:.2f} after (other work "
             "shared the machine: intervals are wider than on a quiet one).", "",
             "| trial | config | ratio to default | 95% CI | verdict | baseline req/s | candidate req/s | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for t in doc["trials"]:
        ci = f"{t['ci'][0]:.3f}-{t['ci'][1]:.3f}" if t["ci"] else "-"
        ratio = "-" if t["ratio"] is None else f"{t['ratio']:.3f}"
        lines.append(f"| {t['label']} | `{json.dumps(t['config'])}` | {ratio} | {ci} | {t['verdict']} | "
                     f"{t['baseline_rps'] or 0:.2f} | {t['candidate_rps'] or 0:.2f} | {t['wall_s']} |")
    gates = [t for t in doc["trials"] if t.get("output_match")]
    if gates:
        lines += ["", "Output gate (`output_match`) of each trial:", ""]
        lines += [f"- {t['label']}: {t['output_match']}" for t in gates]
    s = doc["search"]
    lines += ["", f"## Seeded random search (`atb run {doc['task']} --tuner random`, budget {s.get('budget')}, seed "
              f"{s.get('seed')}): {s.get('usable_iterations')} usable, best {s.get('best_speedup')} "
              f"{s.get('best_ci')}; outcome {s.get('outcome', s.get('error'))}; {doc['search_wall_s']} s", "",
              "| it | flags | verdict | ratio | 95% CI | usable | why unusable |", "|---|---|---|---|---|---|---|"]
    for it in doc["search_iterations"]:
        ci = f"{it['ci'][0]:.3f}-{it['ci'][1]:.3f}" if it["ci"] else "-"
        ratio = "-" if it["ratio"] is None else f"{it['ratio']:.3f}"
        lines.append(f"| {it['iteration']} | `{json.dumps(it['knobs'])}` | {it['status']} | {ratio} | {ci} | "
                     f"{it['usable']} | {it['unusable_reason']} |")
    return "\n".join(lines) + "\n"


def render(doc: dict[str, Any]) -> str:
    loads = (doc["before"]["load_average"][0], doc["after_load_average"][0])
    shared = max(loads) > float(doc["before"]["cpus"] or 1)
    head = (f"Machine: {doc['before']['machine']}, {doc['before']['cpus']} CPUs; load average "
            f"{loads[0]:.2f} before, {loads[1]:.2f} after "
            + ("(other work shared the machine: wall times are noisy; routes and verdict reasons are not)."
               if shared else "(no more than the study itself kept the cores busy)."))
    ms = doc["before"].get("model_server") or {}
    model = (f"The LLM arm is **{ms.get('about', 'SmolLM2-135M')}, a 135M model served locally** by llama-server "
             f"(`{' '.join(str(ms.get('server_version', '')).split())}`), GGUF SHA-256 `{ms.get('gguf_sha256', '')}`, "
             f"output cap {ms.get('max_output_tokens')} tokens, temperature {ms.get('temperature')}, seed = the run's "
             f"seed, text protocol `{ms.get('text_protocol')}`.")
    lines = []
    if doc["study"] == "campaign":
        lines += ["# Live campaign: SmolLM2-135M (served locally) vs seeded random search, CPU", "", model, "", head, ""]
        lines += ["| task | budget | random usable | LLM usable | LLM outcome | LLM truncated fraction | compare | random wall s | LLM wall s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in doc["results"]:
            lines.append(f"| {r['task']} | {r['budget']} | {r['random'].get('usable_iterations')} | "
                         f"{r['llm'].get('usable_iterations')} | {r['llm'].get('outcome', r['llm'].get('error', ''))} | "
                         f"{r['llm'].get('truncated_fraction')} | {r.get('compare', {}).get('verdict', '')} | "
                         f"{r['random_wall_s']} | {r['llm_wall_s']} |")
        if doc.get("note"):
            lines += ["", f"Note: {doc['note']}."]
        for r in doc["results"]:
            lines += ["", f"## {r['task']}: every LLM iteration", "",
                      f"Random search unusable, by reason: {r['random'].get('unusable_reasons')}; "
                      f"LLM unusable, by reason: {r['llm'].get('unusable_reasons')}.", "",
                      "| it | route to the harness | stop reasons | truncated | verdict | usable | why unusable | verdict reason (start) |",
                      "|---|---|---|---|---|---|---|---|"]
            for it in r.get("llm_iterations", []):
                lines.append(f"| {it['iteration']} | {it['route']} | {', '.join(it['stop_reasons'])} | {it['truncated_calls']} | "
                             f"{it['verdict']} | {it['usable']} | {it['unusable_reason']} | "
                             f"{it['verdict_reason'][:140].replace('|', '/')} |")
    else:
        lines += ["# Prompt change, measured on the real model: reach `submit` with a candidate that builds", "", model, "",
                  head, "", f"Tasks {', '.join(doc['tasks'])}; seeds {doc['seeds']}; budget {doc['budget']} per run; same "
                  "seeds for both prompts. 'Reached submit' = a native `submit` call or the declared text protocol "
                  "(not the workspace submitted as it stood); 'builds' = the harness imported it and constructed "
                  "`ModelNew` (the verdict is not an import or construction failure). Outputs are never edited.", "",
                  "| prompt | iterations | reached submit with a candidate that builds | fraction | routes | truncated calls / calls |",
                  "|---|---|---|---|---|---|"]
        for variant, s in doc["summary"].items():
            frac = "n/a" if s["fraction"] is None else f"{s['fraction']:.2f}"
            lines.append(f"| {variant} | {s['iterations']} | {s['reached_submit_and_builds']} | {frac} | {s['routes']} | "
                         f"{s['truncated_calls']} / {s['model_calls']} |")
        lines += ["", "| prompt | task | seed | it | route | stop reasons | verdict | builds | verdict reason (start) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for run in doc["runs"]:
            for it in run["iterations"]:
                lines.append(f"| {run['prompt']} | {run['task']} | {run['seed']} | {it['iteration']} | {it['route']} | "
                             f"{', '.join(it['stop_reasons'])} | {it['verdict']} | {it['builds']} | "
                             f"{it['verdict_reason'][:120].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=["campaign", "prompt", "engine", "reanalyse", "fromstore"])
    ap.add_argument("--store", type=Path, default=None,
                    help="fromstore: the campaign study's store; prompt: add runs to this store")
    ap.add_argument("--variants", type=lambda s: s.split(","), default=["standard", "small-model/1"],
                    help="prompt: the prompt variants to run (the report pairs runs present under both)")
    ap.add_argument("--json", type=Path, default=None, help="reanalyse: the results JSON to fill in")
    ap.add_argument("--tasks", type=lambda s: s.split(","), default=None)
    ap.add_argument("--budget", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2])
    ap.add_argument("--out", type=Path, default=None, help="JSON path (the .md is written beside it)")
    args = ap.parse_args()
    if args.study == "fromstore":
        doc = campaign_from_store(args.store, args.tasks or ["relu", "scale_shift"], args.budget or 10, args.seed)
        out = args.out or ROOT / "benchmarks" / "results" / "live_campaign.json"
        out.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
        out.with_suffix(".md").write_text(render(doc))
        return 0
    if args.study == "prompt" and args.store is not None and args.budget == 0:
        # budget 0 with --store: write the document from the runs already in the store (no new runs)
        runs = paired_only(prompt_runs_from_store(args.store))
        before = _env_info()
        before["model_server"] = before.get("model_server") or next((r["model_server"] for r in runs), None)
        doc = {"study": "prompt", "store": str(args.store), "before": before,
               "after_load_average": list(os.getloadavg()), "tasks": sorted({r["task"] for r in runs}),
               "seeds": sorted({r["seed"] for r in runs}), "budget": 1, "summary": prompt_summary(runs), "runs": runs}
        out = args.out or ROOT / "benchmarks" / "results" / "live_prompt.json"
        out.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
        out.with_suffix(".md").write_text(render(doc))
        return 0
    if args.study == "reanalyse":
        doc = reanalyse(args.json)
        args.json.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
        args.json.with_suffix(".md").write_text(render(doc))
        return 0
    if args.study == "campaign":
        args.tasks = args.tasks or ["relu", "scale_shift"]
        args.budget = args.budget or 10
        doc = campaign(args)
        out = args.out or ROOT / "benchmarks" / "results" / "live_campaign.json"
    elif args.study == "engine":
        args.budget = args.budget or 2
        out = args.out or ROOT / "benchmarks" / "results" / "engine_real_model.json"

        def partial(d: dict[str, Any]) -> None:
            out.write_text(json.dumps(d, indent=2, sort_keys=True, default=str) + "\n")
            out.with_suffix(".md").write_text(render_engine(d))

        args.partial = partial
        doc = engine_study(args)
    else:
        args.tasks = args.tasks or ["relu", "gelu"]
        args.budget = args.budget or 2
        doc = prompt_study(args)
        out = args.out or ROOT / "benchmarks" / "results" / "live_prompt.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    out.with_suffix(".md").write_text(render_engine(doc) if doc["study"] == "engine" else render(doc))
    print(f"wrote {out} and {out.with_suffix('.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
