"""``atb mcp serve TASK --budget N --seed S``: any MCP client becomes the tuner of one campaign.

Over stdio (the default) the client starts this command itself and talks on its stdin/stdout; nothing
else is ever written to stdout (messages go to stderr). Over HTTP (``--transport http``) it binds to
loopback unless ``--host`` says otherwise, and prints the URL and the bearer token every request must
carry (``--json``: one JSON object with both, on stdout, before serving). The server runs until the
client disconnects (stdio) or it is interrupted (HTTP); an unfinished campaign is resumed with
``--resume RUN``. Exit 0 when it served, 2 for bad input (unknown task, bad budget, no sandbox, a
resume that does not match), 1 for an internal failure.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
from typing import Any

from atb_agent.cli import _args
from atb_agent.cli._common import EXIT_OK, BadInput, add_db, add_json

TOKEN_ENV = "ATB_MCP_TOKEN"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("mcp", help="serve the tuning tools over the Model Context Protocol (any agent as the tuner)")
    msub = p.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND")
    msub.required = True
    s = msub.add_parser("serve", help="serve one campaign's tools to an MCP client (stdio or HTTP)")
    s.add_argument("task", help="native task name (see `atb tasks`) or a task file")
    s.add_argument("--budget", type=_args.budget, required=True,
                   help="submissions the client may make (one verdict each)")
    s.add_argument("--seed", type=_args.seed, required=True, help="the campaign's seed (recorded; compare equal seeds)")
    s.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    s.add_argument("--host", default="127.0.0.1", help="HTTP: address to bind (default loopback only)")
    s.add_argument("--port", type=_args.port, default=8765, help="HTTP: port to bind (0: any free port; it is printed)")
    s.add_argument("--backend", default="cpu", choices=["cpu", "cuda"], help="device to measure on")
    s.add_argument("--sandbox", default="auto", choices=["auto", "docker", "bwrap"],
                   help="sandbox backend for the tools (auto: Docker when a daemon answers, else bubblewrap)")
    s.add_argument("--resume", metavar="RUN", help="continue an unfinished MCP campaign (same task, budget, seed)")
    add_db(s)
    add_json(s)
    s.set_defaults(handler=cmd_serve)


def _check_host(host: str) -> bool:
    """Whether ``host`` is a loopback address; refuses a name that is not an address (no DNS surprises)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError as exc:
        raise BadInput(f"--host must be an IP address (127.0.0.1, ::1, or an interface's address), "
                       f"not {host!r}") from exc


def _token() -> str:
    from atb_agent.mcp import new_token

    given = os.environ.get(TOKEN_ENV, "")
    if given and len(given) < 32:
        raise BadInput(f"{TOKEN_ENV} is set but shorter than 32 characters; unset it to have a token generated")
    return given or new_token()


def cmd_serve(args: argparse.Namespace) -> int:
    from atb_agent.mcp._server import say

    sock = token = None
    if args.transport == "http":
        from atb_agent.mcp import bind_socket

        if not _check_host(args.host):
            say(f"atb: warning: --host {args.host} is not loopback: anyone who can reach it and holds the token "
                "can drive this campaign's sandbox")
        token = _token()
        try:
            sock = bind_socket(args.host, args.port)
        except OSError as exc:
            raise BadInput(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    elif args.host != "127.0.0.1" or args.port != 8765:
        raise BadInput("--host and --port apply to --transport http only")
    try:
        asyncio.run(_serve(args, sock, token))
    finally:
        if sock is not None:
            sock.close()
    return EXIT_OK


async def _serve(args: argparse.Namespace, sock: Any, token: str | None) -> None:
    from atb_agent.mcp import HTTP_PATH, McpCampaign, Worker, serve_http, serve_stdio
    from atb_agent.mcp._server import say
    from sandbox import SandboxError

    worker = Worker()
    try:
        try:
            campaign = await worker.run(lambda: McpCampaign(
                args.task, args.budget, args.seed, args.db, backend=args.backend, sandbox_backend=args.sandbox,
                resume=args.resume, transport=args.transport))
        except SandboxError as exc:
            raise BadInput(f"{type(exc).__name__}: {exc}") from exc
        try:
            if args.resume:
                say(f"atb mcp: resumed campaign {args.resume}: {campaign.status()['iterations_recorded']} of "
                    f"{args.budget} iterations recorded; workspace rebuilt from the call log")
            if args.transport == "stdio":
                say(f"atb mcp: serving task {campaign.task.id} (budget {args.budget}, seed {args.seed}) over stdio")
                await serve_stdio(campaign, worker)
            else:
                host, port = sock.getsockname()[:2]
                url = f"http://{'[' + host + ']' if ':' in host else host}:{port}{HTTP_PATH}"
                if args.json:
                    print(json.dumps({"url": url, "token": token, "transport": "http", "task": campaign.task.id,
                                      "budget": args.budget, "seed": args.seed, "resume": args.resume}), flush=True)
                else:
                    print(f"atb mcp: serving task {campaign.task.id} (budget {args.budget}, seed {args.seed})\n"
                          f"  url:   {url}\n  token: {token}\n"
                          f"  every request needs the header  Authorization: Bearer {token}", flush=True)
                await serve_http(campaign, worker, sock, token or "")
        finally:
            status = await worker.run(campaign.status)
            await worker.run(campaign.close)
            if status["campaign_id"] is None:
                say("atb mcp: no client made a tool call; no campaign was recorded")
            elif status["finished"]:
                say(f"atb mcp: campaign {status['campaign_id']} finished ({status['iterations_recorded']} iterations); "
                    f"call log {status['call_log']}")
            else:
                say(f"atb mcp: campaign {status['campaign_id']} left unfinished ({status['iterations_recorded']} of "
                    f"{args.budget} iterations); continue it with `atb mcp serve {args.task} --budget {args.budget} "
                    f"--seed {args.seed} --db {args.db} --resume {status['campaign_id']}`")
    finally:
        worker.shutdown()
