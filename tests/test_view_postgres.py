"""``atb view`` over a PostgreSQL store (issue 31): the same pages, the same numbers, read-only.

The store is built on the test server by ``benchmarks/view_pages.py``'s ``populate`` (the project's own
APIs, exactly as ``tests/test_view.py`` builds its SQLite store), and a SQLite twin is built from the same
seed, so every number the pages show can be checked both against the PostgreSQL store's own reads and
against what the same pages show for SQLite. Then: the view's connection refuses a write (the database
refuses it, not the view); a database that does not exist, one without a results store, a server that
cannot be reached and a connection the server drops are each shown on the first page, never as a
traceback.

The server comes from ``pg_url`` (tests/conftest.py): these tests skip with the reason when no
PostgreSQL server can be reached or started, and fail under CI=true, like the other PostgreSQL tests.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from benchmark_scripts import load_benchmark
from harness.store import StoreError, open_store
from harness.tuning.campaigns import CampaignRecorder, get_iterations, summarize

from atb_agent.view import ViewConfig, create_app

vp = load_benchmark("view_pages")

CAMPAIGNS, ITERATIONS = 6, 5


def _database(pg_url: str, prefix: str) -> tuple[str, str]:
    """A fresh database on the test server: (its name, its URL)."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, f"{pg_url.rpartition('/')[0]}/{name}"


