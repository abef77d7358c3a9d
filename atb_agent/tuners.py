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

Every spec's head is a name in :data:`TUNERS`, a :class:`harness.registry.Registry` of
:class:`TunerEntry` (the pattern gates, engine adapters and backends use too): the built-ins are
registered here (``@tuner("openai", needs="MODEL")``), installed entry points are found there by name.

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
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from harness.registry import Registry
from transcripts import HeaderData, ModelServerData, ReplayCursor, TranscriptWriter

from atb_agent._checkpointer import CheckpointTarget
from atb_agent._iteration import encode_files, force_submission, measure_submission
from atb_agent.errors import TunerSpecError
from atb_agent.evaluation import Evaluator, IterationSink, IterationUsageCounts, VerdictSummary
from atb_agent.graph._text_protocol import STOP_SEQUENCES, TEXT_PROTOCOL_FENCED_PYTHON_STOP, TEXT_PROTOCOLS
from atb_agent.graph import (
    PROMPT_SMALL_MODEL, PROMPT_STANDARD, PROMPT_VARIANTS, AgentContext, ExchangeRecorder, SubmissionInbox,
    ToolBoxLike, system_prompt,
)
from atb_agent.providers import AnthropicProvider, OpenAIProvider, Provider

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "autotunebench.tuners"


