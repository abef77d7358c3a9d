"""The held-out retest: does a run's certified best candidate survive a device it was not tuned on?

A speedup certified on its home device can be an artefact of that device (in the paper a kernel
certified at 11.03x on its home GPU read 0.79x on a held-out machine under MLX). :func:`retest_run`
takes a run's *certified best* (its best usable iteration, whose verdict is accepted) and measures it
again on another backend, against a baseline **re-derived there from the task's reference**, never
carried over from the home measurement:

* ``cpu`` / ``cuda``: the harness's own evaluation (:func:`harness.verdict.evaluate.evaluate_candidate`) in
  a fresh measurement session on that backend; the baseline is the task's eager reference there.
  When that device's fingerprint equals the home device's, the leg is reported as *not held out*.
* ``mlx``: the candidate's MLX port against the task's MLX reference, each in its own child process
  (:mod:`harness.measure.backends.mlx_runner`), timed with ``mx.eval`` interleaved A B A B over paired,
  unpredictably drawn seeds. The MLX child times each repetition with the CPU backend's loop
  (``harness.measure.timing._cpu``: the same inner-loop calibration and block as a CPU verdict); this
  module reads no clock, it only orders the arms' repetitions and forms the ratio with
  :func:`harness.stats.rounds_ratio`, as the verdict does. The MLX reference is itself checked against the torch reference on the
  same inputs, so a wrong port cannot make a baseline.

MLX-port convention. A task file may define ``mlx_reference(params, *inputs)``; a candidate file may
define ``mlx_forward(params, *inputs)`` or a class ``ModelNewMLX`` built as
``ModelNewMLX(params, *get_init_inputs())`` and called with ``*inputs``. ``params`` is the torch
``Model``'s ``state_dict()`` as ``mx.array`` (built under the same seed for both arms); ``inputs`` are
the harness's inputs converted to ``mx.array``. A candidate without a port, or a task without an MLX
reference, gets a retest report that says so (no held-out leg), not an error.

Every retest is stored as a store report of kind ``retest`` (subject: the run id) with the home ratio
and the held-out ratio side by side; :func:`held_out_label` gives the line every report should print,
including "no held-out leg" for a certified result that has none.
"""

from __future__ import annotations

import os
import platform
import secrets
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError, TaskError
from harness.measure.backends import backend_named
from harness.records import Backend, DeviceFingerprint
from harness.store import SqliteStore
from protocol import Protocol, load_protocol

if TYPE_CHECKING:
    from harness.measure.runner import _messages as M

REPORT_KIND = "retest"
# A held-out leg's stored ``method``: a label, kept as recorded reports carry it (the evaluation path it
# names now lives at harness/verdict/evaluate.py; the label is data, not an import path).
METHOD_LABEL = "harness.evaluate"
LegStatus = Literal["accepted", "rejected", "quarantined", "no_port", "reference_port_wrong"]


class NoCertifiedResult(HarnessError):
    """The run has no usable iteration with an accepted verdict: there is nothing certified to retest."""


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CertifiedBest(_Frozen):
    """A run's best usable iteration and the verdict that certified it on its home device."""

    run_id: str
    task_id: str
    iteration: int
    verdict_id: str
    candidate_sha256: str
    ratio: float
    ci_low: float | None
    ci_high: float | None
    device_sha256: str
    device: DeviceFingerprint
    baseline_label: str


class Check(_Frozen):
    seed: int
    distribution: str
    phase: Literal["correctness", "timed", "reference_port"]
    passed: bool
    reason: str = ""
    max_abs_err: float | None = None
    rel_l2: float | None = None


class RetestLeg(_Frozen):
    """The measurement on the held-out backend."""

    backend: Backend
    status: LegStatus
    reason: str = ""
    correct: bool
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    seeds: list[int] = Field(default_factory=list)
    baseline_label: str
    device: DeviceFingerprint | None = None
    device_sha256: str | None = None
    verdict_id: str | None = None
    session_id: str | None = None
    blas: str | None = None
    method: str = ""
    checks: list[Check] = Field(default_factory=list)
    baseline_median_ns: float | None = None
    candidate_median_ns: float | None = None


