"""Timer and harness tampering: patching the clock, the events, the sync, or finding the harness.

The worker binds its timers before the candidate is imported, so a candidate that replaces
``time.perf_counter_ns``, ``torch.cuda.Event`` or ``torch.cuda.synchronize`` changes nothing the
harness measures; the attempt is still a cheat and is refused. Three layers:

* integrity facts: after candidate code ran, the worker compares each bound function with the module
  attribute it came from (``IntegrityFacts.checks``), and records audit events raised from candidate
  frames (``IntegrityFacts.audit_events``: ``sys._getframe``, ``sys.settrace``, ...);
* the parent's own clock: the timed total the worker reports cannot exceed the parent's wall clock
  around the whole command, no repetition may read zero, negative or non-finite, and the parent's
  time around the candidate's blocks may not exceed the worker's own wall time by more than the
  baseline's IPC cost allows (CUDA only: a candidate that reaches the harness's bound clock through
  ``sys.modules`` and slows it is caught there however it spelled the patch; on CPU the source scan
  and the integrity facts must catch it);
* the source: overwriting a timer, a harness or builtin name, importing the harness, changing the
  pinned thread count, searching ``sys.modules``, or walking the stack (``sys._getframe``,
  ``inspect.stack``, ``f_back``);
* deferred outputs (issue 25): an output that is not a plain, finished tensor when ``forward``
  returns (a tensor subclass whose ``__torch_dispatch__``/``__torch_function__`` computes when the
  harness first reads it, a lazy object, a pending neg/conj/zero view, a mode left active) moves the
  work past the timer. The child refuses it before reading it (the candidate is rejected with the
  reason) and reports ``outputs.finished`` false among its integrity checks; this gate words it.

Not tampering: torch's own wrappers. ``import torch._dynamo`` (every ``torch.compile``) replaces
``torch.manual_seed`` with ``torch._disable_dynamo(torch.manual_seed)``; the child accepts exactly that
wrapper of the original (``harness.measure.runner._child._torch_own_wrapper``), so a compiled
candidate passes, while a candidate's own replacement still reads as patched.
"""

from __future__ import annotations

import math

from harness.measure.backends import backend_named
from harness.measure.evidence import Evidence, TimedFacts
from harness.verdict.gates._base import gate, is_torch_op_check
from harness.verdict.gates._source import SourceScan, matching, scan_source
from protocol import Protocol

NAME = "timer_tampering"
# the child's integrity check that every output it saw was a plain, finished tensor
# (harness.measure.runner._child.OUTPUTS_FINISHED; the child imports nothing of the verdict layer)
OUTPUTS_FINISHED = "outputs.finished"

STACK_REFS = frozenset({
    "sys._getframe", "sys._current_frames", "inspect.stack", "inspect.currentframe", "inspect.getouterframes",
    "inspect.getinnerframes", "inspect.trace", "traceback.extract_stack", "traceback.walk_stack",
    "traceback.format_stack", "traceback.print_stack", "sys.settrace", "sys.setprofile", "threading.settrace",
    "threading.setprofile", "sys.addaudithook", "sys.monitoring",
})
STACK_SUFFIXES = (".f_back", ".f_locals", ".f_globals", ".tb_frame", ".gi_frame", ".cr_frame", ".ag_frame")
STACK_EVENTS = frozenset({"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
                          "sys.addaudithook", "sys.monitoring.register_callback"})
PROTECTED_OVERWRITES = (
    "time", "torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.Stream", "torch.cuda.current_stream",
    "torch.cuda.default_stream", "torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.stream",
    "torch.cuda.Event.elapsed_time", "torch.allclose", "torch.equal", "torch.testing", "torch.save",
    "torch.load", "torch.set_num_threads", "torch.get_num_threads", "builtins", "__builtins__", "gc", "sys",
    "os", "harness", "protocol", "importlib", "threading",
)
ALLOWED_OVERWRITES = ("os.environ",)   # e.g. TORCH_CUDA_ARCH_LIST for an inline extension build
THREAD_CALLS = frozenset({"torch.set_num_threads", "torch.set_num_interop_threads"})


def _source_problems(scan: SourceScan) -> list[str]:
    problems: list[str] = []
    if scan.parse_error:
        return [f"the candidate source does not parse ({scan.parse_error}); it cannot be scanned"]
    harness_imports = [r for r in scan.imports if r.name.split(".")[0] in ("harness", "protocol")]
    if harness_imports:
        problems.append(f"the candidate imports the harness ({scan.where(harness_imports)}): candidate code "
                        "must not reach the measuring code")
    patched = [r for r in matching(scan.overwrites, prefixes=PROTECTED_OVERWRITES)
               if not r.name.startswith(ALLOWED_OVERWRITES)]
    if patched:
        problems.append(f"the candidate overwrites timer, harness or builtin names ({scan.where(patched)})")
    threads = [r for r in scan.calls if r.name in THREAD_CALLS]
    if threads:
        problems.append(f"the candidate changes the pinned thread count ({scan.where(threads)}); the protocol "
                        "pins it for both arms")
    table = matching(scan.references, prefixes=("sys.modules",))
    if table:
        problems.append(f"the candidate searches the module table ({scan.where(table)}), as code looking for "
                        "the harness's modules does")
    stack = matching(scan.references, exact=STACK_REFS, suffixes=STACK_SUFFIXES)
    if stack:
        problems.append(f"the candidate inspects the interpreter stack or installs hooks ({scan.where(stack)}), "
                        "as code looking for the harness does")
    return problems


