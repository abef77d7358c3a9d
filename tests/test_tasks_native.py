"""The native task suite and the task loader (no child processes: task code runs in-test only)."""

from __future__ import annotations

import ast
import itertools
import types
from pathlib import Path

import pytest
import torch

from harness.errors import TaskError
from harness.measure.correctness import compare_outputs
from harness.measure.runner._inputs import make_inputs, tensor_sha256
from harness.tasks import load_task, native_task_names, native_tasks
from protocol import load_protocol

FIXTURES = Path(__file__).parent / "fixtures" / "kernelbench"


def _exec(source: str, name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(source, name, "exec"), mod.__dict__)  # noqa: S102 - the test runs its own task code
    return mod


def _build(task_mod: types.ModuleType, cls: type, seed: int = 7) -> torch.nn.Module:
    torch.manual_seed(seed)
    init = task_mod.get_init_inputs()
    torch.manual_seed(seed)
    return cls(*init)


def test_suite_has_the_required_kinds_of_task() -> None:
    names = native_task_names()
    assert len(names) >= 12
    for required in ("relu", "gelu", "softmax", "layernorm", "sum_reduction", "matmul", "conv2d",
                     "scale_shift", "residual_relu", "bias_scale_broadcast", "pairwise_sqdist"):
        assert required in names


def test_every_task_declares_a_knob_space_and_an_honest_start() -> None:
    for task in native_tasks():
        assert task.kind == "native" and task.id == task.path.stem
        assert task.meta.description
        assert task.knob_space and all(len(v) >= 2 for v in task.knob_space.values())
        assert set(task.start_knobs) == set(task.knob_space)
        tree = ast.parse(task.start_source())
        assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def test_starting_candidates_match_their_reference() -> None:
    proto = load_protocol()
    torch.set_num_threads(1)
    for task in native_tasks():
        ref_mod = _exec(task.source, f"ref_{task.id}")
        cand_mod = _exec(task.start_source(), f"start_{task.id}")
        ref, cand = _build(ref_mod, ref_mod.Model), _build(ref_mod, cand_mod.ModelNew)
        for dist in ("task", "normal", "negative", "noncontiguous"):
            inputs = make_inputs(torch, ref_mod.get_inputs, 11, dist, proto.correctness.large_magnitude, "cpu")
            with torch.no_grad():
                check = compare_outputs(ref(*inputs), cand(*inputs), proto, task.meta.tolerance)
            assert check.passed, (task.id, dist, check.reason)


def test_every_knob_combination_renders_and_runs() -> None:
    proto = load_protocol()
    for task in native_tasks():
        ref_mod = _exec(task.source, f"ref_{task.id}")
        names = list(task.knob_space)
        inputs = make_inputs(torch, ref_mod.get_inputs, 3, "task", proto.correctness.large_magnitude, "cpu")
        expected = ref_mod.Model(*ref_mod.get_init_inputs())(*[t.clone() for t in inputs])
        for combo in itertools.product(*task.knob_space.values()):
            knobs = dict(zip(names, combo))
            mod = _exec(task.render_candidate(knobs), f"{task.id}_{'_'.join(combo)}")
            out = _build(ref_mod, mod.ModelNew)(*[t.clone() for t in inputs])
            assert tuple(out.shape) == tuple(expected.shape) and out.dtype == expected.dtype, (task.id, knobs)


def test_dishonest_knob_choices_are_caught_by_the_inputs_the_harness_makes() -> None:
    proto = load_protocol()
    softmax = load_task("softmax")
    ref_mod = _exec(softmax.source, "ref_softmax")
    naive = _exec(softmax.render_candidate({"impl": "naive", "layout": "keep"}), "naive_softmax")
    large = make_inputs(torch, ref_mod.get_inputs, 5, "large", proto.correctness.large_magnitude, "cpu")
    check = compare_outputs(ref_mod.Model()(*large), naive.ModelNew()(*large), proto)
    assert not check.passed and "NaN" in check.reason

    shift = load_task("scale_shift")
    mod = _exec(shift.render_candidate({"impl": "input_inplace", "layout": "keep"}), "inplace_shift")
    x = make_inputs(torch, lambda: [torch.randn(4, 8)], 5, "task", 1.0, "cpu")[0]
    before = tensor_sha256(torch, x)
    mod.ModelNew()(x)
    assert tensor_sha256(torch, x) != before


def test_render_refuses_unknown_or_missing_knobs() -> None:
    task = load_task("relu")
    with pytest.raises(TaskError, match="unknown"):
        task.render_candidate({"impl": "relu", "layout": "keep", "nope": "x"})
    with pytest.raises(TaskError, match="missing"):
        task.render_candidate({"impl": "relu"})
    with pytest.raises(TaskError, match="no choice"):
        task.render_candidate({"impl": "fast", "layout": "keep"})


def test_loader_errors_are_actionable(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="native tasks are"):
        load_task("no_such_task")
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model: pass\n")
    with pytest.raises(TaskError, match="get_inputs"):
        load_task(bad)
    meta = tmp_path / "meta.py"
    meta.write_text("ATB_META = {'bytes': 'io', 'colour': 1}\nclass Model: pass\n"
                    "def get_inputs(): return []\ndef get_init_inputs(): return []\n")
    with pytest.raises(TaskError, match="malformed"):
        load_task(meta)


def test_kernelbench_file_loads_with_defaults_and_starts_from_eager() -> None:
    task = load_task(str(FIXTURES / "19_ReLU.py"))
    assert task.kind == "kernelbench" and task.id.startswith("kb:19_ReLU:")
    assert task.knob_space == {} and task.meta.bytes == "io"
    start = _exec(task.start_source(), "kb_start")
    assert start.ModelNew is start.Model
    with pytest.raises(TaskError, match="no knob space"):
        task.render_candidate({})