class RetestReport(_Frozen):
    """Home ratio and held-out ratio side by side (stored as report kind ``retest``)."""

    report_id: str | None = None
    run_id: str
    task_id: str
    candidate_sha256: str
    home_backend: Backend
    home_device: str
    home_device_sha256: str
    home_ratio: float
    home_ci: tuple[float, float] | None
    held_out_backend: Backend
    held_out: bool = Field(description="True when the leg ran on another backend or device fingerprint")
    held_out_ratio: float | None
    held_out_ci: tuple[float, float] | None
    direction_kept: bool | None = Field(description="both ratios on the same side of 1.0; None without a ratio")
    leg: RetestLeg
    label: str
    protocol_version: str
    protocol_sha256: str


# ---------------------------------------------------------------------------------------- the run's best
def certified_best(store: SqliteStore, run_id: str) -> CertifiedBest:
    """The run's best usable iteration (highest speedup, earliest on a tie), accepted and stored.

    Raises:
        NotFound: no such run.
        NoCertifiedResult: the run has no usable iteration, or its best verdict is not accepted.
    """
    from harness.tuning.campaigns import best_usable, get_campaign, get_iterations

    info = get_campaign(store, run_id)
    best = best_usable(get_iterations(store, run_id))
    if best is None or best.verdict_id is None:
        raise NoCertifiedResult(f"run {run_id} has no usable iteration (an accepted verdict within the usability "
                                "bar): there is no certified result to retest")
    verdict = store.verdict(best.verdict_id)
    if store.effective_status(verdict.id) != "accepted" or verdict.ratio is None:
        raise NoCertifiedResult(f"run {run_id}: the best iteration's verdict {verdict.id} is not accepted")
    return CertifiedBest(
        run_id=run_id, task_id=info.task_id, iteration=best.idx, verdict_id=verdict.id,
        candidate_sha256=verdict.candidate_sha256, ratio=verdict.ratio, ci_low=verdict.ci_low,
        ci_high=verdict.ci_high, device_sha256=verdict.device_sha256, device=store.device(verdict.device_sha256),
        baseline_label=verdict.baseline_label)


def resolve_task_file(store: SqliteStore, task_id: str, task_path: str | Path | None = None) -> Path:
    """The task file behind a stored task id (a native name, or a KernelBench file given by path).

    A given ``task_path`` must be the very file the run was tuned on: its loaded id must equal
    ``task_id`` (KernelBench ids carry the file's digest), so an edited reference cannot slip in.

    Raises:
        TaskError: no file can be found for the id, or the given file is another task.
    """
    from harness.tasks import load_task, load_task_file, native_task_names

    if task_path is not None:
        task = load_task_file(Path(task_path))
        if task.id != task_id and not (task.kind == "kernelbench" and task_id.endswith(task.source_sha256[:12])):
            raise TaskError(f"{task_path} is task {task.id}, but the run was tuned on {task_id}: give the same file")
        return task.path
    if task_id in native_task_names():
        return load_task(task_id).path
    meta = store.task_metadata(task_id)
    if meta is not None:
        for key in ("path", "task_path", "source_path"):
            p = meta.get(key)
            if p and Path(p).is_file() and load_task_file(Path(p)).id == task_id:
                return Path(p)
    raise TaskError(f"cannot find the file of task {task_id}; pass it with --task PATH (the same file the run used)")


