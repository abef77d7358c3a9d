"""The device-evidence helpers that a CPU can check (issue 13): exact input-mutation marks from a
rebuild, value keys of timed sets, and the fd channel that carries a candidate's device-output fd to
the reference child through the harness (tag matching, stray messages, timeouts).

The CUDA VMM export/import itself needs a GPU; it is exercised by every CUDA evaluation (the verdict
records ``output_transport``) and by the H200 sweep in benchmarks/results/kernelbench/.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch

from harness.measure.runner._inputs import make_inputs, sample_key, unchanged_marks
from harness.measure.backends._share import recv_tagged_fd


def _gi() -> list[object]:
    return [torch.randn(64, 32), torch.randint(0, 3, (64,)), 7]


def test_unchanged_marks_are_equal_for_untouched_inputs_and_differ_for_one_written_word() -> None:
    def rebuild() -> list[object]:
        return make_inputs(torch, _gi, 11, "task", 1e4, "cpu")

    inputs = rebuild()
    before, after = unchanged_marks(torch, inputs, rebuild)
    assert before == after and len(before) == 3
    inputs[0].view(-1)[1234 % inputs[0].numel()] += 1.0
    before, after = unchanged_marks(torch, inputs, rebuild)
    assert [i for i, (b, a) in enumerate(zip(before, after)) if b != a] == [0]


def test_unchanged_marks_compare_bits_so_a_nan_input_left_alone_is_unchanged() -> None:
    def rebuild() -> list[object]:
        return [torch.tensor([float("nan"), 1.0, -0.0])]

    inputs = rebuild()
    assert unchanged_marks(torch, inputs, rebuild)[1] == ["made:0"]
    inputs[0][2] = 0.0      # -0.0 -> +0.0: equal as numbers, a write as bits
    assert unchanged_marks(torch, inputs, rebuild)[1] == ["made:0-changed"]


def test_sample_keys_differ_between_seeds_and_agree_for_equal_values() -> None:
    a = make_inputs(torch, _gi, 1, "task", 1e4, "cpu")
    b = make_inputs(torch, _gi, 2, "task", 1e4, "cpu")
    again = make_inputs(torch, _gi, 1, "task", 1e4, "cpu")
    assert sample_key(torch, a).tolist() == sample_key(torch, again).tolist()
    assert sample_key(torch, a).tolist() != sample_key(torch, b).tolist()


def _pipe_fd() -> int:
    r, w = os.pipe()
    os.close(w)
    return r


def test_fd_channel_matches_tags_keeps_others_pending_and_drops_messages_without_one_fd() -> None:
    harness_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        socket.send_fds(child_end, [b"timed-1"], [_pipe_fd()])
        child_end.send(b"call")                                   # no fd: dropped
        socket.send_fds(child_end, [b"call"], [_pipe_fd(), _pipe_fd()])   # two fds: dropped
        socket.send_fds(child_end, [b"call"], [_pipe_fd()])
        pending: dict[str, int] = {}
        fd = recv_tagged_fd(harness_end, "call", 5.0, pending)
        assert os.fstat(fd) and list(pending) == ["timed-1"]
        os.close(fd)
        fd2 = recv_tagged_fd(harness_end, "timed-1", 5.0, pending)   # served from pending, no read
        assert not pending
        os.close(fd2)
        with pytest.raises(TimeoutError):
            recv_tagged_fd(harness_end, "reuse", 0.2, pending)
    finally:
        harness_end.close()
        child_end.close()


def test_fd_channel_pending_is_bounded() -> None:
    harness_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        for i in range(12):
            socket.send_fds(child_end, [f"t{i}".encode()], [_pipe_fd()])
        socket.send_fds(child_end, [b"wanted"], [_pipe_fd()])
        pending: dict[str, int] = {}
        fd = recv_tagged_fd(harness_end, "wanted", 5.0, pending, max_pending=4)
        os.close(fd)
        assert list(pending) == ["t8", "t9", "t10", "t11"]   # the oldest were closed
        for f in pending.values():
            os.close(f)
    finally:
        harness_end.close()
        child_end.close()


def _same_file(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def test_an_output_left_unread_can_never_stand_in_for_the_next_one() -> None:
    """H200: the reference skipped a comparison (its own output had NaN), left the candidate's fd on
    its channel, and the next comparison under the same tag mapped that stale output. Now the skipped
    comparison discards its fd, and each correctness call has its own tag, so a stale fd left on the
    channel is dropped rather than served."""
    from harness.measure.backends._share import discard_output

    ref_end, harness_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        stale, fresh = _pipe_fd(), _pipe_fd()
        socket.send_fds(harness_end, [b"call-1-normal"], [stale])
        discard_output({"vmm": {"tag": "call-1-normal"}}, ref_end, timeout_s=1.0)   # the skipped comparison
        socket.send_fds(harness_end, [b"call-1-uniform"], [fresh])
        got = recv_tagged_fd(ref_end, "call-1-uniform", 1.0)
        assert _same_file(got, fresh) and not _same_file(got, stale)
        os.close(got)
        # without the discard, distinct tags still keep the stale output out (it is closed, not served)
        stale2, fresh2 = _pipe_fd(), _pipe_fd()
        socket.send_fds(harness_end, [b"call-2-normal"], [stale2])
        socket.send_fds(harness_end, [b"call-2-uniform"], [fresh2])
        got = recv_tagged_fd(ref_end, "call-2-uniform", 1.0)
        assert _same_file(got, fresh2)
        os.close(got)
        discard_output({"path": "/x"}, ref_end, timeout_s=0.1)          # a file share has no fd: nothing to take
        discard_output({"vmm": {"tag": "never-sent"}}, ref_end, timeout_s=0.1)   # none came: no error
    finally:
        for f in (stale, fresh, stale2, fresh2):
            try:
                os.close(f)
            except OSError:
                pass
        ref_end.close()
        harness_end.close()


class _HostBuffer:
    """Stands in for a mapped VMM buffer: ``unpack`` only needs its size and its bytes as a tensor."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._raw = torch.arange(size, dtype=torch.int64).to(torch.uint8)

    def raw(self) -> torch.Tensor:
        return self._raw


