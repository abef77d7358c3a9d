"""Collecting the evidence of one evaluation from the measuring children.

Phases, all driven from the harness's process over the workers' pipes:

1. load: the reference worker loads the task; the candidate and start workers load the task and a
   candidate file. Every model is built from ``get_init_inputs()`` under one ``torch.manual_seed``
   (drawn per evaluation), so parameters match the reference's (KernelBench convention).
2. correctness: ``correctness_trials`` fresh seeds, each under the task's own inputs and every
   adversarial distribution of ``protocol.correctness`` the task allows. The candidate child keeps
   its output and shares it one way (CUDA IPC, or a file on a CPU); the reference child, which never
   imports candidate code, computes its own output for the same input and compares the two where
   they live; only the summary (errors, pass/fail, NaN facts) comes back here. A probe on which the
   reference itself is not finite says nothing and is recorded as uninformative. An input class
   (``harness.measure.runner._inputs``) on which the reference itself raises is the harness's fact,
   not the candidate's (protocol ``correctness.skip_classes_reference_fails``): that class is skipped
   for the problem from then on and recorded (a ``skipped`` comparison naming the reference's error,
   and :attr:`Collected.skipped_classes`). Whether a class is skipped depends on the reference alone:
   it is asked on the same seed and class whether the candidate's call returned (the check) or raised
   (a reference call then decides whose failure it was). The task's own inputs are never skipped: a
   reference that cannot take them is a broken problem, and the evaluation ends as its failure.
3. timing: ``paired_seeds`` fresh seeds; at each, every arm is calibrated on an input set of its own,
   then the arms are timed in interleaved rounds (A B C, B C A, ...; CPU:
   ``timing.cpu.interleave_rounds`` rounds of ``timed_reps / rounds`` repetitions; CUDA:
   ``timing.cuda.min_reps`` rounds sharing the do_bench repetition count). No timed call sees input
   values an earlier call saw (``harness.measure.runner._inputs.TimedSets``): each repetition's sets are made
   outside the timed region. The outputs of ``timed_output_checks`` randomly chosen timed
   repetitions are checked by the reference child on the same sets, rebuilt from their specs.
4. integrity: each worker reports whether the harness's bound functions are still intact.

On CUDA the memory is planned: the reference reports its inputs', outputs' and free device bytes
at load, and a problem whose heaviest step (one arm's input set and outputs, the candidate's shared
output, the comparison's temporaries) cannot fit gets a ``memory`` failure saying ``unfit``, never a
hang or a crash of this process; each arm hands its cached device memory back between its blocks.

Seeds come from :mod:`secrets` (unpredictable to a candidate) and are all recorded.
"""

from __future__ import annotations

import math
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from harness.measure.backends import backend_named
from harness.measure.backends._share import transport_kind
from harness.measure.evidence import (CallFacts, Comparison, IntegrityFacts, TimedFacts, TimedOutput, TensorMeta,
                                      WorkerFailure)
from harness.measure.runner import TASK_DISTRIBUTION, Worker, WorkerDied
from harness.measure.runner import _messages as M
from harness.measure.timing._clock import perf_counter_ns
from harness.records import MeasurementSample
from harness.stats import median
from harness.tasks import Task
from protocol import Protocol

SEED_BITS = 62
ARMS = ("candidate", "baseline", "start")


def draw_seed() -> int:
    """One unpredictable seed (62 bits: fits SQLite's signed integers and torch.manual_seed)."""
    return secrets.randbits(SEED_BITS)


