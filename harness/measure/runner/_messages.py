"""The commands a measuring child answers and the replies it sends, one typed model each, validated where
one end builds it and again where the other end reads it.

Why typed: the parent drives its children over a pipe, and the commands were untyped dicts. A misspelled
or stale key was silently ignored or read as its default on the child's side (a test sent ``n_buffers``,
which the child does not read, and passed), and the two ends kept their own idea of what each command
holds, the child with its own copies of protocol defaults.
Here each command is one model: the parent's code is checked by mypy against it (the pydantic plugin
types every constructor), the parent validates what it sends (``Worker.request``), and the child
validates what it reads (:func:`harness.measure.runner._serve.serve`) and refuses a command it does
not know, a key it does not read or a value of the wrong type, as a ``protocol`` failure.

The torch child (:mod:`harness.measure.runner._child`) and the MLX child
(:mod:`harness.measure.backends.mlx_runner`) each have their own set: :data:`TORCH_COMMANDS` and
:data:`MLX_COMMANDS`. ``exit`` ends either child's loop and is answered by ``serve`` itself.

Protocol values (tolerances, the reference's spread factor, how a class's inputs are made) travel in
the commands or the child's config; a default here is what the parent sends when it has nothing to
say (a candidate child has no tolerances), never a protocol value the child would otherwise assume.

Replies: each command names its reply model (``reply_model``). The child's handler builds that model
(construction validates it) and ``serve`` sends it; the parent validates every line it reads into the
command's reply model, or into :class:`Failed` when the child's loop caught an error
(:func:`parse_reply`), and a reply that fits neither is the child's ``protocol`` failure
(``Worker.request``). Only ``ready`` is written as a plain mapping by the child (it is sent before
pydantic is imported, off the start-up path) and validated into :class:`Ready` by the parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator


# ------------------------------------------------------------------------------- replies
class ChildReply(BaseModel):
    """What every reply carries: ``ok`` (False: the command failed, ``error`` and ``failure_kind`` say how),
    ``op`` (the command answered, set by ``serve``) and, from a child that times its handlers (MLX),
    ``handler_s``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool = True
    op: str = ""
    handler_s: float | None = None


class Failed(ChildReply):
    """A command the child's loop could not answer: unknown, malformed, or its handler raised.

    ``failure_kind`` is the child's word (``import_error``, ``exception``, ``memory``, ``protocol``, the MLX
    child's ``no_port``); the parent maps it onto a worker failure's kinds."""

    ok: Literal[False] = False
    error: str = ""
    failure_kind: str = "exception"


class Ready(ChildReply):
    """The child's first line: torch (or MLX) imported, the timers bound, commands may come."""

    pid: int
    pid_in_sandbox: int | None = None       # set by the parent: the pid the child sees inside its namespace
    torch_version: str = ""
    threads: int = 0
    device: str = ""
    startup_s: dict[str, float] = Field(default_factory=dict)   # import torch, device init, to ready
    mlx_version: str = ""


class Exited(ChildReply):
    """``exit`` answered: the loop ends."""


class OutputMeta(BaseModel):
    """One output tensor of a call: shape, dtype, storage address, contiguity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: list[int]
    dtype: str
    storage_ptr: int = 0
    contiguous: bool = True


class CallOutcome(BaseModel):
    """One untimed call's facts as the child observed them (the evidence's ``CallFacts``, with the child's
    ``failure_kind`` when the call raised). Defaults are ``CallFacts``'s: a fact the child did not take."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    distribution: str
    ok: bool = True
    error: str = ""
    failure_kind: str = ""
    output_path: str = ""
    outputs: list[OutputMeta] = Field(default_factory=list)
    input_hashes_before: list[str] = Field(default_factory=list)
    input_hashes_after: list[str] = Field(default_factory=list)
    aliases_input: list[int] = Field(default_factory=list)
    equals_input: list[int] = Field(default_factory=list)
    threads_before: int = 1
    threads_after: int = 1
    ops_called: list[str] = Field(default_factory=list)
    tf32_enabled_after: bool = False
    wall_ns: int = 0
    inputs: str = ""


class LoadReply(ChildReply):
    """The model is built and called once. The reference reports its inputs' and output's sizes and, on a
    device with its own memory, the memory facts the collector plans with; ``ok`` False with
    ``failure_kind`` ``memory``: the reference's own call does not fit the device (``unfit``)."""

    error: str = ""
    failure_kind: str = ""
    estimate_param_bytes: int | None = None
    input_bytes: int = 0
    input_dtype: str = "float32"
    output_bytes: int = 0
    peak_device_bytes: int | None = None
    device_free_bytes: int = 0
    device_total_bytes: int | None = None
    restored_by_harness: list[str] = Field(default_factory=list)