# ---------------------------------------------------------------------------------------- statistics
def paired_ratio(baseline: dict[int, list[float]], candidate: dict[int, list[float]],
                 protocol: Protocol) -> tuple[float, float, float]:
    """Speedup and its bootstrap interval from :func:`harness.stats.rounds_ratio`: the median of the
    paired ratios (baseline / candidate) over all seeds, in ascending seed order.

    The MLX leg interleaves the arms sample by sample (A B, B A, ...), so each sample is its own
    round: a block of one, whose median is the sample itself.

    Raises:
        ValueError: the arms differ in sample count at a seed, or a time is not positive.
    """
    from harness.stats import rounds_ratio

    for seed in baseline:
        if len(baseline[seed]) != len(candidate[seed]):
            raise ValueError(f"unpaired samples at seed {seed}: {len(baseline[seed])} baseline vs "
                             f"{len(candidate[seed])} candidate")
    res = rounds_ratio({s: [[x] for x in baseline[s]] for s in sorted(baseline)},
                       {s: [[x] for x in candidate[s]] for s in candidate}, protocol, "median_of_ratios")
    if res is None:
        raise ValueError("no paired samples to form a ratio")
    return res.ratio, res.ci_low, res.ci_high


# ---------------------------------------------------------------------------------------- comparisons
def check_saved(cand_path: Path, cand_meta: list[M.MlxOutput], ref_path: Path, ref_meta: list[M.MlxOutput],
                protocol: Protocol, overrides: dict[str, Any] | None) -> tuple[bool, str, float | None, float | None]:
    """Compare two saved outputs with the harness's own rules (:func:`harness.measure.correctness.compare_outputs`).

    The children save numpy arrays (no pickle) with each output's original dtype name; the arrays
    are turned back into tensors of that dtype so the protocol's per-dtype tolerance applies.
    """
    import torch

    from harness.measure.correctness import compare_outputs

    def tensors(path: Path, meta: list[M.MlxOutput]) -> list[Any]:
        with np.load(path, allow_pickle=False) as z:
            arrays = [z[f"arr_{i}"] for i in range(len(z.files))]
        return [torch.from_numpy(np.ascontiguousarray(a)).to(getattr(torch, m.dtype)) for a, m in zip(arrays, meta)]

    res = compare_outputs(tensors(ref_path, ref_meta), tensors(cand_path, cand_meta), protocol, overrides)
    return res.passed, res.reason, res.max_abs_err, res.rel_l2


def _seed() -> int:
    return secrets.randbits(62)


# ---------------------------------------------------------------------------------------- the MLX leg
def find_blas(protocol: Protocol) -> str | None:
    """The BLAS library the MLX child preloads, per ``protocol.anchors.mlx_blas`` (None: MLX's own)."""
    if protocol.anchors.mlx_blas == "bundled":
        return None
    for p in protocol.anchors.mlx_blas_paths:
        if Path(p).is_file():
            return p
    return None


def mlx_fingerprint(load_reply: M.MlxLoadReply, blas: str) -> DeviceFingerprint:
    """The MLX device's fingerprint: the CPU it runs on, MLX's version and the BLAS it used."""
    import torch

    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return DeviceFingerprint(backend="mlx", cpu_model=model, cpu_count=os.cpu_count() or 1,
                             torch_version=torch.__version__, mlx_version=load_reply.mlx_version,
                             blas=blas, torch_threads=load_reply.torch_threads or None,
                             clocks={"mlx_device": load_reply.device})


