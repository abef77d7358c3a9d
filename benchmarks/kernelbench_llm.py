"""The LLM arm over KernelBench problems: one campaign per problem, one JSON line per problem as it
finishes, resumable across device calls (issue 26). The random arm beside it is
``benchmarks/kernelbench_random.py``; ``benchmarks/render_kernelbench_arms.py`` puts both in one table.

Why: the paper this project answers reports, for KernelBench Level 1, usable iterations per arm (random
search 3/20, an LLM tuner 11-14/20). Here the LLM arm is a model tuner (default ``openai:smollm2``, the
local SmolLM2-135M served by ``atb model serve``) driven through the same campaign function as ``atb run``
(:func:`atb_agent.campaign.run_campaign` with a :class:`~atb_agent.campaign_spec.CampaignSpec`), with the
harness's own services: one measurement session on ``--device``, the tuner's sandbox (bubblewrap by
default: the GPU machine has no Docker; where no image root filesystem was built it runs over the host's
own files, read-only), every candidate measured by the same path as any other.

Usage (the GPU machine, after ``scripts/device_kit_setup.sh`` and ``. /tmp/atb-kit/env.sh``; device calls
of ~9 minutes, re-run the same command until it prints ``done``)::

    python3 benchmarks/kernelbench_llm.py --kb $ATB_KB --level 1 --problems 19,23 \\
        --out /tmp/atb-run/llm.jsonl --stores /tmp/atb-run/llm_stores --device cuda --budget 10 --seed 1 \\
        --base-url $ATB_MODEL_URL --time-budget-s 540

Resuming: each problem's campaign has a fixed key (level, problem, source digest, tuner, seed, budget,
attempt) naming its own folder under ``--stores``: ``<key>/atb.sqlite`` (the store), ``checkpoints.sqlite``
(the tuner graph's LangGraph checkpoints) and ``transcripts/`` beside it, as ``atb run`` keeps them. The
folder holds one campaign; a call cut short by its budget, or a model call that failed, leaves it open,
and the next call resumes it (``resume=`` its run id) from the graph's checkpoint: iterations already
stored are not run again. A finished problem's row holds every iteration's figures, the model's call and
truncation counts and the time split; its folder is deleted unless ``--keep-stores`` (its transcript can
be kept with ``--transcripts DIR``). Finished problems (a row in ``--out``) are skipped. A resume refused
(another device fingerprint, protocol or code) is recorded (``kind: llm_abandoned``) and the problem
starts again under the next attempt's key. A child that broke without a result is recorded as an error
row and retried up to ``--max-attempts``.

Every row carries ``kind``: ``llm_campaign`` or ``llm_abandoned``. An ``llm_campaign`` row has the random
arm's shape (``benchmarks/kernelbench_random.py``: outcome, usable iterations, best speedup and interval,
correct fraction, fast_1, each iteration's status, speedup, interval and reason) plus ``model_calls``
(every call made, over all runs of the campaign), ``failed_calls`` (HTTP errors), ``truncated_calls``,
``truncated_fraction`` (the recorder's, which decides ``infrastructure_defect``), ``resumes``, ``model`` (the served model's identity: GGUF SHA-256, server
version), ``arm_config``, ``timing_s`` (run start, model, evaluation) and per iteration the model's
calls, truncations, generation seconds and output tokens. ``sandbox`` is the backend asked for;
``sandbox_started`` is the tuner's sandbox the campaign's first run started (``backend``, ``root``:
``image`` or ``host``, ``image``, ``root_identity``, ``selection``: every reason, ``requested``) and
``sandbox_runs`` the same for every run, a resumed run's fresh sandbox included.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _measuring_digest import process_measuring_digest
from kernelbench_random import _marked, code_rev, fold_wal, missing_campaign_modules  # noqa: E402
from kernelbench_random import read_state as _read_state  # noqa: E402
from kernelbench_sweep import (  # noqa: E402
    ROOT, append_line, child_env, now_utc, problem_dir, problem_id, report_end, run_bounded, select_problems,
)

RESULT_MARK = "ATB_KB_LLM_RESULT "
ERROR_MARK = "ATB_KB_LLM_ERROR "
MIN_START_S = 60.0      # do not start (or resume) a campaign with less budget left than this
MARGIN_S = 8.0          # kept free at the end of the budget for writing and exiting
DEFAULT_TUNER = "openai:smollm2"
DEFAULT_ARM_CONFIG = {"text_protocol": "fenced-python-stop/1", "prompt": "small-model/2"}   # the A/B example's (issue 28)
STORE_FILE = "atb.sqlite"


def tuner_slug(tuner: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", tuner).strip("-").lower()


def campaign_key(level: int, problem: Path, tuner: str, seed: int, budget: int, attempt: int) -> str:
    """The fixed key of a problem's campaign (its store folder): the same in every call, so a cut call resumes it."""
    from harness.records import sha256_text

    digest = sha256_text(problem.read_text(encoding="utf-8"))[:12]
    base = f"kbllm-l{level}-{problem.stem}-{digest}-{tuner_slug(tuner)}-s{seed}-b{budget}"
    return base if attempt <= 1 else f"{base}-a{attempt}"


