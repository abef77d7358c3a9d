"""The gate names a verdict must carry, as the running code registers them.

The store keeps them per protocol digest and kind in ``expected_gates`` so the database itself can
refuse a verdict with one gate, a made-up gate name, or an accepted verdict missing a built-in gate.
Built-in gates are required; plug-in gates (entry points) and the fail-closed placeholders that
``harness.verdict.evaluate`` puts on a rejection (and the ``flag_space`` gate of an engine configuration
refused before any trial) are known but not required.

Every name comes from the one gate registry (:mod:`harness.verdict.gates`), per subject kind: the engine
gates live there too (:mod:`harness.verdict.gates.engine`, which imports no engine code at run time, so
the store open of a one-shot kernel ``atb eval`` still loads no engine module).
"""

from __future__ import annotations

# Names harness/verdict/evaluate.py gives a failed placeholder gate when the gates module is broken.
# Rejections only.
KERNEL_FAIL_CLOSED = ("gates_unavailable", "gates_error", "gates_empty")


def expected_gates() -> list[tuple[str, str, int]]:
    """(kind, name, required) for every gate the running code can put on a verdict.

    A gates module that cannot be imported contributes no required gate: verdicts can then only be
    rejections carrying a fail-closed placeholder, which is what the evaluation produces in that case.
    """
    out: list[tuple[str, str, int]] = []
    try:
        from harness.verdict.gates import BUILTIN_GATES, registered_gates

        builtin = [g.name for g in BUILTIN_GATES]
        out += [("kernel", n, 1) for n in builtin]
        out += [("kernel", g.name, 0) for g in registered_gates() if g.name not in builtin]
    except Exception:  # noqa: BLE001 - fail closed: no required kernel gate is registered
        pass
    out += [("kernel", n, 0) for n in KERNEL_FAIL_CLOSED]
    try:
        from harness.verdict.gates import ENGINE_GATES, FLAG_SPACE, registered_gates

        engine_builtin = [g.name for g in ENGINE_GATES]
        out += [("engine", n, 1) for n in engine_builtin]
        out += [("engine", g.name, 0) for g in registered_gates("engine") if g.name not in engine_builtin]
        out += [("engine", FLAG_SPACE, 0)]
    except Exception:  # noqa: BLE001 - fail closed: no required engine gate is registered
        pass
    seen: set[tuple[str, str]] = set()
    unique: list[tuple[str, str, int]] = []
    for kind, name, req in out:
        if (kind, name) not in seen:
            seen.add((kind, name))
            unique.append((kind, name, req))
    return unique


__all__ = ["KERNEL_FAIL_CLOSED", "expected_gates"]
