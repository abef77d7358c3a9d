"""The measuring-backend protocol: what the harness asks of a device, on both sides of the child's pipe.

A backend is one object registered by name in :data:`harness.measure.backends.BACKENDS` (the project's
one :class:`harness.registry.Registry` pattern). It answers, for the harness's own process:

* **availability** (:meth:`MeasuringBackend.available`, a cheap :meth:`MeasuringBackend.precheck`);
* **device facts** taken beside the child's start-up (:meth:`MeasuringBackend.driver_facts`) and the
  family a stored device row is kept under (``stored_as``);
* **ceilings** and the **timing loop** through its child part (:class:`ChildBackend`, made inside the
  measuring child by :meth:`MeasuringBackend.child`);
* **input placement** (``device``: where task inputs, models and outputs live);
* **output transport** (``default_transport``; the child's transport module picks per output);
* **confinement extras** (``gpu_nodes``: a GPU's device nodes and relaxations; :meth:`confinement_ro_paths`);
* the few facts the verdict and the session read (cache factor, start-up overlap, memory limit, ...).

This module is imported inside the measuring child before ``import torch`` is done: it imports nothing
of the harness beyond the registry (no pydantic, no protocol package).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from harness.measure.runner._messages import PrepareReply
    from harness.records import DeviceFamily
    from protocol import Protocol as AtbProtocol


@runtime_checkable
class MeasuringBackend(Protocol):
    """A measuring backend as the harness's own process sees it (see the module docstring)."""

    #: the registry name (``atb eval --device NAME``)
    name: str
    #: the torch device type task inputs, models and outputs are placed on
    device: str
    #: the device family the store keeps this backend's devices under (schema: cpu, cuda, mlx)
    stored_as: DeviceFamily
    #: the measuring children are the harness's torch children (False: the backend has its own runner)
    torch_children: bool
    #: a GPU: its device nodes are bound into the confinement, its relaxations apply, no RLIMIT_AS
    gpu_nodes: bool
    #: GPUs a campaign on this backend holds (a sweep's scheduler reserves them)
    gpus: int
    #: the other workers' start-up may overlap the reference's device work (the ceilings); False: the ceilings
    #: wait until the candidate and start workers, spawned beside the reference, are ready
    overlaps_startup: bool
    #: the full availability probe runs only after the reference failed to start (:meth:`precheck` first)
    probes_late: bool
    #: torch's TF32 switch applies to this device's matmuls (the anchors set it from the protocol)
    matmul_tf32: bool
    #: the stale-output gate can count distinct timed input sets (the child records them)
    counts_input_sets: bool
    #: the timer-tampering gate compares the parent's block time with the child's (long blocks only)
    judges_parent_wall: bool
    #: how outputs reach the comparing reference when the collector recorded none
    default_transport: str

    def available(self) -> tuple[bool, str]:
        """Whether the backend can measure here, and why not (may start a short child)."""
        ...

    def precheck(self) -> str | None:
        """A cheap check before any child is spawned: None, or why the backend cannot run here."""
        ...

    def driver_facts(self) -> dict[str, Any] | None:
        """Fingerprint facts the harness takes itself beside the reference child's start-up, or None
        when the child reports them all."""
        ...

    def memory_limit_bytes(self, candidate_memory_mb: int) -> int:
        """The RLIMIT_AS a measuring child gets (0: none)."""
        ...

    def interleave_rounds(self, protocol: AtbProtocol) -> int:
        """How many interleaved rounds (A B A B) one paired seed is timed in."""
        ...

    def cache_factor(self, protocol: AtbProtocol) -> float:
        """The multiplier of the copy ceiling the physical floor uses (caches not flushed between reps)."""
        ...

    def choose_method(self, ask_arms: Callable[[Any], dict[str, Any]], prep: dict[str, PrepareReply],
                      protocol: AtbProtocol, probe_errors: list[str]) -> None:
        """After every arm prepared a seed: pick one timing method for all of them (``ask_arms`` sends a
        command to every live arm). Nothing to do where the backend has one method."""
        ...

    def plan_memory(self) -> bool:
        """Whether the collector checks the heaviest step against the device's free memory."""
        ...

    def confinement_ro_paths(self) -> tuple[str, ...]:
        """Paths outside the project packages a confined child must read (a plug-in's own module)."""
        ...

    def fingerprint_facts(self, torch: Any, facts: dict[str, Any], smi: bool) -> dict[str, Any]:
        """Add this device's own facts to the common ones (``facts``); ``smi``: also the driver's
        facts (False when the harness takes them itself, see :meth:`driver_facts`)."""
        ...

    def measure_ceilings(self, torch: Any, params: dict[str, int]) -> dict[str, Any]:
        """Copy bandwidth and matmul rate on this device (``bytes_per_s``, ``flops_per_s``, ``method``)."""
        ...

    def median_seconds(self, fn: Any, protocol: AtbProtocol, reps: int | None = None, warm: bool = True) -> float:
        """Median seconds per call of ``fn`` by this backend's clock (the anchors' probes)."""
        ...

    def paired_rounds(self, protocol: AtbProtocol) -> int:
        """How many A B pairs a paired ratio of two workloads takes (the anchors' ratio probes)."""
        ...

    def fingerprint_name(self, fp: Any) -> str:
        """The device name in a fingerprint that a device pattern is matched against."""
        ...

    def child(self, torch: Any, config: dict[str, Any]) -> ChildBackend:
        """This backend's part inside a measuring child (called there, after ``import torch``)."""
        ...


class ChildBackend(Protocol):
    """A backend's part inside the measuring child: device start, facts, ceilings and the timing loop.

    ``c`` in the timing methods is the child's loop context (``harness.measure.runner._child``'s
    ``LOOP``): its state ``S``, ``torch``, ``config``, ``device``, ``large`` and the helpers the loop
    shares across backends (``forward``, ``note``, ``next_sets``, ``note_sets``, ``track_out``,
    ``check_timed``, ``check_finished``, ``nbytes``, ``free_device``, ``refill_static``).
    """

    #: the torch device type inputs and models are placed on
    device: str
    #: inputs live on a device: mutation is checked against a rebuild, not by hashing
    on_device: bool
    #: the device's total memory in bytes (0: not a device with its own memory)
    device_total: int
    #: the timer object whose bound methods the integrity check snapshots (None: the CPU clock only)
    timer: Any

    def sync(self) -> None: ...
    def synchronize(self) -> None: ...
    def mem_info(self) -> tuple[int, int] | None: ...
    def load_facts(self) -> dict[str, Any]: ...
    def free_device(self, nbytes: int, large_bytes: int) -> None: ...
    def after_compare(self) -> None: ...
    def ipc_collect(self) -> None: ...
    def timer_globals(self) -> dict[str, Any]: ...
    def timer_intact(self, same: Any) -> dict[str, bool]: ...
    def prepare(self, c: Any, seed: int, large: float, private_inputs: bool) -> dict[str, Any]: ...
    def capture(self, c: Any, graph: bool, seed: int, large: float) -> str: ...
    def block(self, c: Any, reps: int, capture: set[int], rep_q: dict[int, int]) -> Any: ...
    def after_block(self, c: Any) -> None: ...


__all__ = ["ChildBackend", "MeasuringBackend"]
