"""``atb run``, ``atb compare``, ``atb report`` and ``atb ab``: tuning runs and their comparisons.

``random`` is the harness's seeded random-search baseline; every other tuner spec goes through
``atb_agent.campaign.run_campaign``. Both record through the harness's ``CampaignRecorder``, so
``compare`` and ``report`` read every arm the same way, from the store.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from atb_agent.cli import _args
from atb_agent.cli._common import EXIT_OK, BadInput, add_db, add_json, emit, progress


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("run", help="run a tuner on a task for a budget of iterations, recording every one")
    p.add_argument("task", help="native task name (see `atb tasks`) or a task file")
    p.add_argument("--tuner", required=True, type=_args.tuner_spec, help="random | openai:MODEL | anthropic:MODEL | replay:PATH | entry point")
    p.add_argument("--budget", type=_args.budget, required=True, help="iterations (each ends with one harness verdict)")
    p.add_argument("--seed", type=_args.seed, required=True, help="the tuner's seed (random search: its whole sequence)")
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda"], help="device to measure on")
    p.add_argument("--resume", metavar="RUN", help="resume an unfinished run id instead of starting a new one")
    p.add_argument("--base-url", default=None,
                   help="OpenAI/Anthropic-compatible endpoint for the model tuner (e.g. a locally served model)")
    add_db(p)
    add_json(p)
    p.set_defaults(handler=cmd_run)

    c = sub.add_parser("compare", help="compare two runs: usable iterations, best speedup, noise, saturation")
    c.add_argument("run_a")
    c.add_argument("run_b")
    _add_allow_draft(c)
    add_db(c)
    add_json(c)
    c.set_defaults(handler=cmd_compare)

    r = sub.add_parser("report", help="write an HTML report with PNG plots for runs or an A/B registration")
    r.add_argument("runs", nargs="+", metavar="RUN", help="run ids, or a registration id for all its runs")
    r.add_argument("--out", required=True, help="output folder (report.html, best_so_far.png, usability.png)")
    add_db(r)
    add_json(r)
    r.set_defaults(handler=cmd_report)

    a = sub.add_parser("ab", help="register a pre-registered A/B spec, run both arms, check delivery, decide")
    a.add_argument("spec", help="A/B spec YAML (see protocol/preregistrations/)")
    a.add_argument("--backend", default="cpu", choices=["cpu", "cuda"])
    a.add_argument("--transcripts", default=None,
                   help="folder searched for the arms' transcripts (default: next to the --db file; for a "
                        "PostgreSQL --db also where the arms write them, default $ATB_TRANSCRIPTS_DIR or .)")
    a.add_argument("--base-url", default=None,
                   help="model endpoint for every openai:/anthropic: arm without its own base_url (e.g. the URL "
                        "`atb model serve` prints); registered with the spec, so it is in the digest")
    a.add_argument("--out", default=None, metavar="DIR",
                   help="also write the A/B's HTML report (as `atb report REG_ID --out DIR`) into DIR")
    _add_allow_draft(a)
    add_db(a)
    add_json(a)
    a.set_defaults(handler=cmd_ab)


def _add_allow_draft(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-draft-protocol", action="store_true",
                   help="work under a draft (unreleased) protocol; the output says protocol_draft (issue 27)")


def _refuse_draft_first(args: argparse.Namespace, action: str) -> Any:
    """Load the protocol and refuse a draft before anything opens (or creates) the store."""
    from protocol import load_protocol, require_released

    protocol = load_protocol()
    require_released(protocol, action, allow_draft=bool(getattr(args, "allow_draft_protocol", False)))
    return protocol


def _require_existing_store(db: str) -> None:
    """A command that only reads results must not create a store: a missing SQLite file is bad input.

    Why: opening a missing path creates an empty store, so `atb compare X Y --db typo.sqlite` used to
    leave a fresh file behind while exiting 2 on the unknown ids (issue 27, item 7).

    Raises:
        BadInput: ``db`` names a local SQLite file that does not exist.
    """
    text = str(db)
    if "://" in text and not text.startswith("sqlite:///"):
        return                      # a server store (PostgreSQL): nothing is created by reading it
    path = Path(text[len("sqlite:///"):] if text.startswith("sqlite:///") else text)
    if not path.is_file():
        raise BadInput(f"no results store at {path}: give --db the store the runs were recorded in")


# ---------------------------------------------------------------------- run
def _campaign_id_of(result: Any) -> str:
    for path in (("campaign_id",), ("run_id",), ("campaign", "id"), ("id",)):
        obj = result
        for name in path:
            obj = obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)
        if isinstance(obj, str):
            return obj
    raise BadInput("the tuner finished but returned no run id; its campaign cannot be reported")


def run_tuner(*, task: str, tuner: str, budget: int, seed: int, db: str, backend: str,
              resume: str | None = None, preregistration_id: str | None = None, arm: str | None = None,
              config: dict[str, Any] | None = None, base_url: str | None = None,
              transcripts_dir: Path | None = None) -> str:
    """Run one campaign with any tuner spec and return its run id (from the store).

    Raises:
        BadInput: a non-positive budget, a tuner the installation lacks, or an A/B arm whose tuner
            cannot claim a registration.
        NotFound: ``resume`` names no stored run.
        HarnessError / AgentError: from the search or the tuner (exit 2 at the CLI).
    """
    from atb_agent.campaign import CampaignSpec, open_results_store, run_campaign

    if budget <= 0:
        raise BadInput(f"--budget must be a positive number of iterations, got {budget}")
    spec = CampaignSpec(task=task, tuner=tuner, budget=budget, seed=seed, store=db, base_url=base_url, resume=resume,
                        backend=backend, preregistration_id=preregistration_id, arm=arm, config=config or {},
                        transcripts_dir=transcripts_dir)
    if tuner == "random" and resume is not None:
        from harness.tuning.campaigns import get_campaign

        with open_results_store(db) as store:
            get_campaign(store, resume)      # NotFound (exit 2) rather than a new run under a mistyped id

    def random_progress(i: int, knobs: dict[str, Any], res: Any) -> None:
        progress(f"[random seed {seed}] iteration {i + 1}/{budget} {knobs}: "
                 f"{getattr(res, 'verdict', '?')} speedup {getattr(res, 'speedup', None)}")

    summary = run_campaign(spec, on_iteration=random_progress)
    return _campaign_id_of(summary)


def _run_payload(db: str, run_id: str) -> dict[str, Any]:
    from atb_agent.campaign import open_results_store as open_store
    from harness.tuning.campaigns import campaign_sandboxes, get_iterations, summarize

    with open_store(db) as store:
        s = summarize(store, run_id)
        its = get_iterations(store, run_id)
        sandboxes = campaign_sandboxes(store, run_id)
    return {
        "run_id": run_id, "task": s.campaign.task_id, "tuner": s.campaign.tuner_spec, "seed": s.campaign.seed,
        "budget": s.campaign.budget, "iterations_recorded": s.iterations_recorded,
        "usable_iterations": s.usable_iterations, "best_speedup": s.best_speedup,
        "best_ci": list(s.best_ci) if s.best_ci else None,
        "best_iteration": None if s.best_iteration is None else s.best_iteration + 1,
        "best_candidate_sha256": s.best_candidate_sha256, "unusable_reasons": s.unusable_reasons,
        "candidate_sequence": [it.detail.get("candidate_sha256") or it.candidate_sha256 for it in its],
        "knob_sequence": [it.detail.get("knobs") for it in its] if s.campaign.tuner_spec == "random" else None,
        "tokens_in": s.tokens_in, "tokens_out": s.tokens_out, "cost_usd": s.cost_usd,
        "truncated_fraction": s.truncated_fraction,
        "outcome": s.outcome.status if s.outcome else "unfinished",
        "outcome_reason": s.outcome.reason if s.outcome else "",
        "device_sha256": s.campaign.device_sha256, "protocol_sha256": s.campaign.protocol_sha256,
        # the tuner's sandbox (issue 26): backend, root (image or host), image, root identity, selection
        # reasons and the backend requested; the first run's, then every run's (a resume starts a fresh one).
        # None and [] for random search, which has no sandbox. Named as in benchmarks/kernelbench_llm.py's rows.
        "sandbox_started": sandboxes[0] if sandboxes else None, "sandbox_runs": sandboxes,
    }


def cmd_run(args: argparse.Namespace) -> int:
    run_id = run_tuner(task=args.task, tuner=args.tuner, budget=args.budget, seed=args.seed, db=args.db,
                       base_url=args.base_url,
                       backend=args.backend, resume=args.resume)
    payload = _run_payload(args.db, run_id)
    best = "none usable" if payload["best_speedup"] is None else (
        f"{payload['best_speedup']:.3f}x [{payload['best_ci'][0]:.3f}, {payload['best_ci'][1]:.3f}] at iteration "
        f"{payload['best_iteration']}")
    emit(payload, args, f"run {run_id}: {payload['tuner']} on {payload['task']}, seed {payload['seed']}: "
                        f"{payload['usable_iterations']}/{payload['budget']} usable iterations, best {best}; "
                        f"outcome {payload['outcome']}")
    return EXIT_OK


# ---------------------------------------------------------------------- compare
def _compare_human(c: Any) -> str:
    def arm(name: str, r: Any) -> str:
        best = "none usable" if r.best_speedup is None else f"{r.best_speedup:.3f}x [{r.best_ci[0]:.3f}, {r.best_ci[1]:.3f}]"
        reach = r.iterations_to_reach_other_best
        return (f"  {name} {r.campaign_id} ({r.tuner_spec}, seed {r.seed}): {r.usable_iterations}/{r.budget} usable; "
                f"best {best}; reached the other's best {'in ' + str(reach) + ' iterations' if reach else 'never'}")
    names = {"a_better": f"{c.a.tuner_spec} (A) is better", "b_better": f"{c.b.tuner_spec} (B) is better",
             "within_noise": "no difference beyond noise", "uninformative_saturated": "uninformative: task saturated",
             "no_usable_result": "no usable result"}
    draft = " (DRAFT, unreleased)" if getattr(c, "protocol_draft", False) else ""
    return "\n".join([f"task {c.task_id}, budget {c.budget}, device {c.device_sha256[:12]}…, protocol "
                      f"{c.protocol_sha256[:12]}…{draft}", arm("A", c.a), arm("B", c.b),
                      f"verdict: {names[c.verdict]} — {c.explanation}"])


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.tuning.compare import compare_runs
    from atb_agent.cli._common import open_verified_store

    protocol = _refuse_draft_first(args, f"compare runs {args.run_a} and {args.run_b}")
    _require_existing_store(args.db)
    with open_verified_store(args.db) as store:   # a store that fails `atb store verify` is refused (exit 2)
        result = compare_runs(store, args.run_a, args.run_b, protocol, allow_draft=True)  # refused above
    emit(result, args, _compare_human(result))
    return EXIT_OK


# ---------------------------------------------------------------------- report
def cmd_report(args: argparse.Namespace) -> int:
    from harness.tuning.reports import build_report
    from atb_agent.cli._common import open_verified_store
    from protocol import load_protocol

    _require_existing_store(args.db)
    with open_verified_store(args.db) as store:   # a store that fails `atb store verify` is refused (exit 2)
        files = build_report(store, list(args.runs), Path(args.out), load_protocol())
    emit(files, args, f"report written: {files.html} ({', '.join(files.pngs)})")
    return EXIT_OK


# ---------------------------------------------------------------------- ab
def _transcript_for(store: Any, run: Any, search_dir: Path) -> Path | None:
    """The transcript of ``run``: named in its config or outcome, else found by its header's campaign id."""
    from transcripts import TranscriptError, read_transcript

    from harness.tuning.campaigns import get_outcome

    outcome = get_outcome(store, run.id)
    for source in (run.config, outcome.detail if outcome else {}):
        for key in ("transcript", "transcript_path"):
            value = source.get(key)
            if isinstance(value, str) and Path(value).is_file():
                return Path(value)
    if not search_dir.is_dir():
        return None
    for path in sorted(search_dir.rglob("*.jsonl")):
        try:
            if read_transcript(path).header.campaign_id == run.id:
                return path
        except (TranscriptError, ValueError, OSError):
            continue
    return None


