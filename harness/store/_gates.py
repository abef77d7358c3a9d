"""The gate names a verdict must carry, as the running code registers them.

The store keeps them per protocol digest and kind in ``expected_gates`` so the database itself can
refuse a verdict with one gate, a made-up gate name, or an accepted verdict missing a built-in gate.
Built-in gates are required; plug-in gates (entry points) and the fail-closed placeholders that
``harness.verdict.evaluate`` and ``harness.engines.evaluate`` put on a rejection are known but not required.

The engine gates' names are written here, not imported from ``harness.engines.gates``: importing any
module of ``harness.engines`` runs the package's ``__init__``, which loads the whole engine stack (httpx,
the engine client, the adapters), and every store open (a one-shot kernel ``atb eval`` included) reaches
this function. ``tests/test_eval_imports.py`` holds the two tuples equal.
"""

from __future__ import annotations

# Names harness/verdict/evaluate.py gives a failed placeholder gate when the gates module is broken; and the
# one gate of an engine config outside its flag space (harness/engines/evaluate.py). Rejections only.
KERNEL_FAIL_CLOSED = ("gates_unavailable", "gates_error", "gates_empty")
ENGINE_OPTIONAL = ("flag_space",)
# harness.engines.gates.GATE_NAMES, in its order: the gates every engine verdict carries
ENGINE_REQUIRED = ("engine_launch", "engine_alive", "failed_requests", "baseline_requests", "output_match",
                   "output_length", "anomaly")


def expected_gates() -> list[tuple[str, str, int]]:
    """(kind, name, required) for every gate the running code can put on a verdict.

    A kernel gates module that cannot be imported contributes no required kernel gate: verdicts can then
    only be rejections carrying a fail-closed placeholder, which is what the evaluation produces in that
    case. The engine gates are always required (their names are this module's, see the module doc).
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
    out += [("engine", n, 1) for n in ENGINE_REQUIRED]
    out += [("engine", n, 0) for n in ENGINE_OPTIONAL]
    seen: set[tuple[str, str]] = set()
    unique: list[tuple[str, str, int]] = []
    for kind, name, req in out:
        if (kind, name) not in seen:
            seen.add((kind, name))
            unique.append((kind, name, req))
    return unique


__all__ = ["ENGINE_OPTIONAL", "ENGINE_REQUIRED", "KERNEL_FAIL_CLOSED", "expected_gates"]
