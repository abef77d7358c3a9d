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
from harness.store import open_store
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
    with open_store(db) as store:
        s = summarize(store, info["campaigns"][0])
    row = re.search(rf'data-campaign="{info["campaigns"][0]}".*?</tr>', html, re.DOTALL)
    assert row is not None and f"{s.best_speedup:.3f}x" in row.group(0)
    assert re.search(r"protocol \S+ [0-9a-f]{12}", _text(row.group(0)))


def test_campaign_page_numbers_match_the_store(client: TestClient, built: tuple[Path, dict[str, Any]]) -> None:
    db, info = built
    cid = info["campaigns"][0]
    html = client.get(f"/campaign/{cid}").text
    with open_store(db) as store:
        its = get_iterations(store, cid)
    for it in its:
        row = re.search(rf'<tr id="i{it.idx}".*?</tr>', html, re.DOTALL)
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
    with open_store(db) as store:
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
    with open_store(built[0]) as store:
        kb_runs = [c for c in store.campaigns() if c.task_id == vp.KB_TASK]
    assert kb_runs and "19_ReLU" in kb
    for run in kb_runs:
        assert f'href="/campaign/{run.id}"' in kb and f"<th>{run.arm or run.tuner_spec}</th>" in kb


def test_registration_without_runs_shows_arms_digest_and_not_run_yet(client: TestClient,
                                                                      built: tuple[Path, dict[str, Any]]) -> None:
    db, info = built
    rid = info["idle_registration"]
    with open_store(db) as store:
        row = store.preregistration(rid)
        assert row is not None and not store.campaigns(rid)
    html = client.get(f"/ab/{rid}").text
    text = _text(html)
    assert row.spec_sha256[:16] in html and re.search(r"protocol \S+ [0-9a-f]{12}", text)
    assert 'data-delivery="not-run"' in html and "not run yet" in text
    for role in ("control", "treatment"):
        arm = row.spec[role]
        line = re.search(rf'<tr data-arm="{arm["name"]}">.*?</tr>', html, re.DOTALL)
        assert line is not None, role
        shown = _text(line.group(0))
        assert role in shown and arm["tuner"] in shown and arm["base_url"] in shown and "0 / 2" in shown
    assert "VEC-HINT: prefer vectorised torch ops" in html                 # the treatment's config
    # the index lists registrations with where their delivery checkpoint stands
    index = client.get("/").text
    reg = re.search(rf'<tr data-registration="{info["registration"]}">.*?</tr>', index, re.DOTALL)
    assert reg is not None and 'data-delivery="not-delivered"' in reg.group(0)


def test_delivery_checkpoint_states() -> None:
    from atb_agent.view._data import _delivery_state, provenance
    from atb_agent.view._models import CampaignCard

    def card(i: int, outcome: str | None) -> CampaignCard:
        return CampaignCard(id=f"run-{i}", task_id="relu", kind="kernel", tuner_spec="t", seed=i, budget=2, arm="a",
                            preregistration_id="r", sweep_id=None, created_at="", recorded=2, usable=0,
                            outcome=outcome, best_speedup=None, best_ci=None, best_idx=None,
                            provenance=provenance(None, None))

    def outcome(delivered: bool, status: str) -> dict[str, Any]:
        return {"subject": "r", "created_at": "t", "body": {"status": status, "delivery": {"delivered": delivered}}}

    assert _delivery_state([], [], owed=4) == ("not-run", "not run yet")
    assert _delivery_state([], [card(1, "completed"), card(2, None)], owed=4)[0] == "running"
    assert _delivery_state([], [card(i, "completed") for i in range(4)], owed=4)[0] == "undecided"
    assert _delivery_state([outcome(True, "inconclusive")], [], owed=4)[0] == "delivered"
    state, text = _delivery_state([outcome(True, "x"), outcome(False, "void")], [], owed=4)   # the newest counts
    assert state == "not-delivered" and "void" in text


def test_ab_list_names_every_registration(tmp_path: Path) -> None:
    """A registration no campaign claims and no outcome names is listed (the store's ``preregistrations()``)."""
    from harness.science.prereg import load_spec, register

    from atb_agent.view._data import PREREG_DIR

    db = tmp_path / "atb.sqlite"
    info = vp.populate(db, campaigns=4, iterations=2)
    spec = load_spec(PREREG_DIR / "example-hint-ab.yaml")
    with open_store(db) as store:
        register(store, spec, vp.PROTO, allow_draft=True)
    with TestClient(create_app(ViewConfig(db=str(db), warm=False))) as c:
        html = c.get("/ab").text
    assert f'id="reg-{spec.id}"' in html and f'id="reg-{info["registration"]}"' in html
    section = re.search(rf'id="reg-{spec.id}".*?</section>', html, re.DOTALL)
    assert section is not None and 'data-delivery="not-run"' in section.group(0)
    assert spec.digest[:16] in section.group(0)
    assert f'id="reg-{info["idle_registration"]}"' in html and "Every registration in this store" in html


def test_sweep_page_is_live(client: TestClient, built: tuple[Path, dict[str, Any]]) -> None:
    db, info = built
    sid = info["sweep"]
    html = client.get(f"/sweep/{sid}").text
    assert f'data-live="/fragment/sweep/{sid}"' in html
    fragment = client.get(f"/fragment/sweep/{sid}").text
    with open_store(db) as store:
        mine = [c for c in store.campaigns() if c.config.get("sweep_id") == sid]
        iterations = sum(len(get_iterations(store, c.id)) for c in mine)
    assert re.search(rf'data-field="started">{len(mine)}<', fragment)
    assert re.search(rf'data-field="iterations">{iterations}<', fragment)
    assert re.search(r"protocol \S+ [0-9a-f]{12}", _text(fragment))
    for c in mine:
        assert f'data-campaign="{c.id}"' in fragment


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


@pytest.mark.parametrize("kind", ["not a database", "another program's database"])
def test_foreign_file_is_shown_as_such(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "atb.sqlite"
    if kind == "not a database":
        db.write_text("this is not a results store\n" * 100)
    else:
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE notes (x TEXT)")
        conn.commit()
        conn.close()
    before = db.read_bytes()
    app = create_app(ViewConfig(db=str(db), warm=False))
    assert app.state.view.verifier.wait(30).state != "verified"
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/")
        assert r.status_code == 200 and "Traceback" not in r.text
        assert 'data-state="verified' not in r.text
        assert 'id="read-problem"' in r.text or 'id="open-problem"' in r.text
        assert c.get("/ab").status_code in (500, 503)
    assert db.read_bytes() == before


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
