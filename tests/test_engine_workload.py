"""The seeded workload, the openai async client and the metrics, against a real loopback HTTP server
that streams OpenAI completions (SSE) on 127.0.0.1: determinism, arrival processes, failures counted."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness.engines.workload import WORDS, WorkloadSpec
from harness.measure.serving.client import run_workload
from harness.measure.serving.metrics import compute_metrics
from harness.measure.serving.workload import make_workload


class _Server:
    """Streams `max_tokens` one-word chunks per request, `delay_s` apart; prompts containing 'river'
    get HTTP 500 when `fail_river` is set. Records each request body and its arrival time."""

    def __init__(self, delay_s: float = 0.002, fail_river: bool = False) -> None:
        self.delay_s, self.fail_river = delay_s, fail_river
        self.bodies: list[dict] = []
        self.arrivals: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                with outer.lock:
                    outer.bodies.append(body)
                    outer.arrivals.append(time.monotonic())
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    if outer.fail_river and "river" in body["prompt"]:
                        self.send_response(500)
                        self.send_header("content-type", "application/json")
                        self.send_header("content-length", "2")
                        self.end_headers()
                        self.wfile.write(b"{}")
                        return
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("connection", "close")
                    self.end_headers()
                    n = body["max_tokens"]
                    for i in range(n):
                        time.sleep(outer.delay_s)
                        chunk = {"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                                 "choices": [{"index": 0, "text": f" w{len(body['prompt']) % 7}{i}",
                                              "finish_reason": "length" if i == n - 1 else None}]}
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    usage = {"id": "c", "object": "text_completion", "created": 0, "model": body["model"],
                             "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}}
                    self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
                    self.wfile.flush()
                finally:
                    with outer.lock:
                        outer.in_flight -= 1
                self.close_connection = True

        class Srv(ThreadingHTTPServer):
            request_queue_size = 128  # the default backlog of 5 refuses an all-at-once burst

        self.httpd = Srv(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server() -> Iterator[_Server]:
    s = _Server()
    yield s
    s.close()


SPEC = WorkloadSpec(prompt_words_min=4, prompt_words_max=12, output_tokens_min=3, output_tokens_max=6,
                    shared_prefix_words=5)


def test_workload_is_deterministic_in_the_seed() -> None:
    a, b, c = make_workload(SPEC, 11, 16), make_workload(SPEC, 11, 16), make_workload(SPEC, 12, 16)
    assert a == b and a != c
    prefixes = {r.prompt.split()[:5].__repr__() for r in a.requests}
    assert len(prefixes) == 1  # one shared prefix per workload
    for r in a.requests:
        words = r.prompt.split()
        assert 9 <= len(words) <= 17 and set(words) <= set(WORDS)
        assert 3 <= r.max_tokens <= 6 and r.send_at_s == 0.0


def test_poisson_offsets_grow_and_follow_the_rate() -> None:
    spec = SPEC.model_copy(update={"arrival": "poisson", "rate_per_s": 50.0})
    w = make_workload(spec, 3, 400)
    offs = [r.send_at_s for r in w.requests]
    assert offs == sorted(offs) and offs[0] == 0.0
    assert 400 / 50.0 * 0.8 < offs[-1] < 400 / 50.0 * 1.2


def test_spec_validation() -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        WorkloadSpec(prompt_words_min=1, prompt_words_max=2, output_tokens_min=1, output_tokens_max=2, arrival="poisson")
    with pytest.raises(ValueError, match="concurrency"):
        WorkloadSpec(prompt_words_min=1, prompt_words_max=2, output_tokens_min=1, output_tokens_max=2,
                     arrival="fixed_concurrency")


def test_client_sends_temperature_zero_and_seed_and_times_every_request(server: _Server) -> None:
    w = make_workload(SPEC, 5, 8)
    run = run_workload(server.url, "tiny", w, timeout_s=20)
    assert [r.index for r in run.results] == list(range(8)) and all(r.ok for r in run.results)
    for body in server.bodies:
        assert body["temperature"] == 0 and body["seed"] == 5 and body["stream"] is True
        assert body["ignore_eos"] is True and body["model"] == "tiny"
    for req, res in zip(w.requests, run.results):
        assert res.completion_tokens == req.max_tokens
        assert res.ttft_s is not None and res.e2e_s is not None and 0 < res.ttft_s <= res.e2e_s
        assert res.tpot_s is not None and res.tpot_s > 0
    m = compute_metrics(run)
    assert m.failed == 0 and m.completed == 8
    assert m.request_throughput == pytest.approx(8 / run.duration_s)
    assert m.output_tokens == sum(r.max_tokens for r in w.requests)
    assert m.ttft_s.p50 is not None and m.ttft_s.p50 <= m.ttft_s.p99 and m.e2e_s.p90 is not None


def test_failed_requests_stay_in_the_denominator() -> None:
    s = _Server(fail_river=True)
    try:
        w = make_workload(SPEC.model_copy(update={"shared_prefix_words": 0}), 1, 24)
        expect_fail = sum("river" in r.prompt for r in w.requests)
        assert 0 < expect_fail < 24
        run = run_workload(s.url, "tiny", w, timeout_s=20)
    finally:
        s.close()
    m = compute_metrics(run)
    assert m.failed == expect_fail and m.requests == 24
    assert m.failed_fraction == pytest.approx(expect_fail / 24)
    assert m.request_throughput == pytest.approx((24 - expect_fail) / run.duration_s)
    bad = [r for r in run.results if not r.ok]
    assert all("InternalServerError" in r.error for r in bad), [r.error for r in bad]


def test_fixed_concurrency_caps_requests_in_flight() -> None:
    s = _Server(delay_s=0.01)
    try:
        spec = SPEC.model_copy(update={"arrival": "fixed_concurrency", "concurrency": 2})
        run_workload(s.url, "tiny", make_workload(spec, 2, 8), timeout_s=20)
        assert s.max_in_flight <= 2
        s.max_in_flight = 0
        run_workload(s.url, "tiny", make_workload(SPEC, 2, 8), timeout_s=20)
        assert s.max_in_flight > 2  # all at once really is concurrent
    finally:
        s.close()


def test_poisson_arrivals_are_spaced_on_the_wire(server: _Server) -> None:
    spec = SPEC.model_copy(update={"arrival": "poisson", "rate_per_s": 20.0})
    w = make_workload(spec, 9, 6)
    run_workload(server.url, "tiny", w, timeout_s=20)
    span = max(server.arrivals) - min(server.arrivals)
    assert span >= 0.8 * w.requests[-1].send_at_s


def test_unreachable_engine_gives_failed_requests_not_an_exception() -> None:
    from harness.measure.serving.process import free_port

    run = run_workload(f"http://127.0.0.1:{free_port()}", "tiny", make_workload(SPEC, 1, 3), timeout_s=5)
    assert not any(r.ok for r in run.results)
    m = compute_metrics(run)
    assert m.failed == 3 and m.request_throughput == 0.0