class CallReply(ChildReply, CallOutcome):
    """One untimed call: its facts, the shared output's descriptor (candidate and start roles) and the
    seconds each step of the command took."""

    share: dict[str, Any] | None = None
    steps_s: dict[str, float] = Field(default_factory=dict)


class ComparisonOutcome(BaseModel):
    """The reference child's comparison of the candidate's shared output with its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    passed: bool
    reason: str = ""
    max_abs_err: float | None = None
    rel_l2: float | None = None
    reference_spread: list[float] | None = None   # (abs, rel L2) of the reference's own two runs
    reference_failed: bool = False                # the reference raised on a class it may skip
    transport_error: bool = False                 # the device-memory handle could not be opened here


class CheckReply(ChildReply):
    """The reference's call facts on the input and the comparison's summary."""

    call: CallOutcome
    comparison: ComparisonOutcome
    restored_by_harness: list[str] = Field(default_factory=list)
    steps_s: dict[str, float] = Field(default_factory=dict)


class ReshareReply(ChildReply):
    """A held output shared again, as a file."""

    share: dict[str, Any]


class ReleaseReply(ChildReply):
    """Bytes of held outputs dropped."""

    released: int


class PrepareReply(ChildReply):
    """A seed's calibration: repetitions to time, the calibrated call's estimate, the timed sets' layout."""

    reps: int
    est_ns: float
    method: str
    input_hashes_before: list[str] = Field(default_factory=list)
    inner: int | None = None            # CPU: calls per repetition
    launch_ns: float | None = None      # CUDA: host time launching one call


class CaptureReply(ChildReply):
    """Whether a CUDA graph was captured for this seed, the method, and why a probe was not taken."""

    captured: bool
    method: str
    probe_error: str = ""


class TimedOutputReply(BaseModel):
    """A timed repetition's output kept for the reference to check: its input set's spec and share."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rep: int
    input_seed: int
    spec: dict[str, Any]
    share: dict[str, Any]
    output_path: str = ""
    tag: str


class BlockReply(ChildReply):
    """A timed block: per-repetition times and the child's clocks around it (see ``TimedFacts``)."""

    times_ns: list[float]
    wall_ns: float
    timed_total_ns: float
    method: str
    timed_outputs: list[TimedOutputReply] = Field(default_factory=list)
    harness_ns: list[float] = Field(default_factory=list)
    handler_ns: float
    other_threads_cpu_ns: float = 0.0


class FinishSeedReply(ChildReply):
    """A seed's end: input fingerprints around the timed calls, threads, distinct input sets."""

    input_hashes_before: list[str]
    input_hashes_after: list[str]
    threads_after: int
    distinct_input_sets: int = 0
    timed_calls: int = 0
    input_refill: str = ""


class ReuseProbeReply(ChildReply):
    """The rewritten-input call's output, shared for the reference."""

    share: dict[str, Any]
    output_path: str = ""


class IntegrityReply(ChildReply):
    """The harness's own functions checked, the audit events and candidate modules seen."""

    checks: dict[str, bool]
    audit_events: list[str] = Field(default_factory=list)
    candidate_modules: list[str] = Field(default_factory=list)
    pid: int
    pid_in_sandbox: int | None = None


class FingerprintReply(ChildReply):
    """The device's fingerprint facts as this child sees them (keys of ``DeviceFingerprint``)."""

    facts: dict[str, Any]


class CeilingsReply(ChildReply):
    """The device's measured copy bandwidth and matmul rate."""

    bytes_per_s: float
    flops_per_s: float
    method: str


class MlxLoadReply(ChildReply):
    """The MLX port found and bound; ``ok`` False with ``failure_kind`` ``no_port``: none is defined."""

    error: str = ""
    failure_kind: str = ""
    port: str = ""
    mlx_version: str = ""
    device: str = ""
    blas_libraries: list[str] = Field(default_factory=list)
    torch_threads: int = 0


class MlxOutput(BaseModel):
    """One saved output array: shape and dtype name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: list[int]
    dtype: str


class MlxCallReply(ChildReply):
    """One call's saved outputs (and, from the reference, its torch model's)."""

    outputs: list[MlxOutput]
    torch_outputs: list[MlxOutput] | None = None


class MlxPrepareReply(ChildReply):
    """The calibrated inner loop of one seed."""

    inner: int
    estimate_ns: float


class MlxRepReply(ChildReply):
    """One timed repetition."""

    times_ns: list[float]
    wall_ns: float
    timed_total_ns: float
    method: str
    outputs: list[MlxOutput] | None = None


ReplyT = TypeVar("ReplyT", bound=ChildReply)


# ------------------------------------------------------------------------------- commands
class ChildCommand(BaseModel, Generic[ReplyT]):
    """What every command carries: ``op`` names it; ``stack_dump_after_s`` is set by the parent (the
    child writes every thread's stack to its output then, shortly before the parent's deadline).
    ``reply_model`` is the model its successful reply is validated into."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reply_model: ClassVar[type[ChildReply]] = ChildReply

    op: str
    stack_dump_after_s: float | None = None


