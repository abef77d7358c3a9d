"""Escape from the timed region: work left running after the timed call returned.

On CPU the escape is a side thread (or process) that finishes the output after the timer stops; on
CUDA it is work queued on another stream, which an event recorded on the default stream does not
wait for. Three facts catch it:

* thread counts: the candidate process has more threads after a call (or a timed block) than before;
* side-thread CPU time: threads other than the timing thread burn CPU during a timed block
  (``TimedFacts.other_threads_cpu_ns`` above ``gates.escape_side_cpu_max`` of the timed time; for
  graph-replayed repetitions, less what the runtime's threads spend per repetition on the baseline's
  identical loop, :func:`runtime_side_cpu_ns`);
* wall versus timed time: the worker's wall clock from the first start to *after a device
  synchronisation* is much longer than the sum of the timed regions. The harness's own per-repetition
  host work (the cache flush's launch, the event records) is subtracted first, so an honest fast kernel
  is not penalised for that overhead (the ratio is judged only above ``gates.escape_min_wall_ns``).
  Since protocol 1.6.0 (issue 25) that work is measured where it falls, in the candidate's own timing
  loop (``TimedFacts.harness_rep_ns``), taken as its median per repetition (a few slow repetitions,
  such as one that waited for a captured output, credit nothing), credited at most
  ``gates.escape_harness_over_baseline_max`` times the baseline loop's own figure, and never less than
  the baseline's excess at the same seed. The baseline's excess alone read 0.000 ms on the H200: that host work
  overlaps the reference's longer kernels and is exposed only by a fast candidate, so honest 2.7-6x
  kernels were rejected. Work left on another stream still shows: it is waited for by the final
  device synchronisation, which is no part of the harness's measured work;
* the source: spawning threads or processes takes work outside the protocol's pinned thread budget.

The outputs themselves are checked after synchronisation by the correctness and stale-output checks.
"""

from __future__ import annotations

import statistics

from harness.measure.evidence import Evidence, TimedFacts
from harness.verdict.gates._base import gate
from harness.verdict.gates._source import matching, scan_source
from protocol import Protocol

NAME = "timed_region_escape"

SPAWN_PREFIXES = (
    "threading.Thread", "threading.Timer", "_thread", "concurrent.futures", "multiprocessing",
    "torch.multiprocessing", "os.fork", "os.forkpty", "os.posix_spawn", "os.posix_spawnp", "os.spawnv",
    "os.spawnl", "os.system", "os.popen", "subprocess", "asyncio.to_thread", "torch.jit.fork",
    "torch.jit._fork",
)
SPAWN_SUFFIXES = (".run_in_executor", ".start_new_thread")


def _baseline_excess_per_rep(evidence: Evidence, seed: int) -> float:
    """The harness's own untimed cost per repetition (flushes, launches), as seen on the baseline."""
    for b in evidence.baseline_timed:
        if b.seed == seed and b.wall_ns > 0 and b.timed_total_ns > 0:
            return max(0.0, b.wall_ns - b.timed_total_ns) / len(b.times_ns)
    return 0.0


def _median_harness(t: TimedFacts) -> float | None:
    """The loop's median per-repetition harness time, if recorded for every repetition."""
    return statistics.median(t.harness_rep_ns) if t.harness_rep_ns and len(t.harness_rep_ns) == len(t.times_ns) \
        else None


def harness_overhead_ns(evidence: Evidence, t: TimedFacts, protocol: Protocol) -> float:
    """The harness's own host work inside the wall window of ``t``'s repetitions.

    The candidate loop's median per-repetition harness time (measured there), credited at most
    ``gates.escape_harness_over_baseline_max`` times the baseline loop's at the same seed (the same
    harness code: a candidate that slows the harness's own launches gains nothing beyond that), times
    the repetitions; never less than the baseline's excess of wall over timed time (the only estimate
    evidence recorded before 1.6.0 carries).
    """
    own = _median_harness(t) or 0.0
    base = next((b for b in evidence.baseline_timed if b.seed == t.seed), None)
    base_own = _median_harness(base) if base is not None else None
    if base_own is not None:
        own = min(own, protocol.gates.escape_harness_over_baseline_max * base_own)
    return max(own, _baseline_excess_per_rep(evidence, t.seed)) * len(t.times_ns)


