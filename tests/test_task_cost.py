"""The physical floor's figures: bytes and FLOPs counted from a KernelBench-format reference, with sources.

Fixtures are our own files in KernelBench's format (tests/fixtures/kernelbench_like/). Counting runs
torch's real FlopCounterMode on the real meta device; the gate tests run the real physical gate.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.measure.evidence import Evidence
from harness.records import DeviceCeilings
from harness.tasks import (
    begin_cost, load_task, load_task_file, native_task_names, needs_count, resolve_cost,
)
from harness.tasks._cost import count_file, count_module, import_task_module
from harness.verdict.gates.physical import flop_trigger, physical_gate
from protocol import load_protocol

FIX = Path(__file__).parent / "fixtures" / "kernelbench_like" / "KernelBench"
MATMUL = FIX / "level1" / "1_Tiny_matmul.py"
ELEMENTWISE = FIX / "level1" / "2_Tiny_scale_add.py"
DATA_DEPENDENT = FIX / "level1" / "3_Tiny_data_dependent.py"
CONV = FIX / "level2" / "1_Tiny_conv_relu.py"


def test_matmul_gets_2mnk_flops_on_meta() -> None:
    c = count_file(torch, MATMUL)
    m, k, n = 64, 48, 32
    assert c.method == "flop_counter:meta"
    assert c.flops == 2 * m * n * k
    assert c.input_bytes == (m * k + k * n) * 4 and c.output_bytes == m * n * 4
    assert c.inputs == [([m, k], "float32"), ([k, n], "float32")]


def test_elementwise_gets_io_bytes_and_no_counted_flops() -> None:
    c = count_file(torch, ELEMENTWISE)
    assert c.method == "flop_counter:meta"
    assert c.input_bytes == 2 * 16 * 1000 * 4 and c.output_bytes == 16 * 1000 * 4
    assert c.flops == 0.0


def test_conv_counted_on_meta_but_kept_out_of_the_floor() -> None:
    c = count_file(torch, CONV)
    # direct convolution: 2 * batch * out_c * out_h * out_w * in_c * k * k; Winograd/FFT may do fewer,
    # so the floor's FLOPs leave it out
    direct = 2 * 2 * 8 * 14 * 14 * 3 * 3 * 3
    assert c.method == "flop_counter:meta" and c.flops_total == direct and c.flops == 0.0
    assert c.flops_by_op == {"aten.convolution": direct}
    cost = resolve_cost(load_task_file(CONV), c, input_bytes=1, output_bytes=1)
    assert cost.flops == 0.0 and "convolution FLOPs left out" in cost.flops_source


def test_forward_failing_on_meta_falls_back_with_a_reason() -> None:
    c = count_file(torch, DATA_DEPENDENT)
    assert c.method == "flop_counter:cpu"
    assert "meta" in c.note and c.note.startswith("forward failed on meta")
    assert c.flops is not None and c.flops > 0 and c.input_bytes == 32 * 16 * 4
    # too large for a real run: bytes only, and the reason says why
    mod = import_task_module(torch, DATA_DEPENDENT, "atb_test_dd")
    c2 = count_module(torch, mod, real_max_input_bytes=0)
    assert c2.method.startswith("bytes_only:forward failed on meta") and "above 0" in c2.method
    assert c2.flops is None and c2.input_bytes == 32 * 16 * 4 and c2.output_bytes is None


def test_import_failure_is_bytes_only(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("import torch\nraise RuntimeError('boom')\nclass Model: pass\n"
                   "def get_inputs(): return []\ndef get_init_inputs(): return []\n")
    c = count_file(torch, bad)
    assert c.method.startswith("bytes_only:import failed") and "boom" in c.method


def test_declared_native_flops_agree_with_the_counter() -> None:
    """Native tasks keep their declarations; the counter confirms the matmul and convolution figures, counts
    0 where none is declared, and never more than a declaration (it is a lower bound)."""
    for name in native_task_names():
        task = load_task(name)
        assert not needs_count(task)
        counted = count_file(torch, task.path)
        assert counted.method == "flop_counter:meta", (name, counted.method)
        if task.meta.flops is None:
            assert counted.flops_total == 0.0, (name, counted.flops_total)
        elif name == "matmul":
            assert counted.flops == pytest.approx(task.meta.flops), name
        elif name == "conv2d":
            assert counted.flops_total == pytest.approx(task.meta.flops) and counted.flops == 0.0, name
        else:   # e.g. pairwise_sqdist declares its elementwise work, which the counter does not count
            assert counted.flops is not None and counted.flops <= task.meta.flops, name
        cost = resolve_cost(task, None, input_bytes=100, output_bytes=50)
        assert cost.flops_source == ("declared" if task.meta.flops is not None else "not_declared")
        assert cost.bytes_source == "io:measured" and cost.bytes == 150.0


def test_kernelbench_task_counted_in_its_own_process() -> None:
    task = load_task_file(MATMUL)
    assert task.kind == "kernelbench" and needs_count(task)
    pending = begin_cost(task)
    cost = pending.resolve(input_bytes=0, output_bytes=0)   # the reference measured nothing: counted io
    assert cost.flops == 2 * 64 * 32 * 48 and cost.flops_source == "flop_counter:meta"
    assert cost.bytes == (64 * 48 + 48 * 32 + 64 * 32) * 4 and cost.bytes_source == "io:meta"
    measured = begin_cost(task).resolve(input_bytes=18432, output_bytes=8192)   # cached: no second process
    assert measured.bytes_source == "io:measured" and measured.flops_source == "flop_counter:meta"


def _evidence(**kw: object) -> Evidence:
    base = dict(task_id="kb:mm", backend="cuda", candidate_median_ns=1e4, ratio=1.0, ci_low=0.9, ci_high=1.1,
                ceilings=DeviceCeilings(bytes_per_s=4e12, flops_per_s=5e13, method="test"),
                candidate_timed=[{"seed": 1, "times_ns": [1e4]}])
    base.update(kw)
    return Evidence.model_validate(base)


def test_physical_gate_uses_counted_flops_and_names_the_source() -> None:
    proto = load_protocol()
    flops = 2.0 * 4096 ** 3          # a 4096^3 fp32 matmul: ~2.7 ms at 50 TFLOP/s
    low = _evidence(task_bytes=3 * 4096 * 4096 * 4.0, task_flops=flops, task_bytes_source="io:measured",
                    task_flops_source="flop_counter:meta", candidate_median_ns=1e5)
    # protocol 1.6.0: the floor is the bytes; a time below the reference's counted FLOPs at peak passes the
    # gate but is named as the trigger for the extended pass (a rewrite may honestly do less arithmetic)
    r = physical_gate(low, proto)
    assert r.passed and "io:measured" in r.detail and "quarantined for the extended pass" in r.detail
    why = flop_trigger(low, proto)
    assert why is not None and "flop_counter:meta" in why
    assert flop_trigger(low.model_copy(update={"candidate_median_ns": 5e6}), proto) is None
    # below the bytes floor it still fails, whatever the FLOPs
    assert not physical_gate(low.model_copy(update={"candidate_median_ns": 1e3}), proto).passed
    # with no FLOPs counted there is nothing to trigger on: the count matters
    assert flop_trigger(low.model_copy(update={"task_flops": None, "task_flops_source": ""}), proto) is None