def measure_mlx(task_path: Path, candidate_source: str, protocol: Protocol) -> RetestLeg:
    """Time the candidate's MLX port against the task's MLX reference, interleaved over paired seeds.

    Never raises for candidate behaviour: a missing port, a crash, a hang or a wrong result is a leg
    with that status and reason.
    """
    from harness.measure.backends.mlx_runner import MlxWorker, blas_label
    from harness.measure.runner import _messages as M
    from harness.measure.runner._worker import WorkerDied
    from harness.tasks import load_task_file

    p = protocol
    task = load_task_file(task_path)
    overrides: dict[str, Any] = dict(task.meta.tolerance)
    dists = task.meta.distributions if task.meta.distributions is not None else list(p.correctness.distributions)
    blas_path = find_blas(p)
    config = {"threads": p.timing.cpu.threads, "warmup_reps": p.timing.cpu.warmup_reps,
              "min_timed_ns": p.timing.cpu.min_timed_ns, "large": p.correctness.large_magnitude,
              "memory_bytes": 0}
    workdir = Path(tempfile.mkdtemp(prefix="atb-mlx-"))
    cand_path = workdir / "candidate.py"
    cand_path.write_text(candidate_source)
    init_seed = _seed()
    label = "mlx-reference (task's MLX port of Model, re-derived on MLX)"
    ref = MlxWorker("reference", config, workdir, p.limits.reference_timeout_s, blas_path).start()
    cand = MlxWorker("candidate", config, workdir, p.limits.candidate_timeout_s, blas_path).start()
    checks: list[Check] = []

    def leg(status: LegStatus, reason: str, **kw: Any) -> RetestLeg:
        return RetestLeg(backend="mlx", status=status, reason=reason, correct=kw.pop("correct", False),
                         baseline_label=label, checks=checks, **kw)

    try:
        try:
            r_load = ref.request(M.MlxLoad(task_path=str(task_path), init_seed=init_seed))
        except WorkerDied as exc:
            return leg("reference_port_wrong", f"the MLX reference process failed: {exc.failure.detail}")
        if isinstance(r_load, M.Failed) or not r_load.ok:
            status: LegStatus = "no_port" if r_load.failure_kind == "no_port" else "reference_port_wrong"
            return leg(status, f"task: {r_load.error}".strip())
        blas = blas_label(r_load.blas_libraries, blas_path)
        fp = mlx_fingerprint(r_load, blas)
        common: dict[str, Any] = {"blas": blas, "device": fp, "device_sha256": fp.sha256}
        try:
            c_load = cand.request(M.MlxLoad(task_path=str(task_path), candidate_path=str(cand_path), init_seed=init_seed))
        except WorkerDied as exc:
            return leg("rejected", f"candidate process failed while loading: {exc.failure.detail}", **common)
        if isinstance(c_load, M.Failed) or not c_load.ok:
            status = "no_port" if c_load.failure_kind == "no_port" else "rejected"
            return leg(status, f"candidate: {c_load.error}", **common)

        def outputs(seed: int, dist: str, phase: Any) -> bool:
            rp, tp, cp = (workdir / f"{n}-{seed}-{dist}.npz" for n in ("ref", "torch", "cand"))
            rr = ref.request(M.MlxCall(seed=seed, distribution=dist, out_path=str(rp), torch_out_path=str(tp)))
            if isinstance(rr, M.Failed):
                checks.append(Check(seed=seed, distribution=dist, phase="reference_port", passed=False,
                                    reason=rr.error[:500]))
                return False
            ok, why, ma, l2 = check_saved(rp, rr.outputs, tp, rr.torch_outputs or [], p, overrides)
            checks.append(Check(seed=seed, distribution=dist, phase="reference_port", passed=ok, reason=why,
                                max_abs_err=ma, rel_l2=l2))
            if not ok:
                return False
            cr = cand.request(M.MlxCall(seed=seed, distribution=dist, out_path=str(cp)))
            if isinstance(cr, M.Failed):
                checks.append(Check(seed=seed, distribution=dist, phase=phase, passed=False,
                                    reason=cr.error[:500]))
                return False
            ok, why, ma, l2 = check_saved(cp, cr.outputs, tp, rr.torch_outputs or [], p, overrides)
            checks.append(Check(seed=seed, distribution=dist, phase=phase, passed=ok, reason=why,
                                max_abs_err=ma, rel_l2=l2))
            return ok

        try:
            trials = [("task", _seed()) for _ in range(p.seeds.correctness_trials)]
            trials += [(d, _seed()) for d in dists]
            for dist, seed in trials:
                if not outputs(seed, dist, "correctness"):
                    bad = checks[-1]
                    status = "reference_port_wrong" if bad.phase == "reference_port" else "rejected"
                    who = "the task's MLX reference disagrees with its torch Model" if status != "rejected" \
                        else "the candidate's MLX port is wrong"
                    return leg(status, f"{who} at seed {seed} ({dist}): {bad.reason}", **common)
            seeds = [_seed() for _ in range(p.seeds.paired_seeds)]
            base: dict[int, list[float]] = {}
            cnd: dict[int, list[float]] = {}
            method = ""
            for i, seed in enumerate(seeds):
                for w in (ref, cand):
                    prep = w.request(M.MlxPrepare(seed=seed))
                    if isinstance(prep, M.Failed):
                        raise RuntimeError(f"{w.role}: {prep.error}")
                base[seed], cnd[seed] = [], []
                for rep in range(p.timing.cpu.timed_reps):
                    order = [(ref, base), (cand, cnd)] if (rep + i) % 2 == 0 else [(cand, cnd), (ref, base)]
                    for w, sink in order:
                        r = w.request(M.MlxRep(seed=seed))
                        if isinstance(r, M.Failed):
                            raise RuntimeError(f"{w.role}: {r.error}")
                        sink[seed].extend(r.times_ns)
                        method = r.method
            for seed in seeds[: p.gates.timed_output_checks]:
                cp, rp, tp = (workdir / f"timed-{n}-{seed}.npz" for n in ("cand", "ref", "torch"))
                timed = cand.request(M.MlxRep(seed=seed, out_path=str(cp)))
                again = ref.request(M.MlxCall(seed=seed, distribution="task", out_path=str(rp), torch_out_path=str(tp)))
                ok, why, ma, l2 = (check_saved(cp, timed.outputs or [], tp, again.torch_outputs or [], p, overrides)
                                   if not isinstance(timed, M.Failed) and not isinstance(again, M.Failed)
                                   else (False, "a timed call failed", None, None))
                checks.append(Check(seed=seed, distribution="task", phase="timed", passed=ok, reason=why,
                                    max_abs_err=ma, rel_l2=l2))
                if not ok:
                    return leg("rejected", f"a timed output at seed {seed} is wrong: {why}", seeds=seeds, **common)
        except WorkerDied as exc:
            return leg("rejected", f"{exc.failure.role} process {exc.failure.kind}: {exc.failure.detail}", **common)
        except RuntimeError as exc:
            return leg("rejected", str(exc)[:1000], **common)
        ratio, lo, hi = paired_ratio(base, cnd, p)
        return leg("accepted", "", correct=True, ratio=ratio, ci_low=lo, ci_high=hi, seeds=seeds, method=method,
                   baseline_median_ns=statistics.median(t for v in base.values() for t in v),
                   candidate_median_ns=statistics.median(t for v in cnd.values() for t in v), **common)
    finally:
        ref.close()
        cand.close()
        shutil.rmtree(workdir, ignore_errors=True)


