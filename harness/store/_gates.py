"""The gate names a verdict may carry, per subject kind: the store's own canonical table.

The store keeps them per protocol digest and kind in ``expected_gates`` so the database itself can
refuse a verdict with one gate, a made-up gate name, or an accepted verdict missing a built-in gate.
Built-in gates are required; plug-in gates (entry points), the fail-closed placeholders that
``harness.verdict.evaluate`` puts on a rejection, and the ``flag_space`` gate of an engine configuration
refused before any trial are known but not required.

Why a table of names here rather than a read of the gate registry (:mod:`harness.verdict.gates`): the
store sits below every layer that uses it (a measurement session opens it), so it imports no layer; the
verdict layer, which owns the gates, imports the store (issue 29: the store joins the layers contract
with no ignored import). ``tests/test_eval_imports.py`` holds this table equal to the registry: the
same names, in the same order, for each kind, with and without a plug-in gate installed. A renamed or
added built-in gate fails that test until its name is written here too (its name is stored with every
verdict, so a rename is a change of the record that should be made on purpose).

Plug-in gates are found the way the registry finds them: the entry points of group
``autotunebench.gates``, loaded once per process (the registry caches its gates the same way), each
named by its own ``name`` and judging its declared ``kinds`` (kernels when it declares none). A plug-in
that does not load, is not a gate, or reuses a gate's name contributes nothing (the registry refuses it
too, so no verdict can carry it): fail closed.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from harness.records import SubjectKind
from harness.registry import Registry

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

# The registry's built-in gates, in its order (harness/verdict/gates/_registry.py BUILTIN_GATES, and
# harness/verdict/gates/engine.py ENGINE_GATES): required on every accepted or quarantined verdict.
KERNEL_GATES: tuple[str, ...] = (
    "anomaly", "identity_aliasing", "input_mutation", "stale_output", "timed_region_escape", "timer_tampering",
    "baseline_sabotage", "reference_scavenging", "physical_limit", "forbidden_shortcut", "precision_downgrade",
)
ENGINE_GATES: tuple[str, ...] = (
    "engine_launch", "engine_alive", "failed_requests", "baseline_requests", "output_match", "output_length",
    "anomaly",
)
# Names harness/verdict/evaluate.py gives a failed placeholder gate when the gates module is broken.
# Rejections only.
KERNEL_FAIL_CLOSED = ("gates_unavailable", "gates_error", "gates_empty")
# The gate of an engine configuration refused by its flag space before any trial
# (harness/verdict/gates/engine.py FLAG_SPACE). Rejections only.
ENGINE_REFUSED = ("flag_space",)

GATE_ENTRY_POINT_GROUP = "autotunebench.gates"
_KERNEL: SubjectKind = "kernel"
_KINDS: tuple[SubjectKind, ...] = ("kernel", "engine")


class _PluginGate:
    """What the store needs of an installed gate: its name and the kinds it judges."""

    def __init__(self, name: str, kinds: frozenset[str]) -> None:
        self.name = name
        self.kinds = kinds

    @property
    def key(self) -> str:
        # The registry's key (harness.verdict.gates.gate_key): a kernel gate's name, else "<kinds>:<name>".
        return self.name if self.kinds == {_KERNEL} else f"{'+'.join(sorted(self.kinds))}:{self.name}"


def _from_entry_point(ep: EntryPoint, obj: object) -> _PluginGate:
    name = getattr(obj, "name", None)
    if not callable(obj) or not isinstance(name, str):
        raise ValueError(f"entry point {ep.name!r} in {GATE_ENTRY_POINT_GROUP} is not a gate")
    declared = getattr(obj, "kinds", None)
    return _PluginGate(name, frozenset(declared) if declared else frozenset({_KERNEL}))


@lru_cache(maxsize=None)
def plugin_gates() -> tuple[tuple[SubjectKind, str], ...]:
    """(kind, name) of every installed plug-in gate, in entry-point order; empty when any plug-in does not
    load, is not a gate or reuses a gate's name (the registry refuses the whole set then, and so does this).

    Read once per process, as the registry reads its gates (``registered_gates`` is cached).
    """
    registry: Registry[_PluginGate] = Registry("gate", entry_point_group=GATE_ENTRY_POINT_GROUP,
                                               from_entry_point=_from_entry_point, named_by=lambda g: g.key)
    builtins = [_PluginGate(n, frozenset({"kernel"})) for n in KERNEL_GATES]
    builtins += [_PluginGate(n, frozenset({"engine"})) for n in ENGINE_GATES]
    for g in builtins:                  # a plug-in reusing a built-in's key clashes, as in the registry
        registry.add(g.key, g)
    try:
        plugins = [g for _, g in registry.items()[len(builtins):]]
    except Exception:  # noqa: BLE001 - fail closed: no plug-in gate is known
        return ()
    return tuple((kind, g.name) for kind in _KINDS for g in plugins if kind in g.kinds)


def expected_gates() -> list[tuple[SubjectKind, str, int]]:
    """(kind, name, required) for every gate a verdict may carry, in the order the store registers them."""
    plugins = plugin_gates()
    out: list[tuple[SubjectKind, str, int]] = []
    out += [("kernel", n, 1) for n in KERNEL_GATES]
    out += [("kernel", n, 0) for kind, n in plugins if kind == "kernel"]
    out += [("kernel", n, 0) for n in KERNEL_FAIL_CLOSED]
    out += [("engine", n, 1) for n in ENGINE_GATES]
    out += [("engine", n, 0) for kind, n in plugins if kind == "engine"]
    out += [("engine", n, 0) for n in ENGINE_REFUSED]
    seen: set[tuple[str, str]] = set()
    unique: list[tuple[SubjectKind, str, int]] = []
    for kind, name, req in out:
        if (kind, name) not in seen:
            seen.add((kind, name))
            unique.append((kind, name, req))
    return unique


__all__ = ["ENGINE_GATES", "ENGINE_REFUSED", "GATE_ENTRY_POINT_GROUP", "KERNEL_FAIL_CLOSED", "KERNEL_GATES",
           "expected_gates", "plugin_gates"]
