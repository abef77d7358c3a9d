"""The ``atb view`` web application: a Starlette app over one store, read-only, GET only.

Why Starlette with server-side Jinja templates: every page is a plain document with stable links
(``/campaign/ID``, ``/campaign/ID/iteration/N``, ``/verdict/ID``, ``/campaign/ID/transcript#r12``), which
a reader can share and a test can open; the only script is plotly.js for the plots and a small poller
that swaps the live part of a page when the store's chain head moves (``/api/status``, every second).

Failure is a page, never a traceback: a missing store, a tampered one (the ``atb store verify`` result
comes first on the index and as a banner on every page), an unknown id (404), or a read that fails
(500 with one line). Nothing here writes: the store is opened read-only (:mod:`atb_agent.view._store`).
"""

from __future__ import annotations

import hmac
import threading
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from pydantic import BaseModel, ConfigDict
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from harness.redact import redact
from harness.store import NotFound, StoreError
from atb_agent.view._data import ViewData, source_diff
from atb_agent.view._plots import (best_so_far_figure, figure_json, interval_figure, plotly_js_path, samples_figure,
                                   usability_figure)
from atb_agent.view._store import StoreUnavailable, Verifier, describe_path, open_read_only
from atb_agent.view._transcripts import TEXT_LIMIT, TranscriptIndex, transcript_view

HERE = Path(__file__).resolve().parent
TOKEN_COOKIE = "atb_view_token"
POLL_MS = 1000


class ViewConfig(BaseModel):
    """What ``atb view`` serves: the store URL, folders searched for transcripts, the access token."""

    model_config = ConfigDict(frozen=True)
    db: str
    transcripts: list[str] = []
    token: str | None = None          # required on every request when set (a non-loopback bind)
    key_dir: str | None = None        # the checkpoint key folder verify trusts (default $ATB_KEY_DIR)
    poll_ms: int = POLL_MS
    warm: bool = True                 # summarise every campaign in a thread at start, before the first visit


