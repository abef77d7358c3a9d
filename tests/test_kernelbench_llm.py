"""The LLM arm over KernelBench-format problems (``benchmarks/kernelbench_llm.py``, issue 26): its rows,
its resumption across calls, the side-by-side table, and the device kit's part planning.

The end-to-end tests drive the real campaign path (``run_campaign`` with the harness's own services: a
measurement session on the CPU, the tuner's bubblewrap sandbox, every candidate measured) against a
loopback model server that serves scripted text-protocol turns, on this project's own tiny fixtures.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from pathlib import Path

import pytest
from loopback import LoopbackServer, ScriptedTurn
from loopback.served import register_served

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts"))

import device_kit  # noqa: E402
import kernelbench_llm as kl  # noqa: E402
import render_kernelbench_arms as arms  # noqa: E402

KB = ROOT / "tests" / "fixtures" / "kernelbench_like"
PROBLEM = "2_Tiny_scale_add"
GOOD = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n\n    def forward(self, x, z):\n        return x * 2.0 + z\n")
REPLY = f"Here is candidate.py:\n\n```python\n{GOOD}```\n"
ROW_KEYS = {"kind", "problem", "level", "tuner", "seed", "budget", "device", "campaign_key", "campaign_id", "outcome",
            "usable_iterations", "iterations_recorded", "correct_fraction", "best_speedup", "best_ci", "fast_1",
            "model_calls", "truncated_calls", "truncated_fraction", "model", "arm_config", "timing_s", "iterations",
            "protocol_sha256", "code_rev", "started_utc", "sandbox", "sandbox_started", "sandbox_runs"}
ITERATION_KEYS = {"idx", "status", "correct", "speedup", "ci", "usable", "unusable_reason", "reason", "reason_last_line",
                  "candidate_sha256", "model_calls", "failed_calls", "truncated_calls", "model_s", "output_tokens"}


def _rows(out: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------------- fast
def test_the_campaign_key_is_fixed_by_problem_tuner_seed_budget_and_attempt(tmp_path: Path) -> None:
    problem = KB / "KernelBench" / "level1" / f"{PROBLEM}.py"
    key = kl.campaign_key(1, problem, "openai:smollm2", 1, 3, 1)
    assert key == kl.campaign_key(1, problem, "openai:smollm2", 1, 3, 1)
    assert key.startswith(f"kbllm-l1-{PROBLEM}-") and key.endswith("-openai-smollm2-s1-b3")
    assert kl.campaign_key(1, problem, "openai:smollm2", 1, 3, 2) == key + "-a2"
    copy = tmp_path / problem.name
    copy.write_text(problem.read_text() + "\n# edited\n")
    assert kl.campaign_key(1, copy, "openai:smollm2", 1, 3, 1) != key      # another source, another campaign


def test_state_settles_a_finished_row_and_retries_an_error_up_to_the_attempts(tmp_path: Path) -> None:
    out = tmp_path / "llm.jsonl"
    base = {"level": 1, "kind": "llm_campaign"}
    out.write_text("\n".join(json.dumps(r) for r in [
        {**base, "problem": "a", "outcome": "completed"},
        {**base, "problem": "b", "outcome": "error"},
        {**base, "problem": "c", "outcome": "error"}, {**base, "problem": "c", "outcome": "error"},
        {"level": 1, "problem": "d", "kind": "llm_abandoned"},
    ]) + "\n{torn")
    settled, abandoned, errors = kl.read_state(out, max_attempts=2)
    assert settled == {"1:a", "1:c"} and errors == {"1:b": 1, "1:c": 2} and abandoned == {"1:d": 1}


def _row(kind: str, tuner: str, problem: str, usable: int, **extra: object) -> dict[str, object]:
    return {"kind": kind, "tuner": tuner, "seed": 1, "budget": 3, "device": "cuda", "level": 1, "problem": problem,
            "id": int(problem.split("_")[0]), "outcome": "completed", "usable_iterations": usable,
            "iterations_recorded": 3, "correct_iterations": usable, "correct_fraction": usable / 3,
            "best_speedup": 1.2 if usable else None, "best_ci": [1.1, 1.3] if usable else None,
            "fast_1": bool(usable), "fast_1_ci": bool(usable), "started_utc": "2026-12-05T10:00:00Z",
            "code_rev": "abc1234", "protocol_sha256": "p" * 64, **extra}


def test_the_table_puts_the_arms_side_by_side_per_problem(tmp_path: Path) -> None:
    llm = {"model_calls": 3, "truncated_calls": 1, "model": {"model": "smollm2", "gguf_sha256": "b179c9523d0e6a0f"}}
    a, b = tmp_path / "random.jsonl", tmp_path / "llm.jsonl"
    a.write_text("\n".join(json.dumps(r) for r in [_row("random_campaign", "random", "19_ReLU", 1),
                                                     _row("random_campaign", "random", "23_Softmax", 0)]) + "\n")
    b.write_text("\n".join(json.dumps(r) for r in [
        {**_row("llm_campaign", "openai:smollm2", "19_ReLU", 0, **llm), "outcome": "error",
         "started_utc": "2026-12-05T09:00:00Z"},
        _row("llm_campaign", "openai:smollm2", "19_ReLU", 2, **llm)]) + "\n")
    text = arms.render(arms.read_rows([a, b]))
    random_at, llm_at = text.index("| random (seed 1"), text.index("| openai:smollm2 (seed 1")
    assert random_at < llm_at                                            # the baseline first
    assert "| 19_ReLU | 1 / 3 | 1.200x [1.100x, 1.300x] | 33% | 2 / 3 | 1.200x [1.100x, 1.300x] | 67% | 1 / 3 |" in text
    assert "| 23_Softmax | 0 / 3 | n/a | 0% | – | – | – | – |" in text     # the LLM arm has not run it yet
    assert "1 / 3, 0 set aside" in text                                  # the retry's row, not the broken one
    assert "smollm2 gguf b179c9523d0e" in text


def test_the_device_kit_balances_its_parts_under_the_limit() -> None:
    mib = 1 << 20
    sizes = device_kit.plan_chunks(22 * mib, 90 * mib, 56 * mib)
    assert len(sizes) == 2 and sum(sizes) == 90 * mib
    parts = [22 * mib + sizes[0], sizes[1]]
    assert max(parts) <= 56 * mib and max(parts) - min(parts) <= 1       # balanced, so each call has the same room
    assert len(device_kit.plan_chunks(22 * mib, 90 * mib, 40 * mib)) == 3
    assert device_kit.plan_chunks(1 * mib, 3 * mib, 56 * mib) == [3 * mib]
    with pytest.raises(SystemExit):
        device_kit.plan_chunks(57 * mib, 3 * mib, 56 * mib)


# ----------------------------------------------------------------------------------- end to end
@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATB_CACHE_DIR", str(cache))         # children read the served model's state file here
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ATB_PROMPT", raising=False)
    return cache


def _sweep(tmp_path: Path, url: str, *extra: str) -> int:
    return kl.main(["--kb", str(KB), "--level", "1", "--problems", PROBLEM, "--out", str(tmp_path / "llm.jsonl"),
                    "--stores", str(tmp_path / "stores"), "--device", "cpu", "--budget", "2", "--seed", "1",
                    "--base-url", url, "--time-budget-s", "500", *extra])


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_a_campaign_cut_by_a_failed_model_call_resumes_in_the_next_call_and_writes_one_row(
        tmp_path: Path, served: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from protocol import load_protocol
    from sandbox._open import bwrap_root

    # call 1: the model answers the first iteration, then fails (the script is exhausted: HTTP 500); no image
    # root filesystem here, so the tuner's sandbox runs over the host's own files (a GPU host without one)
    no_image = tmp_path / "no-image"
    monkeypatch.setenv("ATB_SANDBOX_CACHE", str(no_image))
    with LoopbackServer([ScriptedTurn(text=REPLY)]) as srv:
        register_served(served, srv.openai_base_url)
        assert _sweep(tmp_path, srv.openai_base_url, "--keep-stores") == 0
    monkeypatch.delenv("ATB_SANDBOX_CACHE")     # call 2: this machine's own cache (an image root where built)
    second_root, _ = bwrap_root(load_protocol().sandbox.image)
    first = _rows(tmp_path / "llm.jsonl")
    assert [(r["kind"], r["outcome"]) for r in first] == [("llm_campaign", "error")]
    run_id = first[0]["run_id"]
    folder = tmp_path / "stores" / str(first[0]["campaign_key"])
    with sqlite3.connect(folder / kl.STORE_FILE) as db:
        assert db.execute("select count(*) from iterations where campaign_id=?", (run_id,)).fetchone()[0] == 1

    # call 2: a model that answers again; the same campaign resumes from its checkpoint, iteration 0 is not redone
    with LoopbackServer([ScriptedTurn(text=REPLY)] * 2) as srv:
        register_served(served, srv.openai_base_url)
        assert _sweep(tmp_path, srv.openai_base_url, "--keep-stores") == 0
        resumed_requests = len(srv.requests)
    rows = _rows(tmp_path / "llm.jsonl")
    assert len(rows) == 2 and rows[1]["kind"] == "llm_campaign" and rows[1]["campaign_id"] == run_id
    row = rows[1]
    assert ROW_KEYS <= set(row) and row["campaign_key"] == first[0]["campaign_key"]
    assert row["iterations_recorded"] == 2 and [it["idx"] for it in row["iterations"]] == [0, 1]
    assert all(ITERATION_KEYS <= set(it) for it in row["iterations"])
    assert resumed_requests == 1                             # only iteration 1's model call was made again
    # every call of the campaign: iteration 0's, iteration 1's that failed (HTTP 500) and its retry after the resume
    assert (row["model_calls"], row["failed_calls"], row["truncated_calls"], row["resumes"]) == (3, 1, 0, 1)
    assert [it["model_calls"] for it in row["iterations"]] == [1, 2]
    first_it = row["iterations"][0]
    assert first_it["status"] == "accepted" and first_it["correct"] is True, first_it
    assert row["correct_fraction"] == 1.0 and kl.DEFAULT_ARM_CONFIG.items() <= row["arm_config"].items()
    assert row["model"]["text_protocol"] == "fenced-python-stop/1"
    # the sandbox each run started, not only the backend asked for: call 1's host root, then call 2's
    assert row["sandbox"] == "bwrap" and row["sandbox_runs"][0] == row["sandbox_started"]
    assert [(s["backend"], s["root"], s["requested"]) for s in row["sandbox_runs"]] == \
        [("bwrap", "host", "bwrap"), ("bwrap", second_root, "bwrap")]
    assert row["sandbox_started"]["image"] == "host-root"
    assert row["sandbox_started"]["selection"][1].startswith(f"no image root filesystem at {no_image}")
    with sqlite3.connect(folder / kl.STORE_FILE) as db:     # still one campaign, each iteration stored once
        assert db.execute("select count(*) from campaigns").fetchone()[0] == 1
        assert db.execute("select count(*) from iterations").fetchone()[0] == 2

    # call 3: nothing left to do
    assert _sweep(tmp_path, "http://127.0.0.1:9/v1") == 0
    assert len(_rows(tmp_path / "llm.jsonl")) == 2
    text = arms.render(arms.read_rows([tmp_path / "llm.jsonl"]))
    assert f"| {PROBLEM} | " in text and "openai:smollm2 s1: usable / budget" in text


def test_the_device_kit_reassembles_its_parts_checks_them_and_skips_what_it_has(tmp_path: Path) -> None:
    import hashlib
    import lzma

    model = b"GGUF" + bytes(range(256)) * 400
    xz = lzma.compress(model)
    cut = len(xz) // 2
    chunks = [xz[:cut], xz[cut:]]
    pieces = [{"name": f"{device_kit.GGUF_XZ}.{i:03d}", "part": i + 1, "bytes": len(c),
               "sha256": hashlib.sha256(c).hexdigest()} for i, c in enumerate(chunks)]
    manifest = {"format": device_kit.KIT_FORMAT, "kit_id": "k1", "parts": 2, "pieces": pieces,
                "gguf": {"file": "m.gguf", "sha256": hashlib.sha256(model).hexdigest(), "bytes": len(model),
                         "xz_sha256": hashlib.sha256(xz).hexdigest(), "xz_bytes": len(xz)}}
    src, kit = tmp_path / "carried", tmp_path / "kit"
    kit.mkdir()
    for i, c in enumerate(chunks):                       # the two calls, each carrying one part
        part = src / f"call{i + 1}" / f"part{i + 1}"
        part.mkdir(parents=True)
        (part / "MANIFEST.json").write_text(json.dumps(manifest))
        (part / pieces[i]["name"]).write_bytes(c)
    assert device_kit._stash(kit, src / "call1")["kit_id"] == "k1"
    assert device_kit._assemble_model(kit, manifest) is None          # part 2 not here yet
    device_kit._stash(kit, src / "call2")
    path = device_kit._assemble_model(kit, manifest)
    assert path is not None and path.read_bytes() == model
    assert not any((kit / "pieces").glob("gguf.xz.*"))               # the chunks are dropped once the model is whole
    assert device_kit._assemble_model(kit, manifest) == path          # a later call keeps it
    bad = src / "call3" / "part1"
    bad.mkdir(parents=True)
    (bad / "MANIFEST.json").write_text(json.dumps({**manifest, "kit_id": "k2"}))
    (bad / pieces[0]["name"]).write_bytes(b"x" + chunks[0][1:])        # a damaged copy is refused
    with pytest.raises(SystemExit, match="SHA-256"):
        device_kit._stash(kit, src / "call3")