# ----------------------------------------------------------------------------------- records
def read_state(out: Path, max_attempts: int) -> tuple[set[str], dict[str, int], dict[str, int]]:
    """(settled problem keys, abandoned attempts per key, errors per key) from ``out``: the random arm's
    rule (``kernelbench_random.read_state``) over this arm's rows (``llm_campaign``, ``llm_abandoned``)."""
    return _read_state(out, max_attempts, arm="llm")


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def transcript_figures(path: Path) -> dict[str, Any]:
    """From a campaign's transcript: the model's calls per iteration (truncated or not, generation
    seconds from llama-server's own ``timings`` where the response has them, output tokens), the
    served model's identity, and when the run started (the header)."""
    per: dict[int, dict[str, Any]] = {}
    header: dict[str, Any] = {}
    resumes = 0
    if not path.is_file():
        return {"per_iteration": per, "header": header, "resumes": resumes}

    def slot(data: dict[str, Any]) -> dict[str, Any]:
        return per.setdefault(int(data.get("iteration", -1)), {"model_calls": 0, "failed_calls": 0,
                                                                "truncated_calls": 0, "model_s": 0.0,
                                                                "output_tokens": 0})
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        data = rec.get("data") or {}
        kind = rec.get("kind")
        if kind == "header":
            header = data
        elif kind == "resume":
            resumes += 1
        elif kind == "model_call":
            it = slot(data)
            it["model_calls"] += 1
            if (data.get("response") or {}).get("status") != 200:
                it["failed_calls"] += 1      # an HTTP error (the server down, overloaded): recorded, not a turn
            try:
                body = json.loads(base64.b64decode(data["response"]["body_b64"]))
                tm = body.get("timings") or {}
                it["model_s"] = round(it["model_s"] + (tm.get("prompt_ms", 0) + tm.get("predicted_ms", 0)) / 1000, 3)
            except (KeyError, ValueError, TypeError):
                pass
        elif kind == "model_turn":
            it = slot(data)
            it["output_tokens"] += int(data.get("output_tokens") or 0)
            if (data.get("truncation") or {}).get("truncated"):
                it["truncated_calls"] += 1
    return {"per_iteration": per, "header": header, "resumes": resumes}


