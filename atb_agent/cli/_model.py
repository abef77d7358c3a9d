"""``atb model serve|stop|status``: a real small model served on loopback for the tuner.

``atb model serve`` starts llama-server with the cached SmolLM2-135M GGUF, waits until it is ready
and prints its base URL (with ``--json``, the URL and the model/server identity). Then
``atb run TASK --tuner openai:smollm2 --base-url URL`` runs a live campaign against it through the
official OpenAI SDK, with no API key. ``atb model stop`` ends the server it started.
"""

from __future__ import annotations

import argparse

from atb_agent.cli import _args
from atb_agent.cli._common import EXIT_OK, BadInput, add_json, emit, progress


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("model", help="serve a real small model locally (llama-server) for `--tuner openai:...`")
    msub = p.add_subparsers(dest="model_command", metavar="ACTION", parser_class=type(p))
    msub.required = True

    s = msub.add_parser("serve", help="start llama-server on loopback with the cached model; print its base URL")
    s.add_argument("model", nargs="?", default="smollm2", help="the model to serve (default smollm2)")
    s.add_argument("--port", type=_args.port, default=None, help="TCP port on 127.0.0.1 (default: a free one)")
    s.add_argument("--threads", type=_args.threads, default=1,
                   help="generation threads (default 1: on a shared 2-core machine a second thread mostly waits)")
    s.add_argument("--max-output-tokens", type=_args.output_tokens, default=None,
                   help="output cap of each request the tuner makes to this model (default 384)")
    add_json(s)
    s.set_defaults(handler=_serve)

    t = msub.add_parser("stop", help="stop the model server `atb model serve` started")
    t.add_argument("model", nargs="?", default="smollm2")
    add_json(t)
    t.set_defaults(handler=_stop)

    q = msub.add_parser("status", help="say whether the model server is running, and where")
    q.add_argument("model", nargs="?", default="smollm2")
    add_json(q)
    q.set_defaults(handler=_status)


def _check(args: argparse.Namespace) -> None:
    from atb_agent.model_server import SERVED_MODELS

    if args.model not in SERVED_MODELS:
        raise BadInput(f"unknown model {args.model!r}; models `atb model` serves: {', '.join(SERVED_MODELS)}")


def _serve(args: argparse.Namespace) -> int:
    from atb_agent.model_server import DEFAULT_MAX_OUTPUT_TOKENS, describe, serve

    _check(args)
    if args.port is not None and not 0 < args.port < 65536:
        raise BadInput(f"--port must be between 1 and 65535, got {args.port}")
    if args.threads < 1:
        raise BadInput(f"--threads must be at least 1, got {args.threads}")
    cap = DEFAULT_MAX_OUTPUT_TOKENS if args.max_output_tokens is None else args.max_output_tokens
    if cap < 1:
        raise BadInput(f"--max-output-tokens must be at least 1, got {cap}")
    state, was_running = serve(args.model, port=args.port, threads=args.threads, max_output_tokens=cap,
                               progress=progress)
    payload = {**describe(state), "already_running": was_running}
    if not getattr(args, "json", False):
        how = "already running" if was_running else "ready"
        progress(f"{state.identity.about} {how} (pid {state.pid}, gguf sha256 {state.identity.gguf_sha256[:16]}…, "
                 f"log {state.log_path}); use: --tuner openai:{args.model} --base-url {state.identity.base_url}")
    emit(payload, args, state.identity.base_url)
    return EXIT_OK


def _stop(args: argparse.Namespace) -> int:
    from atb_agent.model_server import stop

    _check(args)
    state = stop(args.model)
    payload = {"stopped": state is not None, "pid": state.pid if state else None, "model": args.model}
    emit(payload, args, f"stopped {args.model} (pid {state.pid})" if state else f"no {args.model} server was running")
    return EXIT_OK


def _status(args: argparse.Namespace) -> int:
    from atb_agent.model_server import describe, read_state

    _check(args)
    state = read_state(args.model)
    payload = {"running": state is not None, **(describe(state) if state else {"model": args.model})}
    emit(payload, args, f"{args.model} serving at {state.identity.base_url} (pid {state.pid})" if state
         else f"no {args.model} server is running")
    return EXIT_OK
