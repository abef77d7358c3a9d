"""What the measuring child processes report, and what the gates judge.

This is the contract between the runner (which runs candidate and reference code in child processes
and collects facts) and the gates (pure functions of these facts, run in the harness's own process).
Every field is a plain fact observed by harness code; no field is computed by candidate code. Outputs
never come here: the reference child compares them where they live (on the device) and reports the
summary (:class:`Comparison`). Input fingerprints are SHA-256 on a CPU and keyed device checksums on
CUDA (only the digests cross to the host).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.records import Backend, DeviceCeilings

if TYPE_CHECKING:
    from harness.measure.collect import ArmProcesses, Collected
    from harness.stats import RatioEstimate
    from harness.tasks import Task, TaskCost


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TensorMeta(_Fact):
    shape: list[int]
    dtype: str
    storage_ptr: int = 0
    contiguous: bool = True


class CallFacts(_Fact):
    """One untimed call of a model (candidate or reference) on inputs made from ``seed``."""

    seed: int
    distribution: str
    ok: bool = True
    error: str = ""                                # exception text when the call raised
    output_path: str = ""                          # CPU: the file the candidate shared its output in; CUDA: "" (IPC)
    outputs: list[TensorMeta] = Field(default_factory=list)
    input_hashes_before: list[str] = Field(default_factory=list)
    input_hashes_after: list[str] = Field(default_factory=list)
    aliases_input: list[int] = Field(default_factory=list)     # input indexes whose storage an output shares
    equals_input: list[int] = Field(default_factory=list)      # input indexes an output equals bytewise
    threads_before: int = 1
    threads_after: int = 1
    ops_called: list[str] = Field(default_factory=list)        # torch functions seen (first call only)
    tf32_enabled_after: bool = False
    wall_ns: int = 0
    # how an input class's set was made (harness.measure.runner._inputs.make_inputs_noted): "" the task's
    # own draw, "factory" get_inputs with the class's draws, "strided", or "redraw (why)" (the fallback)
    inputs: str = ""


class TimedOutput(_Fact):
    """An output captured right after a *timed* repetition, with the input seed it was computed on."""

    rep: int
    input_seed: int                                # one integer naming the input set (differs per set)
    output_path: str = ""                          # CPU: the shared file; CUDA: "" (shared by IPC)
    spec: dict[str, Any] = Field(default_factory=dict)   # how the reference rebuilt that exact set


class TimedFacts(_Fact):
    """One arm's timed repetitions at one paired seed."""

    seed: int
    times_ns: list[float] = Field(min_length=1)    # per repetition, by the harness's bound timer
    wall_ns: float = 0                             # harness wall clock from first start to after device sync
    timed_total_ns: float = 0                      # sum of the timed region over the same repetitions
    parent_wall_ns: float = 0                      # the parent's own clock around the whole command
    # the worker's bound clock around its whole handling of the commands (the timed loop and the harness
    # work around it: input sets, mutation checks, cache release); 0: not recorded (wall_ns stands in)
    handler_ns: float = 0
    # per repetition, in measuring order: host ns the timing loop spent in its own work inside the wall
    # window (flush launch, event records, output capture; not the call, not the refill). The escape gate
    # subtracts it from the wall (issue 25: exposed on a fast candidate, hidden by the reference's
    # longer kernels). Empty: not recorded (the baseline's excess stands in).
    harness_rep_ns: list[float] = Field(default_factory=list)
    timed_outputs: list[TimedOutput] = Field(default_factory=list)
    input_hashes_before: list[str] = Field(default_factory=list)
    input_hashes_after: list[str] = Field(default_factory=list)
    threads_after: int = 1
    method: str = ""                               # e.g. "cpu-perf_counter", "cuda-events+flush", "cuda-graph"
    # CPU time spent by threads other than the timing thread over the block (process CPU time minus
    # the timing thread's, time.process_time_ns / time.thread_time_ns bound before import), from
    # the block's start until its outputs were saved. None: not measured (the gate then skips it).
    other_threads_cpu_ns: float | None = None
    # Calls made in the timed loop and how many distinct input sets they received (equal when no
    # timed call saw values an earlier one saw); how the sets were made between repetitions:
    # "fresh" (a new exact draw per call), "window" (CPU: distinct windows of a pool of exact draws),
    # "graph" (CUDA-graph static sets refilled before every replay). 0 / "": not recorded.
    timed_calls: int = 0
    distinct_input_sets: int = 0
    input_refill: str = ""


