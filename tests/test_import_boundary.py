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
    code = "import sys, harness; assert 'torch' not in sys.modules and 'harness.evaluate' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
