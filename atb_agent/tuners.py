"""Tuners, and how to add one.

A tuner spends a campaign's budget of iterations on one task. Every tuner works through a
:class:`TuningEnvironment`: the task brief, the sandboxed tools (``env.toolbox``, whose ``submit`` tool
hands workspace files over) and :meth:`TuningEnvironment.conclude_iteration`, which has the harness
measure the submission and stores the iteration. A tuner never measures or records anything itself.

Specs (``atb run TASK --tuner SPEC``):

* ``openai:MODEL`` — the LangGraph tuner on OpenAI chat completions (``--base-url`` for any
  OpenAI-compatible server); key from ``OPENAI_API_KEY``;
* ``anthropic:MODEL`` — the LangGraph tuner on Anthropic messages; key from ``ANTHROPIC_API_KEY``;
* ``replay:PATH`` — re-runs a recorded transcript's model turns (no key, no network), measured afresh;
* ``random`` — the harness's seeded random search over the task's knob space;
* ``NAME`` or ``NAME:ARG`` — an entry point in group ``autotunebench.tuners``.

Adding a tuner from your own package::

    # pyproject.toml of your package
    [project.entry-points."autotunebench.tuners"]
    mytuner = "my_pkg.tuner:make"

    # my_pkg/tuner.py
    def make(arg: str) -> Tuner:          # arg is what follows "mytuner:" in the spec ('' if nothing)
        return MyTuner(arg)

    class MyTuner:
        spec = "mytuner"
        def identity(self) -> TunerIdentity: return TunerIdentity(provider="mine", model="v1")
        def run(self, env: TuningEnvironment) -> RunCounts:
            for idx in env.iterations_left():
                env.toolbox.call("write_file", {...})            # act in the sandbox
                env.conclude_iteration(idx)                      # the harness measures; stored once
            return RunCounts(iterations=env.budget)

A factory may instead return a :class:`atb_agent.providers.Provider` (another model API): it then runs
inside the LangGraph tuner like the built-in providers.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from transcripts import ReplayCursor, TranscriptWriter

from atb_agent._iteration import encode_files, force_submission, measure_submission
from atb_agent.errors import TunerSpecError
from atb_agent.evaluation import Evaluator, IterationSink, IterationUsageCounts, VerdictSummary
from atb_agent.graph import SYSTEM_PROMPT, AgentContext, ExchangeRecorder, SubmissionInbox, ToolBoxLike
from atb_agent.providers import AnthropicProvider, OpenAIProvider, Provider

ENTRY_POINT_GROUP = "autotunebench.tuners"


class TunerIdentity(BaseModel):
    """Who the tuner is, for the transcript header and the campaign row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str
    model: str = ""
    base_url: str = ""


