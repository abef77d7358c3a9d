"""The gate registry and the one function that runs every gate, failing closed.

Gates are kept in ``GATES``, a :class:`harness.registry.Registry` (the pattern every kind of plug-in
uses). Built-in gates are registered here in a fixed order (their names are stored with every verdict,
and ``run_gates`` runs them in that order). Further gates can be added by installing a package with an
entry point in group ``autotunebench.gates`` whose object is a :class:`harness.verdict.gates.Gate`; they run
after the built-ins. An added gate can only make verdicts stricter, since every gate must pass for
acceptance. A plug-in cannot replace a built-in gate: a name clash is an error.

One registry serves every subject kind: a gate declares the kinds it judges (``kinds``; a gate that
declares none, a plug-in included, judges kernels), and ``registered_gates(kind)`` / ``run_gates`` take the
gates of one kind. The engine gates (:mod:`harness.verdict.gates.engine`) are registered under
``engine:<name>``, since two kinds may each have a gate of one name (both have an ``anomaly`` gate); the
name stored with a verdict is the gate's own ``name``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, overload

from harness.measure.evidence import Evidence
from harness.records import GateResult, SubjectKind
from harness.registry import Registry, RegistryError
from harness.verdict.gates._base import Gate
from harness.verdict.gates.aliasing import aliasing_gate
from harness.verdict.gates.engine import ENGINE_GATES, EngineEvidence, EngineGate
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


AnyGate = Gate | EngineGate
KERNEL: SubjectKind = "kernel"


def gate_kinds(g: object) -> frozenset[SubjectKind]:
    """The subject kinds a gate judges: its ``kinds``, or kernels only when it declares none."""
    kinds = getattr(g, "kinds", None)
    return frozenset(kinds) if kinds else frozenset({KERNEL})


def gate_key(g: AnyGate) -> str:
    """A gate's registry key: its name for a kernel gate, ``<kind>:<name>`` for a gate of other kinds."""
    kinds = gate_kinds(g)
    return g.name if kinds == {KERNEL} else f"{'+'.join(sorted(kinds))}:{g.name}"


GATES: Registry[AnyGate] = Registry("gate", entry_point_group=ENTRY_POINT_GROUP,
                                    from_entry_point=_gate_from_entry_point, named_by=gate_key,
                                    error=GateRegistryError)
_BUILTINS: tuple[AnyGate, ...] = (*BUILTIN_GATES, *ENGINE_GATES)
for _builtin in _BUILTINS:
    GATES.add(gate_key(_builtin), _builtin)


@overload
def registered_gates(kind: Literal["kernel"] = "kernel") -> tuple[Gate, ...]: ...
@overload
def registered_gates(kind: Literal["engine"]) -> tuple[EngineGate, ...]: ...
@lru_cache(maxsize=None)
def registered_gates(kind: SubjectKind = "kernel") -> tuple[Gate, ...] | tuple[EngineGate, ...]:
    """The gates of one subject kind: the built-ins in their fixed order, then any installed plug-in gates.

    Read once per process and kind (cached): every verdict of a session is judged by the same gates.

    Raises:
        GateRegistryError: a plug-in is not a Gate, does not load, or its name clashes with another gate's.
    """
    return tuple(g for g in GATES.values() if kind in gate_kinds(g))  # type: ignore[return-value]


def gate_names(kind: SubjectKind = "kernel") -> list[str]:
    """Names of every gate run_gates runs for ``kind``, in order."""
    return [g.name for g in registered_gates(kind)]


@overload
def run_gates(evidence: Evidence, protocol: Protocol, gates: tuple[Gate, ...] | None = None) -> list[GateResult]: ...
@overload
def run_gates(evidence: EngineEvidence, protocol: Protocol,
              gates: tuple[EngineGate, ...] | None = None) -> list[GateResult]: ...
def run_gates(evidence: Evidence | EngineEvidence, protocol: Protocol,
              gates: tuple[Gate, ...] | tuple[EngineGate, ...] | None = None) -> list[GateResult]:
    """Run every gate of the evidence's subject kind. A gate that raises is a failed gate whose detail is
    the exception; after a failed gate that ``stops_on_fail`` (an engine that never launched) none runs.

    Never raises for a gate's failure: fail closed means an error can only turn a pass into a fail.
    A gate that returns something other than a GateResult, or one with another gate's name, also fails.
    """
    if gates is None:
        gates = registered_gates("engine") if isinstance(evidence, EngineEvidence) else registered_gates()
    results: list[GateResult] = []
    for g in gates:
        name = getattr(g, "name", None) or type(g).__name__
        judge: Callable[[Any, Protocol], object] = g
        r: GateResult
        try:
            out = judge(evidence, protocol)
            if isinstance(out, GateResult) and out.name == name:
                r = out
            else:
                r = GateResult(name=name, passed=False,
                               detail=f"gate returned {type(out).__name__} named {getattr(out, 'name', None)!r}, "
                                      "not its own GateResult: counted as failed")
        except Exception as exc:  # noqa: BLE001 - fail closed on anything a gate raises
            r = GateResult(name=name, passed=False,
                           detail=f"gate raised {type(exc).__name__}: {exc} (a gate that errors fails closed)")
        results.append(r)
        if not r.passed and getattr(g, "stops_on_fail", False):
            break
    return results