class IntegrityFacts(_Fact):
    """Whether the harness's own bound functions were still the originals after candidate code ran."""

    checks: dict[str, bool] = Field(default_factory=dict)     # name -> intact
    candidate_modules_in_baseline: list[str] = Field(default_factory=list)
    pid: int = 0
    # Names of audit events (sys.addaudithook, installed before the candidate is imported) whose
    # immediate Python caller was candidate code: "gc.get_objects", "sys._getframe", "sys.settrace", ...
    audit_events: list[str] = Field(default_factory=list)


class Comparison(_Fact):
    """The parent's comparison of one output against the reference's for the same input seed."""

    seed: int
    distribution: str
    # "skipped": not a comparison; an input class the reference itself cannot take (it raised), skipped
    # for this problem from this seed on, with the reference's error as the reason (issue 25)
    phase: Literal["correctness", "timed", "extended", "preflight", "skipped"]
    passed: bool
    reason: str = ""
    max_abs_err: float | None = None
    rel_l2: float | None = None
    ref_equals_input: list[int] = Field(default_factory=list)


class WorkerFailure(_Fact):
    """A child process that crashed, hung, exited or raised: a rejection reason, never a harness error."""

    role: Literal["candidate", "reference", "start"]
    kind: Literal["import_error", "exception", "crash", "timeout", "exit", "memory", "protocol"]
    detail: str


class Evidence(_Fact):
    """Everything the gates see about one evaluation."""

    task_id: str
    backend: Backend
    candidate_pid: int = 0
    reference_pid: int = 0
    candidate_calls: list[CallFacts] = Field(default_factory=list)
    reference_calls: list[CallFacts] = Field(default_factory=list)
    comparisons: list[Comparison] = Field(default_factory=list)
    candidate_timed: list[TimedFacts] = Field(default_factory=list)
    baseline_timed: list[TimedFacts] = Field(default_factory=list)
    start_timed: list[TimedFacts] = Field(default_factory=list)   # the search's starting candidate, same seeds
    candidate_integrity: IntegrityFacts = Field(default_factory=IntegrityFacts)
    baseline_integrity: IntegrityFacts = Field(default_factory=IntegrityFacts)
    failure: WorkerFailure | None = None
    ratio: float | None = None                     # baseline time / candidate time (speedup)
    ci_low: float | None = None
    ci_high: float | None = None
    candidate_median_ns: float | None = None
    ceilings: DeviceCeilings | None = None
    task_bytes: float | None = None                # minimum bytes moved, declared by the task
    task_flops: float | None = None                # floating-point operations, declared by the task
    task_bytes_source: str = ""                    # how task_bytes was obtained (harness.tasks.TaskCost)
    task_flops_source: str = ""                    # how task_flops was obtained: declared, flop_counter:meta, ...
    forbidden_ops: list[str] = Field(default_factory=list)   # declared by the task
    candidate_source: str = ""
    input_dtype: str = "float32"

    @classmethod
    def from_collected(cls, col: Collected, *, task: Task, candidate_source: str, backend: Backend,
                       processes: ArmProcesses, speed: RatioEstimate | None, ceilings: DeviceCeilings | None,
                       cost: TaskCost) -> "Evidence":
        """The gates' view of one evaluation: what the children reported (``col``), the task's declarations
        and cost, the processes measured, the device's ceilings and the speedup formed from ``col``."""
        return cls(
            task_id=task.id, backend=backend, candidate_pid=processes.candidate_pid,
            reference_pid=processes.reference_pid,
            candidate_calls=col.candidate_calls, reference_calls=col.reference_calls, comparisons=col.comparisons,
            candidate_timed=col.timed_facts("candidate"), baseline_timed=col.timed_facts("baseline"),
            start_timed=col.timed_facts("start"),
            candidate_integrity=col.candidate_integrity, baseline_integrity=col.baseline_integrity,
            failure=col.failure, ratio=speed.ratio if speed else None, ci_low=speed.ci_low if speed else None,
            ci_high=speed.ci_high if speed else None, candidate_median_ns=col.arm_median_ns("candidate"),
            ceilings=ceilings, task_bytes=cost.bytes, task_flops=cost.flops, task_bytes_source=cost.bytes_source,
            task_flops_source=cost.flops_source, forbidden_ops=list(task.meta.forbidden_ops),
            candidate_source=candidate_source, input_dtype=col.input_dtype)