class _TokenGate:
    """Refuse every request without the token (query ``?token=``, then a cookie), in constant time."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        given = request.query_params.get("token") or request.cookies.get(TOKEN_COOKIE) or ""
        if not hmac.compare_digest(given.encode(), self.token):
            await PlainTextResponse("atb view: a token is required (open the URL `atb view` printed)",
                                    status_code=401)(scope, receive, send)
            return
        if request.query_params.get("token"):
            async def send_with_cookie(message: Any) -> None:
                if message["type"] == "http.response.start":
                    cookie = f"{TOKEN_COOKIE}={given}; HttpOnly; SameSite=Strict; Path=/".encode()
                    message["headers"] = list(message.get("headers", [])) + [(b"set-cookie", cookie)]
                await send(message)
            await self.app(scope, receive, send_with_cookie)
            return
        await self.app(scope, receive, send)


class ViewState:
    """The app's one store connection (opened lazily: the store may appear after the server starts),
    its verifier and its transcript index."""

    def __init__(self, config: ViewConfig) -> None:
        self.config = config
        self.verifier = Verifier(config.db, config.key_dir)
        self._lock = threading.Lock()
        self._data: ViewData | None = None
        self.open_problem = ""            # why the store cannot be opened ("" when it is open)
        self.read_problem = ""            # why the open store's chain head could not be read, last time
        folders = [Path(f) for f in config.transcripts]
        beside = describe_path(config.db)
        if beside is not None:
            folders.append(beside.resolve().parent)
        self.transcripts = TranscriptIndex(folders)

    def data(self) -> ViewData | None:
        with self._lock:
            if self._data is None:
                try:
                    self._data = ViewData(open_read_only(self.config.db))
                    self.open_problem = ""
                except StoreError as exc:
                    self.open_problem = str(exc)
            return self._data

    def require(self) -> ViewData:
        data = self.data()
        if data is None:
            raise HTTPException(503, self.open_problem or "the store cannot be opened")
        return data

    def warm(self) -> None:
        """Summarise every campaign once (the index's per-campaign reads), so the first visit finds them
        cached; a store that cannot be read is left for the pages to report."""
        try:
            data = self.data()
            if data is not None:
                data.campaign_cards()
        except Exception:  # noqa: BLE001, S110 - warming is an optimisation; the page shows any real failure
            pass

    def head(self) -> tuple[int, str]:
        """The store's chain head; (0, "") when it cannot be read, with why in ``read_problem``. A failed
        read drops the connection, so the next request opens the store again: a server that went away is
        shown as unreachable, and picked up again once it is back."""
        data = self.data()
        if data is None:
            return 0, ""
        try:
            head = data.head()
        except Exception as exc:  # noqa: BLE001 - a page shows what went wrong, never a traceback
            self.read_problem = one_line(exc)
            self.drop(data)
            return 0, ""
        self.read_problem = ""
        return head

    def drop(self, data: ViewData) -> None:
        """Close ``data``'s connection (once no page reads through it) unless it was replaced already."""
        with self._lock:
            if self._data is not data:
                return
            self._data = None
        with data.lock:
            try:
                data.store.close()
            except Exception:  # noqa: BLE001, S110 - a broken connection may fail to close; it is dropped anyway
                pass

    def close(self) -> None:
        with self._lock:
            if self._data is not None:
                self._data.store.close()
                self._data = None


def one_line(exc: BaseException, limit: int = 500) -> str:
    """An exception as one line for a page (type, then its message with whitespace folded)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:limit]}"


def _fmt_x(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}x"


def _short(value: str | None, n: int = 12) -> str:
    return "" if not value else value[:n]


def _environment() -> Environment:
    env = Environment(loader=FileSystemLoader(str(HERE / "templates")), autoescape=select_autoescape(["html"]),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["x"] = _fmt_x
    env.filters["short"] = _short
    env.globals["text_limit"] = TEXT_LIMIT
    return env


def create_app(config: ViewConfig) -> Starlette:
    """The ASGI app for ``config``. Starts the first verification of the store at once (in a thread)."""
    state = ViewState(config)
    env = _environment()
    plotly_js = plotly_js_path()

    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        head_seq, head_hash = state.head()
        state.verifier.request(head_seq)
        ctx.setdefault("read_problem", state.read_problem)
        html = env.get_template(name).render(
            request=request, verify=state.verifier.result, head_seq=head_seq, head_hash=head_hash,
            store=redact(config.db), poll_ms=config.poll_ms,
            plotly=plotly_js is not None, open_problem=state.open_problem, **ctx)
        return HTMLResponse(html, status_code=status)

    def index_context() -> dict[str, Any]:
        data = state.data()
        if data is None:
            return {"cards": [], "sweeps": [], "regs": [], "kb": 0}
        try:
            cards = data.campaign_cards()
            regs = data.registrations(cards)
            return {"cards": cards, "sweeps": data.sweeps(cards), "regs": regs,
                    "kb": sum(1 for c in cards if c.task_id.startswith("kb:"))}
        except Exception as exc:  # noqa: BLE001 - the first page says why, under the verification result
            return {"cards": [], "sweeps": [], "regs": [], "kb": 0, "read_problem": one_line(exc)}

    def index(request: Request) -> Response:
        return page(request, "index.html", **index_context())

    def index_fragment(request: Request) -> Response:
        return page(request, "_index_live.html", **index_context())

    def status(request: Request) -> Response:
        head_seq, head_hash = state.head()
        state.verifier.request(head_seq)
        v = state.verifier.result
        return JSONResponse({"head_seq": head_seq, "head_hash": head_hash,
                             "verify": {"state": v.state, "head_seq": v.head_seq, "message": v.message},
                             "version": f"{head_seq}:{v.state}:{v.head_seq}"})

    def campaign(request: Request) -> Response:
        data = state.require()
        cid = request.path_params["cid"]
        card, its, curve, outcome = data.campaign(cid)
        return page(request, "campaign.html", c=card, its=its, outcome=outcome,
                    fig_best=figure_json(best_so_far_figure(its, curve)),
                    fig_usable=figure_json(usability_figure(its, card.budget)),
                    curve=curve)

    def campaign_fragment(request: Request) -> Response:
        data = state.require()
        card, its, _, outcome = data.campaign(request.path_params["cid"])
        return page(request, "_campaign_live.html", c=card, its=its, outcome=outcome)

    def iteration(request: Request) -> Response:
        data = state.require()
        cid, idx = request.path_params["cid"], int(request.path_params["idx"])
        card, its, _, _ = data.campaign(cid)
        it = next((i for i in its if i.idx == idx), None)
        if it is None:
            raise NotFound(f"campaign {cid} has no iteration {idx}")
        prev = next((i for i in sorted(its, key=lambda i: -i.idx) if i.idx < idx and i.candidate_sha256), None)
        source = data.candidate(it.candidate_sha256)
        before = data.candidate(prev.candidate_sha256) if prev else None
        v = data.verdict(it.verdict_id, usable=it.usable) if it.verdict_id else None
        return page(request, "iteration.html", c=card, it=it, v=v, prev=prev, source=source,
                    diff=source_diff(before, source), same_as_prev=(prev is not None and before == source),
                    **_verdict_figs(v))

    def verdict(request: Request) -> Response:
        data = state.require()
        v = data.verdict(request.path_params["vid"])
        return page(request, "iteration.html", c=None, it=None, v=v, prev=None, source=data.candidate(v.candidate_sha256),
                    diff=[], same_as_prev=False, **_verdict_figs(v))

    def transcript(request: Request) -> Response:
        data = state.require()
        cid = request.path_params["cid"]
        card, _, _, outcome = data.campaign(cid)
        with data.reading() as s:
            row = s.campaign(cid)
        named = [row.config if row is not None and isinstance(row.config, dict) else {}, outcome.get("detail") or {}]
        t = transcript_view(cid, state.transcripts.find(cid, named))
        return page(request, "transcript.html", c=card, t=t)

    def ab_list(request: Request) -> Response:
        data = state.require()
        regs = data.registrations(data.campaign_cards())
        return page(request, "ab.html", regs=regs, one=False)

    def ab_one(request: Request) -> Response:
        data = state.require()
        reg = data.registration(request.path_params["rid"], data.campaign_cards())
        if reg is None:
            raise NotFound(f"no registration {request.path_params['rid']!r} in this store")
        return page(request, "ab.html", regs=[reg], one=True)

    def kernelbench(request: Request) -> Response:
        data = state.require()
        rows, arms = data.kernelbench(data.campaign_cards())
        return page(request, "kernelbench.html", rows=rows, arms=arms)

    def sweep_context(sid: str) -> dict[str, Any]:
        data = state.require()
        cards = data.campaign_cards()
        found = [s for s in data.sweeps(cards) if s.id == sid]
        if not found:
            raise NotFound(f"no sweep {sid!r} in this store")
        return {"s": found[0], "cards": [c for c in cards if c.sweep_id == sid]}

    def sweep(request: Request) -> Response:
        return page(request, "sweep.html", **sweep_context(request.path_params["sid"]))

    def sweep_fragment(request: Request) -> Response:
        return page(request, "_sweep_live.html", **sweep_context(request.path_params["sid"]))

    def plotly(request: Request) -> Response:
        if plotly_js is None:
            return PlainTextResponse("/* plotly is not installed: pip install plotly */", media_type="text/javascript")
        return FileResponse(plotly_js, media_type="text/javascript", headers={"Cache-Control": "max-age=86400"})

    async def not_found(request: Request, exc: Exception) -> Response:
        return page(request, "error.html", status=404, title="Not found", message=str(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 500)
        return page(request, "error.html", status=code, title=f"HTTP {code}", message=str(getattr(exc, "detail", exc)))

    async def internal(request: Request, exc: Exception) -> Response:
        msg = one_line(exc)
        try:
            return page(request, "error.html", status=500, title="This page could not be read from the store",
                        message=msg)
        except Exception:  # noqa: BLE001 - the store itself may be what fails; still no traceback
            return PlainTextResponse(f"atb view: {msg}", status_code=500)

    routes = [
        Route("/", index), Route("/fragment/index", index_fragment), Route("/api/status", status),
        Route("/campaign/{cid}", campaign), Route("/fragment/campaign/{cid}", campaign_fragment),
        Route("/campaign/{cid}/iteration/{idx:int}", iteration), Route("/campaign/{cid}/transcript", transcript),
        Route("/verdict/{vid}", verdict), Route("/ab", ab_list), Route("/ab/{rid}", ab_one),
        Route("/kernelbench", kernelbench), Route("/sweep/{sid}", sweep), Route("/fragment/sweep/{sid}", sweep_fragment),
        Route("/static/plotly.min.js", plotly),
        Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={
        NotFound: not_found, StoreUnavailable: http_error, HTTPException: http_error, Exception: internal},
        lifespan=_lifespan(state))
    app.state.view = state
    state.verifier.request(None)
    if config.warm:
        threading.Thread(target=state.warm, name="atb-view-warm", daemon=True).start()
    if config.token:
        app.add_middleware(_TokenGate, token=config.token)
    return app


def _lifespan(state: ViewState) -> Any:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app: Starlette) -> Any:
        yield
        state.close()

    return lifespan


def _verdict_figs(v: Any) -> dict[str, Any]:
    if v is None:
        return {"fig_samples": "", "fig_interval": ""}
    from protocol import load_protocol

    try:
        bar: float | None = load_protocol().usability.ci_relative_halfwidth_max
    except Exception:  # noqa: BLE001 - the bar is a guide line only; a draft-less checkout still shows the page
        bar = None
    return {"fig_samples": figure_json(samples_figure(v)) if v.candidate_samples else "",
            "fig_interval": figure_json(interval_figure(v, bar))}


__all__ = ["ViewConfig", "ViewState", "create_app"]
