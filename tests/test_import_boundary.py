"""The trust boundary is the folder layout: harness/ and protocol/ never import the agent side."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {"harness": {"atb_agent", "tools", "transcripts"}, "protocol": {"atb_agent", "tools", "transcripts", "harness", "sandbox"}}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_forbidden_import_anywhere_in(package: str) -> None:
    """An AST scan that also sees lazy imports inside functions, which import-linter may not."""
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = _imports(path) & FORBIDDEN[package]
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, "trust boundary broken:\n" + "\n".join(offenders)


# The harness's layers, lowest first: each imports only those below it (pyproject.toml's layers contract
# says the same for import-linter, which also follows indirect chains). engines (adapters, engine tasks,
# flag spaces) and store (the results store) are the lowest, independent siblings: measuring a trial reads
# the engines, a session opens the store; neither reads the other or any layer (issue 29).
LAYERS: tuple[tuple[str, ...], ...] = (("engines", "store"), ("measure",), ("verdict",), ("tuning",), ("science",))
FOLDERS = [folder for layer in LAYERS for folder in layer]


def _harness_modules_imported(path: Path) -> set[str]:
    """``harness.X`` for every ``harness.X...`` module an import in ``path`` names, lazy ones included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return {".".join(n.split(".")[:2]) for n in names if n.startswith("harness.")}


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_harness_layer_never_imports_a_layer_above_it_or_a_sibling(folder: str) -> None:
    at = next(i for i, layer in enumerate(LAYERS) if folder in layer)
    above = {f"harness.{x}" for layer in LAYERS[at + 1:] for x in layer}
    siblings = {f"harness.{x}" for x in LAYERS[at] if x != folder}
    offenders = []
    for path in sorted((ROOT / "harness" / folder).rglob("*.py")):
        bad = _harness_modules_imported(path) & (above | siblings)
        if bad:
            offenders.append(f"{path.relative_to(ROOT)} imports {sorted(bad)}")
    assert not offenders, f"harness.{folder} reaches a layer above it or its sibling:\n" + "\n".join(offenders)


def test_the_layers_contract_is_declared() -> None:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layered = [c for c in contracts if c["type"] == "layers"]
    assert [(c.get("containers"), c["layers"]) for c in layered] == [
        (["harness"], [" | ".join(layer) for layer in reversed(LAYERS)])]
    assert all("ignore_imports" not in c for c in layered)     # no import is let through the layers
    # nor through any other contract (issue 29: the task-cost module's two ignored imports of the runner
    # were the last; the counting process is now started by harness.measure.cost)
    assert [c["name"] for c in contracts if c.get("ignore_imports")] == []


# The foundations every layer reads (pyproject.toml's forbidden contract names the same modules).
FOUNDATIONS = ("errors", "records", "stats", "registry", "space", "tasks")


@pytest.mark.parametrize("name", FOUNDATIONS)
def test_a_foundation_imports_no_layer(name: str) -> None:
    """The AST scan of the forbidden contract, lazy imports included."""
    layers = {f"harness.{x}" for layer in LAYERS for x in layer} | {"harness.science", "harness.tuning"}
    base = ROOT / "harness" / name
    paths = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    offenders = [f"{p.relative_to(ROOT)} imports {sorted(bad)}" for p in paths
                 if (bad := _harness_modules_imported(p) & layers)]
    assert not offenders, f"harness.{name} reaches a layer:\n" + "\n".join(offenders)


def test_import_linter_contracts_hold() -> None:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("import-linter is not installed: pip install -e '.[dev]'")
    out = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_checker_catches_a_planted_violation(tmp_path: Path) -> None:
    planted = tmp_path / "bad.py"
    planted.write_text("def f():\n    from atb_agent import cli\n")
    assert "atb_agent" in _imports(planted)


def test_harness_exports_its_main_verbs_lazily() -> None:
    import subprocess
    import sys

    import harness

    for name in harness.__all__:
        assert callable(getattr(harness, name)), name
    code = "import sys, harness; assert 'torch' not in sys.modules and 'harness.verdict.evaluate' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
