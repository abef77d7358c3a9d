"""No import cycle among the project's modules, read from the source (an AST scan, nothing is imported).

Two graphs are checked:

* ``module-level``: the imports that run when a module is imported (top level, and inside top-level
  ``if``/``try``/``with`` blocks and class bodies; ``if TYPE_CHECKING:`` blocks are left out). A cycle
  here makes import order matter and can fail with a partially initialised module.
* ``with-lazy``: the same plus imports inside functions. A cycle here is a circle in the design that a
  lazy import only hides (issue 18 named one, since broken: ``harness/engines/search.py`` ->
  ``harness/tuning/search`` -> ``harness/tuning/search/_task.py`` -> back).

An edge goes to the module an import names: ``from a.b import c`` is an edge to ``a.b.c`` when that
is a module, else to ``a.b``; parent packages are not edges (grimp counts imports the same way).
Each cycle is reported as one path through its strongly connected component.

Known cycles are listed in ``KNOWN_CYCLES`` and expected to fail (strict): when a refactor breaks
one, its case starts passing, pytest reports XPASS as a failure, and the entry is to be deleted.
"""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("atb_agent", "tools", "sandbox", "harness", "protocol", "transcripts")

Graph = dict[str, set[str]]

# (graph, the modules of the cycle's component) -> why it is still there. None is left: the four that
# issue 18 listed were broken (engines/search <-> search, store/_sqlite <-> _verify, store/_open <->
# _postgres <-> _pg_schema, campaign -> replay -> mcp -> campaign). A new one fails the test.
KNOWN_CYCLES: dict[tuple[str, frozenset[str]], str] = {}


# ---------------------------------------------------------------------- the graph

def module_names(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted name -> file, for every ``.py`` file under the packages (``__init__`` names the package)."""
    out: dict[str, Path] = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(body: list[ast.stmt], lazy: bool) -> list[ast.Import | ast.ImportFrom]:
    """The import statements that run when this body runs (``lazy``: also those inside functions)."""
    found: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            todo.extend(node.orelse)                       # typing-only imports never run
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and not lazy:
            continue
        else:
            todo.extend(ast.iter_child_nodes(node))
    return found


def _resolve(name: str, known: set[str]) -> str | None:
    """The project module ``name`` is, or the longest project module it lies in; None outside the project."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _base_of_relative(module: str, is_package: bool, level: int) -> str:
    parts = module.split(".") if is_package else module.split(".")[:-1]
    return ".".join(parts[:len(parts) - (level - 1)])


def build_graph(root: Path, packages: tuple[str, ...], lazy: bool) -> Graph:
    """Module -> the project modules it imports (module-level imports, or all of them with ``lazy``)."""
    files = module_names(root, packages)
    known = set(files)
    graph: Graph = {m: set() for m in files}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _import_nodes(tree.body, lazy):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [_resolve(a.name, known) for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    prefix = _base_of_relative(module, path.name == "__init__.py", node.level)
                    base = f"{prefix}.{base}" if base else prefix
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in known else _resolve(base, known))
            graph[module].update(t for t in targets if t is not None and t != module)
    return graph


# ---------------------------------------------------------------------- the cycles

def _components(graph: Graph) -> list[set[str]]:
    """Strongly connected components (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, succ = work[-1]
            if succ:
                nxt = succ.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: set[str] = set()
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.add(m)
                    if m == node:
                        break
                out.append(comp)
    return out


def _cycle_path(graph: Graph, comp: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (by name), as a closed path."""
    start = min(comp)
    prev: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] & comp):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"no cycle through {start} in {sorted(comp)}")


def cycles(graph: Graph) -> list[tuple[frozenset[str], list[str]]]:
    """Every cyclic component, with one cycle through it, sorted by the path."""
    found = [(frozenset(c), _cycle_path(graph, c)) for c in _components(graph) if len(c) > 1]
    return sorted(found, key=lambda x: x[1])


def _show(found: list[tuple[frozenset[str], list[str]]]) -> str:
    return "\n".join(f"  {' -> '.join(path)}  (component of {len(comp)}: {', '.join(sorted(comp))})"
                     for comp, path in found)


_GRAPHS: dict[str, Graph] = {}


def _graph(kind: str) -> Graph:
    if kind not in _GRAPHS:
        _GRAPHS[kind] = build_graph(ROOT, PACKAGES, lazy=kind == "with-lazy")
    return _GRAPHS[kind]


# ---------------------------------------------------------------------- the tests

@pytest.mark.parametrize("kind", ["module-level", "with-lazy"])
def test_no_import_cycle_other_than_the_known_ones(kind: str) -> None:
    unknown = [(c, p) for c, p in cycles(_graph(kind)) if (kind, c) not in KNOWN_CYCLES]
    assert not unknown, f"import cycles among the project's modules ({kind} imports):\n{_show(unknown)}"


@pytest.mark.parametrize("kind, members", [
    pytest.param(kind, members, id=f"{kind}:{'+'.join(sorted(members))}",
                 marks=pytest.mark.xfail(strict=True, reason=reason))
    for (kind, members), reason in KNOWN_CYCLES.items()
])
def test_known_cycle_is_broken(kind: str, members: frozenset[str]) -> None:
    found = [(c, p) for c, p in cycles(_graph(kind)) if c & members]
    assert not found, f"still a cycle ({kind} imports):\n{_show(found)}"


def test_the_scan_finds_a_planted_cycle_and_skips_typing_only_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "plant"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from plant.a import x\n")
    (pkg / "a.py").write_text("from .sub import b\nx = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("import plant.c\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from plant import d\n"
                              "def f():\n    from plant.a import x\n")
    (pkg / "d.py").write_text("import plant.c\n")
    eager = build_graph(tmp_path, ("plant",), lazy=False)
    assert eager["plant.a"] == {"plant.sub.b"} and eager["plant.c"] == set()
    assert cycles(eager) == []                             # the function-level import is not module-level
    lazy = cycles(build_graph(tmp_path, ("plant",), lazy=True))
    assert [p for _, p in lazy] == [["plant.a", "plant.sub.b", "plant.c", "plant.a"]]
