"""``atb view [--db URL] [--port N] [--host H]``: browse the results store in a web browser, read-only.

Loopback by default. Bound to any other address the server is reachable from the network, so every
request must then carry a token (``--token``, ``$ATB_VIEW_TOKEN``, or one made here and printed in the
URL); nothing it serves can change the store either way (the store is opened read-only). Runs until
interrupted (Ctrl-C: exit 0). Exit 2 for bad input (an unknown store scheme, a port that is taken).
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
import sys

from atb_agent.cli._args import bounded_int
from atb_agent.cli._common import EXIT_OK, BadInput

TOKEN_ENV = "ATB_VIEW_TOKEN"


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("view", help="browse the results store (campaigns, verdicts, transcripts, A/B, "
                                    "KernelBench) in a local web browser, read-only")
    p.add_argument("--db", default="atb.sqlite",
                   help="results store: a SQLite path or sqlite:///PATH (default ./atb.sqlite), or postgresql://...")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; any other needs a token)")
    p.add_argument("--port", type=bounded_int(0, 65535, "port"), default=8765, help="port (default 8765; 0 picks a free one)")
    p.add_argument("--token", default=None,
                   help=f"access token required on a non-loopback bind (default ${TOKEN_ENV}, else a random one)")
    p.add_argument("--transcripts", action="append", default=[], metavar="DIR",
                   help="folder searched for campaign transcripts (*.jsonl); the store's own folder always is")
    p.add_argument("--key-dir", default=None, help="checkpoint key folder verification trusts (default $ATB_KEY_DIR)")
    p.set_defaults(handler=cmd_view)


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only this machine (``localhost`` and 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_view(args: argparse.Namespace) -> int:
    import uvicorn

    from atb_agent.view import ViewConfig, create_app
    from harness.store import StoreError
    from harness.store._open import store_kind

    try:
        store_kind(args.db)
    except StoreError as exc:
        raise BadInput(str(exc)) from exc
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if not is_loopback(args.host) and not token:
        token = secrets.token_urlsafe(24)
    # IPPROTO_TCP named explicitly: asyncio sets TCP_NODELAY only on such sockets, and without it a small
    # response (the live poll) waits ~40 ms on Nagle's algorithm and the client's delayed ACK
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET, socket.SOCK_STREAM,
                         socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        raise BadInput(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc
    port = sock.getsockname()[1]
    app = create_app(ViewConfig(db=str(args.db), transcripts=list(args.transcripts), token=token,
                                key_dir=args.key_dir))
    shown = f"[{args.host}]" if ":" in args.host else args.host
    url = f"http://{shown}:{port}/" + (f"?token={token}" if token else "")
    print(url, flush=True)
    print(f"atb view: serving {args.db} read-only at {url} (Ctrl-C stops)", file=sys.stderr, flush=True)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    return EXIT_OK