class ArmFailed(Exception):
    """An arm's worker failed or raised; carries the WorkerFailure."""

    def __init__(self, failure: WorkerFailure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


@dataclass
class ArmTiming:
    """One arm's timing at one paired seed, per interleaved round."""

    facts: TimedFacts
    rounds: list[list[float]]


@dataclass
class Collected:
    """Everything the evaluation measured; ``Evidence`` is built from it."""

    init_seed: int
    correctness_seeds: list[int]
    timing_seeds: list[int] = field(default_factory=list)
    input_bytes: int = 0
    output_bytes: int = 0
    input_dtype: str = "float32"
    candidate_calls: list[CallFacts] = field(default_factory=list)
    reference_calls: list[CallFacts] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    timed: dict[str, list[ArmTiming]] = field(default_factory=lambda: {a: [] for a in ARMS})
    candidate_integrity: IntegrityFacts = field(default_factory=IntegrityFacts)
    baseline_integrity: IntegrityFacts = field(default_factory=IntegrityFacts)
    failure: WorkerFailure | None = None
    start_failure: WorkerFailure | None = None
    method: str = ""
    correct: bool = False
    phase_s: dict[str, float] = field(default_factory=dict)
    op_s: dict[str, float] = field(default_factory=dict)   # where the phases' time went: "role.op" -> s
    memory_plan: dict[str, int] = field(default_factory=dict)
    transport: str = ""            # how candidate outputs reached the reference: "" (IPC or CPU file) or a fallback
    # input classes skipped because the reference itself raised on them: class -> the reference's error
    skipped_classes: dict[str, str] = field(default_factory=dict)
    # why an arm's CUDA-graph capture probe was not taken ("arm: reason"): the harness's fact, not a verdict
    capture_probe_errors: list[str] = field(default_factory=list)

    def timed_facts(self, arm: str) -> list[TimedFacts]:
        return [t.facts for t in self.timed[arm]]

    # the typed pieces the verdict is built from (harness.verdict.evaluate), one arm or one fact at a time
    def arm_rounds(self, arm: str) -> dict[int, list[list[float]]]:
        """One arm's timed samples per seed, one block per interleaved round, in measuring order."""
        return {t.facts.seed: t.rounds for t in self.timed[arm]}

    def arm_samples(self, arm: str) -> list[MeasurementSample]:
        """One arm's stored samples, with the round boundaries a verdict's ratio is formed over."""
        return [MeasurementSample.from_rounds(t.facts.seed, t.rounds) for t in self.timed[arm]]

    def arm_median_ns(self, arm: str) -> float | None:
        """The median of every timed repetition of one arm (None: the arm was not timed)."""
        times = [x for tf in self.timed_facts(arm) for x in tf.times_ns]
        return median(times) if times else None

    def timed_input_sets(self) -> dict[str, list[dict[str, Any]]]:
        """Per arm and paired seed: calls timed, distinct input sets they received, how sets were refilled."""
        return {arm: [{"calls": tf.timed_calls, "distinct": tf.distinct_input_sets, "refill": tf.input_refill}
                      for tf in self.timed_facts(arm)] for arm in self.timed}

    @property
    def outputs_correct(self) -> bool:
        """No arm failed and every correctness comparison passed."""
        return self.failure is None and self.correct and all(
            c.passed for c in self.comparisons if c.phase == "correctness")

    @property
    def distributions(self) -> list[str]:
        """The input classes compared (a skipped class is not one)."""
        return sorted({c.distribution for c in self.comparisons if c.phase != "skipped"})


@dataclass(frozen=True)
class ArmProcesses:
    """The measuring processes of one evaluation: the pids the gates tell apart and each arm's confinement."""

    candidate_pid: int
    reference_pid: int
    confinement: dict[str, str]

    @classmethod
    def of(cls, candidate: Worker, reference: Worker) -> "ArmProcesses":
        return cls(candidate_pid=candidate.pid, reference_pid=reference.pid,
                   confinement={"candidate": candidate.confinement, "reference": reference.confinement})


R = TypeVar("R", bound=M.ChildReply)
_FAILURE_KINDS = ("import_error", "exception", "crash", "timeout", "exit", "memory", "protocol")


def _ask(worker: Worker, cmd: M.ChildCommand[R]) -> R:
    """A command whose ``ok: false`` reply is the arm's failure; its own reply model otherwise."""
    try:
        reply = worker.request(cmd)
    except WorkerDied as exc:
        raise ArmFailed(exc.failure) from None
    if isinstance(reply, M.Failed) or not reply.ok:
        kind = getattr(reply, "failure_kind", "") or "exception"
        raise ArmFailed(WorkerFailure(role=worker.role, kind=kind if kind in _FAILURE_KINDS else "exception",
                                      detail=f"{cmd.op}: {str(getattr(reply, 'error', ''))[-1500:]}"))
    return reply


def _call_facts(call: M.CallOutcome, **update: Any) -> CallFacts:
    """The evidence record of one call, from the facts its child reported."""
    keep = call.model_dump(include=set(CallFacts.model_fields))
    keep["outputs"] = [TensorMeta(**m) for m in keep["outputs"]]
    return CallFacts(**{**keep, **update})


class Collector:
    """Runs the phases of one evaluation over three workers (see the module docstring)."""

    def __init__(self, task: Task, protocol: Protocol, backend: str, workdir: Path,
                 candidate: Worker, reference: Worker, start: Worker | None) -> None:
        self.task, self.protocol, self.backend = task, protocol, backend
        self.workdir = workdir
        self.workers: dict[str, Worker | None] = {"candidate": candidate, "baseline": reference, "start": start}
        self.out = Collected(init_seed=draw_seed(),
                             correctness_seeds=[draw_seed() for _ in range(protocol.seeds.correctness_trials)])
        self._n = 0
        self._transports: list[str] = []

    def _ask(self, worker: Worker, cmd: M.ChildCommand[R]) -> R:
        """:func:`_ask`, with the time this process waited added to ``op_s`` under ``role.op``."""
        t0 = perf_counter_ns()
        reply: R | None = None
        try:
            reply = _ask(worker, cmd)
            return reply
        finally:
            key = f"{worker.role}.{cmd.op}"
            self._add_op_s(key, (perf_counter_ns() - t0) / 1e9, reply)

    def _add_op_s(self, key: str, seconds: float, reply: M.ChildReply | None) -> None:
        """Charge ``seconds`` to ``key`` in ``op_s``, and the steps the child timed inside the command
        (its reply's ``steps_s``) to ``key.step``."""
        self.out.op_s[key] = self.out.op_s.get(key, 0.0) + seconds
        steps = getattr(reply, "steps_s", None) or {}
        for name, s in steps.items():
            sub = f"{key}.{str(name)[:32]}"
            self.out.op_s[sub] = self.out.op_s.get(sub, 0.0) + float(s)

    def _path(self, tag: str) -> str:
        self._n += 1
        return str(self.workdir / f"{tag}-{self._n}.pt")

    def _tolerances(self) -> dict[str, dict[str, float]]:
        """The protocol's tolerances per dtype with the task's overrides applied (the reference child
        compares with these)."""
        tols: dict[str, dict[str, float]] = {str(name): t.model_dump()
                                             for name, t in self.protocol.correctness.tolerances.items()}
        for name, o in (self.task.meta.tolerance or {}).items():
            tols[name] = {"atol": o.atol, "rtol": o.rtol, "rel_l2": o.rel_l2}
        return tols

    # ------------------------------------------------------------------ phases
    def run(self, candidate_path: Path, start_path: Path | None) -> Collected:
        """All phases; a candidate or reference failure stops early and is recorded, never raised."""
        try:
            self._phase("load", lambda: self._load(candidate_path, start_path))
            self._phase("correctness", self._correctness)
            if self.out.correct:
                self._phase("timing", self._timing)
            self._phase("integrity", self._integrity)
        except ArmFailed as exc:
            self.out.failure = exc.failure
            self._integrity_after_failure()
        if not self.out.transport and self._transports:
            self.out.transport = " + ".join(self._transports)
        return self.out

    def _phase(self, name: str, fn: Any) -> None:
        t0 = perf_counter_ns()
        try:
            fn()
        finally:
            self.out.phase_s[name] = (perf_counter_ns() - t0) / 1e9

    def _load(self, candidate_path: Path, start_path: Path | None) -> None:
        base = M.Load(task_path=str(self.task.path), task_module="atb_task_" + self.task.source_sha256[:12],
                      init_seed=self.out.init_seed)
        ref = self.workers["baseline"]
        assert ref is not None
        r = self._ask(ref, base.model_copy(update={
            "tolerances": self._tolerances(),
            "reference_spread_factor": self.protocol.correctness.reference_spread_factor}))
        self.out.input_bytes, self.out.input_dtype = r.input_bytes, r.input_dtype
        self.out.output_bytes = r.output_bytes
        self._plan_memory(r)
        cand = self.workers["candidate"]
        assert cand is not None
        self._ask(cand, base.model_copy(update={"candidate_path": str(candidate_path),
                                                "candidate_module": "atb_candidate_" + candidate_path.stem[-12:]}))
        start = self.workers["start"]
        if start is not None and start_path is not None:
            try:
                self._ask(start, base.model_copy(update={"candidate_path": str(start_path),
                                                         "candidate_module": "atb_start_" + start_path.stem[-12:]}))
            except ArmFailed as exc:
                self._drop_start(exc.failure)
        else:
            self.workers["start"] = None

    def _plan_memory(self, r: M.LoadReply) -> None:
        """CUDA: refuse, with a clear reason, a problem whose heaviest step cannot fit the device.

        The heaviest step is a candidate call checked for input mutation: its input set, the set
        rebuilt from its seed to compare against, its output and the output's shared copy, beside a
        kept timed output; or, in a comparison, the reference's set and output beside the
        candidate's shared output. The other arms hand their cached memory back between blocks. One
        GiB covers the comparison's chunked temporaries."""
        free = r.device_free_bytes
        if not backend_named(self.backend).plan_memory() or free <= 0:
            return
        in_b, out_b = self.out.input_bytes, self.out.output_bytes
        params = r.estimate_param_bytes or 0
        need = 2 * in_b + 3 * out_b + 2 * params + (1 << 30)
        self.out.memory_plan = {"device_free_bytes": free, "need_bytes": need, "input_bytes": in_b,
                                "output_bytes": out_b, "param_bytes": params}
        if need > free:
            raise ArmFailed(WorkerFailure(role="reference", kind="memory", detail=(
                f"unfit: this problem needs about {need / 2**30:.1f} GiB of device memory at its heaviest step "
                f"({in_b / 2**30:.2f} GiB of inputs, {out_b / 2**30:.2f} GiB per output) and "
                f"{free / 2**30:.1f} GiB are free on the device")))

    def _drop_start(self, failure: WorkerFailure) -> None:
        self.out.start_failure = failure
        self.workers["start"] = None
        self.out.timed["start"] = []

    def distributions(self) -> list[str]:
        allowed = self.task.meta.distributions
        dists = [d for d in self.protocol.correctness.distributions if allowed is None or d in allowed]
        return [TASK_DISTRIBUTION] + dists

    def _may_skip(self, phase: str, dist: str) -> bool:
        """Whether a reference failure on this class skips the class instead of ending the evaluation."""
        return (phase == "correctness" and dist != TASK_DISTRIBUTION
                and self.protocol.correctness.skip_classes_reference_fails)

    def _check(self, share: dict[str, Any], phase: str, seed: int, dist: str,
               spec: dict[str, Any] | None = None, tag: str = "call") -> str | None:
        """The reference child recomputes the output for this input and compares it with the
        candidate's shared one; its call facts and the comparison are recorded. Returns the reference's
        error when it raised on a class it may skip (nothing is recorded then), else None."""
        ref = self.workers["baseline"]
        assert ref is not None
        if spec is not None:
            cmd = M.Check(candidate=share, seed=seed, spec=spec)
        else:
            cmd = M.Check(candidate=share, seed=seed, distribution=dist,
                          class_inputs=self.protocol.correctness.class_inputs,
                          skip_on_reference_failure=self._may_skip(phase, dist))
        self._note_transport(share)
        if isinstance(share.get("vmm"), dict) and not self._relay_fd(share, tag):
            # the candidate named a device-memory fd but sent none: it shares a file instead
            cand = self.workers["candidate"]
            assert cand is not None
            self.out.transport = "file (the candidate's output fd did not arrive)"
            cmd = cmd.model_copy(update={"candidate": self._reshare(cand, tag)})
        rr = self._ask(ref, cmd)
        if rr.comparison.transport_error:
            # the reference could not map the CUDA IPC handle here: the candidate shares a file instead
            cand = self.workers["candidate"]
            assert cand is not None
            self.out.transport = "file (CUDA IPC refused: " + rr.comparison.reason[:200] + ")"
            cmd = cmd.model_copy(update={"candidate": self._reshare(cand, tag)})
            rr = self._ask(ref, cmd)
        if rr.comparison.reference_failed:
            self.out.reference_calls.append(_call_facts(rr.call, ok=False))
            return rr.comparison.reason or "the reference raised"
        call = rr.call
        if phase == "correctness":
            self.out.reference_calls.append(_call_facts(call))
        c = rr.comparison
        self.out.comparisons.append(Comparison(
            seed=seed, distribution=dist, phase=phase, passed=c.passed,  # type: ignore[arg-type]
            reason=c.reason, max_abs_err=c.max_abs_err, rel_l2=c.rel_l2, ref_equals_input=list(call.equals_input)))
        return None

    def _reshare(self, cand: Worker, tag: str) -> dict[str, Any]:
        """The candidate's held output ``tag`` shared again as a file (the device-memory handle failed)."""
        return dict(self._ask(cand, M.Reshare(tag=tag, path=self._path("cand-reshare"))).share)

    def _reference_fails(self, seed: int, dist: str) -> str | None:
        """The reference's own call on (seed, class): its error if it raised, None if it returned. Asked
        only after the candidate raised on that input, so the failure goes to whichever side owns it."""
        ref = self.workers["baseline"]
        assert ref is not None
        t0 = perf_counter_ns()
        rr: M.CallReply | M.Failed | None = None
        try:
            rr = ref.request(M.Call(seed=seed, distribution=dist, class_inputs=self.protocol.correctness.class_inputs))
        except WorkerDied as exc:
            raise ArmFailed(exc.failure) from None
        finally:
            self._add_op_s("reference.call", (perf_counter_ns() - t0) / 1e9, rr)
        if isinstance(rr, M.Failed):   # the command itself failed (no call was made): the harness's failure
            raise ArmFailed(WorkerFailure(role="reference", kind="protocol",
                                          detail=f"call: {(rr.error or 'no reply')[-1500:]}"))
        if rr.ok:
            return None
        self.out.reference_calls.append(_call_facts(rr))
        return rr.error or "the reference raised"

    def _skip_class(self, seed: int, dist: str, reference_error: str, candidate_error: str = "") -> None:
        """Record that the reference cannot take class ``dist`` (from ``seed`` on): a ``skipped``
        comparison with the reference's error (its failed call is in ``reference_calls``), never a
        judgement of the candidate."""
        why = f"skipped: the reference itself raises on this input class: {reference_error.strip()[-400:]}"
        if candidate_error:
            why += f" (the candidate raised too, not held against it: {candidate_error.strip()[-200:]})"
        self.out.skipped_classes[dist] = why
        self.out.comparisons.append(Comparison(seed=seed, distribution=dist, phase="skipped", passed=True,
                                               reason=why))

    def _note_transport(self, share: dict[str, Any]) -> None:
        """Record how this output travels (the verdict says which transports an evaluation used)."""
        kind = transport_kind(share)
        if kind not in self._transports:
            self._transports.append(kind)

    def _relay_fd(self, share: dict[str, Any], expected_tag: str) -> bool:
        """Forward the candidate's output fd (VMM share) to the reference child; False if none came.

        Raises:
            ArmFailed: the candidate's descriptor names another output than the one asked for.
        """
        cand, ref = self.workers["candidate"], self.workers["baseline"]
        assert cand is not None and ref is not None
        tag = str(share["vmm"].get("tag", ""))[:128]
        if tag != expected_tag[:128]:
            raise ArmFailed(WorkerFailure(role="candidate", kind="protocol",
                                          detail=f"the output descriptor names {tag!r}, not the output {expected_tag!r} "
                                                 "the harness asked for"))
        fd = cand.receive_fd(tag)
        if fd is None:
            return False
        try:
            ref.send_fd(fd, tag)
        except OSError as exc:
            raise ArmFailed(WorkerFailure(role="reference", kind="protocol",
                                          detail=f"the fd channel to the reference failed: {exc}")) from None
        finally:
            os.close(fd)
        return True

    def _release(self, arm: str, tags: list[str] | None = None) -> None:
        w = self.workers[arm]
        if w is not None:
            self._ask(w, M.Release(tags=tags))
            if arm == "candidate" and tags is None:
                w.drop_fds()

    def _correctness(self) -> None:
        cand = self.workers["candidate"]
        assert cand is not None
        first = True
        for seed in self.out.correctness_seeds:
            for dist in self.distributions():
                if dist in self.out.skipped_classes:
                    continue
                t0 = perf_counter_ns()
                tag = f"call-{seed}-{dist}"   # one tag per comparison: an output can never stand in for another
                cr: M.CallReply | M.Failed | None = None
                try:
                    cr = cand.request(M.Call(seed=seed, distribution=dist, share=tag, save_path=self._path("cand"),
                                             record_ops=first, class_inputs=self.protocol.correctness.class_inputs))
                except WorkerDied as exc:
                    raise ArmFailed(exc.failure) from None
                finally:
                    self._add_op_s("candidate.call", (perf_counter_ns() - t0) / 1e9, cr)
                first = False
                if isinstance(cr, M.Failed):
                    raise ArmFailed(WorkerFailure(role="candidate", kind="protocol",
                                                  detail=f"call: {cr.error}"))
                facts = _call_facts(cr)
                if not facts.ok:
                    ref_error = self._reference_fails(seed, dist) if self._may_skip("correctness", dist) else None
                    if ref_error is not None:
                        self._skip_class(seed, dist, ref_error, facts.error)
                        continue
                    self.out.candidate_calls.append(facts)
                    kind = cr.failure_kind or "exception"
                    raise ArmFailed(WorkerFailure(role="candidate", kind="memory" if kind == "memory" else "exception",
                                                  detail=f"seed {seed} ({dist}): {facts.error}"))
                self.out.candidate_calls.append(facts)
                share = cr.share
                if share is None:
                    raise ArmFailed(WorkerFailure(role="candidate", kind="protocol",
                                                  detail="call: the reply carries no shared output"))
                ref_error = self._check(share, "correctness", seed, dist, tag=tag)
                self._release("candidate")
                if ref_error is not None:
                    self.out.candidate_calls.pop()   # a class the reference cannot take judges nothing
                    self._skip_class(seed, dist, ref_error)
        self.out.correct = all(c.passed for c in self.out.comparisons if c.phase == "correctness")

    def _timing(self) -> None:
        p = self.protocol
        seeds = [draw_seed() for _ in range(p.seeds.paired_seeds)]
        self.out.timing_seeds = seeds
        checks = p.gates.timed_output_checks
        capture_seed_idx = [k % len(seeds) for k in range(checks)]
        for si, seed in enumerate(seeds):
            self._time_seed(si, seed, sum(1 for i in capture_seed_idx if i == si))
        self._reuse_probe()

    def _active_arms(self) -> list[str]:
        return [a for a in ARMS if self.workers[a] is not None]

    def _ask_arm(self, arm: str, cmd: M.ChildCommand[R]) -> R | None:
        """Send ``cmd`` to one live arm; a failing starting candidate is dropped (None), others raise."""
        w = self.workers[arm]
        assert w is not None
        try:
            return self._ask(w, cmd)
        except ArmFailed as exc:
            if arm != "start":
                raise
            self._drop_start(exc.failure)
            return None

    def _ask_arms(self, cmd: M.ChildCommand[R]) -> dict[str, R]:
        """Send ``cmd`` to every live arm (:meth:`_ask_arm`); the replies of those still live."""
        replies: dict[str, R] = {}
        for arm in self._active_arms():
            reply = self._ask_arm(arm, cmd)
            if reply is not None:
                replies[arm] = reply
        return replies

    def _time_seed(self, si: int, seed: int, n_capture: int) -> None:
        prep = self._ask_arms(M.Prepare(seed=seed, private_inputs=self.task.meta.private_timed_inputs))
        backend = backend_named(self.backend)
        # one timing method for every arm of this seed (CUDA: graph replay or events, see backends/cuda.py)
        backend.choose_method(self._ask_arms, prep, self.protocol, self.out.capture_probe_errors)
        rounds = backend.interleave_rounds(self.protocol)
        block = {a: max(1, math.ceil(prep[a].reps / rounds)) for a in prep}
        total_c = block["candidate"] * rounds
        capture = sorted({secrets.randbelow(total_c) for _ in range(n_capture)}) if n_capture else []
        while n_capture and len(capture) < min(n_capture, total_c):
            capture = sorted(set(capture) | {secrets.randbelow(total_c)})
        acc: dict[str, dict[str, Any]] = {a: {"times": [], "rounds": [], "wall": 0.0, "timed": 0.0, "parent": 0.0,
                                              "handler": 0.0, "outs": [], "other": 0.0, "method": "",
                                              "harness": []} for a in prep}
        for r in range(rounds):
            order = self._active_arms()
            k = r % len(order)
            for arm in order[k:] + order[:k]:
                w = self.workers[arm]
                if w is None:
                    continue
                cmd = M.Block(reps=block[arm], rep_offset=r * block[arm],
                              capture=capture if arm == "candidate" else [], save_dir=str(self.workdir))
                t0 = perf_counter_ns()
                rep = self._ask_arm(arm, cmd)
                if rep is None:
                    continue
                a = acc[arm]
                a["parent"] += perf_counter_ns() - t0
                a["times"].extend(rep.times_ns)
                a["rounds"].append(list(rep.times_ns))
                a["wall"] += rep.wall_ns
                a["handler"] += rep.handler_ns
                a["timed"] += rep.timed_total_ns
                a["other"] += rep.other_threads_cpu_ns
                a["harness"].extend(rep.harness_ns)   # the loop's own host work
                a["outs"].extend(rep.timed_outputs)
                a["method"] = rep.method
        for arm in self._active_arms():
            fin = self._ask_arm(arm, M.FinishSeed())
            if fin is None:
                continue
            a = acc[arm]
            outs = [TimedOutput(rep=o.rep, input_seed=o.input_seed, spec=dict(o.spec), output_path=o.output_path)
                    for o in a["outs"]]
            facts = TimedFacts(seed=seed, times_ns=a["times"], wall_ns=a["wall"], timed_total_ns=a["timed"],
                               parent_wall_ns=a["parent"], handler_ns=a["handler"], timed_outputs=outs,
                               harness_rep_ns=a["harness"] if len(a["harness"]) == len(a["times"]) else [],
                               input_hashes_before=list(fin.input_hashes_before),
                               input_hashes_after=list(fin.input_hashes_after),
                               threads_after=fin.threads_after, method=a["method"],
                               other_threads_cpu_ns=a["other"], distinct_input_sets=fin.distinct_input_sets,
                               timed_calls=fin.timed_calls, input_refill=fin.input_refill)
            self.out.timed[arm].append(ArmTiming(facts=facts, rounds=a["rounds"]))
        self.out.method = acc["candidate"]["method"]
        # the candidate's captured timed outputs, checked now that every arm's buffers are freed
        for o in acc.get("candidate", {}).get("outs", []):
            self._check(dict(o.share), "timed", o.input_seed, TASK_DISTRIBUTION, spec=dict(o.spec), tag=o.tag)
        if acc.get("candidate", {}).get("outs"):
            self._release("candidate")

    def _reuse_probe(self) -> None:
        """One more timed-phase comparison: the candidate's answer after an input it has already seen
        was rewritten in place (see the child's ``reuse_probe``), against the reference on the new
        contents. A memoised answer fails it; the stale-output gate reads it like any timed output."""
        cand = self.workers["candidate"]
        assert cand is not None
        seed_a, seed_b = draw_seed(), draw_seed()
        cr = self._ask(cand, M.ReuseProbe(seed_a=seed_a, seed_b=seed_b, save_path=self._path("cand-reuse")))
        self._check(dict(cr.share), "timed", seed_b, TASK_DISTRIBUTION, tag="reuse")
        self._release("candidate")

    def _integrity_of(self, arm: str) -> IntegrityFacts:
        w = self.workers[arm]
        if w is None or not w.alive():
            return IntegrityFacts(pid=w.pid if w is not None else 0)
        r = self._ask(w, M.Integrity())
        return IntegrityFacts(checks=dict(r.checks), pid=r.pid,
                              candidate_modules_in_baseline=list(r.candidate_modules) if arm == "baseline" else [],
                              audit_events=list(r.audit_events))

    def _integrity(self) -> None:
        self.out.candidate_integrity = self._integrity_of("candidate")
        self.out.baseline_integrity = self._integrity_of("baseline")

    def _integrity_after_failure(self) -> None:
        for arm, attr in (("candidate", "candidate_integrity"), ("baseline", "baseline_integrity")):
            try:
                setattr(self.out, attr, self._integrity_of(arm))
            except ArmFailed:
                pass
