"""Input mutation: inputs are hashed before and after every call; a candidate that writes them fails.

Writing an input in place can make a later check or repetition cheaper (or make the reference, run
on the same buffers, agree with a wrong answer). The worker hashes every input tensor's bytes before
and after each untimed call and around each seed's timed repetitions.
"""

from __future__ import annotations

from harness.measure.evidence import Evidence
from harness.verdict.gates._base import gate, ok_calls
from protocol import Protocol

NAME = "input_mutation"


def _changed(before: list[str], after: list[str]) -> list[int]:
    if len(before) != len(after):
        return list(range(max(len(before), len(after))))
    return [i for i, (b, a) in enumerate(zip(before, after)) if b != a]


@gate(NAME)
def mutation_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    calls = ok_calls(evidence.candidate_calls)
    if not calls:
        return ["no candidate call returned, so input mutation cannot be ruled out"], ""
    problems: list[str] = []
    checked = 0
    for c in calls:
        where = f"the call on seed {c.seed} ({c.distribution})"
        if not c.input_hashes_before or not c.input_hashes_after:
            problems.append(f"the worker recorded no input hashes for {where}; the check cannot be made")
            continue
        checked += 1
        changed = _changed(c.input_hashes_before, c.input_hashes_after)
        if changed:
            problems.append(f"{where} wrote input(s) {changed}: a candidate must not modify its inputs "
                            "(work on a copy or use out-of-place ops)")
    for t in evidence.candidate_timed:
        where = f"the timed repetitions on seed {t.seed}"
        if not t.input_hashes_before or not t.input_hashes_after:
            problems.append(f"the worker recorded no input hashes for {where}; the check cannot be made")
            continue
        checked += 1
        changed = _changed(t.input_hashes_before, t.input_hashes_after)
        if changed:
            problems.append(f"{where} wrote input(s) {changed}: a candidate must not modify its inputs")
    return problems, f"inputs unchanged across {checked} checked calls and timed blocks"