class Exit(ChildCommand[Exited]):
    """End the child's loop (answered by ``serve``)."""

    reply_model = Exited

    op: Literal["exit"] = "exit"


# ------------------------------------------------------------------------------- torch child
class Load(ChildCommand[LoadReply]):
    """Import the task (and, in a candidate or start child, the candidate file) and build the model."""

    reply_model = LoadReply

    op: Literal["load"] = "load"
    task_path: str
    task_module: str
    init_seed: int
    candidate_path: str | None = None
    candidate_module: str | None = None
    tolerances: dict[str, dict[str, float]] | None = None   # the reference's: correctness tolerances by dtype
    reference_spread_factor: float = 0.0                     # the reference's: protocol correctness value

    @model_validator(mode="after")
    def _candidate_named(self) -> "Load":
        if self.candidate_path and not self.candidate_module:
            raise ValueError("a load with a candidate_path names its candidate_module too")
        return self


class Call(ChildCommand[CallReply]):
    """One call of the model on the inputs of (seed, distribution); the output shared under ``share``."""

    reply_model = CallReply

    op: Literal["call"] = "call"
    seed: int
    distribution: str
    class_inputs: str                    # protocol correctness.class_inputs: how a class's inputs are made
    record_ops: bool = False
    save_path: str | None = None
    share: str = "call"


class Check(ChildCommand[CheckReply]):
    """Reference child: recompute the output for an input and compare the candidate's shared one with it.

    The input is named by ``spec`` (a timed set) or by (``seed``, ``distribution``)."""

    reply_model = CheckReply

    op: Literal["check"] = "check"
    candidate: dict[str, Any]
    seed: int = 0
    distribution: str | None = None
    class_inputs: str | None = None      # protocol correctness.class_inputs, with a distribution
    spec: dict[str, Any] | None = None
    skip_on_reference_failure: bool = False

    @model_validator(mode="after")
    def _input_named(self) -> "Check":
        if self.spec is None and (self.distribution is None or self.class_inputs is None):
            raise ValueError("a check names its input by spec, or by seed, distribution and class_inputs")
        return self


class Reshare(ChildCommand[ReshareReply]):
    """Share a held output again, as a file at ``path`` (when the device-memory handle could not be used)."""

    reply_model = ReshareReply

    op: Literal["reshare"] = "reshare"
    tag: str
    path: str


class Release(ChildCommand[ReleaseReply]):
    """Drop held outputs: those of ``tags``, or all."""

    reply_model = ReleaseReply

    op: Literal["release"] = "release"
    tags: list[str] | None = None


class Prepare(ChildCommand[PrepareReply]):
    """Start one paired seed: calibrate on a set of its own and lay out the timed sets."""

    reply_model = PrepareReply

    op: Literal["prepare"] = "prepare"
    seed: int
    private_inputs: bool = False


class Capture(ChildCommand[CaptureReply]):
    """Time this seed by CUDA-graph replay (``graph``) or by events."""

    reply_model = CaptureReply

    op: Literal["capture"] = "capture"
    graph: bool = False


class Block(ChildCommand[BlockReply]):
    """Time ``reps`` repetitions; the outputs of the seed's repetitions ``capture`` are kept for checking."""

    reply_model = BlockReply

    op: Literal["block"] = "block"
    reps: int
    rep_offset: int
    capture: list[int] = Field(default_factory=list)
    save_dir: str | None = None


class FinishSeed(ChildCommand[FinishSeedReply]):
    """End the seed: the input-write evidence of its timed calls."""

    reply_model = FinishSeedReply

    op: Literal["finish_seed"] = "finish_seed"


class ReuseProbe(ChildCommand[ReuseProbeReply]):
    """Call twice on one input object, rewrite it in place, call again (a memo by address fails)."""

    reply_model = ReuseProbeReply

    op: Literal["reuse_probe"] = "reuse_probe"
    seed_a: int
    seed_b: int
    save_path: str | None = None


class Integrity(ChildCommand[IntegrityReply]):
    """The harness's own functions and the modules loaded: what candidate code may have changed."""

    reply_model = IntegrityReply

    op: Literal["integrity"] = "integrity"


