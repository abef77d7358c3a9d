"""``atb replay TRANSCRIPT [--fresh-measurement]``: replay a recorded run byte-for-byte.

The recorded responses are served through the same SDK code path; every request must be
byte-identical to the recorded one, the tool calls are re-run in a fresh sandbox and the submitted
files must hash-equal the recording. With recorded measurement the recorded verdicts are reproduced
exactly; with ``--fresh-measurement`` the harness measures every submission again and the output
says how each verdict moved. Exit 0 when the replay matched, 2 when the transcript fails verification
or the replay diverged (the message names the call and the field).

Recorded verdicts are re-checked against signed evidence, never against the transcript itself (issue
27): the campaign's rows in ``--db`` (when it holds the campaign) or in the store beside the transcript,
which must verify and lie under a checkpoint signed by ``--key-dir``'s key. A recorded verdict those
rows contradict is a divergence (exit 2). With no signed rows to compare, the report says
``verdicts_reproduced: false`` and ``verdict_evidence: none`` with the reason, and ``ok`` is false
(exit 1) unless the transcript is a ``scripted`` fixture found with no store at all.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from atb_agent.cli._common import EXIT_OK, BadInput, add_db, add_json, emit, progress


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("replay", help="replay a recorded transcript byte-for-byte and check it")
    p.add_argument("transcript", help="a transcript (.jsonl) written by `atb run`")
    p.add_argument("--fresh-measurement", action="store_true",
                   help="re-measure every submission with the harness and report how the verdicts moved")
    p.add_argument("--backend", default="cpu", choices=["cpu", "cuda"], help="device for --fresh-measurement")
    p.add_argument("--sandbox", default="auto", choices=["auto", "docker", "bwrap"],
                   help="sandbox backend the tool calls are re-run in (MCP call logs; default: Docker if it answers)")
    add_db(p)
    p.add_argument("--key-dir", default=None,
                   help="folder of the trusted checkpoint key and its log, for checking recorded verdicts against "
                        "the signed store (default $ATB_KEY_DIR, else ~/.config/autotunebench)")
    add_json(p)
    p.set_defaults(handler=run)


EXIT_NOT_REDERIVED = 1


def run(args: argparse.Namespace) -> int:
    from atb_agent.services import HarnessServices
    from atb_agent.errors import ReplayDivergence
    from atb_agent.replay import replay_transcript
    from harness.tuning.subjects import load_subject
    from transcripts import TranscriptError, read_transcript

    path = Path(args.transcript)
    if not path.is_file():
        raise BadInput(f"no transcript at {path}")
    from atb_agent.mcp import is_mcp_log

    if is_mcp_log(path):                       # an `atb mcp serve` call log: re-executed, measured afresh
        return run_mcp_log(args, path)
    try:
        header = read_transcript(path).header
    except TranscriptError as exc:
        raise BadInput(f"{type(exc).__name__}: {exc}") from exc
    task = load_subject(header.task)   # a kernel task or an engine (flag) task
    services = HarnessServices(args.backend)
    services.bind_task(task)
    store = None
    try:
        fresh = None
        if args.fresh_measurement:
            from harness.store import open_store
            from protocol import load_protocol

            proto = load_protocol()
            store = open_store(args.db)
            services.open_session(store, proto, None)
            fresh = services.evaluator(task, store, proto)
        progress(f"replaying {path} ({header.provider}:{header.model}, {'scripted' if header.scripted else 'real model'})")
        try:
            report = replay_transcript(path, toolbox_factory=lambda inbox, brief: services.toolbox(task, brief, inbox),
                                       fresh_evaluator=fresh, evidence_db=args.db, key_dir=args.key_dir)
        except TranscriptError as exc:
            raise BadInput(f"{type(exc).__name__}: {exc}") from exc
        except ReplayDivergence as exc:
            raise BadInput(f"ReplayDivergence: {exc}") from exc
    finally:
        services.close()
        if store is not None:
            store.close()
    moved = sum(v.moved for v in report.verdicts)
    if report.verdicts_reproduced:
        verdicts = ("verdicts reproduced exactly" + (f" (checked against the signed store {report.evidence_store}, "
                                                      f"checkpoint {report.evidence_checkpoint})"
                                                      if report.verdict_evidence == "signed_store" else ""))
    elif report.measurement == "fresh":
        verdicts = f"{moved} of {len(report.verdicts)} verdicts moved"
    else:
        verdicts = "verdicts NOT re-derived: " + "; ".join(report.evidence_problems[:3])
    human = (f"replayed {report.model_calls} model calls byte-for-byte, {report.tool_calls} tool calls, "
             f"{report.submissions_checked} submissions with matching file hashes; measurement {report.measurement}: "
             + verdicts)
    emit(report, args, human)
    return EXIT_OK if report.ok else EXIT_NOT_REDERIVED


def run_mcp_log(args: argparse.Namespace, path: Path) -> int:
    """``atb replay MCP_LOG``: re-execute an MCP call log's tool calls in a fresh sandbox and measure every
    submission again (there is no recorded measurement to serve: the point is the verdict sequence)."""
    from atb_agent.services import HarnessServices
    from atb_agent.errors import ReplayDivergence
    from atb_agent.mcp import McpLogError, read_call_log
    from atb_agent.replay import replay_mcp_log
    from harness.store import open_store
    from harness.tuning.subjects import load_subject
    from protocol import load_protocol
    from sandbox import SandboxError

    try:
        header = read_call_log(path).header
    except McpLogError as exc:
        raise BadInput(f"{type(exc).__name__}: {exc}") from exc
    task = load_subject(header.task)
    services = HarnessServices(args.backend, args.sandbox)
    services.bind_task(task)
    proto = load_protocol()
    store = open_store(args.db)
    try:
        services.open_session(store, proto, None)
        evaluator = services.evaluator(task, store, proto)
        progress(f"replaying MCP call log {path} ({header.tuner_spec}, task {header.task}): every tool call again "
                 "in a fresh sandbox, every submission measured afresh")
        try:
            report = replay_mcp_log(
                path, toolbox_factory=lambda submit, brief: services.toolbox(task, brief, submit), evaluator=evaluator)
        except McpLogError as exc:
            raise BadInput(f"{type(exc).__name__}: {exc}") from exc
        except ReplayDivergence as exc:
            raise BadInput(f"ReplayDivergence: {exc}") from exc
        except SandboxError as exc:
            raise BadInput(f"{type(exc).__name__}: {exc}") from exc
    finally:
        services.close()
        store.close()
    seq = ", ".join(f"{m.recorded_status}->{m.replayed_status}"
                    + (f" ({m.speedup_change:+.1%})" if m.speedup_change is not None else "") for m in report.verdicts)
    human = (f"re-executed {report.tool_calls_replayed} of {report.tool_calls_logged} logged tool calls "
             f"({report.tool_calls_skipped} were refused when logged), {report.submissions_checked} submissions with "
             f"matching file hashes; verdicts (logged->replayed): {seq or 'none'}; "
             + ("same statuses, all within noise" if report.verdicts_within_noise else
                ("same statuses, some speedups moved beyond the noise floor" if report.same_statuses
                 else "STATUSES CHANGED")))
    emit(report, args, human)
    return EXIT_OK
