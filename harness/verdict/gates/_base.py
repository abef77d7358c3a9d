"""What a gate is: a named pure function of the evidence and the protocol, returning a GateResult.

Why pure functions over :class:`harness.measure.evidence.Evidence`: gates run in the harness's own process,
which never imports candidate code, so nothing a candidate does can reach them; and a gate can be
unit-tested on hand-built evidence. A gate reports *problems*; no problems is a pass. Exceptions are
not caught here: :func:`harness.verdict.gates.run_gates` turns them into failed gates (fail closed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol as TypingProtocol
from typing import runtime_checkable

from harness.measure.evidence import CallFacts, Evidence
from harness.records import GateResult
from protocol import Protocol

MAX_DETAIL_PROBLEMS = 6


@runtime_checkable
class Gate(TypingProtocol):
    """An anti-cheat gate: ``name`` is stable (stored with every verdict); calling it judges evidence."""

    @property
    def name(self) -> str: ...  # read-only, so a frozen dataclass (FunctionGate) implements it

    def __call__(self, evidence: Evidence, protocol: Protocol) -> GateResult: ...


@dataclass(frozen=True)
class FunctionGate:
    """A gate made from a function returning ``(problems, pass_detail)``."""

    name: str
    check: Callable[[Evidence, Protocol], tuple[list[str], str]]

    def __call__(self, evidence: Evidence, protocol: Protocol) -> GateResult:
        problems, pass_detail = self.check(evidence, protocol)
        if problems:
            return failed(self.name, problems)
        return GateResult(name=self.name, passed=True, detail=pass_detail)


def gate(name: str) -> Callable[[Callable[[Evidence, Protocol], tuple[list[str], str]]], FunctionGate]:
    """Decorator: turn a ``(evidence, protocol) -> (problems, pass_detail)`` function into a Gate."""

    def wrap(fn: Callable[[Evidence, Protocol], tuple[list[str], str]]) -> FunctionGate:
        return FunctionGate(name=name, check=fn)

    return wrap


def failed(name: str, problems: list[str]) -> GateResult:
    """A failed gate whose detail lists the first few problems (and how many more there were)."""
    shown = problems[:MAX_DETAIL_PROBLEMS]
    more = len(problems) - len(shown)
    detail = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
    return GateResult(name=name, passed=False, detail=detail)


def reference_call_for(evidence: Evidence, call: CallFacts) -> CallFacts | None:
    """The reference's call on the same seed and distribution as ``call`` (None if not recorded)."""
    for ref in evidence.reference_calls:
        if ref.seed == call.seed and ref.distribution == call.distribution:
            return ref
    return None


def ok_calls(calls: list[CallFacts]) -> list[CallFacts]:
    """The calls that returned (a call that raised has no outputs to judge)."""
    return [c for c in calls if c.ok]


# Integrity check names that guard timing and the harness itself; every other failed "torch.*" check
# is a patched torch function (baseline sabotage), and any other failed check is tampering.
TIMER_NAMES = (
    "time.", "torch.cuda.Event", "torch.cuda.synchronize", "torch.cuda.Stream", "torch.cuda.current_stream",
    "torch.cuda.default_stream", "torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.stream",
    "torch.set_num_threads", "torch.get_num_threads", "torch.set_num_interop_threads",
)

# torch functions the harness itself relies on (seeding, saving outputs): replacing them is tampering.
HARNESS_TORCH_NAMES = ("torch.manual_seed", "torch.save", "torch.load", "torch.get_num_threads")


def is_torch_op_check(name: str) -> bool:
    """True for an integrity check guarding a torch compute function (not a timer or the harness)."""
    return name.startswith("torch.") and not name.startswith(TIMER_NAMES + HARNESS_TORCH_NAMES)
