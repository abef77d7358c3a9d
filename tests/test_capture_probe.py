"""The CUDA-graph capture probe leaves nothing behind (issue 25).

On the H200 a candidate that cannot be captured (it synchronises inside forward) left the default CUDA
generator in capture mode; the task's own ``get_inputs`` then raised "Offset increment outside graph
capture encountered unexpectedly", reported as the candidate's exception. A failed probe must end the
capture, put back the current stream and the generator, and say why (``probe_error``): the seed is
then timed by events.

Here: a stand-in for ``torch.cuda`` that fails the way torch does (``capture_end`` raises on an
invalidated capture before it takes the generator out of capture mode, leaving the capture stream
current), runnable anywhere. With a GPU: the same on the device, in process and through a measuring
child (the lead runs ``pytest tests/test_capture_probe.py`` on the H200).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from harness.measure.timing._cuda import CudaTimer


class _Stream:
    def __init__(self, cuda: "_FakeCuda") -> None:
        self.cuda, self.capturing = cuda, False

    def wait_stream(self, other: "_Stream") -> None:
        pass

    def synchronize(self) -> None:
        pass


class _State:
    def __init__(self, capturing: bool = False) -> None:
        self.capturing = capturing


class _Generator:
    def __init__(self) -> None:
        self.state = _State()

    def clone_state(self) -> "_Generator":
        g = _Generator()
        g.state = _State(False)
        return g

    def graphsafe_set_state(self, other: "_Generator") -> None:
        self.state = other.state


class _Graph:
    def __init__(self, cuda: "_FakeCuda") -> None:
        self.cuda, self.stream, self.invalid = cuda, None, False

    def capture_end(self) -> None:
        stream = self.stream
        assert stream is not None
        stream.capturing = False           # cudaStreamEndCapture ends the capture either way...
        if self.invalid:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        self.cuda.gen.state.capturing = False   # ...but only a valid one reaches the generator's epilogue

    def replay(self) -> None:
        pass


class _Event:
    def __init__(self, enable_timing: bool = False) -> None:
        pass

    def record(self) -> None:
        pass

    def elapsed_time(self, other: "_Event") -> float:
        return 1.0


class _FakeCuda:
    """The slice of ``torch.cuda`` the probe uses, with torch's failure mode."""

    Event = _Event

    def __init__(self) -> None:
        self.home = _Stream(self)
        self.current = self.home
        self.gen = _Generator()
        self.default_generators = [self.gen]
        self.CUDAGraph = _GraphFactory(self)
        self.Stream = _StreamFactory(self)

    def synchronize(self) -> None:
        pass

    def current_stream(self) -> _Stream:
        return self.current

    def default_stream(self) -> _Stream:
        return self.home

    def current_device(self) -> int:
        return 0

    def set_stream(self, s: _Stream) -> None:
        self.current = s

    def is_current_stream_capturing(self) -> bool:
        return self.current.capturing

    @contextlib.contextmanager
    def stream(self, s: _Stream) -> Iterator[None]:
        prev, self.current = self.current, s
        yield
        self.current = prev

    @contextlib.contextmanager
    def graph(self, g: _Graph, stream: _Stream) -> Iterator[None]:
        self.current = stream                 # torch.cuda.graph: the capture stream becomes current
        g.stream, stream.capturing, self.gen.state.capturing = stream, True, True
        try:
            yield
        except BaseException:
            g.invalid = True
            g.capture_end()                   # __exit__ calls capture_end, which raises here
            raise
        g.capture_end()
        self.current = self.home              # restored only when capture_end returned


class _StreamFactory:
    """``torch.cuda.Stream``: a constructor with a ``synchronize`` attribute."""

    def __init__(self, cuda: _FakeCuda) -> None:
        self.cuda = cuda
        self.synchronize = _Stream.synchronize

    def __call__(self) -> _Stream:
        return _Stream(self.cuda)


class _GraphFactory:
    """``torch.cuda.CUDAGraph``: a constructor with a ``replay`` attribute."""

    def __init__(self, cuda: _FakeCuda) -> None:
        self.cuda = cuda
        self.replay = _Graph.replay

    def __call__(self) -> _Graph:
        return _Graph(self.cuda)


