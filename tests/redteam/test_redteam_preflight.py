"""The task-strength preflight through the real evaluation path: a weak task written for the
purpose is flagged with the trivial candidate that passed it, and every native task passes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch

from harness.measure.session import MeasurementContext, open_measurement_session
from harness.store import ResultStore, open_store
from harness.tasks import load_task, native_task_names
from harness.verdict.preflight import TRIVIAL_CANDIDATES, latest_preflight, preflight_task, weak_tasks
from redteam_corpus import HERE

pytestmark = pytest.mark.slow

WEAK = HERE / "tasks" / "weak_relu_nonnegative.py"


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, MeasurementContext]]:
    torch.set_num_threads(1)
    store = open_store(tmp_path_factory.mktemp("preflight") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="preflight") as session:
        yield store, session
    store.close()


def test_weak_task_is_flagged_naming_the_trivial_candidate(measured: tuple[ResultStore, MeasurementContext]) -> None:
    store, session = measured
    report = preflight_task(str(WEAK), store, session)
    print("\n" + report.summary())
    assert report.weak and "passthrough" in report.passed_by
    assert "zeros" not in report.passed_by and "constant_mean" not in report.passed_by
    assert [o.name for o in report.outcomes] == list(TRIVIAL_CANDIDATES)
    task = load_task(str(WEAK))
    assert task.id in weak_tasks(store)
    stored = latest_preflight(store, task)
    assert stored is not None and stored.report_id == report.report_id and stored.weak


@pytest.mark.parametrize("name", native_task_names())
def test_native_task_passes_the_preflight(name: str, measured: tuple[ResultStore, MeasurementContext]) -> None:
    store, session = measured
    report = preflight_task(name, store, session)
    print(f"\n{name}: " + ", ".join(f"{o.name}={'PASSES' if o.passed else 'fails'}" for o in report.outcomes))
    assert not report.weak, report.summary() + " :: " + "; ".join(o.reason[:200] for o in report.outcomes)
    assert name not in weak_tasks(store)


def test_cli_refuses_an_unknown_task_with_exit_2(tmp_path: object) -> None:
    proc = subprocess.run([sys.executable, "-m", "harness.verdict.preflight", "no_such_task_xyz", "--json",
                           "--db", str(tmp_path) + "/x.sqlite"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    out = json.loads(proc.stdout)
    assert out["ok"] is False and "no_such_task_xyz" in out["error"]
