"""Identity and aliasing: an output that *is* an input, shares its storage, or copies it verbatim.

The classic exploit is a "kernel" that returns its input: it passes any checker whose inputs happen
to be fixed points of the op (a ReLU fed non-negative inputs). An output equal to an input bytewise is
only suspicious where the reference's output is not, so the reference's own equality facts (from its
call on the same seed, or from the parent's comparison) excuse it.
"""

from __future__ import annotations

from harness.measure.evidence import Evidence
from harness.verdict.gates._base import gate, ok_calls, reference_call_for
from protocol import Protocol

NAME = "identity_aliasing"


@gate(NAME)
def aliasing_gate(evidence: Evidence, protocol: Protocol) -> tuple[list[str], str]:
    calls = ok_calls(evidence.candidate_calls)
    if not calls:
        return ["no candidate call returned an output, so aliasing cannot be ruled out"], ""
    problems: list[str] = []
    for c in calls:
        where = f"seed {c.seed} ({c.distribution})"
        if c.aliases_input:
            problems.append(
                f"on {where} the output shares storage with input(s) {c.aliases_input}: "
                "return a newly allocated tensor, not a view of an input")
        if c.equals_input:
            excused: set[int] = set()
            ref = reference_call_for(evidence, c)
            if ref is not None:
                excused.update(ref.equals_input)
            for cmp in evidence.comparisons:
                if cmp.seed == c.seed and cmp.distribution == c.distribution:
                    excused.update(cmp.ref_equals_input)
            unexcused = sorted(set(c.equals_input) - excused)
            if unexcused:
                problems.append(
                    f"on {where} the output equals input(s) {unexcused} bytewise where the reference's "
                    "output does not: the candidate passed its input through")
    return problems, f"{len(calls)} candidate outputs checked: none aliases or copies an input"
