"""The process conditions of the harness's CPU measuring children, for a benchmark's own timing processes.

Why: an independent timer must not share the harness's timing *method*, but it must run under the same
*conditions*, or the two disagree for reasons that are neither's error. The children pin their thread
counts and fix glibc's mmap threshold (``protocol.yaml`` ``timing.cpu``; applied by
``harness.measure.runner._worker``: ``child_environment`` and ``Worker.start``). Under glibc's adaptive
default a call whose temporaries pass the threshold maps, unmaps and faults them on every call: without
the same setting the CPU convolution reference's temporaries cost an independent timer 0.5-1 ms of a
3 ms call that the children never pay (channels_last read 1.6x there against 0.9x in the harness,
2026-12-06). The rule (trim threshold = 4 x mmap threshold) is ``Worker.start``'s; it is restated here,
outside the measuring code, so that a benchmark helper never moves the measuring digest.
"""

from __future__ import annotations


def measuring_child_env(threads: int | None = None) -> dict[str, str]:
    """Thread counts and glibc malloc settings of a measuring child (``threads``: the protocol's by default)."""
    from protocol import load_protocol

    cpu = load_protocol().timing.cpu
    n = str(cpu.threads if threads is None else threads)
    threshold = int(cpu.malloc_mmap_threshold_bytes)
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n,
            "MALLOC_MMAP_THRESHOLD_": str(threshold), "MALLOC_TRIM_THRESHOLD_": str(4 * threshold)}