class TunerIdentity(BaseModel):
    """Who the tuner is, for the transcript header and the campaign row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str
    model: str = ""
    base_url: str = ""
    text_protocol: str = ""
    prompt: str = ""
    model_server: ModelServerData | None = None
    system_prompt_suffix: str = ""
    request_seed: int | None = None   # the seed a served model's requests carry, when not the campaign's


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
    checkpoint_path: CheckpointTarget   # a SQLite file, or the store's postgresql:// URL (atb_agent._checkpointer)
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


LOCAL_MODEL_KEY = "no-key-needed-for-a-model-served-here"
PROMPT_ENV = "ATB_PROMPT"


def provider_factory(kind: ProviderKind, model: str, base_url: str | None, *, local: bool = False) -> ProviderFactory:
    """Build providers of ``kind`` later, once the transcript sink and replay cursor exist. ``local``: the
    endpoint is a model served here by ``atb model serve`` (OpenAI-compatible, no key)."""
    if kind == "openai":
        def make(sink: ExchangeRecorder, replay: ReplayCursor | None, timeout_s: float) -> Provider:
            return OpenAIProvider(model, sink=sink, timeout_s=timeout_s, base_url=base_url, replay=replay,
                                  api_key=LOCAL_MODEL_KEY if local else None)
        return make

    def make_anthropic(sink: ExchangeRecorder, replay: ReplayCursor | None, timeout_s: float) -> Provider:
        return AnthropicProvider(model, sink=sink, timeout_s=timeout_s, base_url=base_url, replay=replay)

    return make_anthropic


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
    """The LangGraph tuner around one provider (built-in ``openai:`` / ``anthropic:`` specs).

    ``served`` is set when the endpoint is a model served here by ``atb model serve``: every request
    then carries the run's seed (``request_seed``, else the campaign's) and the server's declared
    temperature, the output cap is the server's (at most the protocol's), and the declared
    ``text_protocol`` and the ``prompt`` variant apply. All four are recorded in the transcript header,
    from which a replay rebuilds the same tuner (:func:`graph_tuner_from_header`).
    """

    def __init__(self, spec: str, kind: str, model: str, make_provider: ProviderFactory, base_url: str = "", *,
                 served: ModelServerData | None = None, text_protocol: str = "", prompt: str = PROMPT_STANDARD,
                 request_seed: int | None = None, system_prompt_suffix: str = "") -> None:
        self.spec = spec
        self.system_prompt_suffix = system_prompt_suffix
        self.kind = kind
        self.model = model
        self.base_url = base_url
        self.served = served
        self.text_protocol = text_protocol
        self.prompt = prompt
        self.request_seed = request_seed
        self._make_provider = make_provider

    def identity(self) -> TunerIdentity:
        return TunerIdentity(provider=self.kind, model=self.model, base_url=self.base_url,
                             text_protocol=self.text_protocol,
                             prompt="" if self.prompt == PROMPT_STANDARD else self.prompt, model_server=self.served,
                             system_prompt_suffix=self.system_prompt_suffix, request_seed=self.request_seed)

    def run(self, env: TuningEnvironment) -> RunCounts:
        from atb_agent._runner import run_graph
        from atb_agent.evaluation import CANDIDATE_FILE

        exchanges = ExchangeRecorder(env.transcript)
        provider = self._make_provider(exchanges, env.replay, env.model_timeout_s)
        self.base_url = provider.base_url
        cap = env.max_output_tokens
        if self.served is not None:
            cap = min(cap, self.served.max_output_tokens)
            if isinstance(getattr(provider, "request_options", None), dict):
                seed = env.seed if self.request_seed is None else self.request_seed
                options: dict[str, Any] = {"seed": seed, "temperature": self.served.temperature}
                if self.text_protocol == TEXT_PROTOCOL_FENCED_PYTHON_STOP:
                    options["stop"] = list(STOP_SEQUENCES)     # from the header's text_protocol on replay
                provider.request_options = options  # type: ignore[attr-defined]
        try:
            ctx = AgentContext(
                provider=provider, toolbox=env.toolbox, inbox=env.inbox, evaluator=env.evaluator,
                iterations=env.iterations, transcript=env.transcript, exchanges=exchanges,
                system_prompt=with_suffix(system_prompt(self.prompt), self.system_prompt_suffix), task_brief=env.task_brief, max_output_tokens=cap,
                max_tool_calls_per_iteration=env.max_tool_calls_per_iteration,
                tools=provider.tool_definitions(env.toolbox), text_protocol=self.text_protocol,
                candidate_file=CANDIDATE_FILE, prompt_variant=self.prompt)
            state = run_graph(ctx, checkpoint_path=env.checkpoint_path, thread_id=env.campaign_id, budget=env.budget)
        finally:
            provider.close()
        return RunCounts(iterations=state["iteration"], model_calls=state["model_calls"],
                         truncated_calls=state["truncated_calls"])


ARM_CONFIG_KEYS = ("system_prompt_suffix", "text_protocol", "prompt")
"""What an A/B arm's (or a campaign's) ``config`` may set on the built-in model tuner: text appended to
the system prompt, (for a model served here) which declared text protocol the run uses, and which
prompt variant (:data:`atb_agent.graph.PROMPT_VARIANTS`) it reads."""


def with_suffix(prompt: str, suffix: str) -> str:
    """The system prompt with an arm's extra line(s) appended (unchanged when there are none)."""
    return prompt if not suffix else f"{prompt}\n\n{suffix}"


