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
from harness.measure.cost import begin_cost
from harness.tasks import load_task, load_task_file, native_task_names, needs_count, resolve_cost
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


# ---------------------------------------------------------------------- the counting process (issue 27)
def _probe_task(tmp_path: Path, body: str) -> Path:
    """A KernelBench-format file whose module-level ``body`` sets ``N``: the input has ``N`` floats, so what
    the counting process saw comes back as ``input_bytes`` (a task's only channel out of the count)."""
    path = tmp_path / f"probe_{abs(hash(body)):x}.py"
    path.write_text("import os\nimport torch\n" + body + "\n"
                    "class Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n\n"
                    "def get_inputs():\n    return [torch.zeros(N)]\n\n"
                    "def get_init_inputs():\n    return []\n")
    return path


def _count(path: Path) -> object:
    from harness.measure.cost import _CACHE

    task = load_task_file(path)
    _CACHE.pop(task.source_sha256, None)
    counted = begin_cost(task).counted()
    assert counted is not None and counted.method.startswith("flop_counter"), counted
    return counted


def test_the_counting_process_gets_the_measuring_childrens_environment(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the count ran with the harness's whole environment (a DATABASE_URL with its password, an API
    key), so a task file's import could read them. Now only CHILD_ENV_ALLOW's names reach it."""
    from harness.measure.runner._worker import CHILD_ENV_ALLOW

    monkeypatch.setenv("DATABASE_URL", "postgresql://atb:hunter2@db.example/atb")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("ATB_KEY_DIR", str(tmp_path / "keys"))
    allowed = sorted(CHILD_ENV_ALLOW | {"PYTHONUNBUFFERED", "HOME", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "PWD"})
    path = _probe_task(tmp_path, f"ALLOWED = {allowed!r}\n"
                       "extra = [k for k in os.environ if k not in ALLOWED and not k.startswith('ATB_CHILD')]\n"
                       "leak = any('hunter2' in v or 'sk-test' in v for v in os.environ.values())\n"
                       "N = 1 + (2 if extra else 0) + (4 if leak else 0) + (8 if 'ATB_KEY_DIR' in os.environ else 0)\n")
    assert _count(path).input_bytes == 4          # N == 1: nothing beyond the allow-list, no secret


def test_the_counting_process_is_confined_like_a_measuring_child(tmp_path: Path) -> None:
    """Before: a task file's import could write anywhere the harness can (the repository, the user's
    files) and reach the network. Now it runs in the measuring children's confinement."""
    from harness.measure.runner import _confine

    probe_dir = tmp_path / "confine-probe"
    probe_dir.mkdir()
    if not _confine.plan("cpu", probe_dir, probe_dir).confined:
        pytest.skip("confinement (bubblewrap) is not available here")
    outside = tmp_path / "escaped.txt"
    repo_file = Path(__file__).resolve().parents[1] / "harness" / f".atb_cost_escape_{abs(hash(str(tmp_path))):x}"
    path = _probe_task(tmp_path, "import pathlib, socket\nN = 1\n"
                       f"for target in ({str(outside)!r}, {str(repo_file)!r}):\n"
                       "    try:\n        pathlib.Path(target).write_text('x')\n        N += 2\n"
                       "    except OSError:\n        pass\n"
                       "try:\n    socket.create_connection(('127.0.0.1', 55432), timeout=2).close()\n    N += 8\n"
                       "except OSError:\n    pass\n")
    try:
        counted = _count(path)
        assert not outside.exists() and not repo_file.exists()
        assert counted.input_bytes == 4, counted          # no write landed anywhere, no connection made
        assert counted.confinement.startswith("bwrap:") and "netns" in counted.confinement
    finally:
        repo_file.unlink(missing_ok=True)
