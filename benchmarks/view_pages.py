"""Time every page of ``atb view`` over a large store, and its live update after a new verdict.

    .venv/bin/python benchmarks/view_pages.py [--campaigns 100] [--iterations 20] [--repeat 5]
        [--out benchmarks/results/view_cpu.md] [--no-browser] [--pg-url postgresql://.../EMPTY_DB] [--note TEXT]

Builds (with the project's own APIs: ``open_store``, ``CampaignRecorder``, ``harness.science.prereg``,
``transcripts.TranscriptWriter``) a store of N campaigns x M iterations: native and KernelBench tasks,
two tuners, one A/B registration with its outcome and delivery checkpoint and one never run, one sweep, a
transcript, signed campaign ends (``--pg-url``: the same store again on a PostgreSQL server). Then serves it with uvicorn exactly as ``atb view`` does and times each page over HTTP
(first, cold request and the median of the rest), and the live update: a verdict and its iteration are
written to the store while a real Chromium (Playwright, Debian's ``chromium``) shows the campaign's page,
and the time until the page shows the new iteration is measured (``--no-browser``: a client polling
``/api/status`` every second, as the page's script does, stands in).

Targets (issue 31): every page under 300 ms; the live view updated within 2 s of a new verdict.
``populate`` is also what ``tests/test_view.py``, ``tests/test_view_postgres.py`` and ``tests/test_view_browser.py``
build their stores with.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from harness.records import (DeviceFingerprint, GateResult, MeasurementSample, MeasurementSet, Verdict,
                             sha256_text)
from harness.store import ResultStore, open_store
from harness.tuning.campaigns import CampaignRecorder, IterationUsage
from harness.verdict.gates import gate_names
from protocol import load_protocol

PROTO = load_protocol()
REF = PROTO.ref()
CONFINED = "bwrap:userns+pidns+netns+ro-fs+capdrop+seccomp"
KB_TASK = "kb:19_ReLU:0123456789ab"
IDLE_URL = "http://127.0.0.1:8080/v1"


def _verdict(store: ResultStore, session: str, device: str, task: str, text: str, ratio: float | None,
             halfwidth: float, rng: random.Random, *, confined: bool = True) -> str:
    """One verdict through the store's real ingest rules (paired seeds, every gate, ratio within its samples)."""
    cand = store.add_candidate(text, "kernel", REF)
    base = sha256_text("baseline:" + task)
    gates = [GateResult(name=n, passed=ratio is not None or not n.endswith("correctness"), detail="") for n in gate_names()]
    seeds = list(range(11, 11 + PROTO.seeds.paired_seeds))
    cset = bset = None
    lo = hi = None
    if ratio is not None:
        base_ns = [[1000.0 + rng.random() * 40 for _ in range(6)] for _ in seeds]
        cset = MeasurementSet(session_id=session, device_sha256=device, protocol=REF, task_id=task,
                              subject_sha256=cand, arm="candidate",
                              samples=[MeasurementSample(seed=s, values=[x / ratio for x in b]) for s, b in zip(seeds, base_ns)])
        bset = MeasurementSet(session_id=session, device_sha256=device, protocol=REF, task_id=task,
                              subject_sha256=base, arm="baseline",
                              samples=[MeasurementSample(seed=s, values=b) for s, b in zip(seeds, base_ns)])
        lo, hi = ratio * (1 - halfwidth), ratio * (1 + halfwidth)
    arms = {"candidate": CONFINED if confined else "unconfined:no bubblewrap", "reference": CONFINED}
    v = Verdict(session_id=session, device_sha256=device, protocol=REF, task_id=task, candidate_sha256=cand,
                baseline_sha256=base, baseline_label="eager-reference",
                status="accepted" if ratio is not None else "rejected", correct=ratio is not None,
                reason="" if ratio is not None else "outputs differ", ratio=ratio, ci_low=lo, ci_high=hi,
                candidate_set_id=cset.id if cset else None, baseline_set_id=bset.id if bset else None, gates=gates,
                detail={"confinement": arms})
    return store.add_verdict(v, cset, bset)


def _candidate_text(tuner: str, seed: int, i: int) -> str:
    block = 32 * (1 + (i + seed) % 8)
    return (f"# {tuner} seed {seed} iteration {i}\nimport torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
            f"    BLOCK = {block}\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n"
            f"        return torch.relu(x){' .contiguous()' if i % 3 == 0 else ''}\n")


