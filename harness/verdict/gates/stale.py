"""Stale or cached output: the outputs of *timed* repetitions are checked too.

A candidate that returns an earlier result, or that computes properly only when it is checked and
cuts corners when it is timed, passes an untimed correctness check. The worker therefore saves the
outputs of ``protocol.gates.timed_output_checks`` timed repetitions, run on inputs that change
between repetitions, and the parent compares each with the reference on that repetition's input
seed (comparisons of phase ``timed``).

A candidate that memoises by input *value* (a fingerprint of the contents) defeats that check only if
the timed loop repeats values; the worker therefore gives every timed call a distinct input set
(``TimedFacts.timed_calls`` and ``distinct_input_sets``), and this gate fails closed when the counts
say a value was repeated or were not recorded on a torch backend.
"""

from __future__ import annotations

from harness.measure.backends import backend_named
from harness.measure.evidence import Evidence
from harness.verdict.gates._base import gate
from protocol import Protocol

NAME = "stale_output"


@gate(NAME)
def stale_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    if not evidence.candidate_timed:
        return [], "the candidate was not timed, so no timed output exists to check"
    timed = [c for c in evidence.comparisons if c.phase == "timed"]
    want = protocol.gates.timed_output_checks
    problems: list[str] = []
    if len(timed) < want:
        problems.append(f"only {len(timed)} timed outputs were compared with the reference; the protocol "
                        f"asks for at least {want} (gates.timed_output_checks)")
    for c in timed:
        if not c.passed:
            problems.append(
                f"the output of a timed repetition on input seed {c.seed} does not match the reference "
                f"({c.reason or 'mismatch'}): it returns a cached or earlier result, or behaves "
                "differently when timed than when checked")
    if backend_named(evidence.backend).counts_input_sets:   # the torch children count them (not MLX's)
        for t in evidence.candidate_timed + evidence.baseline_timed:
            if t.timed_calls <= 0:
                problems.append(f"the worker recorded no count of distinct timed input sets on seed {t.seed}; "
                                "repeated inputs cannot be ruled out")
            elif t.distinct_input_sets < t.timed_calls:
                problems.append(f"on seed {t.seed} {t.timed_calls} timed calls saw only {t.distinct_input_sets} "
                                "distinct input sets: a result memoised by input value would pass")
    seeds = [o.input_seed for t in evidence.candidate_timed for o in t.timed_outputs]
    if len(seeds) >= 2 and len(set(seeds)) < 2:
        problems.append("every checked timed output was computed on the same input seed: inputs must "
                        "change between repetitions, or a cached result passes")
    return problems, f"{len(timed)} timed outputs match the reference on changing inputs"
