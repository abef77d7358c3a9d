"""benchmarks/render_results.py: the README's results section is generated from the committed JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

from benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _render_module() -> ModuleType:
    return load_benchmark("render_results")


def test_render_from_gpu_evidence_outputs(tmp_path: Path) -> None:
    src = ROOT / "benchmarks" / "results" / "h200"
    shutil.copytree(src, tmp_path / "h200")
    text = _render_module().render(tmp_path)
    anchors = json.loads((src / "anchors.json").read_text())
    for r in anchors["cuda"]["results"]:
        assert f"| {r['id']} | {r['measured_over_expected']:.3f} |" in text and r["outcome"] in text
    for run in json.loads((src / "random_cuda.json").read_text())["runs"]:
        assert f"| {run['task']} | {run['usable_iterations']} / {run['budget']} |" in text
    assert "held-out" in text.lower() and "### H200" in text
    for extra in src.glob("retest_*_on_*.json"):  # legs measured later from the results file
        d = json.loads(extra.read_text())
        assert f"- {d['task_id']}: home {d['home_ratio']:.3f}x" in text and d["candidate_sha256"][:12] in text


def test_a_failed_step_is_shown_not_skipped(tmp_path: Path) -> None:
    d = tmp_path / "h200"
    d.mkdir()
    (d / "retest.json").write_text(json.dumps({"ok": False, "step": "retest", "exit_code": 124, "stdout_tail": ""}))
    text = _render_module().render(tmp_path)
    assert "held-out retest: step failed" in text and "device fingerprint: missing" in text


def test_write_replaces_only_the_marked_section(tmp_path: Path) -> None:
    mod = _render_module()
    readme = tmp_path / "README.md"
    readme.write_text("# Title\n\nintro\n")
    mod.write_into(readme, "## Results\n\nfirst\n")
    mod.write_into(readme, "## Results\n\nsecond\n")
    text = readme.read_text()
    assert text.startswith("# Title\n\nintro\n") and "second" in text and "first" not in text
    assert text.count(mod.START) == 1 and text.count(mod.END) == 1