def _timing_problems(arm: str, t: TimedFacts) -> list[str]:
    problems: list[str] = []
    bad = [x for x in t.times_ns if not math.isfinite(x) or x <= 0]
    if bad:
        problems.append(f"{arm} seed {t.seed}: {len(bad)} repetition(s) read zero, negative or non-finite "
                        "time: the timer was tampered with")
    if t.parent_wall_ns <= 0:
        problems.append(f"{arm} seed {t.seed}: the parent's own wall clock was not recorded, so the timer "
                        "cannot be cross-checked")
    else:
        if t.timed_total_ns > t.parent_wall_ns:
            problems.append(f"{arm} seed {t.seed}: the reported timed total {t.timed_total_ns / 1e6:.3f} ms "
                            f"exceeds the parent's own clock {t.parent_wall_ns / 1e6:.3f} ms around the "
                            "whole command: the worker's timer is not trustworthy")
        if t.wall_ns > t.parent_wall_ns:
            problems.append(f"{arm} seed {t.seed}: the worker's wall time exceeds the parent's own clock")
        if t.handler_ns > t.parent_wall_ns:
            problems.append(f"{arm} seed {t.seed}: the worker's time handling its commands exceeds the parent's "
                            "own clock around them")
    return problems


def _parent_clock_problems(evidence: Evidence, protocol: Protocol) -> list[str]:
    """A worker clock that runs slow shows as parent time the worker's clock does not account for.

    Per seed, both arms run the same number of blocks, so the baseline's (parent - worker's handling
    time) is the IPC cost of that many blocks; the candidate's excess beyond it is time its clock did
    not see, and it is set against the timed wall. The worker's handling time (``handler_ns``: the
    block and the harness work around it, by the same bound clock) is what the parent's round trip
    contains; against the timed wall alone, any harness work outside the timed loop that differs
    between two processes (on the H200, 70 ms beside a 34 ms wall on 12_Matmul_with_diagonal_matrices_)
    read as a slowed clock. A clock slowed by k still shows: the time it hides is the same either way.
    Seeds with captured timed outputs are skipped (saving them costs parent time only for the
    candidate). Preemption on a loaded machine inflates single seeds at random while a slowed clock
    inflates every seed, so the median over the judged seeds is compared with the limit.

    Judged on CUDA only: there a block lasts about ``rep_ms / min_reps`` (10 ms), while on CPU a block
    is one repetition of about ``min_timed_ns`` (0.2 ms) and the parent's round trip to a child on a
    loaded 2-core machine was seen to add 4 ms per block more for an honest candidate than for the
    baseline (a 7.5x median), which no limit can tell from a slowed clock.
    """
    if not backend_named(evidence.backend).judges_parent_wall:   # CUDA only (see above)
        return []
    limit = protocol.gates.tamper_parent_over_worker_max
    base = {b.seed: b for b in evidence.baseline_timed}
    ratios: list[tuple[float, TimedFacts]] = []
    for t in evidence.candidate_timed:
        b = base.get(t.seed)
        if b is None or t.timed_outputs or b.timed_outputs or t.wall_ns <= 0 or b.wall_ns <= 0:
            continue
        if t.parent_wall_ns < protocol.gates.escape_min_wall_ns:
            continue
        t_seen, b_seen = t.handler_ns or t.wall_ns, b.handler_ns or b.wall_ns
        unexplained = (t.parent_wall_ns - t_seen) - max(0.0, b.parent_wall_ns - b_seen)
        ratios.append(((t.wall_ns + max(0.0, unexplained)) / t.wall_ns, t))
    if not ratios:
        return []
    ratios.sort(key=lambda rt: rt[0])
    med, t = ratios[(len(ratios) - 1) // 2]  # the lower median: with two seeds, both must be inflated
    if med <= limit:
        return []
    return [f"over {len(ratios)} seeds the parent's own clock saw a median {med:.2f}x the candidate worker's wall "
            f"time after the baseline's IPC cost (limit {limit:g}x, gates.tamper_parent_over_worker_max; e.g. "
            f"seed {t.seed}: parent {t.parent_wall_ns / 1e6:.3f} ms, worker wall {t.wall_ns / 1e6:.3f} ms): the "
            "clock inside the candidate's process was slowed"]


@gate(NAME)
def tampering_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    integ = evidence.candidate_integrity
    problems: list[str] = []
    if not integ.checks:
        problems.append("the candidate worker reported no integrity checks of its bound timers")
    checks = dict(integ.checks)
    if not checks.pop(OUTPUTS_FINISHED, True):
        problems.append("the candidate returned an output that was not a plain, finished torch.Tensor (a tensor "
                        "subclass, a lazy object, a pending view or a torch mode left active): its work could run "
                        "when the harness first reads it, after the timer stopped; compute the output before "
                        "forward returns")
    broken = sorted(n for n, intact in checks.items() if not intact and not is_torch_op_check(n))
    if broken:
        problems.append(f"after candidate code ran, {', '.join(broken)} no longer matched what the harness "
                        "bound before import: the candidate patched the timer or the harness")
    events = sorted(set(integ.audit_events) & STACK_EVENTS)
    if events:
        problems.append(f"candidate code raised audit events {events}: it inspected the stack or hooked "
                        "the interpreter")
    problems += _source_problems(scan_source(evidence.candidate_source))
    for t in evidence.candidate_timed:
        problems += _timing_problems("candidate", t)
    for t in evidence.baseline_timed:
        problems += _timing_problems("baseline", t)
    problems += _parent_clock_problems(evidence, protocol)
    return problems, (f"{len(integ.checks)} bound functions intact; timed totals within the parent's clock")
