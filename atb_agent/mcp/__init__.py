"""Any agent can be the tuner: the sandboxed tools over the Model Context Protocol (``atb mcp serve``).

``McpCampaign`` is one campaign driven by an external MCP client (the ToolBox's tools on a real
sandbox, each ``submit`` one harness verdict recorded through ``CampaignRecorder``); ``build_server``,
``serve_stdio`` and ``serve_http`` put it on the official ``mcp`` SDK; the call log (``read_call_log``)
is the hash-chained record kept instead of a model transcript, and ``replay_call_log`` re-executes it.
A campaign outlives its connection: its workspace is kept in a folder beside the store
(``workspace_home``), and a client passes the campaign id back (``CAMPAIGN_ARG``) to continue it.
"""

from atb_agent.mcp._campaign import (
    BRIEF_URI, CAMPAIGN_ARG, CAMPAIGN_META, CAMPAIGN_STATUS_URI, STATUS_URI, CallResult, ClientIdentity, McpCampaign,
    ToolSpec, default_log_path, restore_workspace,
)
from atb_agent.mcp._log import (
    MCP_LOG_FORMAT, CallLog, CallLogWriter, McpLogError, McpLogTampered, ToolCallRecord, is_mcp_log, read_call_log,
)
from atb_agent.mcp._workspace import CampaignBusy, WorkspaceFolder, manifest_sha256, workspace_home
from atb_agent.mcp._server import (
    HTTP_PATH, StaticTokenVerifier, Worker, bind_socket, build_server, new_token, serve_http, serve_stdio,
)

__all__ = [
    "BRIEF_URI", "CAMPAIGN_ARG", "CAMPAIGN_META", "CAMPAIGN_STATUS_URI", "HTTP_PATH", "MCP_LOG_FORMAT", "STATUS_URI", "CallLog", "CallLogWriter", "CallResult",
    "CampaignBusy", "ClientIdentity",
    "McpCampaign", "McpLogError", "McpLogTampered", "StaticTokenVerifier", "ToolCallRecord", "ToolSpec", "Worker",
    "WorkspaceFolder", "bind_socket", "build_server", "default_log_path", "is_mcp_log", "manifest_sha256", "new_token",
    "read_call_log", "restore_workspace", "serve_http", "serve_stdio", "workspace_home",
]