def _dtype(name: str) -> torch.dtype:
    dt = getattr(torch, name, None)
    if not isinstance(dt, torch.dtype):
        raise ValueError(name)
    return dt


def test_vmm_layout_from_the_candidate_is_checked_against_the_buffer() -> None:
    from harness.measure.backends._vmm import unpack

    buf = _HostBuffer(4096)
    ok = unpack(torch, buf, [{"offset": 0, "nbytes": 64, "shape": [4, 4], "dtype": "float32"},  # type: ignore[arg-type]
                             {"offset": 256, "nbytes": 8, "shape": [8], "dtype": "uint8"}], _dtype)
    assert [tuple(t.shape) for t in ok] == [(4, 4), (8,)] and ok[1].tolist() == list(range(0, 8))
    bad_layouts = [
        [{"offset": 4096 - 32, "nbytes": 64, "shape": [16], "dtype": "float32"}],   # past the end
        [{"offset": 100, "nbytes": 16, "shape": [4], "dtype": "float32"}],         # not 256-aligned
        [{"offset": 0, "nbytes": 64, "shape": [8, 4], "dtype": "float32"}],        # size does not match shape
        [{"offset": 0, "nbytes": 0, "shape": [-1], "dtype": "float32"}],           # negative dimension
        [{"offset": -256, "nbytes": 16, "shape": [4], "dtype": "float32"}],        # before the start
    ]
    for layout in bad_layouts:
        with pytest.raises(ValueError):
            unpack(torch, buf, layout, _dtype)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        unpack(torch, buf, [{"offset": 0, "nbytes": 8, "shape": [1], "dtype": "os.system"}], _dtype)  # type: ignore[arg-type]
