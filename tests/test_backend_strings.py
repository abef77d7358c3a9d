"""Issue 29 item 2: the measuring backend is a plug-in, not a string tested across the harness.

Counts, by AST, the comparisons of a value with a backend's name (``x == "cuda"``, ``device != "cpu"``,
``backend in ("cpu", "cuda")``, ``"cuda" in desc``) in the project's packages outside
``harness/measure/backends/``, where each backend's module is the one place its name may be tested.
At most five may remain (issue 29); the test lists where they are when there are more.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "atb_agent")
EXEMPT = ROOT / "harness" / "measure" / "backends"
NAMES = frozenset({"cpu", "cuda", "mlx", "rocm", "mps", "xpu"})
LIMIT = 5


def _is_name(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in NAMES


def _names_a_backend(node: ast.AST) -> bool:
    return _is_name(node) or (isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_is_name(e) for e in node.elts))


def backend_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comparison in ``source`` with a backend's name as an operand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_a_backend(o) for o in (node.left, *node.comparators)):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_counter_finds_each_kind_of_comparison() -> None:
    src = ('a = backend == "cuda"\nb = device != "cpu"\nc = x in ("cpu", "cuda")\nd = "cuda" in share\n'
           'e = t.device.type == "mlx"\nf = name == "cpuinfo"\ng = y in ("a", "b")\n')
    assert [line for line, _ in backend_comparisons(src)] == [1, 2, 3, 4, 5]


def test_backend_string_comparisons_outside_the_backends_folder_are_at_most_five() -> None:
    hits = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.is_relative_to(EXEMPT):
                continue
            for line, text in backend_comparisons(path.read_text(encoding="utf-8")):
                hits.append(f"{path.relative_to(ROOT)}:{line}: {text}")
    assert len(hits) <= LIMIT, "backend names compared outside harness/measure/backends/:\n" + "\n".join(hits)
