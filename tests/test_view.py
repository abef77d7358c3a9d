"""``atb view`` (issue 31) without a browser: every page renders from a store built with the project's own
APIs and shows the store's numbers with their provenance; a missing or tampered store is a page saying so,
never a traceback; nothing is written to the store; a non-loopback bind needs its token.

The store comes from ``benchmarks/view_pages.py``'s ``populate`` (the same builder the page benchmark and
the browser tests use), at a small size.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from benchmark_scripts import load_benchmark
from harness.store import SqliteStore
from harness.tuning.campaigns import get_iterations, summarize

from atb_agent.view import ViewConfig, create_app

vp = load_benchmark("view_pages")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    db = tmp_path_factory.mktemp("view") / "atb.sqlite"
    return db, vp.populate(db, campaigns=6, iterations=5)


@pytest.fixture(scope="module")
def client(built: tuple[Path, dict[str, Any]]) -> Iterator[TestClient]:
    db, _ = built
    app = create_app(ViewConfig(db=str(db)))
    assert app.state.view.verifier.wait(60).state == "verified"
    with TestClient(app) as c:
        yield c


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_every_page_renders_with_provenance(client: TestClient, built: tuple[Path, dict[str, Any]]) -> None:
    _, info = built
    for name, path in vp.pages(info).items():
        r = client.get(path)
        assert r.status_code == 200, (name, r.text[:500])
        if path.startswith("/api"):
            continue
        assert "Traceback" not in r.text
        if name not in ("index live fragment",):
            assert "protocol 1." in r.text or "protocol " in r.text, name


def test_index_shows_verification_first_and_every_campaign(client: TestClient, built: tuple[Path, dict[str, Any]]) -> None:
    db, info = built
    html = client.get("/").text
    text = _text(html)
    assert text.index("store verified") < text.index("Campaigns")
    for cid in info["campaigns"]:
        assert f'href="/campaign/{cid}"' in html
    assert f'href="/sweep/{info["sweep"]}"' in html
    assert "running" in text                       # the last campaign has no outcome
    with SqliteStore(db) as store:
        s = summarize(store, info["campaigns"][0])
    row = re.search(rf'data-campaign="{info["campaigns"][0]}".*?</tr>', html, re.S)
    assert row is not None and f"{s.best_speedup:.3f}x" in row.group(0)
    assert re.search(r"protocol \S+ [0-9a-f]{12}", _text(row.group(0)))


def test_campaign_page_numbers_match_the_store(client: TestClient, built: tuple[Path, dict[str, Any]]) -> None:
    db, info = built
    cid = info["campaigns"][0]
    html = client.get(f"/campaign/{cid}").text
    with SqliteStore(db) as store:
        its = get_iterations(store, cid)
    for it in its:
        row = re.search(rf'<tr id="i{it.idx}".*?</tr>', html, re.S)
        assert row is not None
        shown = re.search(r'data-field="speedup">([^<]*)<', row.group(0))
        assert shown is not None
        assert shown.group(1) == ("n/a" if it.speedup is None else f"{it.speedup:.3f}x")
        assert ('class="badge cert">certified' in row.group(0)) == bool(it.usable)
    assert 'data-plot="fig-best"' in html and '"best so far (usable)"' in html
    assert "/static/plotly.min.js" in html and "cdn" not in html.lower()


def test_iteration_page_gate_log_interval_histogram_and_diff(client: TestClient, built: tuple[Path, dict[str, Any]]) -> None:
    db, info = built
    cid = info["campaigns"][0]
    with SqliteStore(db) as store:
        its = get_iterations(store, cid)
        it = next(i for i in its if i.idx > 0 and i.speedup is not None)
        v = store.verdict(it.verdict_id or "")
    html = client.get(f"/campaign/{cid}/iteration/{it.idx}").text
    assert f'id="verdict-ratio">{v.ratio:.4f}x' in html
    assert f"[{v.ci_low:.3f}, {v.ci_high:.3f}]" in html
    for g in v.gates:
        assert f"<td>{g.name}</td>" in html
    assert 'data-plot="fig-samples"' in html and '"type":"histogram"' in html
    assert 'class="add"' in html and f"iteration {it.idx}" in html       # diffed against the previous one
    assert "bwrap:" in html                                              # confinement per arm


def test_transcript_turns_tool_calls_and_truncation(client: TestClient, built: tuple[Path, dict[str, Any]]) -> None:
    _, info = built
    cid = info["campaigns"][0]
    html = client.get(f"/campaign/{cid}/transcript").text
    assert "hash chain intact" in html
    assert 'id="r0"' in html and 'id="iter-1"' in html                 # stable anchors
    assert "TRUNCATED (finish_reason=length" in html
    assert '<span id="truncated-turns" class="bad">1 truncated</span>' in html
    assert "write_file" in html
    assert "more characters not shown on this page" in html              # a cut display is marked
    # a campaign without a transcript says so
    other = info["campaigns"][1]
    assert "no transcript found" in client.get(f"/campaign/{other}/transcript").text


def test_transcript_edited_is_shown_broken(tmp_path: Path) -> None:
    db = tmp_path / "atb.sqlite"
    info = vp.populate(db, campaigns=1, iterations=2)
    path = next(tmp_path.glob("transcript-*.jsonl"))
    path.write_text(path.read_text().replace("trying block size", "trying BLOCK size", 1))
    with TestClient(create_app(ViewConfig(db=str(db)))) as c:
        html = c.get(f"/campaign/{info['campaigns'][0]}/transcript").text
    assert "hash chain BROKEN" in html and "fails verification" in html and "Traceback" not in html


def test_ab_delivery_checkpoint_and_kernelbench_table(client: TestClient, built: tuple[Path, dict[str, Any]]) -> None:
    _, info = built
    html = client.get(f"/ab/{info['registration']}").text
    assert "Treatment-delivery checkpoint" in html and "NOT delivered" in html and "void" in html
    for cid in info["campaigns"][-2:]:
        assert f'href="/campaign/{cid}"' in html
    kb = client.get("/kernelbench").text
    with SqliteStore(built[0]) as store:
        kb_runs = [c for c in store.campaigns() if c.task_id == vp.KB_TASK]
    assert kb_runs and "19_ReLU" in kb
    for run in kb_runs:
        assert f'href="/campaign/{run.id}"' in kb and f"<th>{run.arm or run.tuner_spec}</th>" in kb


def test_unknown_ids_are_404_pages(client: TestClient) -> None:
    for path in ("/campaign/run-nope", "/verdict/nope", "/ab/nope", "/sweep/nope", "/campaign/run-nope/iteration/3"):
        r = client.get(path)
        assert r.status_code == 404 and "Traceback" not in r.text and "back to the index" in r.text


def test_missing_store_is_shown_as_such(tmp_path: Path) -> None:
    app = create_app(ViewConfig(db=str(tmp_path / "absent.sqlite")))
    assert app.state.view.verifier.wait(30).state == "missing"
    with TestClient(app) as c:
        r = c.get("/")
        assert r.status_code == 200 and "NO STORE" in r.text and "Traceback" not in r.text
        r = c.get("/campaign/x")
        assert r.status_code == 503 and "no results store" in r.text
    assert not (tmp_path / "absent.sqlite").exists()                     # never created


def test_tampered_store_is_shown_as_such(tmp_path: Path) -> None:
    db = tmp_path / "atb.sqlite"
    info = vp.populate(db, campaigns=2, iterations=3)
    conn = sqlite3.connect(db)
    conn.execute("DROP TRIGGER iterations_no_update")
    conn.execute("UPDATE iterations SET tokens_in = 1 WHERE idx = 0")   # an edit the chain exposes
    conn.commit()
    conn.close()
    app = create_app(ViewConfig(db=str(db)))
    assert app.state.view.verifier.wait(60).state == "failed"
    with TestClient(app) as c:
        html = c.get("/").text
        assert "STORE FAILS VERIFICATION" in html and "Traceback" not in html
        assert "trigger iterations_no_update is missing" in html
        camp = c.get(f"/campaign/{info['campaigns'][0]}")
        assert camp.status_code == 200 and "STORE FAILS VERIFICATION" in camp.text


def test_viewing_never_writes(tmp_path: Path) -> None:
    db = tmp_path / "atb.sqlite"
    info = vp.populate(db, campaigns=1, iterations=2)
    before = db.read_bytes()
    with TestClient(create_app(ViewConfig(db=str(db)))) as c:
        for path in vp.pages({**info, "sweep": info["sweep"]}).values():
            c.get(path)
        assert c.post("/").status_code == 405
    assert db.read_bytes() == before


def test_token_gate(built: tuple[Path, dict[str, Any]]) -> None:
    db, _ = built
    with TestClient(create_app(ViewConfig(db=str(db), token="s3cret"))) as c:
        assert c.get("/").status_code == 401
        assert c.get("/?token=wrong").status_code == 401
        assert c.get("/?token=s3cret").status_code == 200
        assert c.get("/kernelbench").status_code == 200             # the cookie it set carries on


def test_cli_registers_view_and_refuses_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    from atb_agent.cli import build_parser, main
    from atb_agent.cli._view import is_loopback

    args = build_parser().parse_args(["view", "--db", "x.sqlite", "--port", "0"])
    assert args.command == "view" and args.host == "127.0.0.1"
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    assert main(["view", "--db", "mysql://h/db"]) == 2
    assert "unknown store scheme" in capsys.readouterr().err


def test_unreachable_server_store_is_shown_without_its_password() -> None:
    url = "postgresql://atb:hunter2secret@127.0.0.1:1/atb"
    app = create_app(ViewConfig(db=url, warm=False))
    state = app.state.view.verifier.wait(60)
    assert state.state in ("missing", "error") and "hunter2secret" not in state.message
    with TestClient(app) as c:
        html = c.get("/").text
    assert "cannot connect" in html and "hunter2secret" not in html and "Traceback" not in html
