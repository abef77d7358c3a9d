"""Anti-cheat gates: pure functions of the evidence, run in the harness's process, failing closed.

Public API::

    run_gates(evidence, protocol) -> list[GateResult]        # every registered gate; errors fail
    decide_status(gates, evidence, protocol) -> (status, reason)
    is_correct(evidence) -> (bool, reason)
    gate_names() -> list[str]
    GATES                                                   # the gate Registry (harness.registry)

Each gate lives in its own module (``harness.verdict.gates.escape``, ...) with a ``NAME`` and a gate object.
"""

from harness.verdict.gates._base import FunctionGate, Gate, gate
from harness.verdict.gates._decide import decide_status, is_correct
from harness.verdict.gates._registry import (BUILTIN_GATES, GATES, GateRegistryError, gate_names, registered_gates,
                                            run_gates)
from harness.verdict.gates._source import SourceScan, scan_source

__all__ = [
    "BUILTIN_GATES", "FunctionGate", "GATES", "Gate", "GateRegistryError", "SourceScan", "decide_status", "gate",
    "gate_names", "is_correct", "registered_gates", "run_gates", "scan_source",
]