# ---------------------------------------------------------------------------------------- torch legs
def measure_torch(store: SqliteStore, task: str | Path, candidate_source: str, backend: Backend,
                  protocol: Protocol) -> RetestLeg:
    """Evaluate the candidate with the harness's own path in a fresh session on ``backend``.

    Raises:
        DeviceUnavailableError: ``backend`` is cuda and no CUDA device is visible.
    """
    from harness.measure.session import open_measurement_session
    from harness.verdict.evaluate import evaluate_candidate

    with open_measurement_session(store, backend, protocol, note="retest") as ctx:
        res = evaluate_candidate(task, candidate_source, store=store, session=ctx, protocol=protocol)
        fp = ctx.fingerprint
        session_id = ctx.session_id
    ci = tuple(res.speedup_ci) if res.speedup_ci else (None, None)
    return RetestLeg(
        backend=backend, status=res.verdict, reason=res.reason, correct=res.correct, ratio=res.speedup,
        ci_low=ci[0], ci_high=ci[1], seeds=list(res.seeds), baseline_label=res.baseline_label,
        device=fp, device_sha256=fp.sha256, verdict_id=res.verdict_id, session_id=session_id,
        blas=fp.blas, method=f"{METHOD_LABEL} on {backend}")


# ---------------------------------------------------------------------------------------- the retest
def _label(home: CertifiedBest, leg: RetestLeg, held_out: bool) -> str:
    home_txt = f"home {home.ratio:.2f}x on {home.device.summary()}"
    if leg.ratio is None:
        return f"certified {home_txt}; no held-out leg on {leg.backend}: {leg.status} ({leg.reason[:160]})"
    where = leg.device.summary() if leg.device else leg.backend
    if not held_out:
        return (f"certified {home_txt}; re-measured {leg.ratio:.2f}x on the same device ({where}): "
                "not a held-out leg")
    return f"certified {home_txt}; held-out {leg.ratio:.2f}x on {where} ({leg.status})"


