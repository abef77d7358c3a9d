"""The full-level KernelBench sweep script and its renderer, on our own tiny KernelBench-format fixtures.

The end-to-end tests run the real script, which runs the real ``atb eval`` on the CPU and the
fixture checkout's ``eval_kernel_against_ref`` (our own CPU stand-in with KernelBench's signature:
the real one needs CUDA) in subprocesses, exactly as on the GPU machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.benchmark_scripts import ROOT, load_benchmark

sweep = load_benchmark("kernelbench_sweep")
render = load_benchmark("render_kernelbench")
KB = Path(__file__).parent / "fixtures" / "kernelbench_like"


def _run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernelbench_sweep.py"), *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=str(ROOT))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_selection_by_ranges_and_names() -> None:
    folder = sweep.problem_dir(KB, 1)
    assert [p.stem for p in sweep.select_problems(folder, "1-2")] == ["1_Tiny_matmul", "2_Tiny_scale_add"]
    assert [p.stem for p in sweep.select_problems(folder, "3,1_Tiny_matmul.py,1")] == \
        ["1_Tiny_matmul", "3_Tiny_data_dependent"]
    every = sweep.select_problems(folder, None)
    assert len(every) == 3
    assert sweep.anchor_sample(every, 2) == sweep.anchor_sample(every, 2) == [every[0], every[1]]
    assert sweep.anchor_sample(every, 0) == []


def test_read_done_ignores_torn_lines_and_retries_broken_runs(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    out.write_text("\n".join([
        json.dumps({"kind": "atb_eval", "level": 1, "problem": "a", "verdict": "accepted"}),
        json.dumps({"kind": "atb_eval", "level": 1, "problem": "b", "verdict": "error"}),
        json.dumps({"kind": "atb_eval", "level": 1, "problem": "c", "verdict": "timeout"}),
        json.dumps({"kind": "kb_anchor", "level": 1, "problem": "a"}),
        '{"kind": "atb_eval", "level": 1, "problem": "d", "verd',            # torn by a kill
    ]) + "\n")
    evals, anchors = sweep.read_done(out, max_attempts=2)
    assert evals == {"1:a", "1:c"} and anchors == {"1:a"}
    evals, _ = sweep.read_done(out, max_attempts=1)
    assert "1:b" in evals


def test_timeout_kills_the_whole_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time; "
            "p = subprocess.Popen(['sleep', '60'], start_new_session=True); "
            f"open({str(pidfile)!r}, 'w').write(str(p.pid)); time.sleep(60)")
    rc, _, _, wall = sweep.run_bounded([sys.executable, "-c", code], 3.0, dict(os.environ), tmp_path)
    assert rc is None and wall < 30
    gpid = int(pidfile.read_text())
    time.sleep(0.5)
    stat = Path(f"/proc/{gpid}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_budget_too_small_starts_nothing(tmp_path: Path) -> None:
    out = tmp_path / "l1.jsonl"
    r = _run("--kb", str(KB), "--level", "1", "--out", str(out), "--device", "cpu", "--time-budget-s", "20")
    assert r.returncode == 0, r.stderr
    assert "stopped: 3 problems left" in r.stdout and (not out.exists() or out.read_text() == "")


@pytest.mark.slow
def test_level2_sweep_with_anchor_then_resume_adds_nothing(tmp_path: Path) -> None:
    out = tmp_path / "l2.jsonl"
    r = _run("--kb", str(KB), "--level", "2", "--out", str(out), "--device", "cpu", "--kb-anchor-sample", "1",
             "--db", str(tmp_path / "s.sqlite"))
    assert r.returncode == 0, r.stderr
    rows = _rows(out)
    ev = [x for x in rows if x["kind"] == "atb_eval"]
    an = [x for x in rows if x["kind"] == "kb_anchor"]
    assert len(ev) == 1 and len(an) == 1
    e = ev[0]
    assert e["problem"] == "1_Tiny_conv_relu" and e["level"] == 2 and e["exit_code"] == 0, e
    assert e["verdict"] in ("accepted", "rejected", "quarantined"), e
    assert isinstance(e["ci"], list) and e["ci_contains_1"] in (True, False) and e["wall_s"] > 0
    assert e["input_bytes"] == 2 * 3 * 16 * 16 * 4 and e["flops_total"] == 2 * 2 * 8 * 14 * 14 * 27
    assert e["flops"] == 0.0   # convolution FLOPs are counted but kept out of the floor
    assert set(e["phase_s"]) >= {"load", "correctness"}
    a = an[0]
    assert a["correctness"] is True and a["kb_eval_wall_s"] > 0 and a["process_wall_s"] >= a["kb_eval_wall_s"]
    again = _run("--kb", str(KB), "--level", "2", "--out", str(out), "--device", "cpu", "--kb-anchor-sample", "1")
    assert again.returncode == 0 and "done: all 1 problems" in again.stdout
    assert _rows(out) == rows


@pytest.mark.slow
def test_resume_after_a_kill_evaluates_only_what_is_missing(tmp_path: Path) -> None:
    out = tmp_path / "l1.jsonl"
    done = {"kind": "atb_eval", "level": 1, "verdict": "accepted", "wall_s": 1.0, "ci": [0.9, 1.1],
            "ci_contains_1": True}
    out.write_text(json.dumps({**done, "problem": "1_Tiny_matmul", "id": 1}) + "\n"
                   + json.dumps({**done, "problem": "3_Tiny_data_dependent", "id": 3}) + "\n"
                   + '{"kind": "atb_eval", "level": 1, "problem": "2_Tiny_sca')   # the kill tore this line
    r = _run("--kb", str(KB), "--level", "1", "--out", str(out), "--device", "cpu")
    assert r.returncode == 0, r.stderr
    rows = [x for x in _rows_tolerant(out) if x.get("kind") == "atb_eval"]
    assert [x["problem"] for x in rows] == ["1_Tiny_matmul", "3_Tiny_data_dependent", "2_Tiny_scale_add"]
    assert rows[-1]["exit_code"] == 0 and rows[-1]["verdict"] in ("accepted", "rejected", "quarantined")
    assert rows[-1]["input_bytes"] == 2 * 16 * 1000 * 4


def _rows_tolerant(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def test_render_counts_ratios_and_exceptions(tmp_path: Path) -> None:
    rows = [
        {"kind": "atb_eval", "level": 1, "problem": "1_a", "id": 1, "verdict": "accepted", "ci": [0.98, 1.02],
         "ci_contains_1": True, "speedup": 1.0, "wall_s": 6.0, "phase_s": {"load": 1.0}, "input_bytes": 2**20,
         "output_bytes": 2**20},
        {"kind": "atb_eval", "level": 1, "problem": "2_b", "id": 2, "verdict": "accepted", "ci": [1.01, 1.05],
         "ci_contains_1": False, "speedup": 1.03, "wall_s": 8.0, "reason": "all gates passed"},
        {"kind": "atb_eval", "level": 1, "problem": "3_c", "id": 3, "verdict": "timeout", "ci": None,
         "ci_contains_1": None, "wall_s": 240.0, "reason": "atb eval timed out: x|y"},
        {"kind": "kb_anchor", "level": 1, "problem": "1_a", "kb_eval_wall_s": 3.0, "process_wall_s": 5.0,
         "correctness": True, "kb_speedup": 1.0, "stubbed_import_only": ["dotenv"]},
    ]
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = render.render([f])
    assert "accepted A/A with a CI containing 1.0: **1 of 3**" in text
    assert "verdicts: accepted 2, timeout 1" in text
    assert "median **2.00x**" in text and "| 1_a | ? | 2 | 6.0 | 3.0 | 5.0 | 2.00 | 1.20 |" in text
    assert "Exceptions (not accepted, or a CI excluding 1.0): 2" in text and "x/y" in text
    readme = tmp_path / "README.md"
    readme.write_text(f"# Title\n\nwhy\n\n{render.BEGIN}\nold\n{render.END}\n\n## Explained\nkept\n")
    render.write_section(readme, text)
    render.write_section(readme, text)
    body = readme.read_text()
    assert body.count(render.BEGIN) == 1 and "old" not in body and body.endswith("## Explained\nkept\n")


def test_render_pairs_an_anchor_only_with_the_atb_row_of_its_own_call(tmp_path: Path) -> None:
    def ev(rev: str, t: str, wall: float) -> dict[str, object]:
        return {"kind": "atb_eval", "level": 1, "problem": "1_a", "id": 1, "verdict": "accepted", "ci": [0.99, 1.01],
                "ci_contains_1": True, "speedup": 1.0, "wall_s": wall, "code_rev": rev, "started_utc": t}
    rows = [ev("aaa", "2026-12-01T10:00:00Z", 6.0),
            {"kind": "kb_anchor", "level": 1, "problem": "1_a", "kb_eval_wall_s": 3.0, "process_wall_s": 5.0,
             "correctness": True, "kb_speedup": 1.0, "code_rev": "aaa", "started_utc": "2026-12-01T10:00:07Z"},
            ev("bbb", "2026-12-02T10:00:00Z", 30.0)]          # a re-run in a later call, under another revision
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = render.render([f])
    assert "| 1_a | bbb | accepted |" in text                  # the problem's verdict is its last row
    assert "| 1_a | aaa | 0 | 6.0 | 3.0 | 5.0 | 2.00 | 1.20 |" in text   # the anchor sits beside its own call's row
    f.write_text("".join(json.dumps(r) + "\n" for r in rows[1:]))   # no row of the anchor's call: no pair
    assert "Side by side" not in render.render([f])


def test_rows_before_protocol_1_3_are_restated_with_the_process_pair_component() -> None:
    from protocol import load_protocol
    from protocol._released import RELEASED

    old = {"kind": "atb_eval", "device": "cuda", "speedup": 1.01, "ci": [1.005, 1.015]}   # excludes 1.0 as stored
    wide = render.ci_under_process_pair(old)
    assert wide is not None and wide[0] < 1.0 < wide[1]
    assert render.ci_under_process_pair({**old, "protocol_sha256": RELEASED["1.2.0"]}) == wide
    current = load_protocol().sha256
    assert render.ci_under_process_pair({**old, "protocol_sha256": current}) == [1.005, 1.015]   # already in it
    if "cpu" not in load_protocol().statistics.process_pair_log_sd:
        assert render.ci_under_process_pair({**old, "device": "cpu"}) == [1.005, 1.015]  # nothing declared for it
    assert render.ci_under_process_pair({**old, "ci": None}) is None
