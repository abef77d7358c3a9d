"""Any agent can be the tuner: the sandboxed tools over the Model Context Protocol (``atb mcp serve``).

``McpCampaign`` is one campaign driven by an external MCP client (the ToolBox's tools on a real
sandbox, each ``submit`` one harness verdict recorded through ``CampaignRecorder``); ``build_server``,
``serve_stdio`` and ``serve_http`` put it on the official ``mcp`` SDK; the call log (``read_call_log``)
is the hash-chained record kept instead of a model transcript, and ``replay_call_log`` re-executes it.
"""

from atb_agent.mcp._campaign import (
    BRIEF_URI, STATUS_URI, CallResult, ClientIdentity, McpCampaign, ToolSpec, default_log_path, restore_workspace,
)
from atb_agent.mcp._log import (
    MCP_LOG_FORMAT, CallLog, CallLogWriter, McpLogError, McpLogTampered, ToolCallRecord, is_mcp_log, read_call_log,
)
from atb_agent.mcp._server import (
    HTTP_PATH, StaticTokenVerifier, Worker, bind_socket, build_server, new_token, serve_http, serve_stdio,
)

__all__ = [
    "BRIEF_URI", "HTTP_PATH", "MCP_LOG_FORMAT", "STATUS_URI", "CallLog", "CallLogWriter", "CallResult",
    "ClientIdentity",
    "McpCampaign", "McpLogError", "McpLogTampered", "StaticTokenVerifier", "ToolCallRecord", "ToolSpec", "Worker",
    "bind_socket", "build_server", "default_log_path", "is_mcp_log", "new_token", "read_call_log", "restore_workspace",
    "serve_http", "serve_stdio",
]