def add_iteration(store: ResultStore, rec: CampaignRecorder, i: int, rng: random.Random, *, calls: int = 2,
                  truncated: int = 0) -> str:
    """Store iteration ``i`` of ``rec``'s campaign (a verdict, then its iteration row); return the verdict id."""
    info = rec.info
    roll = rng.random()
    ratio = None if roll < 0.15 else round(0.8 + 2.2 * rng.random(), 4)
    halfwidth = 0.09 if 0.15 <= roll < 0.25 else 0.01 + 0.02 * rng.random()
    vid = _verdict(store, info.session_id, info.device_sha256, info.task_id, _candidate_text(info.tuner_spec, info.seed, i),
                   ratio, halfwidth, rng, confined=not (i == 3 and info.seed % 7 == 0))
    rec.record(i, verdict_id=vid, usage=IterationUsage(model_calls=calls, truncated_calls=truncated,
                                                         tokens_in=900 * calls, tokens_out=300 * calls))
    return vid


def _write_transcript(path: Path, campaign_id: str, budget: int, verdict_ids: list[str], store: ResultStore) -> None:
    """A scripted transcript of ``campaign_id``: turns, tool calls, one truncated turn, submissions, verdicts."""
    import base64
    import json

    from transcripts import (EndData, HeaderData, HttpRequestRecord, HttpResponseRecord, IterationStartData,
                             ModelCallData, ModelTurnData, SubmissionData, ToolCallData, TranscriptWriter,
                             TruncationData, VerdictData)

    w = TranscriptWriter(path)
    w.append("header", HeaderData(scripted=True, label="SCRIPTED FIXTURE for atb view (benchmarks/view_pages.py)",
                                  tuner_spec="openai:scripted", provider="openai", model="scripted-model",
                                  base_url="http://127.0.0.1:9/v1", task="relu", task_brief="ReLU", budget=budget,
                                  seed=1, campaign_id=campaign_id, protocol_version=REF.version,
                                  protocol_sha256=REF.sha256, max_output_tokens=4096, max_tool_calls_per_iteration=8,
                                  tool_definitions_sha256="0" * 64, created_at="2026-12-04T00:00:00+00:00"))
    for i, vid in enumerate(verdict_ids):
        w.append("iteration_start", IterationStartData(iteration=i, observation=f"Iteration {i + 1} of {budget}. "
                                                                               + "Make ReLU faster. " * 300))
        body = json.dumps({"model": "scripted-model", "messages": [{"role": "user", "content": "tune relu"}]}).encode()
        resp = json.dumps({"choices": [{"finish_reason": "length" if i == 1 else "tool_calls"}]}).encode()
        w.append("model_call", ModelCallData(
            call_index=i, iteration=i,
            request=HttpRequestRecord(method="POST", url="http://127.0.0.1:9/v1/chat/completions", headers=[],
                                      body_b64=base64.b64encode(body).decode()),
            response=HttpResponseRecord(status=200, headers=[], body_b64=base64.b64encode(resp).decode())))
        truncated = i == 1
        content = store.candidate_content(store.verdict(vid).candidate_sha256)
        args = json.dumps({"path": "candidate.py", "content": content})
        w.append("model_turn", ModelTurnData(
            call_index=i, iteration=i, stop_reason="length" if truncated else "tool_calls",
            text=f"Iteration {i}: trying block size {32 * (i + 1)}.",
            tool_calls=[{"id": f"call_{i}", "name": "write_file", "arguments": args}],
            input_tokens=900, output_tokens=4096 if truncated else 300,
            truncation=TruncationData(truncated=truncated, api_signal="finish_reason=length" if truncated else "",
                                      requested_cap=4096, usage_output_tokens=4096 if truncated else 300)))
        w.append("tool_call", ToolCallData(iteration=i, call_id=f"call_{i}", name="write_file", arguments=args,
                                           content=f"wrote {len(content)} bytes to candidate.py", is_error=False))
        w.append("submission", SubmissionData(iteration=i, forced=False, files={"candidate.py": sha256_text(content)}))
        w.append("verdict", VerdictData(iteration=i, verdict=store.verdict(vid).model_dump(mode="json")))
    w.append("end", EndData(status="completed", iterations=len(verdict_ids), model_calls=len(verdict_ids),
                            truncated_calls=1 if len(verdict_ids) > 1 else 0,
                            truncated_fraction=(1 / len(verdict_ids)) if len(verdict_ids) > 1 else 0.0))


