"""Test support: a loopback HTTP server speaking OpenAI chat completions and Anthropic messages,
serving scripted model turns so the real SDK code runs end to end with no internet; an in-memory
ToolBox; and scripted campaign services for tests that need neither Docker nor a measuring child."""

from .server import LoopbackServer, ScriptedCall, ScriptedTurn

__all__ = ["LoopbackServer", "ScriptedCall", "ScriptedTurn"]