def retest_run(store: SqliteStore, run_id: str, backend: Backend, protocol: Protocol | None = None,
               task_path: str | Path | None = None) -> RetestReport:
    """Retest a run's certified best on ``backend`` and store the report (kind ``retest``).

    Raises:
        NotFound: no such run.
        NoCertifiedResult: the run has nothing certified.
        TaskError: the task file cannot be found (MLX needs the file; pass ``task_path``).
        DeviceUnavailableError: ``backend`` is cuda without a CUDA device.
    """
    p = protocol or load_protocol()
    home = certified_best(store, run_id)
    source = store.candidate_content(home.candidate_sha256)
    if not backend_named(backend).torch_children:   # MLX: its own runner (harness.measure.backends.mlx_runner)
        leg = measure_mlx(resolve_task_file(store, home.task_id, task_path), source, p)
    else:
        task: str | Path = home.task_id
        if task_path is not None or not _is_native(home.task_id):
            task = resolve_task_file(store, home.task_id, task_path)
        leg = measure_torch(store, task, source, backend, p)
    held_out = backend != home.device.backend or (leg.device_sha256 is not None and leg.device_sha256 != home.device_sha256)
    direction = None if leg.ratio is None else (leg.ratio > 1.0) == (home.ratio > 1.0)
    ref = p.ref()
    report = RetestReport(
        run_id=run_id, task_id=home.task_id, candidate_sha256=home.candidate_sha256,
        home_backend=home.device.backend, home_device=home.device.summary(), home_device_sha256=home.device_sha256,
        home_ratio=home.ratio,
        home_ci=(home.ci_low, home.ci_high) if home.ci_low is not None and home.ci_high is not None else None,
        held_out_backend=backend, held_out=held_out and leg.ratio is not None, held_out_ratio=leg.ratio,
        held_out_ci=(leg.ci_low, leg.ci_high) if leg.ci_low is not None and leg.ci_high is not None else None,
        direction_kept=direction, leg=leg, label=_label(home, leg, held_out), protocol_version=ref.version,
        protocol_sha256=ref.sha256)
    rid = store.add_report(REPORT_KIND, run_id, report.model_dump(mode="json", exclude={"report_id"}), ref)
    return report.model_copy(update={"report_id": rid})


def _is_native(task_id: str) -> bool:
    from harness.tasks import native_task_names

    return task_id in native_task_names()


def held_out_label(store: SqliteStore, run_id: str) -> str:
    """The line a report prints about a run's held-out leg; says so when there is none."""
    legs = [r["body"] for r in store.reports(REPORT_KIND, run_id)]
    measured = [b for b in legs if b.get("held_out") and b.get("held_out_ratio") is not None]
    if not measured:
        return "no held-out leg: this certified result was measured only on its home device"
    return "; ".join(b["label"] for b in measured)