def llm_row(store: Any, run_id: str, transcript: Path) -> dict[str, Any]:
    """The per-problem record of a finished campaign: the random arm's row shape plus the model's figures."""
    from kernelbench_random import campaign_row

    from harness.tuning.campaigns import campaign_sandboxes, get_iterations, summarize

    row = campaign_row(store, run_id)
    sandboxes = campaign_sandboxes(store, run_id)
    s = summarize(store, run_id)
    its = {it.idx: it for it in get_iterations(store, run_id)}
    fig = transcript_figures(transcript)
    per, header = fig["per_iteration"], fig["header"]
    detail = s.outcome.detail if s.outcome is not None else {}
    started = _stamp(header["created_at"]) if header.get("created_at") else None
    session = store.session(s.campaign.session_id) if s.campaign.session_id else None
    session_started = session["started_at"] if session is not None else None   # a sqlite3.Row or a dict
    last = started
    model_total = evaluation_total = 0.0
    for it in row["iterations"]:
        it.pop("knobs", None)
        m = per.get(it["idx"], {"model_calls": 0, "failed_calls": 0, "truncated_calls": 0, "model_s": 0.0,
                                "output_tokens": 0})
        it.update(m)
        rec = its.get(it["idx"])
        verdict = store.verdict(rec.verdict_id) if rec is not None and rec.verdict_id else None
        lines = [ln.strip() for ln in (verdict.reason if verdict is not None else "").splitlines() if ln.strip()]
        it["reason_last_line"] = lines[-1][:300] if lines else ""      # the exception, where the reason is a traceback
        at = _stamp(rec.created_at) if rec is not None else None
        if at is not None and last is not None:
            it["wall_s"] = round(at - last, 3)
            it["evaluation_s"] = round(at - last - m["model_s"], 3)
            model_total += m["model_s"]
            evaluation_total += it["evaluation_s"]
        last = at if at is not None else last
    row.pop("best_knobs", None)
    row.pop("knob_space", None)
    row.pop("module_space", None)
    served = header.get("model_server") or {}
    row.update({
        # over every run of the campaign (a resumed campaign appends to its transcript); the outcome's own
        # counts are the last run's
        "model_calls": sum(int(m.get("model_calls", 0)) for m in per.values()),
        "failed_calls": sum(int(m.get("failed_calls", 0)) for m in per.values()),
        "truncated_calls": sum(int(m.get("truncated_calls", 0)) for m in per.values()),
        "resumes": fig["resumes"],
        "last_run_calls": {"model_calls": detail.get("model_calls"), "truncated_calls": detail.get("truncated_calls")},
        "truncated_fraction": s.truncated_fraction, "outcome_reason": s.outcome.reason if s.outcome else "",
        "tokens_in": s.tokens_in, "tokens_out": s.tokens_out,
        "model": {"provider": header.get("provider"), "model": header.get("model"),
                  "gguf_sha256": served.get("gguf_sha256"), "server_version": served.get("server_version"),
                  "about": served.get("about"),
                  "max_output_tokens": served.get("max_output_tokens") or header.get("max_output_tokens"),
                  "text_protocol": header.get("text_protocol"), "prompt": header.get("prompt")},
        "arm_config": {k: v for k, v in s.campaign.config.items() if k in ("text_protocol", "prompt",
                                                                            "system_prompt_suffix")},
        "timing_s": {"run_start": round(started - _stamp(session_started), 3)
                     if started is not None and session_started else None,
                     "model": round(model_total, 3), "evaluation": round(evaluation_total, 3)},
        "transcript_entries": sum(1 for _ in transcript.open()) if transcript.is_file() else 0,
        # the sandbox each run started (``sandbox`` is only the backend asked for): backend, root (image or
        # host), image, root identity, selection reasons; the first run's, then every run's (issue 26)
        "sandbox_started": sandboxes[0] if sandboxes else None, "sandbox_runs": sandboxes,
    })
    return row


# ----------------------------------------------------------------------------------- campaign child
def _open_run(store_path: Path) -> tuple[str | None, bool]:
    """The campaign already in this problem's store (its run id, finished?), or (None, False)."""
    from harness.store import open_store
    from harness.tuning.campaigns import list_campaigns, summarize

    if not store_path.is_file():
        return None, False
    with open_store(store_path) as store:
        rows = list_campaigns(store)
        if not rows:
            return None, False
        run = rows[-1].id
        return run, summarize(store, run).outcome is not None