class Fingerprint(ChildCommand[FingerprintReply]):
    """The device's identity as this child sees it (``smi``: also ask nvidia-smi)."""

    reply_model = FingerprintReply

    op: Literal["fingerprint"] = "fingerprint"
    smi: bool = True


class Ceilings(ChildCommand[CeilingsReply]):
    """Measure the device's bandwidth and compute ceilings."""

    reply_model = CeilingsReply

    op: Literal["ceilings"] = "ceilings"


TorchCommand = Annotated[Union[Exit, Load, Call, Check, Reshare, Release, Prepare, Capture, Block, FinishSeed,
                               ReuseProbe, Integrity, Fingerprint, Ceilings], Field(discriminator="op")]


# --------------------------------------------------------------------------------- MLX child
class MlxLoad(ChildCommand[MlxLoadReply]):
    """Import the task (and the candidate's MLX port in the candidate child) and build the model."""

    reply_model = MlxLoadReply

    op: Literal["load"] = "load"
    task_path: str
    init_seed: int
    candidate_path: str | None = None


class MlxCall(ChildCommand[MlxCallReply]):
    """One call on (seed, distribution), its output saved at ``out_path`` (the reference's torch output too)."""

    reply_model = MlxCallReply

    op: Literal["call"] = "call"
    seed: int
    distribution: str
    out_path: str
    torch_out_path: str | None = None


class MlxPrepare(ChildCommand[MlxPrepareReply]):
    """Calibrate the inner loop for one seed."""

    reply_model = MlxPrepareReply

    op: Literal["prepare"] = "prepare"
    seed: int


class MlxRep(ChildCommand[MlxRepReply]):
    """One timed repetition; its output saved at ``out_path`` when given."""

    reply_model = MlxRepReply

    op: Literal["rep"] = "rep"
    seed: int
    out_path: str | None = None


MlxCommand = Annotated[Union[Exit, MlxLoad, MlxCall, MlxPrepare, MlxRep], Field(discriminator="op")]


class CommandSet:
    """One child's commands: the validating adapter and the ``op`` names it knows."""

    def __init__(self, union: Any) -> None:
        self.adapter: TypeAdapter[Any] = TypeAdapter(union)
        members = get_args(get_args(union)[0])
        self.ops: frozenset[str] = frozenset(str(m.model_fields["op"].default) for m in members)

    def parse(self, cmd: ChildCommand[Any] | Mapping[str, Any]) -> ChildCommand[Any]:
        """``cmd`` as a validated command of this set: a model is checked to belong to it, a mapping is
        validated into one (tests and tools may still write a command as a dict).

        Raises:
            pydantic.ValidationError: an unknown ``op``, a key the command does not have, a wrong type.
        """
        data = cmd.model_dump(exclude_none=True) if isinstance(cmd, ChildCommand) else dict(cmd)
        parsed = self.adapter.validate_python(data)
        assert isinstance(parsed, ChildCommand)
        return parsed


TORCH_COMMANDS = CommandSet(TorchCommand)
MLX_COMMANDS = CommandSet(MlxCommand)

_FAILED_KEYS = frozenset(Failed.model_fields)


def parse_reply(cmd: ChildCommand[ReplyT], data: Mapping[str, Any]) -> ReplyT | Failed:
    """A reply line read from the child, validated: :class:`Failed` when the child's loop caught an error (it
    carries nothing but the error), else the command's own reply model (which may say ``ok`` False with
    the facts of a call that raised, or a load that did not fit).

    Raises:
        pydantic.ValidationError: the reply is neither.
    """
    if data.get("ok") is False and set(data) <= _FAILED_KEYS:
        return Failed.model_validate(data)
    reply = cmd.reply_model.model_validate(data)
    return reply  # type: ignore[return-value]  # reply_model is the class ReplyT names


__all__ = ["Block", "BlockReply", "Call", "CallOutcome", "CallReply", "Capture", "CaptureReply", "Ceilings",
           "CeilingsReply", "Check", "CheckReply", "ChildCommand", "ChildReply", "CommandSet", "ComparisonOutcome",
           "Exit", "Exited", "Failed", "FinishSeed", "FinishSeedReply", "Fingerprint", "FingerprintReply", "Integrity",
           "IntegrityReply", "Load", "LoadReply", "MLX_COMMANDS", "MlxCall", "MlxCallReply", "MlxLoad", "MlxLoadReply",
           "MlxOutput", "MlxPrepare", "MlxPrepareReply", "MlxRep", "MlxRepReply", "OutputMeta", "Prepare",
           "PrepareReply", "Ready", "Release", "ReleaseReply", "ReplyT", "Reshare", "ReshareReply", "ReuseProbe",
           "ReuseProbeReply", "TORCH_COMMANDS", "TimedOutputReply", "parse_reply"]