class _FakeTorch:
    int32 = torch.int32

    def __init__(self) -> None:
        self.cuda = _FakeCuda()

    def empty(self, *a: Any, **k: Any) -> Any:
        return torch.empty(1)

    def randn(self, *a: Any, **k: Any) -> Any:
        if self.cuda.gen.state.capturing and not self.cuda.current.capturing:
            raise RuntimeError("Offset increment outside graph capture encountered unexpectedly.")
        return torch.zeros(1)


def _sync_in_capture(torch_: _FakeTorch) -> Any:
    def call(b: int) -> Any:
        if torch_.cuda.current.capturing:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return b
    return call


def test_failed_capture_restores_stream_and_generator() -> None:
    fake = _FakeTorch()
    timer = CudaTimer(fake, 1024)
    assert timer.capture_graphs(_sync_in_capture(fake), 2, 2) is None
    assert timer.probe_clean, timer.probe_error
    assert timer.probe_error.startswith("capture: RuntimeError: CUDA error")
    assert fake.cuda.current is fake.cuda.home and not fake.cuda.is_current_stream_capturing()
    fake.randn(4, device="cuda")             # what the task's get_inputs does next: no capture-mode error


def test_a_capture_that_works_is_kept() -> None:
    fake = _FakeTorch()
    timer = CudaTimer(fake, 1024)
    graphs = timer.capture_graphs(lambda b: b, 2, 4)
    assert graphs is not None and graphs[0][1] == [0, 1, 0, 1]
    assert timer.probe_clean and timer.probe_error == ""


def test_probe_that_cannot_restore_says_so() -> None:
    fake = _FakeTorch()
    fake.cuda.gen.graphsafe_set_state = lambda other: None   # type: ignore[method-assign]  # a torch without the API
    timer = CudaTimer(fake, 1024)
    assert timer.capture_graphs(_sync_in_capture(fake), 1, 1) is None
    assert not timer.probe_clean and "clean-up failed" in timer.probe_error


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (run on the H200)")


@cuda
def test_failed_capture_on_the_device_leaves_nothing_behind() -> None:
    timer = CudaTimer(torch, 1 << 20)
    x = torch.randn(1024, device="cuda")
    home = torch.cuda.current_stream()

    def syncs(b: int) -> Any:
        _ = x.sum().item()                    # a host read: capture is invalidated
        return torch.relu(x)

    assert timer.capture_graphs(syncs, 2, 2) is None
    assert timer.probe_clean, timer.probe_error
    assert torch.cuda.current_stream() == home and not torch.cuda.is_current_stream_capturing()
    torch.manual_seed(3)
    assert torch.randn(8, device="cuda").isfinite().all()   # no "Offset increment outside graph capture"
    graphs = timer.capture_graphs(lambda b: torch.relu(x), 2, 2)   # and a capturable call still captures
    assert graphs is not None and timer.probe_clean


@cuda
def test_failed_capture_in_the_child_is_the_harness_fact(tmp_path: Path) -> None:
    from harness.measure.runner import Worker
    from harness.measure.session import worker_config
    from harness.tasks import load_task
    from protocol import load_protocol

    relu = load_task("relu")   # its get_inputs draws with torch.randn on the device
    path = tmp_path / "atb_candidate_syncs.py"
    path.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                    "    def forward(self, x):\n        _ = x.sum().item()\n        return torch.relu(x)\n")
    w = Worker("candidate", worker_config("cuda", load_protocol()), tmp_path, 120.0).start()
    try:
        assert w.request({"op": "load", "task_path": str(relu.path), "task_module": "atb_task_relu", "init_seed": 3,
                          "candidate_path": str(path), "candidate_module": "atb_candidate_syncs"}).ok
        assert w.request({"op": "prepare", "seed": 7}).ok
        cap = w.request({"op": "capture", "graph": True})
        assert cap.ok and cap.captured is False and cap.probe_error, cap
        block = w.request({"op": "block", "reps": 3, "rep_offset": 0})
        assert block.ok, getattr(block, "error", "")
        assert w.request({"op": "finish_seed"}).ok
    finally:
        w.close()
