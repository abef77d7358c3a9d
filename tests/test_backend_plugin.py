"""A measuring backend is a plug-in (issue 29 item 2): a fourth backend defined and registered here, in
this module alone, runs an A/A (the task's own start against its eager reference) through ``atb eval``.

The backend is the CPU's with its own timing-loop wrapper: its measuring children find it through the
module that defines it (the worker's configuration names this file, and the confinement binds it
read-only), so the method its blocks report (``fake:...``) shows the children ran this module's loop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.measure.backends import BACKENDS, ChildBackend
from harness.measure.backends.cpu import CpuBackend, CpuChild


class FakeChild(CpuChild):
    """The CPU loop, its blocks' method renamed: proof that a child ran this backend's own code."""

    def block(self, c: Any, reps: int, capture: set[int], rep_q: dict[int, int]) -> Any:
        bt = super().block(c, reps, capture, rep_q)
        bt.method = "fake:" + bt.method
        return bt


class FakeBackend(CpuBackend):
    """A fourth backend: the host's CPU under another name, its own child part, stored as a CPU device."""

    name = "fake"

    def child(self, torch: Any, config: dict[str, Any]) -> ChildBackend:
        return FakeChild(torch, config)

    def confinement_ro_paths(self) -> tuple[str, ...]:
        return (str(Path(__file__).resolve()),)


if BACKENDS.registered("fake") is None:   # this module is imported again inside each measuring child
    BACKENDS.add("fake", FakeBackend())


@pytest.mark.slow
def test_a_fake_fourth_backend_runs_an_aa_through_atb_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import main

    rc = main(["eval", "relu", "start", "--device", "fake", "--db", str(tmp_path / "atb.sqlite"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert out["timing_method"].startswith("fake:cpu-perf_counter"), out["timing_method"]
    assert out["device"].startswith("cpu:") and out["output_transport"] == "file"
    assert out["correct"] is True
    assert {g["name"] for g in out["gates"]} and out["verdict"] in ("accepted", "rejected", "quarantined")
    print({"verdict": out["verdict"], "speedup": out["speedup"], "failed": [g["name"] for g in out["gates"] if not g["passed"]]})


def test_the_fake_backend_is_found_by_name_and_unknown_names_are_refused() -> None:
    from harness.errors import DeviceUnavailableError
    from harness.measure.backends import backend_named, child_locator
    from harness.measure.device import available

    assert backend_named("fake").name == "fake" and available("fake") == (True, "")
    assert child_locator("fake")["backend_file"].endswith("test_backend_plugin.py")
    assert child_locator("cpu") == {} and child_locator("cuda") == {}
    with pytest.raises(DeviceUnavailableError, match="unknown backend 'rocm'"):
        backend_named("rocm")
