"""The gate registry and the one function that runs every gate, failing closed.

Gates are kept in ``GATES``, a :class:`harness.registry.Registry` (the pattern every kind of plug-in
uses). Built-in gates are registered here in a fixed order (their names are stored with every verdict,
and ``run_gates`` runs them in that order). Further gates can be added by installing a package with an
entry point in group ``autotunebench.gates`` whose object is a :class:`harness.verdict.gates.Gate`; they run
after the built-ins. An added gate can only make verdicts stricter, since every gate must pass for
acceptance. A plug-in cannot replace a built-in gate: a name clash is an error.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from harness.measure.evidence import Evidence
from harness.records import GateResult
from harness.registry import Registry, RegistryError
from harness.verdict.gates._base import Gate
from harness.verdict.gates.aliasing import aliasing_gate
from harness.verdict.gates.anomaly import anomaly_gate
from harness.verdict.gates.escape import escape_gate
from harness.verdict.gates.mutation import mutation_gate
from harness.verdict.gates.physical import physical_gate
from harness.verdict.gates.precision import precision_gate
from harness.verdict.gates.sabotage import sabotage_gate
from harness.verdict.gates.scavenging import scavenging_gate
from harness.verdict.gates.shortcuts import shortcuts_gate
from harness.verdict.gates.stale import stale_gate
from harness.verdict.gates.tampering import tampering_gate
from protocol import Protocol

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "autotunebench.gates"

BUILTIN_GATES: tuple[Gate, ...] = (
    anomaly_gate, aliasing_gate, mutation_gate, stale_gate, escape_gate, tampering_gate, sabotage_gate,
    scavenging_gate, physical_gate, shortcuts_gate, precision_gate,
)


class GateRegistryError(RegistryError):
    """A plug-in gate is malformed or reuses a built-in gate's name; uninstall or rename it."""


def _gate_from_entry_point(ep: EntryPoint, obj: object) -> Gate:
    if not isinstance(obj, Gate) or not isinstance(getattr(obj, "name", None), str):
        raise GateRegistryError(f"entry point {ep.name!r} in {ENTRY_POINT_GROUP} is not a Gate "
                                "(it needs a str `name` and `__call__(evidence, protocol)`)")
    return obj


def _gate_name(g: Gate) -> str:
    return g.name


GATES: Registry[Gate] = Registry("gate", entry_point_group=ENTRY_POINT_GROUP, from_entry_point=_gate_from_entry_point,
                                 named_by=_gate_name, error=GateRegistryError)
for _builtin in BUILTIN_GATES:
    GATES.add(_builtin.name, _builtin)


@lru_cache(maxsize=1)
def registered_gates() -> tuple[Gate, ...]:
    """The built-in gates, in their fixed order, followed by any installed plug-in gates.

    Read once per process (cached): every verdict of a session is judged by the same gates.

    Raises:
        GateRegistryError: a plug-in is not a Gate, does not load, or its name clashes with another gate's.
    """
    return tuple(GATES.values())


def gate_names() -> list[str]:
    """Names of every gate run_gates runs, in order."""
    return [g.name for g in registered_gates()]


def run_gates(evidence: Evidence, protocol: Protocol, gates: tuple[Gate, ...] | None = None) -> list[GateResult]:
    """Run every gate on the evidence. A gate that raises is a failed gate whose detail is the exception.

    Never raises for a gate's failure: fail closed means an error can only turn a pass into a fail.
    A gate that returns something other than a GateResult, or one with another gate's name, also fails.
    """
    results: list[GateResult] = []
    for g in gates if gates is not None else registered_gates():
        name = getattr(g, "name", None) or type(g).__name__
        try:
            r = g(evidence, protocol)
            if not isinstance(r, GateResult) or r.name != name:
                r = GateResult(name=name, passed=False,
                               detail=f"gate returned {type(r).__name__} named {getattr(r, 'name', None)!r}, "
                                      "not its own GateResult: counted as failed")
        except Exception as exc:  # noqa: BLE001 - fail closed on anything a gate raises
            r = GateResult(name=name, passed=False,
                           detail=f"gate raised {type(exc).__name__}: {exc} (a gate that errors fails closed)")
        results.append(r)
    return results
