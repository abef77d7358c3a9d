"""Deferred outputs (issue 25): an output must be a plain, finished tensor when forward returns.

A tensor subclass whose ``__torch_function__``/``__torch_dispatch__`` computes when first read, a lazy
view (neg bit), a tuple whose items come from its own code, or a torch mode left active would do the
work after the timer stopped. The candidate child refuses each before reading it (``load``: the first
untimed call; ``prepare``/``block``: a candidate that turns lazy only once timed), reports
``outputs.finished`` false among its integrity checks, and the timer-tampering gate words it. Plain
outputs (a tensor, a tuple of tensors) stay accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.measure.evidence import Evidence, IntegrityFacts
from harness.measure.runner import Worker
from harness.measure.session import worker_config
from harness.tasks import load_task
from harness.verdict.gates.tampering import OUTPUTS_FINISHED, tampering_gate
from protocol import load_protocol

P = load_protocol()
RELU = load_task("relu")
HERE = Path(__file__).resolve().parent

SUBCLASS = '''
class Later(torch.Tensor):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x).as_subclass(Later)
'''
NEG_VIEW = '''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch._neg_view(torch.clamp_max(-x, 0.0))   # relu(x), its negation still pending
'''
TUPLE_OWN_ITEMS = '''
class Lazy(tuple):
    def __iter__(self):
        return iter([torch.relu(self[0])])


class ModelNew(nn.Module):
    def forward(self, x):
        return Lazy((x,))
'''
MODE_LEFT = '''
from torch.utils._python_dispatch import TorchDispatchMode


class Fill(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.relu(x)
        Fill().__enter__()   # never exited: the harness's reads would run through it
        return out
'''
# plain while few calls come in (the load's and correctness calls), a subclass once timed
LAZY_WHEN_TIMED = '''
class Later(torch.Tensor):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        out = torch.relu(x)
        return out if self.calls < 3 else out.as_subclass(Later)
'''
PLAIN = '''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''
PLAIN_TUPLE = '''
class ModelNew(nn.Module):
    def forward(self, x):
        return (torch.relu(x),)
'''


def _source(body: str) -> str:
    return "import torch\nimport torch.nn as nn\n" + body


def _load(worker: Worker, tmp: Path, body: str, name: str) -> dict[str, Any]:
    path = tmp / f"atb_candidate_{name}.py"
    path.write_text(_source(body))
    return worker.request({"op": "load", "task_path": str(RELU.path), "task_module": f"atb_task_relu_{name}",
                           "init_seed": 3, "candidate_path": str(path), "candidate_module": f"atb_candidate_{name}"})


def _worker(tmp: Path) -> Worker:
    return Worker("candidate", worker_config("cpu", P), tmp, 60.0).start()


REFUSED = [
    ("subclass", SUBCLASS, "torch.Tensor subclass"),
    ("neg_view", NEG_VIEW, "Negative"),
    ("tuple_items", TUPLE_OWN_ITEMS, "whose items are produced by its own code"),
    ("mode_left", MODE_LEFT, "TorchDispatchMode was left active"),
]


def test_unfinished_outputs_are_refused_before_they_are_read(tmp_path: Path) -> None:
    worker = _worker(tmp_path)   # one child for all: a refusal is a reply, the child lives on
    try:
        for name, body, says in REFUSED:
            r = _load(worker, tmp_path, body, name)
            assert r.ok is False and r.failure_kind == "exception", (name, r)
            assert r.error.startswith("refused: ") and says in r.error, (name, r.error)
            assert "Traceback" not in r.error and "File " not in r.error   # the refusal, no harness traceback
        assert worker.request({"op": "integrity"}).checks[OUTPUTS_FINISHED] is False
    finally:
        worker.close()


def test_output_that_turns_lazy_when_timed_is_refused_in_the_timed_loop(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    try:
        assert _load(worker, tmp_path, LAZY_WHEN_TIMED, "lazy_timed").ok is True
        assert worker.request({"op": "integrity"}).checks[OUTPUTS_FINISHED] is True
        prep = worker.request({"op": "prepare", "seed": 11})   # calibration calls are checked like timed ones
        reply = prep if not prep.ok else worker.request({"op": "block", "reps": 2, "rep_offset": 0})
        assert reply.ok is False and "refused: " in reply.error and "subclass" in reply.error, reply
        assert worker.request({"op": "integrity"}).checks[OUTPUTS_FINISHED] is False
    finally:
        worker.close()


def test_plain_outputs_pass(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    try:
        for name, body in (("plain", PLAIN), ("plain_tuple", PLAIN_TUPLE)):
            assert _load(worker, tmp_path, body, name).ok is True
            call = worker.request({"op": "call", "class_inputs": "factory", "seed": 5, "distribution": "normal", "share": f"t-{name}",
                                   "save_path": str(tmp_path / f"{name}.pt")})
            assert call.ok is True, call
        assert worker.request({"op": "integrity"}).checks[OUTPUTS_FINISHED] is True
    finally:
        worker.close()


def _evidence(finished: bool) -> Evidence:
    checks = {"time.perf_counter_ns": True, "torch.manual_seed": True, OUTPUTS_FINISHED: finished}
    return Evidence(task_id="relu", backend="cpu", candidate_integrity=IntegrityFacts(checks=checks, pid=7),
                    candidate_source=_source(PLAIN))


def test_tampering_gate_words_a_deferred_output() -> None:
    bad = tampering_gate(_evidence(False), P)
    assert not bad.passed and "not a plain, finished torch.Tensor" in bad.detail, bad.detail
    assert "patched the timer" not in bad.detail   # named for what it is, not as a patched function
    assert tampering_gate(_evidence(True), P).passed


def test_deferred_cheats_are_in_the_red_team_corpus() -> None:
    """Both deferred-output cheats name the gate that catches them (run end to end by
    tests/redteam/test_redteam_corpus.py; the dispatch wrapper also by benchmarks/cuda_gates.py)."""
    cheats = sorted((HERE / "redteam" / "cheats").glob("deferred_*.py"))
    assert len(cheats) >= 2
    for path in cheats:
        assert 'REDTEAM = {"task": "relu", "gate": "timer_tampering"}' in path.read_text(), path