def populate(db: Path, campaigns: int = 100, iterations: int = 20, *, seed: int = 0,
             url: str | None = None) -> dict[str, Any]:
    """Build the store at ``db`` (or at the server ``url``; the transcript goes beside ``db`` either way);
    return what was stored, for checks.

    Campaign 0 is an LLM campaign with a transcript; every fifth is on a KernelBench problem; the last two
    are the A/B arms of one registration with an outcome; a second registration has no runs; the campaigns
    1..4 belong to one sweep; the last campaign is left running (no outcome) so a live update can add to it.
    """
    from harness.science.prereg import (ABOutcome, ABSpec, DecisionRule, DeliveryCheck, UsabilityBars, ArmSpec,
                                        record_outcome, register)

    rng = random.Random(seed)
    store: Any = open_store(url or db)
    out: dict[str, Any] = {"campaigns": [], "verdicts": {}, "running": None}
    try:
        fp = DeviceFingerprint(backend="cpu", cpu_model="view-bench", cpu_count=2, torch_version="2.13.0")
        session = store.open_session(fp, REF)
        spec = ABSpec(id="ab-prompt-hint", hypothesis="a roofline hint in the prompt makes more iterations usable",
                      task="relu", control=ArmSpec(name="control", tuner="openai:scripted"),
                      treatment=ArmSpec(name="hint", tuner="openai:scripted", config={"prompt": "roofline"}),
                      differs="the system prompt carries a roofline hint", treatment_marker="ROOFLINE-HINT",
                      primary_metric="usable_iterations",
                      usability=UsabilityBars(ci_relative_halfwidth_max=PROTO.usability.ci_relative_halfwidth_max),
                      budget=iterations, seeds=[1], decision_rule=DecisionRule(min_seed_wins=1))
        reg = register(store, spec, PROTO, allow_draft=True)
        # registered, never run: the A/B pages list it with its arms and "not run yet"
        idle = ABSpec(id="ab-not-run-yet", hypothesis="a vectorisation hint in the prompt makes more iterations usable",
                      task="relu", control=ArmSpec(name="control", tuner="openai:smollm2", base_url=IDLE_URL),
                      treatment=ArmSpec(name="vector-hint", tuner="openai:smollm2", base_url=IDLE_URL,
                                        config={"system_prompt_suffix": "VEC-HINT: prefer vectorised torch ops"}),
                      differs="the system prompt ends with a vectorisation hint", treatment_marker="VEC-HINT",
                      primary_metric="usable_iterations",
                      usability=UsabilityBars(ci_relative_halfwidth_max=PROTO.usability.ci_relative_halfwidth_max),
                      budget=iterations, seeds=[1, 2], decision_rule=DecisionRule(min_seed_wins=1))
        out["idle_registration"] = register(store, idle, PROTO, allow_draft=True).id
        sweep_id = "sweep-view-bench"
        keys = [f"{sweep_id}|relu|random|{s}" for s in range(1, 5)]
        store.add_report("sweep", sweep_id, {"spec_sha256": sha256_text("view-bench-sweep"),
                                             "spec": {"budget": iterations, "tasks": ["relu"], "tuners": ["random"]},
                                             "campaigns": keys + [f"{sweep_id}|relu|random|9"],
                                             "registered_at": "2026-12-04T00:00:00+00:00"}, REF)
        for c in range(campaigns):
            llm = c == 0 or c >= campaigns - 2
            tuner = "openai:scripted" if llm else ("random" if c % 2 else "openai:smollm2")
            task = KB_TASK if c % 5 == 4 else "relu"
            arm = ("control" if c == campaigns - 2 else "hint") if c >= campaigns - 2 and campaigns >= 4 else None
            config: dict[str, Any] = {}
            if 1 <= c <= 4:
                config = {"sweep_id": sweep_id, "sweep_campaign": keys[c - 1]}
            rec = CampaignRecorder.open(store, PROTO, task_id=task, kind="kernel", tuner_spec=tuner, seed=c + 1,
                                        budget=iterations, session_id=session, config=config,
                                        preregistration_id=reg.id if arm else None, arm=arm)
            vids = [add_iteration(store, rec, i, rng, calls=0 if tuner == "random" else 2,
                                  truncated=1 if (c == 0 and i == 1) else 0)
                    for i in range(iterations - (1 if c == campaigns - 1 else 0))]
            if c == 0:
                _write_transcript(db.parent / f"transcript-{rec.campaign_id}.jsonl", rec.campaign_id, iterations,
                                  vids, store)
            if c == campaigns - 1:
                out["running"] = rec.campaign_id        # one iteration short, no outcome: a live campaign
            else:
                rec.finish()
            out["campaigns"].append(rec.campaign_id)
            out["verdicts"][rec.campaign_id] = vids
        if campaigns >= 4:
            ctrl, treat = out["campaigns"][-2], out["campaigns"][-1]
            delivery = DeliveryCheck(delivered=False, void_reasons=["seed 1: the treatment run recorded no model request"],
                                     evidence={"marker": spec.treatment_marker, "per_seed": [{
                                         "seed": 1, "treatment_run": treat, "control_run": ctrl, "treatment_requests": 0,
                                         "treatment_requests_with_marker": 0, "control_requests": 0,
                                         "control_requests_with_marker": 0, "treatment_trajectory_sha256": "a" * 64,
                                         "control_trajectory_sha256": "b" * 64}]})
            record_outcome(store, ABOutcome(registration_id=reg.id, spec_sha256=reg.spec_sha256, status="void",
                                            explanation="treatment delivery failed", delivery=delivery, seeds=[]), PROTO)
        out["registration"] = reg.id
        out["sweep"] = sweep_id
        out["session"] = session
    finally:
        store.close()
    return out