def campaign_child(args: argparse.Namespace) -> int:
    """Runs in its own process (killed at the call's budget): one problem's campaign, started or resumed."""
    from atb_agent.campaign import run_campaign
    from atb_agent.campaign_spec import CampaignSpec
    from atb_agent.errors import CampaignError as AgentCampaignError
    from atb_agent.services import HarnessServices
    from harness.store import open_store
    from harness.tuning.campaigns import CampaignError as HarnessCampaignError
    from protocol import load_protocol

    folder: Path = args.dir
    folder.mkdir(parents=True, exist_ok=True)
    store_path = folder / STORE_FILE
    run_id, finished = _open_run(store_path)
    spec = CampaignSpec(task=str(args.campaign_child), tuner=args.tuner, budget=args.budget, seed=args.seed,
                        store=store_path, base_url=args.base_url, resume=run_id, backend=args.device,
                        config=json.loads(args.arm_config), label=args.key)
    print(f"  {'resuming ' + run_id if run_id else 'starting a new run'} in {folder}", flush=True)
    if not finished:
        try:
            summary = run_campaign(spec, services=HarnessServices(args.device, sandbox_backend=args.sandbox))
            run_id = summary.campaign.id
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it and retries
            # a resume the harness refuses (another device fingerprint, protocol, parameters, or a stored
            # sequence that conflicts) is abandoned and started afresh; anything else (a model call that
            # failed, a sandbox that did not start) leaves the campaign open for the next attempt
            refused = run_id is not None and isinstance(exc, (AgentCampaignError, HarnessCampaignError))
            print(ERROR_MARK + json.dumps({"error": f"{type(exc).__name__}: {exc}"[:1500], "refused_resume": refused,
                                           "run_id": run_id or _open_run(store_path)[0]}), flush=True)
            return 3
    assert run_id is not None
    proto = load_protocol()
    with open_store(store_path) as store:
        row = llm_row(store, run_id, folder / "transcripts" / f"{run_id}.jsonl")
    row.update({"protocol_version": proto.version, "protocol_draft": bool(getattr(proto, "draft", False))})
    print(RESULT_MARK + json.dumps(row, default=str), flush=True)
    return 0