def _drop(pg_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def built(pg_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The PostgreSQL store (its transcript in a folder of its own) and its SQLite twin, from one seed."""
    name, url = _database(pg_url, "atb_view")
    folder = tmp_path_factory.mktemp("view-pg")
    twin = tmp_path_factory.mktemp("view-pg-twin") / "atb.sqlite"
    try:
        info = vp.populate(folder / "transcripts-only", campaigns=CAMPAIGNS, iterations=ITERATIONS, url=url)
        twin_info = vp.populate(twin, campaigns=CAMPAIGNS, iterations=ITERATIONS)
        yield {"url": url, "info": info, "folder": folder, "twin": twin, "twin_info": twin_info}
    finally:
        _drop(pg_url, name)


@pytest.fixture(scope="module")
def client(built: dict[str, Any]) -> Iterator[TestClient]:
    app = create_app(ViewConfig(db=built["url"], transcripts=[str(built["folder"])]))
    assert app.state.view.verifier.wait(60).state == "verified"
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def twin_client(built: dict[str, Any]) -> Iterator[TestClient]:
    app = create_app(ViewConfig(db=str(built["twin"])))
    assert app.state.view.verifier.wait(60).state == "verified"
    with TestClient(app) as c:
        yield c


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _numbers(html: str) -> list[str]:
    """Every speedup, interval and count a campaign or iteration page shows, in page order (ids, times and
    digests left out: they differ between two stores by construction)."""
    return re.findall(r"\d+\.\d{3,4}x|\[\d+\.\d{3}, \d+\.\d{3}\]|\b\d+/\d+\b|usable|not usable|certified", html)


def test_every_page_renders_with_provenance_and_verified(client: TestClient, built: dict[str, Any]) -> None:
    for name, path in vp.pages(built["info"]).items():
        r = client.get(path)
        assert r.status_code == 200, (name, r.text[:500])
        if path.startswith("/api"):
            continue
        assert "Traceback" not in r.text, name
        assert re.search(r"protocol \S+ [0-9a-f]{12}", _text(r.text)), name
        if not path.startswith("/fragment"):
            assert 'data-state="verified' in r.text, name      # the banner: verified (or verified-behind)
    assert "postgresql://" in client.get("/").text and "store verified" in _text(client.get("/").text)


def test_numbers_match_the_postgres_store(client: TestClient, built: dict[str, Any]) -> None:
    info = built["info"]
    cid = info["campaigns"][0]
    with open_store(built["url"]) as store:
        s = summarize(store, cid)
        its = get_iterations(store, cid)
        it = next(i for i in its if i.idx > 0 and i.speedup is not None)
        v = store.verdict(it.verdict_id or "")
    index = client.get("/").text
    row = re.search(rf'data-campaign="{cid}".*?</tr>', index, re.DOTALL)
    assert row is not None and f"{s.best_speedup:.3f}x" in row.group(0)
    html = client.get(f"/campaign/{cid}").text
    for i in its:
        line = re.search(rf'<tr id="i{i.idx}".*?</tr>', html, re.DOTALL)
        assert line is not None
        shown = re.search(r'data-field="speedup">([^<]*)<', line.group(0))
        assert shown is not None and shown.group(1) == ("n/a" if i.speedup is None else f"{i.speedup:.3f}x")
        assert ('class="badge cert">certified' in line.group(0)) == bool(i.usable)
    page = client.get(f"/campaign/{cid}/iteration/{it.idx}").text
    assert f'id="verdict-ratio">{v.ratio:.4f}x' in page and f"[{v.ci_low:.3f}, {v.ci_high:.3f}]" in page
    for g in v.gates:
        assert f"<td>{g.name}</td>" in page
    assert "hash chain intact" in client.get(f"/campaign/{cid}/transcript").text   # found via --transcripts


def test_pages_show_the_same_numbers_as_sqlite(client: TestClient, twin_client: TestClient,
                                               built: dict[str, Any]) -> None:
    """One seed, two stores: each campaign's page and each iteration page shows the same numbers."""
    info, twin = built["info"], built["twin_info"]
    for pg_cid, sq_cid in zip(info["campaigns"], twin["campaigns"], strict=True):
        pg = client.get(f"/fragment/campaign/{pg_cid}").text
        sq = twin_client.get(f"/fragment/campaign/{sq_cid}").text
        assert _numbers(pg) == _numbers(sq) and _numbers(pg), pg_cid
        for idx in (0, ITERATIONS - 2):
            a = client.get(f"/campaign/{pg_cid}/iteration/{idx}").text
            b = twin_client.get(f"/campaign/{sq_cid}/iteration/{idx}").text
            assert _numbers(a) == _numbers(b), (pg_cid, idx)
    kb_pg = _numbers(client.get("/kernelbench").text)
    assert kb_pg and kb_pg == _numbers(twin_client.get("/kernelbench").text)


def test_ab_registrations_on_postgres(client: TestClient, built: dict[str, Any]) -> None:
    info = built["info"]
    html = client.get(f"/ab/{info['registration']}").text
    assert "NOT delivered" in html and 'data-delivery="not-delivered"' in html
    idle = client.get(f"/ab/{info['idle_registration']}").text
    assert 'data-delivery="not-run"' in idle and "not run yet" in idle
    assert 'data-arm="vector-hint"' in idle and vp.IDLE_URL in idle


def test_the_view_connection_refuses_writes(client: TestClient, built: dict[str, Any]) -> None:
    data = client.app.state.view.data()   # type: ignore[attr-defined]
    assert data is not None
    store = data.store
    before = store.chain_head()
    with pytest.raises(StoreError, match="read-only transaction"):
        store.add_report("view-write-probe", "x", {"written": True}, vp.REF)
    import psycopg

    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        store.conn.execute("CREATE TABLE view_write_probe (x int)")
    for path in vp.pages(built["info"]).values():
        client.get(path)
    assert store.chain_head() == before
    with open_store(built["url"]) as writer:
        assert writer.chain_head() == before and not writer.reports("view-write-probe")


def test_live_update_from_postgres(client: TestClient, built: dict[str, Any]) -> None:
    cid = built["info"]["running"]
    before = client.get("/api/status").json()
    with open_store(built["url"]) as store:
        rec = CampaignRecorder.resume(store, vp.PROTO, cid)
        idx = rec.next_index()
        assert idx is not None
        vid = vp.add_iteration(store, rec, idx, random.Random(7))
    after = client.get("/api/status").json()
    assert after["head_seq"] > before["head_seq"] and after["version"] != before["version"]
    assert f'<tr id="i{idx}"' in client.get(f"/fragment/campaign/{cid}").text
    assert client.get(f"/verdict/{vid}").status_code == 200


def test_missing_database_is_shown_on_the_first_page(pg_url: str) -> None:
    url = f"{pg_url.rpartition('/')[0]}/atb_view_absent_{uuid.uuid4().hex[:8]}"
    app = create_app(ViewConfig(db=url, warm=False))
    assert app.state.view.verifier.wait(60).state == "missing"
    with TestClient(app) as c:
        r = c.get("/")
        assert r.status_code == 200 and "Traceback" not in r.text
        assert 'data-state="missing"' in r.text and "does not exist" in r.text
        assert c.get("/campaign/x").status_code == 503
        assert c.get("/ab").status_code == 503


def test_database_without_a_results_store_is_shown_on_the_first_page(pg_url: str) -> None:
    name, url = _database(pg_url, "atb_view_empty")
    try:
        app = create_app(ViewConfig(db=url, warm=False))
        assert app.state.view.verifier.wait(60).state in ("failed", "error", "missing")
        with TestClient(app, raise_server_exceptions=False) as c:
            r = c.get("/")
            assert r.status_code == 200 and "Traceback" not in r.text
            assert 'id="read-problem"' in r.text and "does not exist" in r.text
            assert 'data-state="verified' not in r.text
            other = c.get("/campaign/x")
            assert other.status_code == 500 and "Traceback" not in other.text
        import psycopg

        with psycopg.connect(url) as conn:      # and it is still empty: nothing was created to find out
            assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone() == (0,)
    finally:
        _drop(pg_url, name)


def test_unreachable_server_is_shown_on_the_first_page() -> None:
    url = "postgresql://atb:pw-not-shown@127.0.0.1:1/atb"        # nothing listens on port 1
    app = create_app(ViewConfig(db=url, warm=False))
    assert app.state.view.verifier.wait(60).state == "missing"
    with TestClient(app) as c:
        r = c.get("/")
    assert r.status_code == 200 and 'data-state="missing"' in r.text and "cannot connect" in r.text
    assert "pw-not-shown" not in r.text and "Traceback" not in r.text


def test_dropped_connection_is_shown_then_reopened(built: dict[str, Any], pg_url: str) -> None:
    """The server ends the view's session (as a restart would): the next page says the store cannot be
    read instead of failing, and the one after reads through a new connection."""
    import psycopg

    app = create_app(ViewConfig(db=built["url"], warm=False))
    with TestClient(app, raise_server_exceptions=False) as c:
        assert c.get("/").status_code == 200
        data = app.state.view.data()
        assert data is not None
        pid = data.store.conn.info.backend_pid
        with psycopg.connect(pg_url, autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        r = c.get("/")
        assert r.status_code == 200 and "Traceback" not in r.text and 'id="store-problem"' in r.text
        r = c.get("/")
        assert r.status_code == 200 and 'id="store-problem"' not in r.text
        assert f'data-campaign="{built["info"]["campaigns"][0]}"' in r.text
        assert app.state.view.data().store.conn.info.backend_pid != pid