# ---------------------------------------------------------------------- serving and timing
class Server:
    """``atb view``'s app under uvicorn on a free loopback port, in a thread."""

    def __init__(self, db: Path | str, **config: Any) -> None:
        import uvicorn

        from atb_agent.view import ViewConfig, create_app

        self.app = create_app(ViewConfig(db=str(db), poll_ms=int(config.pop("poll_ms", 1000)), **config))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)  # asyncio sets TCP_NODELAY
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", access_log=False))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def pages(info: dict[str, Any]) -> dict[str, str]:
    c0 = info["campaigns"][0]
    vids = info["verdicts"][c0]
    return {"index": "/", "campaign": f"/campaign/{c0}", "iteration": f"/campaign/{c0}/iteration/{min(1, len(vids) - 1)}",
            "verdict": f"/verdict/{vids[min(2, len(vids) - 1)]}", "transcript": f"/campaign/{c0}/transcript",
            "ab": "/ab", "ab registration, not run yet": f"/ab/{info['idle_registration']}",
            "kernelbench": "/kernelbench", "sweep": f"/sweep/{info['sweep']}",
            "index live fragment": "/fragment/index", "sweep live fragment": f"/fragment/sweep/{info['sweep']}",
            "status poll": "/api/status"}


def time_pages(base: str, paths: dict[str, str], repeat: int) -> dict[str, tuple[float, float, int]]:
    """name -> (first request ms, median of ``repeat`` more ms, bytes)."""
    import httpx

    out: dict[str, tuple[float, float, int]] = {}
    with httpx.Client(base_url=base, timeout=30) as client:
        for name, path in paths.items():
            t0 = time.perf_counter()
            r = client.get(path)
            first = (time.perf_counter() - t0) * 1000
            r.raise_for_status()
            times = []
            for _ in range(repeat):
                t0 = time.perf_counter()
                client.get(path).raise_for_status()
                times.append((time.perf_counter() - t0) * 1000)
            out[name] = (first, statistics.median(times), len(r.content))
    return out


def live_latency(db: Path | str, base: str, info: dict[str, Any], browser: bool) -> tuple[float, str]:
    """Seconds from a new verdict's commit to the campaign page (or a 1 s poller) showing it (``db``: the
    SQLite file, or a server store's URL)."""
    cid = info["running"]
    store: Any = open_store(db)
    try:
        from harness.tuning.campaigns import CampaignRecorder as Rec

        rec = Rec.resume(store, PROTO, cid)
        idx = rec.next_index()
        assert idx is not None
        if browser:
            from playwright.sync_api import sync_playwright

            exe = shutil.which("chromium") or shutil.which("chromium-browser")
            if exe is None:
                raise RuntimeError("no chromium on PATH")
            with sync_playwright() as p:
                b = p.chromium.launch(executable_path=exe, args=["--no-sandbox"])
                page = b.new_page()
                page.goto(f"{base}/campaign/{cid}")
                page.wait_for_selector(f"#i{idx - 1}")
                page.wait_for_timeout(1500)          # the poller has its first version
                add_iteration(store, rec, idx, random.Random(99))
                t0 = time.monotonic()
                page.wait_for_selector(f"#i{idx}", timeout=10000)
                dt = time.monotonic() - t0
                b.close()
            return dt, "Chromium (Playwright) on the campaign page, polling every 1 s"
        import httpx

        with httpx.Client(base_url=base, timeout=30) as client:
            before = client.get("/api/status").json()["version"]
            add_iteration(store, rec, idx, random.Random(99))
            t0 = time.monotonic()
            while True:
                time.sleep(1.0)
                if client.get("/api/status").json()["version"] != before:
                    client.get(f"/fragment/campaign/{cid}").raise_for_status()
                    return time.monotonic() - t0, "HTTP poller every 1 s (no browser)"
    finally:
        store.close()