# ----------------------------------------------------------------------------------- main loop
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kb", type=Path, help="root of a KernelBench checkout (or of a folder laid out like one)")
    p.add_argument("--level", type=int, default=1)
    p.add_argument("--problems", default=None, help="ids or ranges (1-100, 1,5,9-12) or names; default all")
    p.add_argument("--out", type=Path, help="JSON-lines results file (appended; resumable)")
    p.add_argument("--stores", type=Path, default=None,
                   help="folder of one folder per campaign (store, checkpoints, transcript), kept across calls "
                        "for resuming (default: beside --out, named <out stem>_stores)")
    p.add_argument("--keep-stores", action="store_true", help="keep a finished campaign's folder")
    p.add_argument("--transcripts", type=Path, default=None, help="copy each finished campaign's transcript here")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--budget", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tuner", default=DEFAULT_TUNER, help="a model tuner spec (default openai:smollm2)")
    p.add_argument("--base-url", default=os.environ.get("ATB_MODEL_URL"),
                   help="the model's endpoint (default $ATB_MODEL_URL, which the device kit's env.sh sets)")
    p.add_argument("--arm-config", default=json.dumps(DEFAULT_ARM_CONFIG),
                   help="JSON arm config for the tuner (keys: text_protocol, prompt, system_prompt_suffix); "
                        f"default {json.dumps(DEFAULT_ARM_CONFIG)}")
    p.add_argument("--sandbox", choices=["auto", "bwrap", "docker"], default="bwrap",
                   help="the tuner's sandbox backend (default bwrap: the GPU machine has no Docker)")
    p.add_argument("--time-budget-s", type=float, default=540.0,
                   help="stop starting work so the whole call ends within this many seconds")
    p.add_argument("--max-attempts", type=int, default=2,
                   help="tries per problem when the campaign child breaks without a result")
    p.add_argument("--_campaign-child", dest="campaign_child", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--_key", dest="key", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_dir", dest="dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.campaign_child is None:
        if args.kb is None:
            p.error("--kb is required")
        if args.out is None:
            p.error("--out is required")
    if args.budget <= 0:
        p.error("--budget must be positive")
    try:
        if not isinstance(json.loads(args.arm_config), dict):
            raise ValueError
    except ValueError:
        p.error("--arm-config must be a JSON object")
    if args.tuner.startswith(("openai:", "anthropic:")) and not args.base_url and args.tuner.endswith(":smollm2"):
        p.error("--base-url (or $ATB_MODEL_URL) is required for the served model: "
                "`atb model serve` or the device kit prints it")
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
          f"{len(todo)} to do; {args.tuner} at {args.base_url} seed {args.seed} budget {args.budget} on "
          f"{args.device}, sandbox {args.sandbox}; out {out}; stores {stores}", flush=True)
    stopped = False
    for p in todo:
        left = deadline - time.perf_counter()
        if left < MIN_START_S:
            stopped = True
            break
        attempt = abandoned.get(key(p), 0) + 1
        ckey = campaign_key(args.level, p, args.tuner, args.seed, args.budget, attempt)
        folder = stores / ckey
        cmd = [sys.executable, str(Path(__file__).resolve()), "--_campaign-child", str(p), "--_key", ckey,
               "--_dir", str(folder), "--device", args.device, "--budget", str(args.budget), "--seed",
               str(args.seed), "--tuner", args.tuner, "--arm-config", args.arm_config, "--sandbox", args.sandbox]
        if args.base_url:
            cmd += ["--base-url", args.base_url]
        started = now_utc()
        print(f"{p.stem}: campaign {ckey} ({left:.0f} s left in this call)", flush=True)
        code, stdout, stderr, wall = run_bounded(cmd, left, child_env(), ROOT)
        for line in stdout.splitlines():
            if line.startswith("  "):
                print(line, flush=True)
        base = {"problem": p.stem, "id": problem_id(p), "level": args.level, "code_rev": rev, "device": args.device,
                "measuring_digest": process_measuring_digest(ROOT),
                "tuner": args.tuner, "seed": args.seed, "budget": args.budget, "campaign_key": ckey,
                "base_url": args.base_url, "sandbox": args.sandbox, "started_utc": started, "wall_s": round(wall, 3)}
        if code is None:   # cut by this call's budget: the campaign resumes from its folder next call
            print(f"{p.stem}: cut by the time budget after {wall:.0f} s; resumed next call from {folder}", flush=True)
            fold_wal(folder / STORE_FILE)
            stopped = True
            break
        result = _marked(stdout, RESULT_MARK)
        failed = _marked(stdout, ERROR_MARK)
        if result is not None:
            row = {**base, "kind": "llm_campaign", **result}
            append_line(out, row)
            settled.add(key(p))
            transcript = folder / "transcripts" / f"{result['campaign_id']}.jsonl"
            if args.transcripts is not None and transcript.is_file():
                args.transcripts.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(transcript, args.transcripts / f"{ckey}.jsonl")
            if not args.keep_stores:
                shutil.rmtree(folder, ignore_errors=True)
            print(f"{p.stem}: {row['outcome']}, {row['usable_iterations']}/{row['budget']} usable, best "
                  f"{row['best_speedup']} {row['best_ci']}, correct {row['correct_fraction']}, truncated "
                  f"{row['truncated_calls']}/{row['model_calls']} calls, {wall:.0f} s", flush=True)
        elif failed is not None and failed.get("refused_resume"):
            append_line(out, {**base, "kind": "llm_abandoned", "reason": failed["error"], "run_id": failed.get("run_id")})
            if not args.keep_stores:
                shutil.rmtree(folder, ignore_errors=True)
            abandoned[key(p)] = attempt
            print(f"{p.stem}: campaign {ckey} abandoned ({failed['error'][:200]}); next attempt next", flush=True)
        else:
            why = failed["error"] if failed is not None else \
                f"exit {code}: {(stderr.strip().splitlines() or [''])[-1][:400]}"
            # the campaign stays open in its folder: the next attempt resumes it from its checkpoint
            append_line(out, {**base, "kind": "llm_campaign", "outcome": "error", "reason": why,
                              "run_id": (failed or {}).get("run_id"), "stderr_tail": stderr[-1500:]})
            errors[key(p)] = errors.get(key(p), 0) + 1
            print(f"{p.stem}: error ({why[:300]})", flush=True)
    remaining = [p for p in problems if key(p) not in read_state(out, args.max_attempts)[0]]
    return report_end(len(problems), len(remaining), stopped, t_begin, args.level, out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.campaign_child is not None:
        return campaign_child(args)
    import importlib.util

    missing = missing_campaign_modules() + [m for m in ("langgraph", "openai", "anthropic", "tiktoken_ext")
                                            if importlib.util.find_spec(m) is None]
    if missing:
        print(f"error: the LLM arm needs {', '.join(missing)}; install or carry their wheels (scripts/device_kit.py) "
              "before spending device time", file=sys.stderr)
        return 2
    return sweep(args)


if __name__ == "__main__":
    sys.exit(main())
