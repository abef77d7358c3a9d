"""A measurement session: one device fingerprint, one protocol, ceilings, and long-lived workers.

Ratios are only ever formed within one session (the store refuses others). The session keeps the
reference worker and the start worker alive between evaluations (they never import candidate
code other than the harness-authored start candidate, which lives in its own process), and keeps one
fresh, never-used candidate worker spawned ahead of time so that ``import torch`` in a new child is
off the critical path of the next evaluation. Each candidate worker serves exactly one evaluation.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import DeviceUnavailableError, HarnessError
from harness.measure.backends import backend_named, child_locator
from harness.measure.compile_threads import compile_threads
from harness.measure.device import available, ceilings_from_facts, fingerprint_from_facts
from harness.measure.runner import Role, Worker, WorkerDied
from harness.measure.runner import _messages as M
from harness.records import Backend, DeviceCeilings, DeviceFingerprint
from protocol import Protocol, load_protocol

if TYPE_CHECKING:   # the store's module is not needed to start the measuring children (spawn_early)
    from harness.store import ResultStore


def worker_config(backend: Backend, protocol: Protocol) -> dict[str, Any]:
    """What every measuring child is started with, all from the protocol.

    The memory limit (RLIMIT_AS) is the backend's (none on CUDA: see ``backends/cuda.py``); a backend
    defined outside ``harness.measure.backends`` adds where the child finds it (:func:`child_locator`).
    """
    limits = protocol.limits
    spec = backend_named(backend)
    return {
        "backend": backend,
        "threads": protocol.timing.cpu.threads,
        "allow_tf32": protocol.correctness.allow_tf32,
        "memory_bytes": spec.memory_limit_bytes(limits.candidate_memory_mb),
        "large": protocol.correctness.large_magnitude,
        "cpu": protocol.timing.cpu.model_dump(),
        "cuda": protocol.timing.cuda.model_dump(),
        "ceilings": protocol.timing.ceilings.model_dump(),
        "compile_threads": compile_threads(),   # untimed first-call compile only (harness.measure.compile_threads)
        **child_locator(backend),
    }


class MeasurementContext:
    """Everything an evaluation needs that outlives it: store session, fingerprint, ceilings, workers.

    Use as a context manager, or call :meth:`close`, to stop the workers.
    """

    def __init__(self, store: ResultStore, backend: Backend, protocol: Protocol, session_id: str,
                 fingerprint: DeviceFingerprint, ceilings: DeviceCeilings | None, workdir: Path,
                 reference: Worker, start: Worker | None = None, spare: Worker | None = None) -> None:
        self.store = store
        self.backend: Backend = backend
        self.protocol = protocol
        self.session_id = session_id
        self.fingerprint = fingerprint
        self.ceilings = ceilings
        self.workdir = workdir
        self.config = worker_config(backend, protocol)
        self._reference: Worker | None = reference
        self._start: Worker | None = start
        self._spare: Worker | None = spare
        self.closed = False
        #: where the open went, seconds since it began ("reference.ready", "fingerprint", "ceilings", ...)
        self.open_stages: dict[str, float] = {}

    @property
    def device_sha256(self) -> str:
        return self.fingerprint.sha256

    def _new(self, role: Role) -> Worker:
        timeout = (self.protocol.limits.reference_timeout_s if role == "reference"
                   else self.protocol.limits.candidate_timeout_s)
        return Worker(role, self.config, self.workdir, timeout).start()

    def reference_worker(self) -> Worker:
        """The session's reference worker, restarted if an earlier evaluation lost it."""
        if self._reference is None or not self._reference.alive():
            if self._reference is not None:
                self._reference.close()
            self._reference = self._new("reference")
        return self._reference

    def start_worker(self) -> Worker:
        """The session's worker for harness-authored starting candidates."""
        if self._start is None or not self._start.alive():
            if self._start is not None:
                self._start.close()
            self._start = self._new("start")
        return self._start

    def take_candidate_worker(self) -> Worker:
        """A fresh candidate worker: the pre-spawned spare if it is alive, else a new one."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.proc is not None and spare.proc.poll() is None:
            return spare
        if spare is not None:
            spare.close()
        return self._new("candidate")

    def prespawn_candidate_worker(self) -> None:
        """Start the next evaluation's candidate worker now, after a measurement (so its start-up
        does not compete with timing for the cores)."""
        if self._spare is None and not self.closed:
            self._spare = self._new("candidate")

    def close(self) -> None:
        """Stop every worker (together: each may take a moment to release its device) and remove the
        session's scratch directory."""
        close_workers([w for w in (self._reference, self._start, self._spare) if w is not None])
        self._reference = self._start = self._spare = None
        if not self.closed:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.closed = True

    def __enter__(self) -> "MeasurementContext":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def close_workers(workers: list[Worker]) -> None:
    """Close several workers at once: a CUDA child can take a second or two to exit, so they are
    closed side by side rather than one after the other."""
    if len(workers) <= 1:
        for w in workers:
            w.close()
        return
    import threading

    threads = [threading.Thread(target=w.close, name=f"atb-close-{w.role}") for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


class StoredCeilings:
    """The best ceilings stored for one device fingerprint, and how many sessions' rows they come from."""

    def __init__(self, bytes_per_s: float, flops_per_s: float, sessions: int) -> None:
        self.bytes_per_s, self.flops_per_s, self.sessions = bytes_per_s, flops_per_s, sessions


def stored_ceilings(store: ResultStore, device_sha256: str) -> StoredCeilings | None:
    """The maximum of every ceilings row stored for ``device_sha256``, or None when there is none."""
    summary = store.ceilings_summary(device_sha256)
    if summary is None:
        return None
    return StoredCeilings(summary.bytes_per_s, summary.flops_per_s, summary.rows)


def best_ceilings(store: ResultStore, device_sha256: str, measured: DeviceCeilings) -> DeviceCeilings:
    """This session's measurement, raised to the best ever stored for the same device fingerprint.

    A ceiling is what the device can do; a measurement on a busy host only ever under-reads it, so
    the cache in the store keeps the maximum over sessions rather than the latest reading.
    """
    best = stored_ceilings(store, device_sha256)
    if best is None or (best.bytes_per_s <= measured.bytes_per_s and best.flops_per_s <= measured.flops_per_s):
        return measured
    return DeviceCeilings(bytes_per_s=max(best.bytes_per_s, measured.bytes_per_s),
                          flops_per_s=max(best.flops_per_s, measured.flops_per_s),
                          method=f"{measured.method}; max with {best.sessions} earlier session(s) on this device")


def session_ceilings(store: ResultStore, device_sha256: str, protocol: Protocol,
                     measure: Any) -> DeviceCeilings:
    """The session's ceilings: the stored maximum, unmeasured, once the store holds
    ``timing.ceilings.reuse_after_sessions`` sessions' rows for this device (the maximum is all a new
    measurement could change, and it only ever raises it); otherwise ``measure()`` (a reply from the
    reference child) raised to that maximum (:func:`best_ceilings`)."""
    reuse_after = protocol.timing.ceilings.reuse_after_sessions
    best = stored_ceilings(store, device_sha256) if reuse_after else None
    if best is not None and best.sessions >= reuse_after:
        return DeviceCeilings(bytes_per_s=best.bytes_per_s, flops_per_s=best.flops_per_s,
                              method=f"max of {best.sessions} stored session(s) on this device, not re-measured "
                                     f"(timing.ceilings.reuse_after_sessions = {reuse_after})")
    return best_ceilings(store, device_sha256, ceilings_from_facts(measure()))


class EarlyWorkers:
    """Measuring children started before their session opens (see :func:`spawn_early`): the
    reference, a candidate worker and, when asked for, a start worker, with their scratch directory.
    The session that is given them owns them (:meth:`take`); until then :meth:`close` stops them, so a
    caller that fails before opening its session leaves no child behind."""

    def __init__(self, backend: Backend, protocol: Protocol, workdir: Path, config: dict[str, Any],
                 reference: Worker, candidate: Worker | None, start: Worker | None = None) -> None:
        self.backend: Backend = backend
        self.protocol = protocol
        self.workdir, self.config = workdir, config
        self.reference, self.candidate, self.start = reference, candidate, start
        self.taken = False

    def take(self) -> "EarlyWorkers":
        self.taken = True
        return self

    def close(self) -> None:
        """Stop the children and remove the scratch directory, unless a session took them."""
        if self.taken:
            return
        self.taken = True
        close_workers([w for w in (self.reference, self.candidate, self.start) if w is not None])
        shutil.rmtree(self.workdir, ignore_errors=True)


def _check_backend(backend: Backend) -> None:
    # a backend with a cheap precheck (CUDA: the driver's device node) runs its full probe (a child that
    # imports torch) only if the reference fails to start: it gives the clear reason then, and costs
    # nothing on the way to a measurement
    spec = backend_named(backend)
    why = spec.precheck()
    if why is not None:
        raise DeviceUnavailableError(f"backend {backend!r} is not available: {why}")
    if not spec.probes_late:
        ok, why = available(backend)
        if not ok:
            raise DeviceUnavailableError(f"backend {backend!r} is not available: {why}")


def spawn_early(backend: Backend, protocol: Protocol, start_arm: bool = False) -> EarlyWorkers:
    """Start the reference worker and a candidate worker now, side by side (and a start worker when
    ``start_arm``), for a session opened later with ``early=``.

    Why: a measuring child's ``import torch`` is the longest step on the way to a first measurement
    (2.6-4.9 s on the H200 hosts), and nothing it does depends on the task; a command that spawns the
    children before importing the rest of the harness, opening its store and loading its task overlaps
    all of that with their start-up, and children spawned together import torch side by side rather than
    one after the other. Each child is its own confined process (its own bwrap, scratch and inbox),
    spawned from this process, which holds no arm's state yet.

    On a backend whose ceilings are measured on the host's cores (CPU: ``overlaps_startup`` False) the
    session waits for these children's start-up to end before it measures the ceilings
    (:func:`open_measurement_session`), so their ``import torch`` never competes with that measurement.

    Raises:
        DeviceUnavailableError: ``backend`` cannot run here.
    """
    _check_backend(backend)
    workdir = Path(tempfile.mkdtemp(prefix="atb-measure-"))
    config = worker_config(backend, protocol)
    limits = protocol.limits
    roles: list[tuple[Role, float]] = [("reference", limits.reference_timeout_s),
                                       ("candidate", limits.candidate_timeout_s)]
    if start_arm:
        roles.append(("start", limits.candidate_timeout_s))
    started: list[Worker] = []
    try:
        for role, timeout in roles:
            started.append(Worker(role, config, workdir, timeout).start())
    except BaseException:
        close_workers(started)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    by_role = {w.role: w for w in started}
    return EarlyWorkers(backend, protocol, workdir, config, by_role["reference"], by_role["candidate"],
                        by_role.get("start"))


def _wait_started(workers: list[Worker]) -> None:
    """Wait until each worker has said it is ready or has failed; a failure is not raised here (the worker
    keeps it: the evaluation that takes it, or the session's replacement of a dead worker, deals with it)."""
    for w in workers:
        try:
            w.wait_ready()
        except WorkerDied:
            pass


def open_measurement_session(store: ResultStore, backend: Backend, protocol: Protocol | None = None,
                             note: str = "", start_arm: bool = True,
                             early: EarlyWorkers | None = None) -> MeasurementContext:
    """Start the reference worker, fingerprint the device, open a store session, get ceilings.

    Ceilings are measured in the reference worker (best repetition, sizes from
    ``protocol.timing.ceilings``), raised to the best stored for this device fingerprint, and stored
    for the session; once the store holds enough sessions' ceilings for the device, their maximum is
    taken unmeasured (:func:`session_ceilings`). The candidate worker (and the start worker, unless
    ``start_arm`` is False: a caller that knows its tasks start from eager) start beside the reference
    on every backend. On CUDA their ``import torch`` overlaps the fingerprint and the ceilings; on a CPU
    (``overlaps_startup`` False) a ceilings measurement first waits for their start-up to end, so that it
    has the host's cores to itself.

    ``early`` (from :func:`spawn_early`, same backend and protocol) supplies workers already
    started; the session takes them over, and closes them if it fails to open.

    Raises:
        DeviceUnavailableError: ``backend`` cannot run here (no CUDA device; MLX is ``atb retest``'s).
        HarnessError: the reference worker could not start or fingerprint the device.
        ValueError: ``early`` was started for another backend or protocol, or already taken.
    """
    proto = protocol or load_protocol()
    if early is not None:
        if early.taken or early.backend != backend or early.protocol.sha256 != proto.sha256:
            early.close()
            raise ValueError("the early workers were started for another backend or protocol, or already used")
        pre = early.take()
    else:
        pre = spawn_early(backend, proto, start_arm=start_arm).take()
    import time

    t0 = time.monotonic()
    stages: dict[str, float] = {}

    def mark(name: str) -> None:
        stages[name] = round(time.monotonic() - t0, 3)

    # the reference child's start-up (import torch) is the longest step of an open: it was spawned first
    workdir, config, reference = pre.workdir, pre.config, pre.reference
    others: list[Worker] = [w for w in (pre.start, pre.candidate) if w is not None]
    driver: dict[str, Any] = {}
    smi_thread = None
    spec = backend_named(backend)
    if spec.overlaps_startup:
        import threading

        # the driver's facts (CUDA: nvidia-smi) are taken here, beside the reference child's start-up
        smi_thread = threading.Thread(target=lambda: driver.update(spec.driver_facts() or {}), name="atb-nvidia-smi",
                                      daemon=True)
        smi_thread.start()
        if start_arm and pre.start is None:
            others.insert(0, Worker("start", config, workdir, proto.limits.candidate_timeout_s).start())
    try:
        ref = store.register_protocol(proto)
        reference.wait_ready()
        mark("reference_ready")
        reply = reference.request(M.Fingerprint(smi=smi_thread is None))
        if isinstance(reply, M.Failed):
            raise HarnessError(f"could not fingerprint the {backend} device: {reply.error}")
        facts = dict(reply.facts)
        mark("fingerprint")
        if smi_thread is not None:
            smi_thread.join(30.0)
            facts.update(driver or {"gpu_driver": "unknown", "clocks": {}})
            mark("driver_facts")
        fp = fingerprint_from_facts(facts)
        session_id = store.open_session(fp, ref, note=note)

        def measure() -> dict[str, Any]:
            if not spec.overlaps_startup:
                # the host's cores measure the ceilings: the other children's start-up ends first
                _wait_started(others)
                mark("others_ready")
            cf = reference.request(M.Ceilings())
            if isinstance(cf, M.Failed):
                raise HarnessError(f"could not measure the {backend} device's ceilings: {cf.error}")
            return cf.model_dump(include={"bytes_per_s", "flops_per_s", "method"})

        ceilings = session_ceilings(store, fp.sha256, proto, measure)
        store.add_ceilings(session_id, ceilings, ref)
        mark("ceilings")
    except WorkerDied as exc:
        close_workers([reference, *others])
        shutil.rmtree(workdir, ignore_errors=True)
        if spec.probes_late:
            ok, why = available(backend)
            if not ok:
                raise DeviceUnavailableError(f"backend {backend!r} is not available: {why}") from exc
        raise HarnessError(f"the {backend} reference worker failed to start: {exc.failure.detail}") from exc
    except BaseException:
        close_workers([reference, *others])
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    by_role = {w.role: w for w in others}
    ctx = MeasurementContext(store, backend, proto, session_id, fp, ceilings, workdir, reference,
                             by_role.get("start"), by_role.get("candidate"))
    ctx.prespawn_candidate_worker()
    if start_arm:
        ctx.start_worker()
    mark("open")
    ctx.open_stages = {**stages, **{f"reference.{k}": v for k, v in reference.startup_stages().items()}}
    return ctx