def measure(db: Path | str, info: dict[str, Any], built: float, size: str, repeat: int,
            browser: bool, transcripts: list[str]) -> list[str]:
    """Serve ``db`` (a SQLite file or a server URL) as ``atb view`` does; time it; its Markdown lines."""
    with Server(db, warm=False, transcripts=transcripts) as cold:   # nothing summarised before the first visit
        cold.app.state.view.verifier.wait(600)
        cold_index = time_pages(cold.url, {"index": "/"}, 1)["index"]
    with Server(db, transcripts=transcripts) as srv:
        t0 = time.monotonic()
        verified = srv.app.state.view.verifier.wait(600)
        verify_s = time.monotonic() - t0
        results = time_pages(srv.url, pages(info), repeat)
        latency, how = live_latency(db, srv.url, info, browser=browser)
    lines = [(f"Store built in {built:.1f} s ({size}, chain head {verified.head_seq}); its full verification "
              f"({verified.state}, {verified.rows_checked} rows) took {verify_s:.1f} s in the background thread, "
              "while pages are served."), "",
             "| page | path | first (ms) | median (ms) | size (KB) | under 300 ms |", "|---|---|---:|---:|---:|---|"]
    paths = pages(info)
    for name, (first, med, nbytes) in results.items():
        ok = "yes" if max(first, med) < 300 else "NO"
        lines.append(f"| {name} | `{paths[name]}` | {first:.1f} | {med:.1f} | {nbytes / 1024:.0f} | {ok} |")
    lines.append(f"| index, no start-up warming (`warm=False`): every campaign summarised on this request | `/` | "
                 f"{cold_index[0]:.1f} | {cold_index[1]:.1f} | {cold_index[2] / 1024:.0f} | "
                 f"{'yes' if cold_index[0] < 300 else 'NO'} |")
    lines += ["", (f"Live update: {latency:.2f} s from a new verdict's commit to the page showing its iteration "
                   f"({how}). Target: under 2 s."), ""]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaigns", type=int, default=100)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None, help="write a Markdown table here")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--pg-url", default=None,
                    help="also build the store in this EMPTY PostgreSQL database and time the pages over it")
    ap.add_argument("--note", default="", help="a sentence added to the machine line (e.g. what else ran)")
    args = ap.parse_args(argv)
    load_at_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="atb-view-bench-"))
    os.environ.setdefault("ATB_KEY_DIR", str(work / "keys"))
    db = work / "atb.sqlite"
    t0 = time.monotonic()
    info = populate(db, args.campaigns, args.iterations)
    built = time.monotonic() - t0
    print(f"built {args.campaigns} x {args.iterations} in {built:.1f} s: {db} ({db.stat().st_size / 1e6:.1f} MB)",
          file=sys.stderr)
    sections = [("SQLite", measure(db, info, built, f"{db.stat().st_size / 1e6:.1f} MB", args.repeat,
                                   not args.no_browser, []))]
    if args.pg_url:
        from harness.redact import redact

        pg_dir = work / "pg"
        pg_dir.mkdir()
        t0 = time.monotonic()
        pg_info = populate(pg_dir / "atb.sqlite", args.campaigns, args.iterations, url=args.pg_url)
        pg_built = time.monotonic() - t0
        print(f"built on PostgreSQL in {pg_built:.1f} s", file=sys.stderr)
        sections.append((f"PostgreSQL ({redact(args.pg_url)}, the server on this machine)",
                         measure(args.pg_url, pg_info, pg_built, "PostgreSQL 15", args.repeat, not args.no_browser,
                                 [str(pg_dir)])))
    load = os.getloadavg()
    lines = [f"# `atb view` page times ({args.campaigns} campaigns x {args.iterations} iterations, CPU machine)", "",
             (f"Command: `.venv/bin/python benchmarks/view_pages.py --campaigns {args.campaigns} --iterations "
              f"{args.iterations} --repeat {args.repeat}{' --no-browser' if args.no_browser else ''}"
              f"{' --pg-url postgresql://...' if args.pg_url else ''}{' --out ' + args.out if args.out else ''}`"), "",
             (f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}; "
              f"load average {load_at_start[0]:.2f} when the run started, {load[0]:.2f} at its end (1-minute)."
              + (f" {args.note}" if args.note else "")), "",
             ("Times are over HTTP from a client on the same machine to uvicorn (the server `atb view` runs): the "
              "first request after the server started (it summarises every campaign in a thread at start, "
              "and verifies the store in another) and the median of the next "
              f"{args.repeat}. Target: under 300 ms."), ""]
    for title, body in sections:
        lines += [f"## {title}", "", *body]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
