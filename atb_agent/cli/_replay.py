"""``atb replay TRANSCRIPT [--fresh-measurement]``: replay a recorded run byte-for-byte.

The recorded responses are served through the same SDK code path; every request must be
byte-identical to the recorded one, the tool calls are re-run in a fresh sandbox and the submitted
files must hash-equal the recording. With recorded measurement the recorded verdicts are reproduced
exactly; with ``--fresh-measurement`` the harness measures every submission again and the output
says how each verdict moved. Exit 0 when the replay matched, 2 when the transcript fails verification
or the replay diverged (the message names the call and the field).
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
    add_db(p)
    add_json(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from atb_agent.campaign import HarnessServices
    from atb_agent.errors import ReplayDivergence
    from atb_agent.replay import replay_transcript
    from atb_agent._engine_support import load_campaign_task
    from transcripts import TranscriptError, read_transcript

    path = Path(args.transcript)
    if not path.is_file():
        raise BadInput(f"no transcript at {path}")
    try:
        header = read_transcript(path).header
    except TranscriptError as exc:
        raise BadInput(f"{type(exc).__name__}: {exc}") from exc
    task = load_campaign_task(header.task)   # a kernel task or an engine (flag) task
    services = HarnessServices(args.backend)
    services.bind_task(task)
    store = None
    try:
        fresh = None
        if args.fresh_measurement:
            from harness.store import SqliteStore
            from protocol import load_protocol

            proto = load_protocol()
            store = SqliteStore(args.db)
            services.open_session(store, proto, None)
            fresh = services.evaluator(task, store, proto)
        progress(f"replaying {path} ({header.provider}:{header.model}, {'scripted' if header.scripted else 'real model'})")
        try:
            report = replay_transcript(path, toolbox_factory=lambda inbox, brief: services.toolbox(task, brief, inbox),
                                       fresh_evaluator=fresh)
        except TranscriptError as exc:
            raise BadInput(f"{type(exc).__name__}: {exc}") from exc
        except ReplayDivergence as exc:
            raise BadInput(f"ReplayDivergence: {exc}") from exc
    finally:
        services.close()
        if store is not None:
            store.close()
    moved = sum(v.moved for v in report.verdicts)
    human = (f"replayed {report.model_calls} model calls byte-for-byte, {report.tool_calls} tool calls, "
             f"{report.submissions_checked} submissions with matching file hashes; measurement {report.measurement}: "
             + ("verdicts reproduced exactly" if report.verdicts_reproduced else f"{moved} of {len(report.verdicts)} verdicts moved"))
    emit(report, args, human)
    return EXIT_OK
