"""Model providers behind the official SDKs, recording (or replaying) at the HTTP transport."""

from atb_agent.providers._anthropic import AnthropicProvider, to_anthropic_messages
from atb_agent.providers._http import sdk_http_module
from atb_agent.providers._openai import OpenAIProvider, to_openai_messages
from atb_agent.providers._types import Message, ModelTurn, Provider, ToolCallRequest, ToolSource

__all__ = ["AnthropicProvider", "Message", "ModelTurn", "OpenAIProvider", "Provider", "ToolCallRequest",
           "ToolSource", "sdk_http_module", "to_anthropic_messages", "to_openai_messages"]