class RunCounts(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    iterations: int
    model_calls: int = 0
    truncated_calls: int = 0


@dataclass
class TuningEnvironment:
    """Everything a tuner may use. Built by :func:`atb_agent.run_campaign` (or the replayer)."""

    campaign_id: str
    task_id: str
    task_brief: str
    budget: int
    seed: int
    toolbox: ToolBoxLike
    inbox: SubmissionInbox
    evaluator: Evaluator
    iterations: IterationSink
    transcript: TranscriptWriter
    checkpoint_path: Path
    max_output_tokens: int
    max_tool_calls_per_iteration: int
    model_timeout_s: float
    replay: ReplayCursor | None = None
    recorded_so_far: set[int] = field(default_factory=set)

    def iterations_left(self) -> Iterator[int]:
        """The iteration indexes still to run (a resumed campaign skips the stored ones)."""
        return (i for i in range(self.budget) if i not in self.recorded_so_far)

    def conclude_iteration(self, idx: int, usage: IterationUsageCounts | None = None,
                           detail: dict[str, Any] | None = None) -> VerdictSummary:
        """End iteration ``idx``: take the files the toolbox's ``submit`` handed over (or submit the
        workspace as it stands), have the harness measure them, store the iteration once."""
        files = self.inbox.take()
        submission = ({"forced": False, "files_b64": encode_files(files)} if files is not None
                      else force_submission(self.toolbox, self.inbox, self.transcript, idx))
        verdict = measure_submission(self.evaluator, self.transcript, idx, submission)
        self.iterations.record(idx, verdict, usage or IterationUsageCounts(),
                               {"forced_submission": bool(submission and submission["forced"]), **(detail or {})})
        self.recorded_so_far.add(idx)
        return verdict


@runtime_checkable
class Tuner(Protocol):
    """A tuner: ``identity()`` says who it is; ``run(env)`` spends ``env.budget`` iterations, each ended
    by ``env.conclude_iteration`` (or by the graph's ``submit`` node for the built-in tuner).

    ``run`` may raise; the campaign then finishes as ``aborted`` with the error as its reason.
    """

    spec: str

    def identity(self) -> TunerIdentity: ...

    def run(self, env: TuningEnvironment) -> RunCounts: ...


ProviderKind = Literal["openai", "anthropic"]
ProviderFactory = Callable[[ExchangeRecorder, ReplayCursor | None, float], Provider]


def provider_factory(kind: ProviderKind, model: str, base_url: str | None) -> ProviderFactory:
    """Build providers of ``kind`` later, once the transcript sink and replay cursor exist."""
    cls = OpenAIProvider if kind == "openai" else AnthropicProvider

    def make(sink: ExchangeRecorder, replay: ReplayCursor | None, timeout_s: float) -> Provider:
        return cls(model, sink=sink, timeout_s=timeout_s, base_url=base_url, replay=replay)

    return make


def require_api_key(kind: ProviderKind) -> None:
    """Raise MissingApiKeyError now, before a campaign is opened, when the provider's key is unset."""
    import os

    from atb_agent.errors import MissingApiKeyError
    from atb_agent.providers import _anthropic, _openai

    variable = _openai.API_KEY_ENV if kind == "openai" else _anthropic.API_KEY_ENV
    if not os.environ.get(variable):
        raise MissingApiKeyError(variable, "OpenAI" if kind == "openai" else "Anthropic")


def default_base_url(kind: ProviderKind, base_url: str | None) -> str:
    """The URL a provider of ``kind`` will call: the given one, else the SDK's environment variable,
    else the public API."""
    import os

    from atb_agent.providers import _anthropic, _openai

    if base_url:
        return base_url
    if kind == "openai":
        return os.environ.get("OPENAI_BASE_URL") or _openai.DEFAULT_BASE_URL
    return os.environ.get("ANTHROPIC_BASE_URL") or _anthropic.DEFAULT_BASE_URL


class GraphTuner:
    """The LangGraph tuner around one provider (built-in ``openai:`` / ``anthropic:`` specs)."""

    def __init__(self, spec: str, kind: str, model: str, make_provider: ProviderFactory, base_url: str = "") -> None:
        self.spec = spec
        self.kind = kind
        self.model = model
        self.base_url = base_url
        self._make_provider = make_provider

    def identity(self) -> TunerIdentity:
        return TunerIdentity(provider=self.kind, model=self.model, base_url=self.base_url)

    def run(self, env: TuningEnvironment) -> RunCounts:
        from atb_agent._runner import run_graph

        exchanges = ExchangeRecorder(env.transcript)
        provider = self._make_provider(exchanges, env.replay, env.model_timeout_s)
        self.base_url = provider.base_url
        try:
            ctx = AgentContext(
                provider=provider, toolbox=env.toolbox, inbox=env.inbox, evaluator=env.evaluator,
                iterations=env.iterations, transcript=env.transcript, exchanges=exchanges,
                system_prompt=SYSTEM_PROMPT, task_brief=env.task_brief, max_output_tokens=env.max_output_tokens,
                max_tool_calls_per_iteration=env.max_tool_calls_per_iteration,
                tools=provider.tool_definitions(env.toolbox))
            state = run_graph(ctx, checkpoint_path=env.checkpoint_path, thread_id=env.campaign_id, budget=env.budget)
        finally:
            provider.close()
        return RunCounts(iterations=state["iteration"], model_calls=state["model_calls"],
                         truncated_calls=state["truncated_calls"])


def tool_definitions_sha256(toolbox: ToolBoxLike) -> str:
    doc = {"openai": toolbox.openai_tools(), "anthropic": toolbox.anthropic_tools()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class ParsedSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["openai", "anthropic", "replay", "random", "entry_point"]
    arg: str = ""
    name: str = ""


def parse_spec(spec: str) -> ParsedSpec:
    """Split a tuner spec. Raises TunerSpecError for an empty model or path."""
    text = spec.strip()
    head, sep, arg = text.partition(":")
    if head in ("openai", "anthropic", "replay"):
        if not arg:
            what = "PATH" if head == "replay" else "MODEL"
            raise TunerSpecError(f"tuner spec {spec!r} needs a {what.lower()}: write {head}:{what}")
        return ParsedSpec(kind=head, arg=arg)  # type: ignore[arg-type]
    if text == "random":
        return ParsedSpec(kind="random")
    if not head:
        raise TunerSpecError("empty tuner spec: use openai:MODEL, anthropic:MODEL, replay:PATH, random or an "
                             f"entry-point name from group {ENTRY_POINT_GROUP}")
    return ParsedSpec(kind="entry_point", name=head, arg=arg)


def entry_point_tuners() -> dict[str, Any]:
    """Installed third-party tuners: entry-point name -> entry point."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def load_entry_point_tuner(name: str, arg: str) -> Tuner:
    """Load and build a third-party tuner. A factory returning a Provider is wrapped in the graph.

    Raises:
        TunerSpecError: no entry point of that name, or it does not produce a Tuner or Provider.
    """
    found = entry_point_tuners()
    if name not in found:
        known = ", ".join(sorted(found)) or "none installed"
        raise TunerSpecError(f"no tuner named {name!r}: built-in specs are openai:MODEL, anthropic:MODEL, "
                             f"replay:PATH, random; entry points in {ENTRY_POINT_GROUP}: {known}")
    factory = found[name].load()
    made = factory(arg)
    if isinstance(made, Tuner):
        return made
    if callable(getattr(made, "complete", None)) and callable(getattr(made, "tool_definitions", None)):
        provider = made
        return GraphTuner(name if not arg else f"{name}:{arg}", str(getattr(provider, "name", name)),
                          str(getattr(provider, "model", arg)), lambda sink, replay, timeout: provider,
                          str(getattr(provider, "base_url", "")))
    raise TunerSpecError(f"entry point {name!r} ({found[name].value}) returned {type(made).__name__}, which is "
                         "neither a Tuner (spec, identity(), run(env)) nor a Provider (complete(), tool_definitions())")


def resolve_tuner(spec: str, *, base_url: str | None = None) -> Tuner:
    """The tuner for an ``openai:``/``anthropic:`` or entry-point spec (``random`` and ``replay:`` are
    handled by :func:`atb_agent.run_campaign`). Raises TunerSpecError."""
    parsed = parse_spec(spec)
    if parsed.kind in ("openai", "anthropic"):
        kind: ProviderKind = parsed.kind
        require_api_key(kind)
        return GraphTuner(spec, kind, parsed.arg, provider_factory(kind, parsed.arg, base_url),
                          default_base_url(kind, base_url))
    if parsed.kind == "entry_point":
        return load_entry_point_tuner(parsed.name, parsed.arg)
    raise TunerSpecError(f"tuner spec {spec!r} is run by run_campaign directly, not resolved to a Tuner")


__all__ = ["ENTRY_POINT_GROUP", "GraphTuner", "ParsedSpec", "RunCounts", "Tuner", "TunerIdentity",
           "TuningEnvironment", "entry_point_tuners", "load_entry_point_tuner", "parse_spec", "provider_factory",
           "resolve_tuner", "tool_definitions_sha256"]
