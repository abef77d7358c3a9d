"""Anti-cheat gates: pure functions of the evidence, run in the harness's process, failing closed.

Public API::

    run_gates(evidence, protocol) -> list[GateResult]        # every gate of the evidence's kind; errors fail
    decide_status(gates, evidence, protocol) -> (status, reason)
    decide_engine_status(gates, ratio, launched) -> (status, correct, reason)
    is_correct(evidence) -> (bool, reason)
    gate_names(kind="kernel") -> list[str]
    registered_gates(kind="kernel")                         # the gates of one subject kind, in order
    GATES                                                   # the gate Registry (harness.registry)

Each kernel gate lives in its own module (``harness.verdict.gates.escape``, ...) with a ``NAME`` and a gate
object; the serving-engine gates, judging :class:`EngineEvidence`, live in ``harness.verdict.gates.engine``.
"""

from harness.verdict.gates._base import FunctionGate, Gate, gate
from harness.verdict.gates._decide import decide_engine_status, decide_status, is_correct
from harness.verdict.gates._registry import (BUILTIN_GATES, GATES, GateRegistryError, gate_key, gate_kinds, gate_names,
                                            registered_gates, run_gates)
from harness.verdict.gates.engine import ENGINE_GATES, FLAG_SPACE, EngineEvidence, EngineGate
from harness.verdict.gates._source import SourceScan, scan_source

__all__ = [
    "BUILTIN_GATES", "ENGINE_GATES", "FLAG_SPACE", "EngineEvidence", "EngineGate", "FunctionGate", "GATES", "Gate",
    "GateRegistryError", "decide_engine_status", "SourceScan", "decide_status", "gate", "gate_key", "gate_kinds", "gate_names", "is_correct",
    "registered_gates", "run_gates", "scan_source",
]