def _recording(store: Any, run: Any, search_dir: Path) -> Any:
    from harness.science.prereg import recording_from_store
    from transcripts import read_transcript, verify_transcript

    path = _transcript_for(store, run, search_dir)
    if path is None:
        return recording_from_store(store, run, [], [])
    verify_transcript(path)          # an edited transcript is refused (TranscriptTampered, exit 2)
    calls = read_transcript(path).model_calls()
    return recording_from_store(store, run, [c.request.body for c in calls], [c.response.body for c in calls])


def _resolve_endpoints(spec: Any, base_url: str | None) -> Any:
    """The spec with ``--base-url`` given to every model arm (``openai:``/``anthropic:``) that names no
    endpoint of its own; the result is what is registered, so the endpoint is in the digest."""
    from atb_agent.tuners import parse_spec

    if not base_url:
        return spec
    update: dict[str, Any] = {}
    for role in ("control", "treatment"):
        arm = getattr(spec, role)
        try:
            kind = parse_spec(arm.tuner).kind
        except Exception:  # noqa: BLE001 - a bad tuner spec is reported by the preflight, with its arm
            continue
        if arm.base_url is None and kind in ("openai", "anthropic"):
            update[role] = arm.model_copy(update={"base_url": base_url})
    return spec.model_copy(update=update) if update else spec


