"""Issue 27, items 6 and 7: list_files spoofing, unreadable long lines, a roofline figure over 100%,
and commands that exit 2 on bad input only after starting Ray or creating a store."""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from atb_agent.cli import main
from harness.measure.device import achieved_fraction, ceiling_defect, roofline_fraction
from harness.records import DeviceCeilings
from protocol import load_protocol
from sandbox import Sandbox, SandboxLimits, SandboxUnavailableError
from sandbox._models import FileEntry, shown_path
from tools import ToolBox

P = load_protocol()
BACKENDS = [pytest.param("docker", marks=pytest.mark.docker), pytest.param("bwrap", marks=pytest.mark.bwrap)]


@pytest.fixture(scope="module", params=BACKENDS)
def box(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    limits = SandboxLimits.from_params(P.sandbox)
    try:
        if request.param == "docker":
            from sandbox._docker import DockerSandbox

            sb: Sandbox = DockerSandbox(limits)
        else:
            if shutil.which("bwrap") is None:
                pytest.skip("bubblewrap is not installed")
            from sandbox._bwrap import BwrapSandbox

            sb = BwrapSandbox(limits)
    except SandboxUnavailableError as exc:
        pytest.skip(f"{request.param} backend unavailable here: {exc}")
    yield sb
    sb.close()


def _toolbox(box: Sandbox) -> ToolBox:
    box.exec("rm -rf /workspace/* /workspace/.[!.]*", timeout_s=10)

    def submit(files: dict[str, bytes]) -> dict[str, Any]:
        return {"verdict": "rejected"}

    return ToolBox(box, "relu", submit)


# ------------------------------------------------------------------------------------ item 6: tools
def test_a_newline_in_a_file_name_cannot_spoof_list_files(box: Sandbox) -> None:
    tb = _toolbox(box)
    r = box.exec("printf x > \"$(printf 'notes (1 bytes)\\ncandidate.py')\"; printf y > plain.py", timeout_s=10)
    assert r.ok, r
    entries, _ = box.list_files(".", True)
    out = tb.call("list_files", {})
    assert not out.is_error, out.content
    lines = out.content.splitlines()
    assert len(lines) == len(entries) == 2, lines          # one line per entry, whatever the names hold
    assert "candidate.py" not in [ln.split(" (")[0] for ln in lines]
    assert '"notes (1 bytes)\\ncandidate.py" (1 bytes)' in lines and "plain.py (1 bytes)" in lines


def test_shown_path_quotes_only_what_could_break_a_line() -> None:
    assert shown_path("candidate.py") == "candidate.py" and shown_path("dir/a b.py") == "dir/a b.py"
    for tricky in ("a\nb", "a\rb", "a\u2028b", "a\x1b[2Jb", 'a"b', "a\\b"):
        s = shown_path(tricky)
        assert "\n" not in s and "\r" not in s and "\u2028" not in s and json.loads(s) == tricky
    assert FileEntry(path="x\ny", kind="file", size=1).shown == '"x\\ny"'


def test_a_line_longer_than_the_read_cap_can_be_read_in_full(box: Sandbox) -> None:
    tb = _toolbox(box)
    cap = box.limits.exec_output_cap_bytes
    long_line = ("é" + "a" * 97 + "\n")[:-1] * ((cap // 98) + 40) + "\n"     # over the cap, multi-byte chars
    text = "first\n" + long_line + "last\n"
    box.write_file("blob.py", text)
    got, start = "", 1
    for _ in range(10):
        out = tb.call("read_file", {"path": "blob.py", "start_line": start})
        assert not out.is_error, out.content[:300]
        body, _, note = out.content.partition("\n[... output capped at")
        got += body
        if not note:
            break
        start = int(note.rsplit("start_line=", 1)[1].rstrip("]"))
    assert got == text                                      # every byte came back, in order
    assert len(got.encode()) > cap


# ------------------------------------------------------------------------------------ item 6: roofline
def test_the_roofline_figure_never_exceeds_one() -> None:
    ceil = DeviceCeilings(bytes_per_s=1e9, flops_per_s=1e12, method="test")
    # 1 MB at 1 GB/s is a 1 ms floor; a 0.54 ms time is 1.86x "the roofline" (the honest relu's figure)
    assert math.isclose(achieved_fraction(1e6, None, ceil, 0.5376e6) or 0, 1.86, rel_tol=1e-3)
    assert roofline_fraction(1e6, None, ceil, 0.5376e6) is None
    defect = ceiling_defect(achieved_fraction(1e6, None, ceil, 0.5376e6), ceil)
    assert defect is not None and "1.86x" in defect and "ceiling" in defect
    # on CPU the cache-resident bandwidth the physical gate allows makes it an honest fraction
    frac = roofline_fraction(1e6, None, ceil, 0.5376e6, cache_factor=P.gates.physical_cpu_cache_factor)
    assert frac is not None and 0 < frac <= 1.0
    assert ceiling_defect(0.9, ceil) is None and roofline_fraction(1e6, None, ceil, 1e6) == 1.0


def test_compare_ignores_a_baseline_fraction_above_one() -> None:
    from harness.tuning import compare

    class _Store:
        def __init__(self, details: list[dict[str, Any]]) -> None:
            self.details = details

        def iteration_verdict_details(self, campaign_id: str) -> list[dict[str, Any]]:
            return self.details

    over = {"roofline_fraction": 0.93, "candidate_median_ns": 1000.0, "baseline_median_ns": 500.0}   # 1.86
    assert compare._baseline_roofline(_Store([over]), "r") is None  # type: ignore[arg-type]
    ok = {"roofline_fraction": 0.5, "candidate_median_ns": 1000.0, "baseline_median_ns": 1000.0}
    assert compare._baseline_roofline(_Store([over, ok]), "r") == 0.5  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ item 7
def test_sweep_with_an_unknown_tuner_exits_2_before_anything_starts(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text("tasks: [relu]\ntuners: [random, no-such-tuner]\nseeds: [1]\nbudget: 1\n")
    db = tmp_path / "sweep.sqlite"
    t0 = time.monotonic()
    assert main(["sweep", str(spec), "--db", str(db), "--json", "--no-live"]) == 2
    took = time.monotonic() - t0
    err = json.loads(capsys.readouterr().out)
    assert "no-such-tuner" in err["error"] and "SweepSpecError" in err["error"]
    assert took < 10.0, took                     # Ray was never started
    assert not db.exists()


def test_compare_with_unknown_ids_creates_no_store(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATB_ALLOW_DRAFT_PROTOCOL", "1")     # the refusal tested here is the store's, not the draft's
    db = tmp_path / "typo.sqlite"
    assert main(["compare", "run-a", "run-b", "--db", str(db), "--json"]) == 2
    assert "no results store" in json.loads(capsys.readouterr().out)["error"]
    assert not db.exists() and os.listdir(tmp_path) == []
    assert main(["report", "run-a", "--out", str(tmp_path / "out"), "--db", str(db), "--json"]) == 2
    assert not db.exists()
    capsys.readouterr()


@pytest.mark.parametrize("argv", [["remeasure", "run-a"], ["retest", "run-a", "--backend", "cpu"]])
def test_remeasure_and_retest_on_a_missing_store_create_nothing(argv: list[str], tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "typo.sqlite"
    assert main([*argv, "--db", str(db), "--json"]) == 2
    assert "no results store" in json.loads(capsys.readouterr().out)["error"]
    assert not db.exists() and os.listdir(tmp_path) == []