def _wall_problem(evidence: Evidence, t: TimedFacts, protocol: Protocol) -> str | None:
    if t.wall_ns <= 0 or t.timed_total_ns <= 0:
        return (f"the worker recorded no wall/timed totals for the timed repetitions on seed {t.seed}; "
                "the escape check cannot be made")
    if t.wall_ns < protocol.gates.escape_min_wall_ns:
        return None
    excess = harness_overhead_ns(evidence, t, protocol)
    ratio = max(t.wall_ns - excess, t.timed_total_ns) / t.timed_total_ns
    if ratio > protocol.gates.escape_wall_over_timed_max:
        return (f"on seed {t.seed} the wall time after device sync is {ratio:.2f}x the timed time "
                f"(limit {protocol.gates.escape_wall_over_timed_max:g}x, gates.escape_wall_over_timed_max; "
                f"wall {t.wall_ns / 1e6:.3f} ms, timed {t.timed_total_ns / 1e6:.3f} ms, harness overhead "
                f"{excess / 1e6:.3f} ms over {len(t.times_ns)} repetitions): work ran outside the timed region "
                "(another stream or thread); synchronise it before returning")
    return None


GRAPH_METHOD = "cuda-graph"   # TimedFacts.method of repetitions timed by graph replay ("cuda-graph(replays=N)+l2flush")


def runtime_side_cpu_ns(evidence: Evidence, t: TimedFacts) -> float:
    """Other-thread CPU the runtime itself spends on graph-replayed repetitions like ``t``'s: the
    baseline's at the same seed, per repetition, times ``t``'s repetitions; 0 outside graph replay.

    Why: a graph replay runs no candidate code on the host, yet on an H100 the runtime's own threads
    used about 20 us of CPU per repetition, 0.84x the timed time of an honest 2.8 us gather replayed 8
    calls at a time (issue 25). The baseline's identical loop shows the same threads' cost.
    """
    if not t.method.startswith(GRAPH_METHOD):
        return 0.0
    base = next((b for b in evidence.baseline_timed if b.seed == t.seed and b.method.startswith(GRAPH_METHOD)
                 and b.other_threads_cpu_ns is not None and b.times_ns), None)
    if base is None or base.other_threads_cpu_ns is None:
        return 0.0
    return base.other_threads_cpu_ns / len(base.times_ns) * len(t.times_ns)


def _side_cpu_problem(evidence: Evidence, t: TimedFacts, protocol: Protocol) -> str | None:
    other = t.other_threads_cpu_ns
    if other is None or t.timed_total_ns < protocol.gates.escape_min_wall_ns:
        return None
    runtime = runtime_side_cpu_ns(evidence, t)
    limit = protocol.gates.escape_side_cpu_max
    if other - runtime > limit * t.timed_total_ns:
        less = f", less the runtime's own {runtime / 1e6:.3f} ms seen on the baseline" if runtime else ""
        return (f"on seed {t.seed} other threads used {other / 1e6:.3f} ms of CPU during the timed block{less}, "
                f"{(other - runtime) / t.timed_total_ns:.2f}x the timed time (limit {limit:g}x, "
                "gates.escape_side_cpu_max): work was moved to a side thread outside the timed region")
    return None


@gate(NAME)
def escape_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    problems: list[str] = []
    scan = scan_source(evidence.candidate_source)
    if scan.parse_error:
        problems.append(f"the candidate source does not parse ({scan.parse_error}); it cannot be scanned")
    spawns = matching(scan.calls, prefixes=SPAWN_PREFIXES, suffixes=SPAWN_SUFFIXES)
    if spawns:
        problems.append(f"the candidate starts threads or processes ({scan.where(spawns)}): work outside "
                        "the protocol's pinned thread budget or the timed region")
    befores = [c.threads_before for c in evidence.candidate_calls]
    base = min(befores) if befores else 1
    for c in evidence.candidate_calls:
        if c.threads_after > c.threads_before:
            problems.append(f"during the call on seed {c.seed} ({c.distribution}) the thread count rose from "
                            f"{c.threads_before} to {c.threads_after}: work runs on threads beyond the pinned budget")
    for t in evidence.candidate_timed:
        if t.threads_after > base:
            problems.append(f"after the timed repetitions on seed {t.seed} the process had {t.threads_after} "
                            f"threads, {base} before the candidate ran: work was left running")
        wall = _wall_problem(evidence, t, protocol)
        if wall:
            problems.append(wall)
        side = _side_cpu_problem(evidence, t, protocol)
        if side:
            problems.append(side)
    return problems, (f"no threads left running; wall time within "
                      f"{protocol.gates.escape_wall_over_timed_max:g}x of timed time on "
                      f"{len(evidence.candidate_timed)} seeds")
