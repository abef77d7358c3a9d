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


def _store_table(kind: str, gates: list[tuple[str, str, int]]) -> tuple[list[str], list[str]]:
    """(required names, every known name) of one kind in the store's table, in its order."""
    return [n for k, n, r in gates if k == kind and r], [n for k, n, _ in gates if k == kind]


def test_the_store_gate_table_is_the_registrys() -> None:
    """The store keeps its own table of gate names (it imports no layer, issue 29): it equals the one
    registry's, kind by kind and in order. Built-ins are required; the fail-closed placeholders of a
    rejection (``run_gates_fail_closed``) and the engine's ``flag_space`` refusal are known, not required.
    The engine names are written out once more to catch a rename (they are stored with every verdict)."""
    from harness.store._gates import KERNEL_FAIL_CLOSED, expected_gates
    from harness.verdict.gates import BUILTIN_GATES, ENGINE_GATES, FLAG_SPACE, gate_names

    gates = expected_gates()
    assert gate_names("engine") == ENGINE_GATE_NAMES == [g.name for g in ENGINE_GATES]
    assert _store_table("engine", gates) == (ENGINE_GATE_NAMES, [*ENGINE_GATE_NAMES, FLAG_SPACE])
    assert _store_table("kernel", gates) == ([g.name for g in BUILTIN_GATES], [*gate_names(), *KERNEL_FAIL_CLOSED])
    assert gate_names() == [g.name for g in BUILTIN_GATES]          # no plug-in gate installed here
    assert {k for k, _, _ in gates} == {"kernel", "engine"} and len(set((k, n) for k, n, _ in gates)) == len(gates)


def test_the_store_reads_no_layer_when_it_opens(tmp_path: Path) -> None:
    """Opening a store (which registers the protocol and its gate table) imports no verdict or engine module."""
    code = ("import sys; from harness.store import open_store; s = open_store(sys.argv[1]); s.close(); "
            "print(sorted(m for m in sys.modules if m.startswith(('harness.verdict', 'harness.engines', "
            "'harness.measure', 'harness.tuning', 'harness.science'))))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "atb.sqlite")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[]"


def _install_gate(site: Path, module: str, body: str, entries: dict[str, str]) -> None:
    (site / f"{module}.py").write_text(body)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entries.items())
    (info / "entry_points.txt").write_text(f"[autotunebench.gates]\n{lines}")


_PLUGINS = """\
from harness.verdict.gates import gate
@gate('extra_check')
def extra(evidence, protocol):
    return [], 'ok'
class EngineOnly:
    name = 'engine_extra'
    kinds = frozenset({'engine'})
    def __call__(self, evidence, protocol):
        raise AssertionError
class Both:
    name = 'both_kinds'
    kinds = frozenset({'kernel', 'engine'})
    def __call__(self, evidence, protocol):
        raise AssertionError
engine_only, both = EngineOnly(), Both()
@gate('anomaly')
def clash(evidence, protocol):
    return [], 'ok'
"""


def test_the_store_knows_the_plugin_gates_the_registry_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Installed plug-in gates: the store finds the same names, kinds and order as the registry, registers
    them as known (not required), and refuses the whole set with the registry when one clashes."""
    from harness.store import open_store
    from harness.store._gates import plugin_gates
    from harness.verdict.gates import GateRegistryError, registered_gates

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    try:
        _install_gate(site, "storeplug_gate", _PLUGINS,
                      {"extra": "storeplug_gate:extra", "eng": "storeplug_gate:engine_only", "both": "storeplug_gate:both"})
        registry = {kind: [g.name for g in registered_gates.__wrapped__(kind)] for kind in ("kernel", "engine")}
        store_view = plugin_gates.__wrapped__()
        assert [n for k, n in store_view if k == "kernel"] == registry["kernel"][11:] == ["extra_check", "both_kinds"]
        assert [n for k, n in store_view if k == "engine"] == registry["engine"][7:] == ["engine_extra", "both_kinds"]

        monkeypatch.setattr("harness.store._gates.plugin_gates", lambda: store_view)  # as a fresh process reads them
        with open_store(tmp_path / "atb.sqlite") as st:
            rows = {(r[0], r[1]): r[2] for r in st.query("SELECT kind, name, required FROM expected_gates")}
        assert rows[("kernel", "extra_check")] == 0 and rows[("engine", "engine_extra")] == 0
        assert rows[("kernel", "both_kinds")] == rows[("engine", "both_kinds")] == 0
        assert ("kernel", "engine_extra") not in rows and rows[("kernel", "anomaly")] == 1

        _install_gate(site, "storeplug_gate2", "", {"clash": "storeplug_gate:clash"})
        with pytest.raises(GateRegistryError, match="reuses the gate name 'anomaly'"):
            registered_gates.__wrapped__("kernel")
        assert plugin_gates.__wrapped__() == ()
    finally:
        for name in [m for m in sys.modules if m.startswith("storeplug_")]:
            sys.modules.pop(name, None)