def apply_arm_config(tuner: Tuner, config: dict[str, Any] | None) -> Tuner:
    """Give ``tuner`` what an A/B arm's ``config`` asks of it: ``system_prompt_suffix`` reaches the
    model's system prompt (the built-in graph tuner), so a registered treatment is delivered, not merely
    stored beside the run; ``text_protocol`` (one of :data:`TEXT_PROTOCOLS`) replaces the served model's
    declared text protocol for this run (``fenced-python-stop/1``: every request stops where the first
    Python block closes); ``prompt`` (one of :data:`PROMPT_VARIANTS`) replaces the run's prompt variant
    (for a served model, ``small-model/1`` or ``$ATB_PROMPT``; ``small-model/2``: a short observation
    after a rejected candidate). All are recorded in the transcript header, from which a replay rebuilds
    them; in an A/B spec they are part of the registered digest.

    Raises:
        TunerSpecError: a key outside :data:`ARM_CONFIG_KEYS`, a non-string suffix, or a suffix on a
            tuner that has no system prompt to carry it (a third-party tuner); an unknown text protocol,
            or one asked of a tuner whose endpoint is not a model served here by ``atb model serve``; an
            unknown prompt variant, or one asked of a tuner whose prompt the harness does not build.
    """
    config = config or {}
    unknown = sorted(set(config) - set(ARM_CONFIG_KEYS))
    if unknown:
        raise TunerSpecError(f"arm config key(s) {', '.join(unknown)} are not known; known: {', '.join(ARM_CONFIG_KEYS)}")
    suffix = config.get("system_prompt_suffix", "")
    if not isinstance(suffix, str):
        raise TunerSpecError(f"arm config system_prompt_suffix must be text, got {type(suffix).__name__}")
    if suffix:
        if not isinstance(tuner, GraphTuner):
            raise TunerSpecError(f"tuner {getattr(tuner, 'spec', tuner)!r} has no system prompt the harness builds; "
                                 "system_prompt_suffix applies to the built-in model tuners only")
        tuner.system_prompt_suffix = suffix
    protocol = config.get("text_protocol")
    if protocol is not None:
        if protocol not in TEXT_PROTOCOLS:
            raise TunerSpecError(f"arm config text_protocol {protocol!r} is not known; known: {', '.join(TEXT_PROTOCOLS)}")
        if not isinstance(tuner, GraphTuner) or tuner.served is None:
            raise TunerSpecError(f"arm config text_protocol applies to a model served here by `atb model serve` "
                                 f"(openai:MODEL --base-url of that server); tuner {getattr(tuner, 'spec', tuner)!r} "
                                 "is not one")
        tuner.text_protocol = protocol
    variant = config.get("prompt")
    if variant is not None:
        if variant not in PROMPT_VARIANTS:
            raise TunerSpecError(f"arm config prompt {variant!r} is not a prompt variant; known: {', '.join(PROMPT_VARIANTS)}")
        if not isinstance(tuner, GraphTuner):
            raise TunerSpecError(f"tuner {getattr(tuner, 'spec', tuner)!r} has no prompt the harness builds; "
                                 "prompt applies to the built-in model tuners only")
        tuner.prompt = variant
    return tuner


def campaign_config_of(tuner: Tuner) -> dict[str, Any]:
    """What a campaign stores about its tuner beyond the spec: for a model served here, its identity
    (so a report, which reads only the store, can say plainly what the LLM arm was)."""
    served = getattr(tuner, "served", None)
    if isinstance(served, ModelServerData):
        return {"model_server": served.model_dump(mode="json"), "prompt": getattr(tuner, "prompt", "")}
    return {}


