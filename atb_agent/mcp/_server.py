"""The MCP face of an :class:`McpCampaign`: tools, the task brief as a resource, stdio and HTTP transports.

Built on the official SDK's low-level ``mcp.server.Server`` so the tool schemas are exactly the ones the
ToolBox generates from its pydantic argument models (no second schema derived from Python signatures).
Every blocking step (sandbox, harness, store) runs on one worker thread, one call at a time, so two
concurrent requests can never interleave inside the sandbox or the campaign.

Errors at the boundary: a malformed argument or a call after the budget is spent is a tool result with
``isError`` (the agent can read it and correct itself); an unknown tool name is a JSON-RPC error
(``-32602``, as the MCP specification asks), naming the tools there are. Neither stops the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from atb_agent.mcp._campaign import (
    BRIEF_URI, CAMPAIGN_ARG, CAMPAIGN_META, CAMPAIGN_STATUS_URI, STATUS_URI, CallResult, ClientIdentity, McpCampaign,
)

T = TypeVar("T")

SERVER_NAME = "autotunebench"
HTTP_PATH = "/mcp"


class Worker:
    """One thread that runs every blocking call of the campaign, in arrival order."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="atb-mcp")

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.wrap_future(self._pool.submit(fn, *args))

    def shutdown(self) -> None:
        """Wait for a call in flight (a submit being measured) to finish and be recorded."""
        self._pool.shutdown(wait=True)


def client_identity(ctx: Any, transport: str) -> ClientIdentity | None:
    """The client's ``clientInfo`` (from ``initialize``, or the per-request envelope on 2026-era connections)."""
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    if info is None or not getattr(info, "name", None):
        return None
    return ClientIdentity(name=str(info.name), version=str(info.version or ""),
                          protocol_version=str(getattr(ctx, "protocol_version", "") or ""), transport=transport)


def build_server(campaign: McpCampaign, worker: Worker, transport: str) -> Any:
    """The low-level MCP server for ``campaign``."""
    import mcp_types as types
    from mcp.server import Server
    from mcp.shared.exceptions import MCPError

    tools = [types.Tool(name=t.name, description=t.description, input_schema=t.input_schema)
             for t in campaign.tools()]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        result: CallResult = await worker.run(campaign.call, client_identity(ctx, transport), params.name,
                                              params.arguments)
        if result.unknown_tool:                  # logged by the campaign; answered as the spec asks
            raise MCPError(types.INVALID_PARAMS, result.content[0])
        return types.CallToolResult(content=[types.TextContent(text=t) for t in result.content],
                                    structured_content=result.structured, is_error=result.is_error,
                                    meta={CAMPAIGN_META: result.campaign} if result.campaign else None)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[
            types.Resource(uri=BRIEF_URI, name="task-brief", title=f"Task brief: {campaign.task.id}",
                           description="What to optimise, the reference implementation, and what to deliver "
                                       "(the same text the get_task tool returns).", mime_type="text/markdown"),
            types.Resource(uri=STATUS_URI, name="campaign-status", title="Campaign status",
                           description="The campaign id, budget, iterations recorded and submissions left of the "
                                       "campaign this server is working on (none until a call changed something). "
                                       f"Any stored MCP campaign's: {CAMPAIGN_STATUS_URI}.",
                           mime_type="application/json"),
        ])

    async def list_resource_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template=CAMPAIGN_STATUS_URI, name="stored-campaign-status",
                                   title="A stored MCP campaign's status",
                                   description="Iterations recorded and submissions left of the campaign a client kept "
                                               "the id of (read from the store; the campaign is not taken up).",
                                   mime_type="application/json"),
        ])

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        import json

        uri = str(params.uri)
        if uri == BRIEF_URI:
            text, mime = campaign.brief, "text/markdown"
        elif uri == STATUS_URI:
            text, mime = json.dumps(await worker.run(campaign.status), sort_keys=True), "application/json"
        else:
            stored = await worker.run(campaign.status_of, uri)
            if stored is None:
                raise MCPError(-32002, f"no resource {uri!r}; the resources are {BRIEF_URI}, {STATUS_URI} and "
                                       f"{CAMPAIGN_STATUS_URI}")
            text, mime = json.dumps(stored, sort_keys=True), "application/json"
        return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    instructions = (f"AutoTuneBench tuning campaign on task {campaign.task.id}: make the candidate faster than the "
                    f"reference while staying correct. Read {BRIEF_URI} (or call get_task), write the candidate with "
                    f"write_file/edit_file, smoke-test it with run_in_sandbox, then call submit: the harness measures "
                    f"it outside the sandbox and answers the verdict. The budget is {campaign.budget} submissions. "
                    f"The first call that changes something opens the campaign and answers its id; a client that "
                    f"opens a new connection per tool call passes it back as the `{CAMPAIGN_ARG}` argument of every "
                    f"call.")
    return Server(SERVER_NAME, version=_version(), instructions=instructions, on_list_tools=list_tools,
                  on_call_tool=call_tool, on_list_resources=list_resources, on_read_resource=read_resource,
                  on_list_resource_templates=list_resource_templates)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("autotunebench")
    except Exception:  # noqa: BLE001 - an uninstalled checkout still serves
        return "0"


