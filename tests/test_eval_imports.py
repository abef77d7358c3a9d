"""A kernel ``atb eval`` imports no engine module (issue 29).

Why: a one-shot kernel evaluation has nothing to do with serving engines, yet before this test it loaded
the whole engine stack (``harness.engines``' package ``__init__``: httpx, the engine client, every adapter;
about 0.25 s of a command whose start-up is timed), because every store open fills ``expected_gates``
and read the engine gates' names from the engine package. The engine gates now live in the one gate registry
(``harness.verdict.gates.engine``, which imports no engine code at run time); this test keeps any later
import from pulling the stack back.

The evaluation runs for real, in a fresh interpreter (nothing this test process imported counts): the
CLI's ``main`` on ``atb eval relu start --device cpu --json``, then the interpreter's ``sys.modules``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PACKAGE = "harness.engines"

# Runs the CLI in-process, then prints the imported module names as the last line of stderr (stdout is
# the --json contract's one object).
_PROBE = """\
import json, sys
from atb_agent.cli import main
code = main(sys.argv[1:])
print("ATB-MODULES " + json.dumps(sorted(sys.modules)), file=sys.stderr)
sys.exit(code)
"""


def _engine_modules(names: list[str]) -> list[str]:
    return [n for n in names if n == ENGINE_PACKAGE or n.startswith(ENGINE_PACKAGE + ".")]


def _run_probe(argv: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", _PROBE, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=300)
    marked = [line for line in out.stderr.splitlines() if line.startswith("ATB-MODULES ")]
    assert marked, (out.returncode, out.stdout[-2000:], out.stderr[-4000:])
    return out, json.loads(marked[-1][len("ATB-MODULES "):])


@pytest.mark.slow
def test_a_kernel_eval_imports_no_engine_module(tmp_path: Path) -> None:
    out, modules = _run_probe(["eval", "relu", "start", "--device", "cpu", "--db", str(tmp_path / "atb.sqlite"),
                               "--json"], tmp_path)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-4000:])
    result = json.loads(out.stdout)
    assert result["verdict_id"], result       # a verdict was measured and stored: the whole path ran
    assert "harness.verdict.evaluate" in modules and "harness.store._sqlite" in modules
    assert not _engine_modules(modules), f"a kernel `atb eval` imported {_engine_modules(modules)}"


def test_the_probe_sees_an_engine_import(tmp_path: Path) -> None:
    """The check is not vacuous: a command that does load the engine stack is caught by the same probe."""
    _, modules = _run_probe(["engine", "flags", "llamacpp-tiny", "--json"], tmp_path)
    assert _engine_modules(modules)


ENGINE_GATE_NAMES = ["engine_launch", "engine_alive", "failed_requests", "baseline_requests", "output_match",
                     "output_length", "anomaly"]


def test_the_store_lists_the_engine_gates_the_registry_runs() -> None:
    """The store reads the engine gates from the one registry; their names and order are stored with every
    engine verdict, so they are written out here once more to catch a rename."""
    from harness.store._gates import expected_gates
    from harness.verdict.gates import gate_names

    assert gate_names("engine") == ENGINE_GATE_NAMES
    assert [n for kind, n, required in expected_gates() if kind == "engine" and required] == ENGINE_GATE_NAMES
    assert ("engine", "flag_space", 0) in expected_gates()
