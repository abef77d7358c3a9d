"""Device-resident evidence (issue 13): timed input sets that never repeat, comparison in the
reference child, fingerprints computed where the tensor lives, one-way output sharing.

Real workers and real evaluations on the CPU; the CUDA-only parts (IPC, device checksums on a GPU)
run where a GPU exists and are skipped elsewhere.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import harness.measure.correctness as correctness
from harness.measure.runner import Worker
from harness.measure.runner._inputs import TimedSets, device_checksum, fingerprints, inputs_from_spec
from harness.measure.session import MeasurementContext, open_measurement_session, worker_config
from harness.store import ResultStore, open_store
from harness.tasks import load_task
from harness.verdict.evaluate import evaluate_candidate
from protocol import load_protocol

P = load_protocol()
REDTEAM = Path(__file__).resolve().parent / "redteam" / "cheats"


def _values(sets: list[list[torch.Tensor]]) -> set[tuple[float, ...]]:
    return {tuple(torch.cat([t.reshape(-1) for t in s]).tolist()) for s in sets}


@pytest.mark.parametrize("shapes,k", [(((64, 48), (48, 32)), 37), (((3,), (2, 2)), 25), (((4096,),), 7)])
def test_window_sets_never_repeat_and_rebuild_exactly(shapes: tuple[tuple[int, ...], ...], k: int) -> None:
    def gi() -> list[torch.Tensor]:
        return [torch.rand(*sh) for sh in shapes]

    ts = TimedSets(torch, gi, 987654321, 1e4, "cpu", "window", k)
    seen: list[list[torch.Tensor]] = []
    for _ in range(30):
        q, sets = ts.take()
        assert len(sets) == k
        seen.extend([t.clone() for t in s] for s in sets)
        rebuilt = inputs_from_spec(torch, gi, ts.spec(q, k - 1), 1e4, "cpu")
        assert all(torch.equal(a, b) for a, b in zip(rebuilt, sets[-1]))
    assert len(_values(seen)) == len(seen) == 30 * k   # no two calls saw the same values
    ts.retire()
    assert ts.fp_before == ts.fp_after and ts.fp_before


def test_fresh_and_graph_sets_rebuild_exactly() -> None:
    def gi() -> list[torch.Tensor]:
        return [torch.randn(8, 16), torch.randint(0, 5, (8,))]

    for mode, k in (("fresh", 1), ("graph", 6)):
        ts = TimedSets(torch, gi, 42, 1e4, "cpu", mode, k)
        seen = []
        for _ in range(10):
            q, sets = ts.take()
            seen.extend(sets)
            for i in (0, k - 1):
                rebuilt = inputs_from_spec(torch, gi, ts.spec(q, i), 1e4, "cpu")
                assert all(torch.equal(a, b) for a, b in zip(rebuilt, sets[i]))
        assert len(_values([[s[0].float()] for s in seen])) == 10 * k, mode


def test_device_checksum_sees_one_changed_word() -> None:
    x = torch.randn(1000, 37)
    a = device_checksum(torch, x).tolist()
    assert device_checksum(torch, x.clone()).tolist() == a
    y = x.clone()
    y[500, 3] = torch.nextafter(y[500, 3], torch.tensor(float("inf")))
    assert device_checksum(torch, y).tolist() != a
    assert device_checksum(torch, x.t()).tolist() != a or x.t().is_contiguous()  # layout-independent values
    assert fingerprints(torch, [x, 3])[0] == fingerprints(torch, [x.clone(), 3])[0]


@pytest.mark.parametrize("seed", range(4))
def test_chunked_comparison_agrees_with_one_chunk(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(5000, generator=g) * 100
    cases = [r.clone(), r + 0.05, r * (1 + 1e-6)]
    r_inf = r.clone()
    r_inf[7] = float("inf")
    c_inf = r_inf.clone()
    c_inf[9] = float("-inf")
    tols = {n: t.model_dump() for n, t in P.correctness.tolerances.items()}
    pairs = [(r, c) for c in cases] + [(r_inf, r_inf.clone()), (r_inf, c_inf), (r, torch.where(r > 0, r, math.nan))]
    whole = [correctness.compare_tensors(a, b, tols) for a, b in pairs]
    monkeypatch.setattr(correctness, "_CHUNK", 333)
    chunked = [correctness.compare_tensors(a, b, tols) for a, b in pairs]
    for w, c in zip(whole, chunked):
        assert w.passed == c.passed and w.reason.split("(")[0] == c.reason.split("(")[0]
        if w.max_abs_err is not None:
            assert c.max_abs_err == pytest.approx(w.max_abs_err) and c.rel_l2 == pytest.approx(w.rel_l2, rel=1e-9)
    assert [w.passed for w in whole] == [True, False, True, True, False, False]


def test_reference_compares_in_its_own_process_and_writes_nothing(tmp_path: Path) -> None:
    cfg = worker_config("cpu", P)
    task = load_task("relu")
    cand_file = tmp_path / "atb_candidate_c.py"
    cand_file.write_text(task.start_source())
    ref, cand = Worker("reference", cfg, tmp_path, 60).start(), Worker("candidate", cfg, tmp_path, 60).start()
    try:
        tols = {n: t.model_dump() for n, t in P.correctness.tolerances.items()}
        base = {"op": "load", "task_path": str(task.path), "task_module": "atb_task_relu", "init_seed": 1}
        assert ref.request({**base, "tolerances": tols}).ok
        assert cand.request({**base, "candidate_path": str(cand_file), "candidate_module": "atb_candidate_c"}).ok
        before = set(tmp_path.iterdir())
        r = ref.request({"op": "call", "class_inputs": "factory", "seed": 3, "distribution": "task", "save_path": str(tmp_path / "ref.pt")})
        assert r.ok and r.share is None and set(tmp_path.iterdir()) == before   # the reference shares nothing
        c = cand.request({"op": "call", "class_inputs": "factory", "seed": 3, "distribution": "normal", "share": "call",
                          "save_path": str(tmp_path / "cand.pt")})
        refused = cand.request({"op": "check", "class_inputs": "factory", "seed": 3, "distribution": "normal", "candidate": c.share})
        assert refused.ok is False and "only the reference" in refused.error
        checked = ref.request({"op": "check", "class_inputs": "factory", "seed": 3, "distribution": "normal", "candidate": c.share})
        assert checked.comparison.passed is True
        wrong = ref.request({"op": "check", "class_inputs": "factory", "seed": 4, "distribution": "normal", "candidate": c.share})
        assert wrong.comparison.passed is False
        bogus = ref.request({"op": "check", "class_inputs": "factory", "seed": 3, "distribution": "normal",
                             "candidate": {"cuda": [{"dtype": "os.system", "shape": [1], "stride": [1],
                                                     "offset": 0, "ipc": []}]}})
        assert bogus.comparison.passed is False and "could not be read" in bogus.comparison.reason
        assert {p.name for p in set(tmp_path.iterdir()) - before} == {"cand.pt"}
    finally:
        ref.close()
        cand.close()


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ResultStore, MeasurementContext]]:
    torch.set_num_threads(1)
    store = open_store(tmp_path_factory.mktemp("devev") / "atb.sqlite")
    with open_measurement_session(store, "cpu", note="device evidence") as ctx:
        yield store, ctx
    store.close()


@pytest.mark.slow
def test_a_value_memo_gains_nothing_because_timed_values_never_repeat(
        session: tuple[ResultStore, MeasurementContext]) -> None:
    store, ctx = session
    src = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
           "    def __init__(self):\n        super().__init__()\n        self.memo = {}\n        self.hits = 0\n\n"
           "    def forward(self, a, b):\n        key = (float(a.sum()), float(b.sum()))\n"
           "        if key in self.memo:\n            self.hits += 1\n            return self.memo[key]\n"
           "        out = torch.matmul(a, b)\n        self.memo[key] = out\n"
           "        if len(self.memo) > 2048:\n            self.memo.pop(next(iter(self.memo)))\n"
           "        return out\n")
    # The memo keeps the last 2048 outputs (128 MiB): bounded, so it never meets the candidate's memory cap,
    # yet longer than a timed window (one block's calls), so values repeated within a block or in the next would hit it.
    r = evaluate_candidate("matmul", src, store=store, session=ctx)
    ev = r.evidence
    assert ev is not None and ev.candidate_timed
    for t in ev.candidate_timed + ev.baseline_timed:
        assert t.timed_calls > len(t.times_ns) and t.distinct_input_sets == t.timed_calls, t
        assert t.input_refill == "window"
    assert r.speedup is not None and r.speedup < 1.5, r.speedup   # the memo never hits
    assert r.verdict == "accepted", r.reason


@pytest.mark.slow
def test_scavenging_cheat_finds_no_reference_output(session: tuple[ResultStore, MeasurementContext]) -> None:
    store, ctx = session
    src = (REDTEAM / "scavenging_reference_output_files.py").read_text()
    r = evaluate_candidate("relu", src, store=store, session=ctx)
    assert "FOUND" not in r.reason and r.correct, r.reason
    assert {g.name for g in r.gates if not g.passed} == {"reference_scavenging"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_ipc_is_one_way_and_compares_on_the_device(tmp_path: Path) -> None:
    cfg = worker_config("cuda", P)
    task = load_task("relu")
    cand_file = tmp_path / "atb_candidate_c.py"
    cand_file.write_text(task.start_source())
    ref, cand = Worker("reference", cfg, tmp_path, 120).start(), Worker("candidate", cfg, tmp_path, 120).start()
    try:
        tols = {n: t.model_dump() for n, t in P.correctness.tolerances.items()}
        base = {"op": "load", "task_path": str(task.path), "task_module": "atb_task_relu", "init_seed": 1}
        assert ref.request({**base, "tolerances": tols}).ok
        assert cand.request({**base, "candidate_path": str(cand_file), "candidate_module": "atb_candidate_c"}).ok
        c = cand.request({"op": "call", "class_inputs": "factory", "seed": 3, "distribution": "normal", "share": "call"})
        # a device share, never a file: a VMM allocation's fd (first choice) or legacy CUDA IPC handles
        assert ("vmm" in c.share or "cuda" in c.share) and not list(tmp_path.glob("*.pt")), c.share
        if "vmm" in c.share:  # the fd travels candidate -> harness -> reference, as the session relays it
            tag = str(c.share["vmm"]["tag"])
            fd = cand.receive_fd(tag)
            assert fd is not None
            try:
                ref.send_fd(fd, tag)
            finally:
                os.close(fd)
        checked = ref.request({"op": "check", "class_inputs": "factory", "seed": 3, "distribution": "normal", "candidate": c.share})
        assert checked.comparison.passed is True, checked
        assert cand.request({"op": "release"}).ok
    finally:
        ref.close()
        cand.close()
