"""The candidate-source scan: alias resolution, getattr/setattr with constant names, overwrites."""

from __future__ import annotations

from harness.verdict.gates import scan_source
from harness.verdict.gates.shortcuts import op_key


def names(refs: list) -> set[str]:  # type: ignore[type-arg]
    return {r.name for r in refs}


def test_import_aliases_resolve() -> None:
    s = scan_source("import torch.nn.functional as F\nfrom time import perf_counter as pc\nimport torch as T\n"
                    "y = F.relu(x)\nz = pc()\nT.cuda.synchronize()\n")
    assert {"torch.nn.functional.relu", "time.perf_counter", "torch.cuda.synchronize"} <= names(s.calls)


def test_constant_getattr_and_setattr_resolve() -> None:
    s = scan_source("import time\nf = getattr(time, 'perf_counter_ns')\nsetattr(time, 'perf_counter_ns', f)\n"
                    "setattr(time, name, f)\n")
    assert "time.perf_counter_ns" in names(s.references)
    assert {"time.perf_counter_ns", "time.<dynamic>"} <= names(s.overwrites)


def test_overwrites_cover_assign_augassign_delete_and_tuples() -> None:
    s = scan_source("import torch\ntorch.relu, torch.add = a, b\ntorch.x += 1\ndel torch.y\n"
                    "import sys\nsys.modules['time'] = fake\n")
    assert {"torch.relu", "torch.add", "torch.x", "torch.y", "sys.modules[]"} <= names(s.overwrites)


def test_late_import_still_resolves_and_matmul_operator_is_seen() -> None:
    s = scan_source("def f(a, b):\n    return np.dot(a, b) @ b\nimport numpy as np\n")
    assert "numpy.dot" in names(s.calls)
    assert s.matmul_lines == [2]


def test_parse_error_is_reported_not_raised() -> None:
    s = scan_source("class (:")
    assert s.parse_error.startswith("SyntaxError")
    assert not s.calls


def test_op_keys() -> None:
    assert op_key("aten::relu_.default") == "relu"
    assert op_key("torch.Tensor.__matmul__") == "matmul"
    assert op_key("torch.nn.functional.softmax") == "softmax"
    assert op_key("?.relu") == "relu"
