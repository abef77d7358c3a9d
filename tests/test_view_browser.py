"""``atb view`` in a real browser (issue 31): Debian's chromium driven by Playwright.

One populated store (``benchmarks/view_pages.py``'s ``populate``, the project's own APIs), served by uvicorn
as ``atb view`` serves it. The walk clicks index -> campaign -> iteration -> transcript, checks the numbers
each page shows against the store, that the plots were drawn by the offline plotly.js, and that no page
logged a script error; each page is screenshotted into ``$ATB_TEST_ARTIFACTS/view`` (else the test's
tmp folder). The live test writes a verdict while the index is open and waits for the row to change.

Skipped only when no chromium is installed or Playwright is missing (``scripts/setup.sh`` installs both).
"""

from __future__ import annotations

import os
import random
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmark_scripts import load_benchmark
from harness.store import open_store
from harness.tuning.campaigns import CampaignRecorder, get_iterations, summarize

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - setup.sh installs it
    sync_playwright = None  # type: ignore[assignment]

pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium; scripts/setup.sh does)"),
    pytest.mark.skipif(sync_playwright is None, reason="the playwright package is not installed (pip install playwright)"),
]

vp = load_benchmark("view_pages")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, Any], str]]:
    db = tmp_path_factory.mktemp("view-browser") / "atb.sqlite"
    info = vp.populate(db, campaigns=6, iterations=6)
    with vp.Server(db) as srv:
        assert srv.app.state.view.verifier.wait(60).state == "verified"
        yield db, info, srv.url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


@pytest.fixture
def artefacts(tmp_path: Path) -> Path:
    root = os.environ.get("ATB_TEST_ARTIFACTS")
    out = Path(root) / "view" if root else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


def _page(browser: Browser) -> tuple[Page, list[str]]:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    return page, errors


def test_walk_index_campaign_iteration_transcript(served: tuple[Path, dict[str, Any], str], browser: Browser,
                                                  artefacts: Path) -> None:
    db, info, url = served
    cid = info["campaigns"][0]
    with open_store(db) as store:
        summary = summarize(store, cid)
        its = get_iterations(store, cid)
    page, errors = _page(browser)

    page.goto(url + "/")
    assert page.locator("#verify-state").get_attribute("data-state") == "verified"
    row = page.locator(f'tr[data-campaign="{cid}"]')
    assert row.locator('[data-field="best"] a').inner_text() == f"{summary.best_speedup:.3f}x"
    assert re.search(r"protocol \S+ [0-9a-f]{12}", row.inner_text())
    page.screenshot(path=str(artefacts / "1-index.png"), full_page=True)

    row.locator(f'a[href="/campaign/{cid}"]').click()
    page.wait_for_url(f"**/campaign/{cid}")
    page.wait_for_selector("#plot-best .main-svg")                 # drawn by plotly.js, served offline
    page.wait_for_selector("#plot-usable .main-svg")
    assert page.locator("#usable-count").inner_text() == str(summary.usable_iterations)
    for it in its:
        shown = page.locator(f'#i{it.idx} [data-field="speedup"]').inner_text()
        assert shown == ("n/a" if it.speedup is None else f"{it.speedup:.3f}x")
    page.screenshot(path=str(artefacts / "2-campaign.png"), full_page=True)

    target = next(i for i in its if i.idx > 0 and i.speedup is not None)
    page.locator(f'#i{target.idx} a[href="/campaign/{cid}/iteration/{target.idx}"]').click()
    page.wait_for_url(f"**/iteration/{target.idx}")
    page.wait_for_selector("#plot-samples .main-svg")
    page.wait_for_selector("#plot-interval .main-svg")
    assert page.locator("#verdict-ratio").inner_text() == f"{target.speedup:.4f}x"
    assert page.locator("#verdict-ci").inner_text() == f"[{target.ci_low:.3f}, {target.ci_high:.3f}]"
    assert page.locator("#gates tbody tr").count() == len(target.gates)
    assert page.locator("#diff .add").count() > 0
    page.screenshot(path=str(artefacts / "3-iteration.png"), full_page=True)

    page.locator("a", has_text="transcript of this iteration").click()
    page.wait_for_url(f"**/campaign/{cid}/transcript#iter-{target.idx}")
    assert page.locator("li.rec.truncated").count() == 1
    assert "TRUNCATED" in page.locator("li.rec.truncated").inner_text()
    assert page.locator("li.rec.tool_call").count() == len(its)
    page.screenshot(path=str(artefacts / "4-transcript.png"), full_page=True)

    page.goto(url + f"/ab/{info['idle_registration']}")             # registered, never run
    idle = page.locator(f'section[id="reg-{info["idle_registration"]}"]')
    with open_store(db) as store:
        reg = store.preregistration(info["idle_registration"])
    assert reg is not None
    assert idle.locator(".delivery-state").get_attribute("data-delivery") == "not-run"
    assert "not run yet" in idle.locator(".delivery-state").inner_text()
    assert idle.locator("table.arms tbody tr").count() == 2
    assert reg.spec_sha256[:16] in idle.inner_text()
    page.screenshot(path=str(artefacts / "5-ab-not-run.png"), full_page=True)
    for name, path in (("5-ab.png", f"/ab/{info['registration']}"), ("6-kernelbench.png", "/kernelbench")):
        page.goto(url + path)
        page.screenshot(path=str(artefacts / name), full_page=True)
    assert errors == []
    page.close()


def test_live_update_within_two_seconds(served: tuple[Path, dict[str, Any], str], browser: Browser,
                                        artefacts: Path) -> None:
    db, info, url = served
    cid = info["running"]
    page, errors = _page(browser)
    page.goto(url + "/")
    recorded = page.locator(f'tr[data-campaign="{cid}"] [data-field="recorded"]')
    before = int(recorded.inner_text())
    page.wait_for_timeout(1200)                                     # the poller holds its first version
    with open_store(db) as store:
        rec = CampaignRecorder.resume(store, vp.PROTO, cid)
        idx = rec.next_index()
        assert idx is not None
        vp.add_iteration(store, rec, idx, random.Random(5))
        t0 = time.monotonic()
        page.wait_for_function(
            f"document.querySelector('tr[data-campaign=\"{cid}\"] [data-field=\"recorded\"]').textContent == '{before + 1}'",
            timeout=5000)
        elapsed = time.monotonic() - t0
    assert elapsed < 2.0, f"the index showed the new verdict after {elapsed:.2f} s"
    page.screenshot(path=str(artefacts / "7-index-live.png"), full_page=True)
    assert errors == []
    page.close()
