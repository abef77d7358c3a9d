"""Issue 27, item 3: a forged transcript must not replay as reproduced.

The red team's forgery: every recorded verdict changed to 5.0x, the same-length verdict text patched
inside the recorded request bodies (so the replayed requests stay byte-identical), the transcript's
chain recomputed. Before this change ``replay_transcript`` compared the recorded verdicts with
themselves and said ``ok`` and ``verdicts_reproduced``. Now they are checked against the campaign's
rows in the signed store: the forgery is a divergence where the store is found, and is not reproduced
(not ok) where it is not.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from loopback import LoopbackServer
from loopback.scripts import three_iterations
from loopback.services import ScriptedServices
from loopback.workspace import MemoryToolBox

from atb_agent.campaign import CampaignSpec, run_campaign
from atb_agent.errors import ReplayDivergence
from atb_agent.evaluation import VerdictSummary
from atb_agent.replay import replay_transcript
from transcripts import TranscriptWriter  # noqa: F401 - the format under test
from transcripts._records import GENESIS, record_hash


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real (loopback-served, not scripted-labelled) campaign: its transcript beside its signed store."""
    monkeypatch.setenv("ATB_KEY_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with LoopbackServer(three_iterations()) as srv:
        summary = run_campaign(CampaignSpec(task="gelu", tuner="openai:scripted-model", budget=3, seed=7,
                                            store=tmp_path / "run" / "atb.sqlite",
                                            base_url=srv.openai_base_url, scripted=False),
                                            services=ScriptedServices())
    return Path(summary.outcome.detail["transcript"])


def _replay(path: Path, **kw: Any) -> Any:
    return replay_transcript(path, toolbox_factory=lambda inbox, brief: MemoryToolBox(brief, inbox), **kw)


def _patch(value: Any, old: str, new: str) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "body_b64" and isinstance(v, str):
                body = base64.b64decode(v).replace(old.encode(), new.encode())
                out[k] = base64.b64encode(body).decode()
            else:
                out[k] = _patch(v, old, new)
        return out
    if isinstance(value, list):
        return [_patch(v, old, new) for v in value]
    if isinstance(value, str):
        return value.replace(old, new)
    return value


def forge(src: Path, dst: Path, *, scripted: bool | None = None) -> int:
    """Every accepted verdict to 5.0x, its shown text patched everywhere, the chain recomputed.
    Returns how many verdicts were changed."""
    envs = [json.loads(line) for line in src.read_text().splitlines()]
    changed = 0
    for e in envs:
        if e["kind"] != "verdict" or e["data"]["verdict"].get("speedup") is None:
            continue
        was = VerdictSummary.model_validate(e["data"]["verdict"])
        now = was.model_copy(update={"speedup": 5.0, "speedup_ci": (4.975, 5.025) if was.speedup_ci else None})
        old_text, new_text = was.for_model(), now.for_model()
        assert len(old_text) == len(new_text)          # a same-length patch: no length field moves
        for other in envs:
            other["data"] = _patch(other["data"], old_text, new_text)
        e["data"]["verdict"] = now.model_dump(mode="json")
        changed += 1
    prev = GENESIS
    for e in envs:
        if scripted is not None and e["kind"] == "header":
            e["data"]["scripted"] = scripted
        e["prev"] = prev
        e["hash"] = record_hash(e["seq"], e["kind"], prev, e["data"])
        prev = e["hash"]
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in envs))
    return changed


def test_genuine_transcript_is_reproduced_against_the_signed_store(recorded: Path) -> None:
    report = _replay(recorded)
    assert report.ok and report.verdicts_reproduced and report.verdict_evidence == "signed_store"
    assert report.evidence_checkpoint is not None and report.evidence_store.endswith("atb.sqlite")
    assert len(report.verdicts) == 3 and not any(m.moved for m in report.verdicts)


def test_forged_transcript_beside_its_store_is_a_divergence(recorded: Path, tmp_path: Path) -> None:
    forged = recorded.parent / "forged.jsonl"
    assert forge(recorded, forged) >= 1
    with pytest.raises(ReplayDivergence) as err:
        _replay(forged)
    assert err.value.field == "verdicts" and "signed store" in str(err.value)   # the requests all matched


def test_forged_transcript_without_its_store_is_not_reproduced(recorded: Path, tmp_path: Path) -> None:
    forged = tmp_path / "elsewhere" / "forged.jsonl"
    forge(recorded, forged)
    report = _replay(forged)
    assert report.requests_identical == report.model_calls      # the forgery replays byte-for-byte...
    assert not report.ok and not report.verdicts_reproduced     # ...and is not taken for reproduced
    assert report.verdict_evidence == "none" and report.evidence_problems
    # labelled a scripted fixture, it still claims nothing about its verdicts
    fixture = tmp_path / "elsewhere" / "fixture.jsonl"
    forge(recorded, fixture, scripted=True)
    report = _replay(fixture)
    assert report.scripted and not report.verdicts_reproduced and report.verdict_evidence == "none"


def test_forged_transcript_against_a_forged_store_is_not_reproduced(recorded: Path, tmp_path: Path) -> None:
    """Moved beside a copy of the store whose verdicts were rewritten to 5.0x with the chain recomputed:
    the store's checkpoint no longer verifies, so it is no evidence."""
    import sqlite3

    from harness.store._chain import CHAINED_TABLES, MAX_SEQ_SQL, row_at, row_hash

    folder = tmp_path / "copy"
    (folder / "transcripts").mkdir(parents=True)
    db = folder / "atb.sqlite"
    shutil.copy(recorded.parent.parent / "atb.sqlite", db)
    forged = folder / "transcripts" / recorded.name
    forge(recorded, forged)
    conn = sqlite3.connect(db, isolation_level=None)
    saved = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").fetchall()
    for name, _ in saved:
        conn.execute(f'DROP TRIGGER "{name}"')
    first = int(conn.execute("SELECT min(chain_seq) FROM verdicts WHERE ratio IS NOT NULL").fetchone()[0])
    conn.execute("UPDATE verdicts SET ratio = 5.0, ci_low = 4.975, ci_high = 5.025 WHERE ratio IS NOT NULL")
    prev = str(row_at(conn, first - 1)[1]["row_hash"])  # type: ignore[index]
    for seq in range(first, int(conn.execute(MAX_SEQ_SQL).fetchone()[0]) + 1):
        table, row = row_at(conn, seq)  # type: ignore[misc]
        prev = row_hash(prev, table, row)
        conn.execute(f"UPDATE {table} SET row_hash = ? WHERE chain_seq = ?", (prev, seq))
    for _, sql in saved:
        conn.execute(sql)
    conn.close()
    assert CHAINED_TABLES
    report = _replay(forged)
    assert not report.ok and not report.verdicts_reproduced
    assert any("fails verification" in p for p in report.evidence_problems), report.evidence_problems