async def serve_stdio(campaign: McpCampaign, worker: Worker) -> None:
    """Serve over this process's stdin/stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = build_server(campaign, worker, "stdio")
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


class StaticTokenVerifier:
    """The SDK's ``TokenVerifier`` for the one bearer token ``serve`` printed (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def verify_token(self, token: str) -> Any:
        from mcp.server.auth.provider import AccessToken

        if hmac.compare_digest(token.encode(), self._token.encode()):
            return AccessToken(token=token, client_id="atb-mcp-client", scopes=[])
        return None


def new_token() -> str:
    return secrets.token_urlsafe(32)


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind before serving, so port 0 gives a real port to print and a taken port fails early."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(64)
    sock.set_inheritable(True)
    return sock


async def serve_http(campaign: McpCampaign, worker: Worker, sock: socket.socket, token: str) -> None:
    """Serve Streamable HTTP at ``http://HOST:PORT/mcp`` on ``sock``; every request needs the bearer token."""
    import uvicorn
    from mcp.server.auth.settings import AuthSettings

    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    base = f"http://{url_host}:{port}"
    server = build_server(campaign, worker, "http")
    app = server.streamable_http_app(
        streamable_http_path=HTTP_PATH, host=host,
        # No OAuth server is offered: the issuer is this server and the only accepted token is the printed one.
        auth=AuthSettings(issuer_url=base, resource_server_url=None), token_verifier=StaticTokenVerifier(token))
    server = _StoppableServer(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, server.stop)
    try:
        await server.serve(sockets=[sock])
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def _stoppable_server_class() -> Any:
    import uvicorn

    class StoppableServer(uvicorn.Server):
        """uvicorn, minus its habit of re-raising the stop signal after a graceful shutdown: SIGINT or
        SIGTERM ends ``serve`` normally, so the campaign is closed (sandbox removed, store closed, an
        unfinished campaign left resumable) and ``atb mcp serve`` exits 0."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        def stop(self) -> None:
            self.force_exit = self.should_exit      # a second signal stops without waiting for connections
            self.should_exit = True

    return StoppableServer


def _StoppableServer(config: Any) -> Any:  # noqa: N802 - a factory standing in for the lazily imported class
    return _stoppable_server_class()(config)


def say(message: str) -> None:
    """Talk to the person running ``serve``: stderr only (stdout is the MCP channel over stdio)."""
    print(message, file=sys.stderr, flush=True)


__all__ = ["HTTP_PATH", "SERVER_NAME", "StaticTokenVerifier", "Worker", "bind_socket", "build_server",
           "client_identity", "new_token", "say", "serve_http", "serve_stdio"]
