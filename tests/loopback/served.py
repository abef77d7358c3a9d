"""A loopback stand-in for a model served by ``atb model serve``: the state file that says smollm2 is served at
a base URL."""

from __future__ import annotations

import os
from pathlib import Path

from transcripts import TEXT_PROTOCOL_FENCED_PYTHON, ModelServerData


def register_served(cache: Path, base_url: str) -> ModelServerData:
    """A state file saying `atb model serve` serves smollm2 at ``base_url`` (this process's pid is alive)."""
    from atb_agent.model_server import ServerState, state_path

    ident = ModelServerData(name="smollm2", about="loopback stand-in for SmolLM2", gguf_sha256="0" * 64,
                            gguf_bytes=1, server="loopback", server_version="test", server_argv=["loopback"],
                            base_url=base_url, max_output_tokens=256, temperature=0.2,
                            text_protocol=TEXT_PROTOCOL_FENCED_PYTHON)
    path = state_path("smollm2")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(ServerState(pid=os.getpid(), log_path="", started_at=0.0, identity=ident).model_dump_json())
    return ident
