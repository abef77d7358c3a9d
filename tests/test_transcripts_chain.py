"""The hash chain: what is written reads back, and any edit, deletion, insertion or reorder is caught."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transcripts import (
    HeaderData,
    IterationStartData,
    ResumeData,
    TranscriptFormatError,
    TranscriptTampered,
    TranscriptWriter,
    normalise_request_headers,
    read_transcript,
    verify_transcript,
)
from transcripts._records import record_hash


def _header() -> HeaderData:
    return HeaderData(scripted=True, tuner_spec="openai:m", provider="openai", model="m", base_url="http://x/v1",
                      task="gelu", task_brief="brief", budget=2, seed=0, campaign_id="run-1", protocol_version="1.0.0",
                      protocol_sha256="0" * 64, max_output_tokens=10, max_tool_calls_per_iteration=4,
                      tool_definitions_sha256="1" * 64,
                      created_at="2026-01-01T00:00:00")


def _write(path: Path, n: int = 4) -> None:
    w = TranscriptWriter(path)
    w.append("header", _header())
    for i in range(n):
        w.append("iteration_start", IterationStartData(iteration=i, observation=f"obs {i}"))


def test_written_transcript_verifies_and_reads_back(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    _write(p)
    t = read_transcript(p)
    assert verify_transcript(p) == 5
    assert t.header.task == "gelu"
    assert [e.data["observation"] for e in t.live[1:]] == ["obs 0", "obs 1", "obs 2", "obs 3"]
    # each record's prev is the previous record's hash
    assert all(b.prev == a.hash for a, b in zip(t.records, t.records[1:]))


def test_reopening_continues_the_chain(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    _write(p, 1)
    w = TranscriptWriter(p)
    assert w.next_seq == 2
    w.append("iteration_start", IterationStartData(iteration=1, observation="later"))
    assert verify_transcript(p) == 3


def _lines(p: Path) -> list[str]:
    return p.read_text().splitlines()


def _put(p: Path, lines: list[str]) -> None:
    p.write_text("".join(line + "\n" for line in lines))


def test_an_edited_value_is_detected_at_its_line(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    _write(p)
    lines = _lines(p)
    lines[2] = lines[2].replace("obs 1", "obs X")
    _put(p, lines)
    with pytest.raises(TranscriptTampered) as exc:
        read_transcript(p)
    assert exc.value.line == 3
    assert "does not match its hash" in str(exc.value)


def test_an_edit_with_a_recomputed_hash_breaks_the_next_link(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    _write(p)
    lines = _lines(p)
    rec = json.loads(lines[2])
    rec["data"]["observation"] = "forged"
    rec["hash"] = record_hash(rec["seq"], rec["kind"], rec["prev"], rec["data"])
    lines[2] = json.dumps(rec)
    _put(p, lines)
    with pytest.raises(TranscriptTampered) as exc:
        read_transcript(p)
    assert exc.value.line == 4
    assert "prev" in str(exc.value)


@pytest.mark.parametrize("edit", ["drop", "swap", "duplicate", "garbage"])
def test_structural_edits_are_detected(tmp_path: Path, edit: str) -> None:
    p = tmp_path / "t.jsonl"
    _write(p)
    lines = _lines(p)
    if edit == "drop":
        del lines[2]
    elif edit == "swap":
        lines[2], lines[3] = lines[3], lines[2]
    elif edit == "duplicate":
        lines.insert(3, lines[2])
    else:
        lines[1] = lines[1][:-5]
    _put(p, lines)
    with pytest.raises(TranscriptTampered):
        read_transcript(p)


def test_a_transcript_must_start_with_its_header(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    w = TranscriptWriter(p)
    w.append("iteration_start", IterationStartData(iteration=0, observation="o"))
    with pytest.raises(TranscriptFormatError):
        read_transcript(p)


def test_resume_record_voids_the_abandoned_range(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    _write(p, 3)   # seq 0 header, 1..3 iteration_start
    w = TranscriptWriter(p)
    w.append("resume", ResumeData(abandoned_from=2, abandoned_to=3, resumed_at="now"))
    t = read_transcript(p)
    assert t.voided == {2, 3}
    assert [e.seq for e in t.live] == [0, 1]


def test_headers_are_normalised_and_secrets_redacted() -> None:
    out = dict(normalise_request_headers([
        ("Authorization", "Bearer sk-secret"), ("X-Api-Key", "sk-ant"), ("x-stainless-retry-count", "2"),
        ("x-stainless-read-timeout", "600"), ("Idempotency-Key", "stainless-python-retry-abc"),
        ("content-type", "application/json")]))
    assert out["authorization"] == "<redacted>" and out["x-api-key"] == "<redacted>"
    assert out["x-stainless-retry-count"] == out["x-stainless-read-timeout"] == out["idempotency-key"] == "<per-attempt>"
    assert out["content-type"] == "application/json"
    assert "sk-secret" not in json.dumps(out)
