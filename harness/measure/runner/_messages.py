"""The commands a measuring child answers, one typed model each, validated where the parent builds one and
again where the child reads one.

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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union, get_args

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator


class ChildCommand(BaseModel):
    """What every command carries: ``op`` names it; ``stack_dump_after_s`` is set by the parent (the
    child writes every thread's stack to its output then, shortly before the parent's deadline)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    op: str
    stack_dump_after_s: float | None = None


class Exit(ChildCommand):
    """End the child's loop (answered by ``serve``)."""

    op: Literal["exit"] = "exit"


# ------------------------------------------------------------------------------- torch child
class Load(ChildCommand):
    """Import the task (and, in a candidate or start child, the candidate file) and build the model."""

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


class Call(ChildCommand):
    """One call of the model on the inputs of (seed, distribution); the output shared under ``share``."""

    op: Literal["call"] = "call"
    seed: int
    distribution: str
    class_inputs: str                    # protocol correctness.class_inputs: how a class's inputs are made
    record_ops: bool = False
    save_path: str | None = None
    share: str = "call"


class Check(ChildCommand):
    """Reference child: recompute the output for an input and compare the candidate's shared one with it.

    The input is named by ``spec`` (a timed set) or by (``seed``, ``distribution``)."""

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


class Reshare(ChildCommand):
    """Share a held output again, as a file at ``path`` (when the device-memory handle could not be used)."""

    op: Literal["reshare"] = "reshare"
    tag: str
    path: str


class Release(ChildCommand):
    """Drop held outputs: those of ``tags``, or all."""

    op: Literal["release"] = "release"
    tags: list[str] | None = None


class Prepare(ChildCommand):
    """Start one paired seed: calibrate on a set of its own and lay out the timed sets."""

    op: Literal["prepare"] = "prepare"
    seed: int
    private_inputs: bool = False


class Capture(ChildCommand):
    """Time this seed by CUDA-graph replay (``graph``) or by events."""

    op: Literal["capture"] = "capture"
    graph: bool = False


class Block(ChildCommand):
    """Time ``reps`` repetitions; the outputs of the seed's repetitions ``capture`` are kept for checking."""

    op: Literal["block"] = "block"
    reps: int
    rep_offset: int
    capture: list[int] = Field(default_factory=list)
    save_dir: str | None = None


class FinishSeed(ChildCommand):
    """End the seed: the input-write evidence of its timed calls."""

    op: Literal["finish_seed"] = "finish_seed"


class ReuseProbe(ChildCommand):
    """Call twice on one input object, rewrite it in place, call again (a memo by address fails)."""

    op: Literal["reuse_probe"] = "reuse_probe"
    seed_a: int
    seed_b: int
    save_path: str | None = None


class Integrity(ChildCommand):
    """The harness's own functions and the modules loaded: what candidate code may have changed."""

    op: Literal["integrity"] = "integrity"


class Fingerprint(ChildCommand):
    """The device's identity as this child sees it (``smi``: also ask nvidia-smi)."""

    op: Literal["fingerprint"] = "fingerprint"
    smi: bool = True


class Ceilings(ChildCommand):
    """Measure the device's bandwidth and compute ceilings."""

    op: Literal["ceilings"] = "ceilings"


TorchCommand = Annotated[Union[Exit, Load, Call, Check, Reshare, Release, Prepare, Capture, Block, FinishSeed,
                               ReuseProbe, Integrity, Fingerprint, Ceilings], Field(discriminator="op")]


# --------------------------------------------------------------------------------- MLX child
class MlxLoad(ChildCommand):
    """Import the task (and the candidate's MLX port in the candidate child) and build the model."""

    op: Literal["load"] = "load"
    task_path: str
    init_seed: int
    candidate_path: str | None = None


class MlxCall(ChildCommand):
    """One call on (seed, distribution), its output saved at ``out_path`` (the reference's torch output too)."""

    op: Literal["call"] = "call"
    seed: int
    distribution: str
    out_path: str
    torch_out_path: str | None = None


class MlxPrepare(ChildCommand):
    """Calibrate the inner loop for one seed."""

    op: Literal["prepare"] = "prepare"
    seed: int


class MlxRep(ChildCommand):
    """One timed repetition; its output saved at ``out_path`` when given."""

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

    def parse(self, cmd: ChildCommand | Mapping[str, Any]) -> ChildCommand:
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


__all__ = ["Block", "Call", "Capture", "Ceilings", "Check", "ChildCommand", "CommandSet", "Exit", "FinishSeed",
           "Fingerprint", "Integrity", "Load", "MLX_COMMANDS", "MlxCall", "MlxLoad", "MlxPrepare", "MlxRep", "Prepare",
           "Release", "Reshare", "ReuseProbe", "TORCH_COMMANDS"]
