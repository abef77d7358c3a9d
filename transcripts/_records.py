"""Pydantic models of transcript records.

A transcript is a JSON Lines file; each line is a :class:`Envelope` whose ``data`` is one of the
typed payloads below, chosen by ``kind``. ``hash`` is the SHA-256 of the canonical JSON of
``{seq, kind, prev, data}`` and ``prev`` is the previous line's ``hash`` (64 zeros for the first), so
changing, dropping, inserting or reordering any line breaks the chain.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FORMAT: Literal["atb-transcript/1"] = "atb-transcript/1"
GENESIS = "0" * 64

Kind = Literal["header", "iteration_start", "model_call", "model_turn", "tool_call", "submission", "verdict",
               "resume", "end"]


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


class HttpRequestRecord(_Data):
    """A request exactly as the SDK handed it to the transport (headers normalised, see _normalise)."""

    method: str
    url: str
    headers: list[tuple[str, str]]
    body_b64: str

    @property
    def body(self) -> bytes:
        return unb64(self.body_b64)


class HttpResponseRecord(_Data):
    """A response exactly as it came off the wire: status, headers, raw (still encoded) body bytes."""

    status: int
    headers: list[tuple[str, str]]
    body_b64: str

    @property
    def body(self) -> bytes:
        return unb64(self.body_b64)


class ModelServerData(_Data):
    """A model served on this machine (``atb model serve``): which weights, which server, which flags.

    Recorded in the header of a live run against it, so the run says exactly what answered: the GGUF's
    SHA-256, the server's own ``--version`` text and the command line it was started with.
    """

    name: str
    about: str
    gguf_sha256: str
    gguf_bytes: int
    server: str
    server_version: str
    server_argv: list[str]
    base_url: str
    max_output_tokens: int = Field(description="the cap this model's requests use (at most the protocol's)")
    temperature: float = Field(description="sent with every request, with the run's seed")
    text_protocol: str = Field(description="the declared text protocol for a model without native tool calls")


TEXT_PROTOCOL_FENCED_PYTHON = "fenced-python/1"


class HeaderData(_Data):
    """What the run was: who made it, against what, and whether the model is real or scripted.

    ``text_protocol`` (empty: none) says the run accepted answers by the declared text protocol: a
    fenced Python block in a turn without tool calls became the candidate file and ending the turn
    submitted it (a native tool call took precedence). ``model_server`` identifies a locally served model.
    """

    format: Literal["atb-transcript/1"] = FORMAT
    scripted: bool = Field(description="True when the model turns came from a script, not a real model")
    label: str = ""
    tuner_spec: str
    provider: str
    model: str
    base_url: str
    task: str
    task_brief: str
    budget: int
    seed: int
    campaign_id: str
    protocol_version: str
    protocol_sha256: str
    max_output_tokens: int
    max_tool_calls_per_iteration: int
    tool_definitions_sha256: str
    created_at: str
    text_protocol: str = ""
    prompt: str = ""                  # the prompt variant ("" = standard; see atb_agent.graph._prompts)
    model_server: ModelServerData | None = None
    # Text appended to the system prompt (an A/B arm's treatment, ``system_prompt_suffix`` in its config):
    # replay rebuilds the same prompt from it. Left out of the record when empty, so a transcript
    # without one is written exactly as before.
    system_prompt_suffix: str = Field(default="", exclude_if=lambda v: not v)
    # The seed a served model's requests carried when it was not the campaign's ``seed``: a replay
    # campaign run at seed 0 of a recording made at seed 1 sends the recorded requests (seed 1), and
    # its own transcript must say so to replay. Left out when None (the campaign's seed was sent).
    request_seed: int | None = Field(default=None, exclude_if=lambda v: v is None)

    def model_request_seed(self) -> int:
        """The seed the run's requests to a served model carried."""
        return self.seed if self.request_seed is None else self.request_seed


class IterationStartData(_Data):
    iteration: int
    observation: str


class ModelCallData(_Data):
    """One HTTP exchange with the model API."""

    call_index: int
    iteration: int
    request: HttpRequestRecord
    response: HttpResponseRecord


class TruncationData(_Data):
    truncated: bool
    api_signal: str = ""              # e.g. "finish_reason=length", "" when the API said nothing
    requested_cap: int
    usage_output_tokens: int | None = None
    tiktoken_output_tokens: int | None = None
    tiktoken_encoding: str = ""
    tiktoken_exact: bool = False      # False when the encoding is only an approximation of the model's
    reasons: list[str] = Field(default_factory=list)


class ModelTurnData(_Data):
    """The parsed outcome of one model call: stop reason, usage, truncation verdict."""

    call_index: int
    iteration: int
    stop_reason: str
    text: str
    tool_calls: list[dict[str, Any]]
    input_tokens: int
    output_tokens: int
    truncation: TruncationData


class ToolCallData(_Data):
    iteration: int
    call_id: str
    name: str
    arguments: str
    content: str
    is_error: bool
    submitted: dict[str, Any] | None = None


class SubmissionData(_Data):
    """Files handed to the harness; ``forced`` when the model ended its turn without submitting."""

    iteration: int
    forced: bool
    files: dict[str, str]             # workspace path -> sha256 of the bytes


class VerdictData(_Data):
    iteration: int
    verdict: dict[str, Any]


class ResumeData(_Data):
    """A killed run resumed from its checkpoint; records ``abandoned_from..abandoned_to`` are void."""

    abandoned_from: int
    abandoned_to: int
    resumed_at: str


class StoreCheckpointRef(_Data):
    """The signed store head a run's transcript was written under (issue 27): the campaign-end checkpoint
    (``harness.store.Checkpoint``) that covers the campaign's rows. The transcript itself is keyless;
    this names the signed evidence a replay checks its verdicts against (``atb replay``)."""

    store_id: str
    head_seq: int
    head_hash: str
    signature_id: str
    signed_at: str


class EndData(_Data):
    status: str
    iterations: int
    model_calls: int
    truncated_calls: int
    truncated_fraction: float
    reason: str = ""
    checkpoint: StoreCheckpointRef | None = None


DATA_MODELS: dict[str, type[_Data]] = {
    "header": HeaderData, "iteration_start": IterationStartData, "model_call": ModelCallData,
    "model_turn": ModelTurnData, "tool_call": ToolCallData, "submission": SubmissionData,
    "verdict": VerdictData, "resume": ResumeData, "end": EndData,
}


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def record_hash(seq: int, kind: str, prev: str, data: dict[str, Any]) -> str:
    body = canonical({"seq": seq, "kind": kind, "prev": prev, "data": data})
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


class Envelope(BaseModel):
    """One line of a transcript."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seq: int = Field(ge=0)
    kind: Kind
    prev: str = Field(pattern=r"^[0-9a-f]{64}$")
    data: dict[str, Any]
    hash: str = Field(pattern=r"^[0-9a-f]{64}$")

    def payload(self) -> _Data:
        return DATA_MODELS[self.kind].model_validate(self.data)
