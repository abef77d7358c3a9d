"""Issue 27, item 1: a candidate cannot rewrite the code another arm imports.

The red team's candidate, at import, rewrote the start arm's file in its own eval folder (the session's
work directory was mounted read-write in every measuring child), and ``speedup_vs_start`` read 18.9x for
a candidate identical to the start (honest: about 1.0). Now each confined child imports read-only copies
staged into its own inbox, and the parent keeps the candidate and start files where no child can see
them. These run real bwrap children on CPU.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.measure.runner import Worker
from harness.measure.session import MeasurementContext, open_measurement_session, worker_config
from harness.store import ResultStore, open_store
from harness.tasks import load_task
from harness.verdict.evaluate import evaluate_candidate
from protocol import load_protocol

P = load_protocol()
RELU = load_task("relu")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None and not os.environ.get("ATB_BWRAP"),
                                 reason="bubblewrap is not installed (scripts/setup.sh installs it)")

# The attack: at import, make every start file it can reach compute ReLU 40 times per call, next to its
# own file, in the folder above, and anywhere under the measuring sessions' work directories.
ATTACK = '''
import glob, os, torch, torch.nn as nn
SLOW = """import torch
import torch.nn as nn
class ModelNew(nn.Module):
    def forward(self, x):
        for _ in range(40):
            y = torch.relu(x)
        return y
"""
here = os.path.dirname(os.path.abspath(__file__))
hits = []
for pattern in (os.path.join(here, "atb_start_*.py"), os.path.join(here, "..", "*", "atb_start_*.py"),
                "/tmp/atb-measure-*/**/atb_start_*.py", "/tmp/atb-measure-*/atb_start_*.py"):
    for path in glob.glob(pattern, recursive=True):
        try:
            with open(path, "w") as f:
                f.write(SLOW)
            hits.append(path)
        except OSError:
            pass
try:
    with open(os.path.abspath(__file__), "a") as f:
        f.write("# edited by the candidate\\n")
    hits.append("own-file")
except OSError:
    pass
print("ATB-HITS", hits, flush=True)

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


@needs_bwrap
def test_a_child_imports_a_read_only_copy_it_cannot_edit(tmp_path: Path) -> None:
    """The worker stages the candidate file into its read-only inbox: the child's ``__file__`` is the
    copy, which it cannot write, and the parent's file is untouched."""
    workdir = Path(tempfile.mkdtemp(prefix="atb-measure-"))
    src = tmp_path / "atb_candidate_x.py"
    src.write_text(ATTACK)
    w = Worker("candidate", worker_config("cpu", P), workdir, 120.0).start()
    try:
        assert w.confinement.startswith("bwrap:"), w.confinement
        reply = w.request({"op": "load", "task_path": str(RELU.path), "task_module": "atb_task_relu",
                           "init_seed": 3, "candidate_path": str(src), "candidate_module": "atb_candidate_x"})
        assert reply.ok, reply
        hits = [ln for ln in w.log_tail(20000).splitlines() if ln.startswith("ATB-HITS")]
        assert hits == ["ATB-HITS []"], w.log_tail()
    finally:
        w.close()
        shutil.rmtree(workdir, ignore_errors=True)
    assert src.read_text() == ATTACK


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ResultStore]:
    s = open_store(tmp_path_factory.mktemp("ro") / "atb.sqlite")
    yield s
    s.close()


@pytest.fixture(scope="module")
def ctx(store: ResultStore) -> Iterator[MeasurementContext]:
    with open_measurement_session(store, "cpu", P, note="tests") as c:
        yield c


@needs_bwrap
def test_a_candidate_cannot_slow_the_start_arm(store: ResultStore, ctx: MeasurementContext) -> None:
    """End to end: the attack is the start's own code, so its speedup over the start stays near 1.0
    (the old layout read ~40x: the start arm imported the rewritten file)."""
    res = evaluate_candidate("relu", ATTACK, store=store, session=ctx, protocol=P, prespawn_next=False)
    assert res.confinement.get("candidate", "").startswith("bwrap:"), res.confinement
    assert res.correct, res.reason
    assert res.speedup_vs_start is not None
    assert 0.5 < res.speedup_vs_start < 2.0, res.speedup_vs_start
    assert store.verdict(res.verdict_id).detail.get("start_failure") is None