def tool_definitions_sha256(toolbox: ToolBoxLike) -> str:
    doc = {"openai": toolbox.openai_tools(), "anthropic": toolbox.anthropic_tools()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


TunerBuilder = Callable[[str, str, str | None], Tuner]
"""``(spec, arg, base_url) -> Tuner``: builds the tuner a spec names (``arg`` is what follows ``NAME:``)."""


@dataclass(frozen=True)
class TunerEntry:
    """One tuner name in :data:`TUNERS`.

    ``build`` makes the tuner; None for the specs :func:`atb_agent.run_campaign` runs itself (``random``:
    the harness's random search; ``replay:``: the recorded run's tuner, rebuilt from its transcript).
    ``needs`` is what a built-in spec must carry after ``NAME:`` (``MODEL``, ``PATH``; "" for none).
    """

    build: TunerBuilder | None
    needs: str = ""


def _tuner_from_entry_point(ep: EntryPoint, factory: object) -> TunerEntry:
    """An installed entry point as a registry entry: its object is a factory ``make(arg) -> Tuner | Provider``."""
    if not callable(factory):
        raise TunerSpecError(f"entry point {ep.name!r} ({ep.value}) in {ENTRY_POINT_GROUP} is a "
                             f"{type(factory).__name__}, not a factory make(arg) -> Tuner or Provider")

    def build(spec: str, arg: str, base_url: str | None) -> Tuner:
        return _tuner_from_factory(ep.name, ep.value, factory, arg)

    return TunerEntry(build=build)


TUNERS: Registry[TunerEntry] = Registry(
    "tuner", entry_point_group=ENTRY_POINT_GROUP, from_entry_point=_tuner_from_entry_point, error=TunerSpecError,
    hint="A spec is openai:MODEL, anthropic:MODEL, replay:PATH, random, or NAME[:ARG] for an installed entry point")
"""Tuners by the head of their spec: the built-ins registered below, then installed entry points."""


def tuner(name: str, *, needs: str = "") -> Callable[[TunerBuilder], TunerBuilder]:
    """Decorator: register a builder ``(spec, arg, base_url) -> Tuner`` as the tuner ``name`` in :data:`TUNERS`
    (like inspect_ai's ``@modelapi``). ``needs`` names what the spec must carry after ``name:``.

    Raises:
        TunerSpecError: ``name`` is taken.
    """

    def wrap(build: TunerBuilder) -> TunerBuilder:
        TUNERS.add(name, TunerEntry(build=build, needs=needs))
        return build

    return wrap


@tuner("openai", needs="MODEL")
def _openai_tuner(spec: str, model: str, base_url: str | None) -> Tuner:
    """An ``openai:`` spec whose ``base_url`` is a model served here by ``atb model serve`` needs no key
    and runs with that model's identity, seed, output cap, declared text protocol and the small-model
    prompt (``$ATB_PROMPT`` overrides)."""
    from atb_agent.model_server import served_identity

    served = served_identity(base_url)
    if served is not None:
        return GraphTuner(spec, "openai", model, provider_factory("openai", model, base_url, local=True),
                          served.base_url, served=served, text_protocol=served.text_protocol,
                          prompt=prompt_variant_from_env(PROMPT_SMALL_MODEL))
    require_api_key("openai")
    return GraphTuner(spec, "openai", model, provider_factory("openai", model, base_url),
                      default_base_url("openai", base_url))


@tuner("anthropic", needs="MODEL")
def _anthropic_tuner(spec: str, model: str, base_url: str | None) -> Tuner:
    require_api_key("anthropic")
    return GraphTuner(spec, "anthropic", model, provider_factory("anthropic", model, base_url),
                      default_base_url("anthropic", base_url))


TUNERS.add("replay", TunerEntry(build=None, needs="PATH"))
TUNERS.add("random", TunerEntry(build=None))
BUILTIN_TUNERS: tuple[str, ...] = ("openai", "anthropic", "replay", "random")


class ParsedSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["openai", "anthropic", "replay", "random", "entry_point"]
    arg: str = ""
    name: str = ""


def parse_spec(spec: str) -> ParsedSpec:
    """Split a tuner spec: a built-in's ``kind`` is its name; any other name (an installed entry point,
    found later in :data:`TUNERS`) is ``kind="entry_point"`` with its ``name``. Raises TunerSpecError for
    an empty spec, a built-in without its model or path, or ``random`` with an argument."""
    text = spec.strip()
    head, _, arg = text.partition(":")
    if not head:
        raise TunerSpecError("empty tuner spec: use openai:MODEL, anthropic:MODEL, replay:PATH, random or an "
                             f"entry-point name from group {ENTRY_POINT_GROUP}")
    entry = TUNERS.registered(head)
    if head in BUILTIN_TUNERS and entry is not None:
        if entry.needs and not arg:
            raise TunerSpecError(f"tuner spec {spec!r} needs a {entry.needs.lower()}: write {head}:{entry.needs}")
        if not entry.needs and (arg or text != head):
            raise TunerSpecError(f"tuner spec {spec!r}: {head} takes no argument; write {head}")
        return ParsedSpec(kind=head, arg=arg)  # type: ignore[arg-type]
    return ParsedSpec(kind="entry_point", name=head, arg=arg)


def entry_point_tuners() -> dict[str, Any]:
    """Installed third-party tuners: entry-point name -> entry point (not loaded).

    Raises:
        TunerSpecError: an entry point reuses a built-in tuner's name, or two share one.
    """
    return {ep.name: ep for ep in TUNERS.entry_points()}


def _tuner_from_factory(name: str, value: str, factory: Callable[[str], Any], arg: str) -> Tuner:
    made = factory(arg)
    if isinstance(made, Tuner):
        return made
    if callable(getattr(made, "complete", None)) and callable(getattr(made, "tool_definitions", None)):
        provider = made
        return GraphTuner(name if not arg else f"{name}:{arg}", str(getattr(provider, "name", name)),
                          str(getattr(provider, "model", arg)), lambda sink, replay, timeout: provider,
                          str(getattr(provider, "base_url", "")))
    raise TunerSpecError(f"entry point {name!r} ({value}) returned {type(made).__name__}, which is "
                         "neither a Tuner (spec, identity(), run(env)) nor a Provider (complete(), tool_definitions())")


def load_entry_point_tuner(name: str, arg: str) -> Tuner:
    """Load and build the tuner ``name`` from :data:`TUNERS` (a third-party one: its entry point's
    factory is called with ``arg``; a factory returning a Provider is wrapped in the graph).

    Raises:
        TunerSpecError: no tuner of that name (the message lists the known ones), it is run by
            run_campaign itself, or its factory produces neither a Tuner nor a Provider.
    """
    entry = TUNERS.get(name)
    if entry.build is None:
        raise TunerSpecError(f"tuner {name!r} is run by run_campaign directly, not resolved to a Tuner")
    return entry.build(name if not arg else f"{name}:{arg}", arg, None)


def prompt_variant_from_env(default: str) -> str:
    """The prompt variant for a live run: ``$ATB_PROMPT`` when set (for before/after measurements of a
    prompt change), else ``default``. Raises TunerSpecError for an unknown variant."""
    import os

    value = os.environ.get(PROMPT_ENV, "").strip() or default
    if value not in PROMPT_VARIANTS:
        raise TunerSpecError(f"{PROMPT_ENV}={value!r} is not a prompt variant; known: {', '.join(PROMPT_VARIANTS)}")
    return value


def graph_tuner_from_header(spec: str, header: HeaderData) -> GraphTuner:
    """The tuner a transcript's run used, rebuilt for replay: provider, model, base URL, and for a
    locally served model its identity, request seed, text protocol and prompt variant."""
    kind: ProviderKind = header.provider  # type: ignore[assignment]
    served = header.model_server
    return GraphTuner(spec, kind, header.model,
                      provider_factory(kind, header.model, header.base_url, local=served is not None),
                      header.base_url, served=served, text_protocol=header.text_protocol,
                      prompt=header.prompt or PROMPT_STANDARD, request_seed=header.model_request_seed() if served else None,
                      system_prompt_suffix=header.system_prompt_suffix)


def resolve_tuner(spec: str, *, base_url: str | None = None) -> Tuner:
    """The tuner for an ``openai:``/``anthropic:`` or entry-point spec, built by its :data:`TUNERS` entry
    (``random`` and ``replay:`` are handled by :func:`atb_agent.run_campaign`). An ``openai:`` spec whose
    ``base_url`` is a model served here by ``atb model serve`` needs no key and runs with that model's
    identity, seed, output cap, declared text protocol and the small-model prompt (``$ATB_PROMPT``
    overrides). Raises TunerSpecError, MissingApiKeyError."""
    parsed = parse_spec(spec)
    name = parsed.name if parsed.kind == "entry_point" else parsed.kind
    entry = TUNERS.get(name)
    if entry.build is None:
        raise TunerSpecError(f"tuner spec {spec!r} is run by run_campaign directly, not resolved to a Tuner")
    return entry.build(spec, parsed.arg, base_url)


__all__ = ["BUILTIN_TUNERS", "ENTRY_POINT_GROUP", "TUNERS", "GraphTuner", "TunerEntry", "tuner", "campaign_config_of", "graph_tuner_from_header", "prompt_variant_from_env", "ParsedSpec", "RunCounts", "Tuner", "TunerIdentity",
           "TuningEnvironment", "entry_point_tuners", "load_entry_point_tuner", "parse_spec", "provider_factory",
           "resolve_tuner", "tool_definitions_sha256", "ARM_CONFIG_KEYS", "apply_arm_config", "with_suffix"]