def _refuse_edit_first(spec: Any, db: str) -> None:
    """An id already registered with another digest is refused before the preflight (read-only), naming
    the fields that differ: the edit, not a missing key, is what the user has to fix.

    Raises:
        RegistrationEdited: ``spec.id`` is stored with another digest.
    """
    from atb_agent.preflight import stored_registration
    from harness.science.prereg import ABSpec, RegistrationEdited, spec_differences

    stored = stored_registration(spec.id, db)
    if stored is None or stored.spec_sha256 == spec.digest:
        return
    changed = spec_differences(ABSpec.model_validate(stored.spec), spec)
    raise RegistrationEdited(
        f"A/B {spec.id} is already registered with digest {stored.spec_sha256[:16]}…; this spec hashes to "
        f"{spec.digest[:16]}…" + (f" (differs in {', '.join(changed)})" if changed else "")
        + ". A registration cannot be edited: register the changed spec under a new id")


def cmd_ab(args: argparse.Namespace) -> int:
    """Preflight, register, run both arms per seed (resuming unfinished ones), check delivery, decide.

    Nothing is registered or stored until the preflight (:func:`atb_agent.preflight.preflight_ab`) has
    passed: a failed preflight exits 2 with one line naming what is missing, the store untouched.
    """
    from atb_agent.campaign import transcripts_home
    from atb_agent.preflight import PreflightFailed, preflight_ab
    from harness.science.prereg import (
        check_treatment_delivery, claimed_runs, decide, load_spec, record_outcome, register,
    )
    from atb_agent.campaign import open_results_store as open_store
    from harness.store._open import store_kind
    from harness.tuning.campaigns import get_outcome

    protocol = _refuse_draft_first(args, f"run the A/B {args.spec}")
    spec = _resolve_endpoints(load_spec(args.spec), args.base_url)
    pg = store_kind(args.db) == "postgresql"
    tdir = Path(args.transcripts).resolve() if (pg and args.transcripts) else None
    _refuse_edit_first(spec, args.db)
    checked = preflight_ab(spec, db=args.db, backend=args.backend, protocol=protocol, transcripts_dir=tdir)
    if not checked.ok:
        raise PreflightFailed(f"A/B {spec.id} not registered, nothing stored: {checked.one_line()}")
    progress(f"A/B {spec.id} preflight ok: " + ", ".join(
        (f"{c.arm} " if c.arm else "") + c.check for c in checked.checks))
    with open_store(args.db) as store:
        reg = register(store, spec, protocol, allow_draft=True)   # draft refused above; refuses an edited spec
        existing = claimed_runs(store, reg)
    progress(f"A/B {reg.id} registered with digest {reg.spec_sha256[:16]}… at {reg.created_at}")
    for seed in spec.seeds:
        for arm in (spec.control, spec.treatment):
            with open_store(args.db) as store:
                mine = [r for r in existing if r.arm == arm.name and r.seed == seed]
                done = bool(mine) and get_outcome(store, mine[0].id) is not None
            if done:
                progress(f"[{arm.name} seed {seed}] already run: {mine[0].id}")
                continue
            progress(f"[{arm.name} seed {seed}] running {arm.tuner}"
                     + (f" at {arm.base_url}" if arm.base_url else "") + f" for {spec.budget} iterations")
            run_tuner(task=spec.task, tuner=arm.tuner, budget=spec.budget, seed=seed, db=args.db,
                      backend=args.backend, resume=mine[0].id if mine else None, preregistration_id=reg.id,
                      arm=arm.name, config=arm.config or None, base_url=arm.base_url, transcripts_dir=tdir)
    search_dir = Path(args.transcripts) if args.transcripts else transcripts_home(args.db)
    with open_store(args.db) as store:
        runs = claimed_runs(store, reg)
        treat = [_recording(store, r, search_dir) for r in runs if r.arm == spec.treatment.name]
        ctrl = [_recording(store, r, search_dir) for r in runs if r.arm == spec.control.name]
        delivery = check_treatment_delivery(spec, treat, ctrl)
        outcome = decide(store, reg, protocol, delivery, allow_draft=True)
        report_id = record_outcome(store, outcome, protocol)
    payload: dict[str, Any] = {"registration_id": reg.id, "spec_sha256": reg.spec_sha256, "report_id": report_id,
                               "endpoints": {spec.control.name: spec.control.base_url,
                                             spec.treatment.name: spec.treatment.base_url},
                               "preflight": [c.model_dump(mode="json") for c in checked.checks],
                               **outcome.model_dump(mode="json")}
    if args.out:
        from atb_agent.cli._common import open_verified_store
        from harness.tuning.reports import build_report

        with open_verified_store(args.db) as store:
            files = build_report(store, [reg.id], Path(args.out), protocol)
        payload["report_html"] = str(files.html)
        progress(f"report written: {files.html}")
    draft = " [under a DRAFT (unreleased) protocol]" if outcome.protocol_draft else ""
    emit(payload, args, f"A/B {reg.id}: {outcome.status} — {outcome.explanation}{draft}")
    return EXIT_OK
