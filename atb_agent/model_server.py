"""A real model served on this machine for the tuner: ``atb model serve`` / ``atb model stop``.

llama-server (built by setup, see ``harness.engines.llamacpp_build``) serves the cached SmolLM2-135M
GGUF (``harness.engines.llamacpp_model``) on loopback with an OpenAI-compatible chat API. The server
runs detached; a state file under the cache root says where it is and what it is, so that

* ``atb run TASK --tuner openai:smollm2 --base-url URL`` recognises ``URL`` as this served model: no
  API key is needed, the transcript header records the model and server identity (GGUF SHA-256,
  ``llama-server --version``, its command line), and the declared text protocol is on (this model
  answers with code in plain text rather than tool calls);
* ``atb model stop`` ends exactly the process it started (by its recorded pid and process group).

State file: ``<cache>/model-server/<name>.json``; server log: ``<cache>/model-server/<name>.log``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict

from transcripts import TEXT_PROTOCOL_FENCED_PYTHON, ModelServerData

from atb_agent.errors import AgentError

SERVED_MODELS = ("smollm2",)
DEFAULT_CTX = 8192                 # SmolLM2's trained context; a 10-iteration conversation needs it
DEFAULT_MAX_OUTPUT_TOKENS = 384    # a 135M model rambles past its answer; the cap keeps a turn short (truncation is counted)
DEFAULT_TEMPERATURE = 0.2
READY_TIMEOUT_S = 120.0


class ModelServerError(AgentError):
    """The model server could not be started, found or stopped; the message says what to do."""


class ServerState(BaseModel):
    """What ``atb model serve`` leaves behind for ``atb run`` and ``atb model stop``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int
    log_path: str
    started_at: float
    identity: ModelServerData


def state_dir() -> Path:
    from harness.engines.llamacpp_build import cache_root

    return cache_root() / "model-server"


def state_path(name: str) -> Path:
    return state_dir() / f"{name}.json"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:   # a zombie child (ours, not yet reaped) is not serving
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def _healthy(base_url: str, timeout_s: float = 2.0) -> bool:
    import httpx

    root = base_url.removesuffix("/v1")
    try:
        return httpx.get(f"{root}/health", timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


def read_state(name: str) -> ServerState | None:
    """The recorded server of ``name`` if its process is still alive, else None (a stale file is removed)."""
    path = state_path(name)
    try:
        state = ServerState.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None
    if not _alive(state.pid):
        path.unlink(missing_ok=True)
        return None
    return state


def _norm(url: str) -> tuple[str, int | None, str]:
    u = urlparse(url.rstrip("/"))
    host = "127.0.0.1" if u.hostname in ("localhost", "127.0.0.1", "::1") else (u.hostname or "")
    return host, u.port, u.path.removesuffix("/v1")


def served_identity(base_url: str | None) -> ModelServerData | None:
    """The identity of the model ``atb model serve`` is serving at ``base_url``, or None when no running
    model server of ours answers there (then the URL is an ordinary OpenAI-compatible endpoint)."""
    if not base_url:
        return None
    for name in SERVED_MODELS:
        state = read_state(name)
        if state is not None and _norm(state.identity.base_url) == _norm(base_url):
            return state.identity
    return None


def _launch_argv(binary: str, model_path: str, alias: str, port: int, threads: int, ctx: int) -> list[str]:
    return [binary, "--model", model_path, "--alias", alias, "--host", "127.0.0.1", "--port", str(port),
            "--jinja", "--ctx-size", str(ctx), "--threads", str(threads), "--parallel", "1", "--seed", "0",
            "--no-webui"]


def serve(name: str = "smollm2", *, port: int | None = None, threads: int = 1, ctx: int = DEFAULT_CTX,
          max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS, temperature: float = DEFAULT_TEMPERATURE,
          progress: "object | None" = None) -> tuple[ServerState, bool]:
    """Start (or find already running) llama-server with the cached model on loopback; wait until it
    answers ``/health`` with 200. Returns the state and whether it was already running.

    Raises:
        ModelServerError: unknown model, llama-server not built, the model not cached and not
            fetchable, or the server exits or does not become ready (the message has its log's tail).
    """
    from harness.engines.llamacpp_build import _version_text, cached_binary, runtime_env
    from harness.engines.llamacpp_model import SMOLLM2_ABOUT, fetch_smollm2
    from harness.measure.serving.process import free_port, log_tail

    if name not in SERVED_MODELS:
        raise ModelServerError(f"unknown model {name!r}; models this command serves: {', '.join(SERVED_MODELS)}")
    running = read_state(name)
    if running is not None and _healthy(running.identity.base_url):
        return running, True
    binary = cached_binary()
    if binary is None:
        raise ModelServerError("llama-server is not built on this machine: run `bash scripts/setup.sh` "
                               "or `atb engine build llama-cpp` (about 7 minutes on 2 cores, cached afterwards)")
    try:
        model = fetch_smollm2(progress=progress if callable(progress) else None)
    except Exception as exc:  # noqa: BLE001 - reported with what to do
        raise ModelServerError(f"the model is not cached and could not be fetched: {exc}") from exc
    version = _version_text(binary) or ""
    port = port or free_port()
    argv = _launch_argv(str(binary), model.path, name, port, threads, ctx)
    state_dir().mkdir(parents=True, exist_ok=True)
    log = state_dir() / f"{name}.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **runtime_env(binary)}, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not _healthy(base_url, 1.0):
        if proc.poll() is not None:
            raise ModelServerError(f"llama-server exited with status {proc.returncode} before it was ready; "
                                   f"its log ({log}) ends with: {log_tail(log, 1500)}")
        if time.monotonic() > deadline:
            _kill_group(proc.pid)
            raise ModelServerError(f"llama-server was not ready within {READY_TIMEOUT_S:.0f} s; its log ({log}) "
                                   f"ends with: {log_tail(log, 1500)}")
        time.sleep(0.2)
    identity = ModelServerData(
        name=name, about=SMOLLM2_ABOUT, gguf_sha256=model.sha256, gguf_bytes=model.bytes, server="llama-server",
        server_version=version, server_argv=argv, base_url=base_url, max_output_tokens=max_output_tokens,
        temperature=temperature, text_protocol=TEXT_PROTOCOL_FENCED_PYTHON)
    state = ServerState(pid=proc.pid, log_path=str(log), started_at=time.time(), identity=identity)
    tmp = state_path(name).with_suffix(".partial")
    tmp.write_text(state.model_dump_json(indent=2))
    tmp.replace(state_path(name))
    return state, False


def _kill_group(pid: int, grace_s: float = 10.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and _alive(pid):
        try:                                   # reap it when it is our child
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.1)
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop(name: str = "smollm2") -> ServerState | None:
    """Stop the recorded server of ``name`` (its process group); None when none was running."""
    if name not in SERVED_MODELS:
        raise ModelServerError(f"unknown model {name!r}; models this command serves: {', '.join(SERVED_MODELS)}")
    state = read_state(name)
    if state is None:
        return None
    _kill_group(state.pid)
    state_path(name).unlink(missing_ok=True)
    return state


def describe(state: ServerState) -> dict[str, object]:
    """The JSON ``atb model serve`` prints."""
    return {"base_url": state.identity.base_url, "pid": state.pid, "log": state.log_path,
            **json.loads(state.identity.model_dump_json())}


__all__ = ["ModelServerError", "ServerState", "describe", "read_state", "serve", "served_identity", "stop"]
