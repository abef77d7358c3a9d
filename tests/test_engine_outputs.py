"""The output-match gate on a real model: a completion that differs from every default completion counts
only when it is the default's greedy decode up to near ties (harness.measure.serving.outputs).

The walk is tested against a toy greedy "server" (httpx2 MockTransport speaking llama-server's native
``/completion`` with ``n_probs``) whose near ties are known; the gate on plain trial facts; and, where
llama-server and the SmolLM2 GGUF are cached, end to end on the real model: the default against itself
passes, a configuration that corrupts the output (a wrong RoPE base) and garbage text are rejected."""

from __future__ import annotations

import json
import re

import pytest

from harness.engines import EngineProbe
from harness.measure.serving.client import RequestResult, WorkloadRun
from harness.measure.serving.metrics import compute_metrics
from harness.measure.serving.outputs import Divergence, OutputCheck, check_completion
from harness.measure.serving.trial import ArmResult, EngineTrial
from harness.verdict.engine import judge_engine_trial as judge_trial
from harness.records import sha256_text
from protocol import load_protocol

PROTO = load_protocol()
TOL = PROTO.engine.output_tie_tolerance_nats

# The toy model: the next token's log-probabilities depend only on the last word of the context.
# After the prompt, " the" and " they" are a near tie (0.05 nats); after " the", " cat" and " dog" are.
TABLE: dict[str, dict[str, float]] = {
    "P": {" the": -0.70, " they": -0.75, " cat": -3.0, " mat": -5.0},
    "the": {" cat": -0.69, " dog": -0.72, " mat": -4.0, " on": -6.0},
    "they": {" sat": -0.2, " on": -2.5, " the": -4.0},
    "cat": {" sat": -0.1, " on": -3.0, " mat": -5.0},
    "dog": {" sat": -0.1, " on": -3.0, " mat": -5.0},
    "sat": {" on": -0.1, " the": -2.5, " mat": -6.0},
    "on": {" the": -0.1, " mat": -3.0, " cat": -4.0},
    "mat": {" on": -0.3, " the": -1.9, " sat": -5.0},
}


def _next(context: str) -> list[tuple[str, float]]:
    last = re.findall(r"\w+", context)[-1]
    return sorted(TABLE[last].items(), key=lambda kv: -kv[1])


def _greedy(context: str, n: int) -> str:
    out = ""
    for _ in range(n):
        out += _next(context + out)[0][0]
    return out


def _toy_client(calls: list[dict] | None = None, fail: bool = False):
    import httpx2

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        if calls is not None:
            calls.append(body)
        if fail:
            return httpx2.Response(500, json={"error": "boom"})
        assert request.url.path == "/completion" and body["temperature"] == 0.0
        ctx, probs = body["prompt"], []
        for _ in range(body["n_predict"]):
            dist = _next(ctx)[: body["n_probs"]]
            tok, lp = dist[0]
            probs.append({"token": tok, "bytes": list(tok.encode()), "logprob": lp,
                          "top_logprobs": [{"token": t, "bytes": list(t.encode()), "logprob": v} for t, v in dist]})
            ctx += tok
        return httpx2.Response(200, json={"content": ctx[len(body["prompt"]):], "completion_probabilities": probs})

    return httpx2.Client(transport=httpx2.MockTransport(handler))


def _check(text: str, client=None, n: int = 6) -> OutputCheck:
    return check_completion("http://toy", prompt="P", text=text, max_tokens=n, seed=1, index=0,
                            tolerance_nats=TOL, top_n=PROTO.engine.output_check_top_n, timeout_s=5,
                            client=client or _toy_client())


def test_the_defaults_own_greedy_text_needs_no_divergence() -> None:
    calls: list[dict] = []
    text = _greedy("P", 6)
    c = _check(text, _toy_client(calls))
    assert text == " the cat sat on the cat"
    assert c.consistent(TOL) and c.divergences == [] and c.reference_requests == 1 == len(calls)


def test_near_ties_pass_and_each_is_judged_in_the_candidates_own_context() -> None:
    # " they" (0.05 nats below " the"; the text alone cannot say it is not " the" + "y") and later " dog"
    # (0.03 below " cat"): every later token is judged after the candidate's own prefix.
    calls: list[dict] = []
    c = _check(" they sat on the dog sat", _toy_client(calls))
    assert c.consistent(TOL), c
    assert [(d.reference_token, d.candidate_token) for d in c.divergences] == [(" the", " they"), (" cat", " dog")]
    assert max(d.gap_nats for d in c.divergences) == pytest.approx(0.05)
    assert [b["prompt"] for b in calls] == ["P", "P they", "P they sat on the dog"]


@pytest.mark.parametrize("garbage", [
    " mat on the cat sat on",        # fluent words, a clear non-greedy first choice (4.3 nats below)
    " xyzzy plugh",                   # tokens the model would never rank in its top n
    " the cat sat on the mat",       # right until the last token, which is 3.3 nats below the best
])
def test_garbage_is_not_a_greedy_decode(garbage: str) -> None:
    c = _check(garbage)
    assert not c.consistent(TOL)
    assert c.divergences and (c.divergences[-1].gap_nats is None or c.divergences[-1].gap_nats > TOL)


def test_a_failed_reference_fails_the_check_closed() -> None:
    c = _check(" they sat", _toy_client(fail=True))
    assert not c.consistent(TOL) and "HTTP 500" in c.error


# -- the gate, on trial facts ------------------------------------------------------------------------------

SEEDS = [101, 202, 303, 404, 505]
N = 6
PROBE = EngineProbe(engine="llama-server", pinned_version="test", version_text="version: 1 (test)",
                    help_sha256=sha256_text("help"), flags_in_help=["--parallel"])


def _arm(arm: str, text) -> ArmResult:
    runs = [WorkloadRun(seed=s, results=[RequestResult(index=i, ok=True, text=text(s, i), completion_tokens=8,
                                                       ttft_s=0.01, e2e_s=0.05) for i in range(N)],
                        duration_s=0.6) for s in SEEDS]
    return ArmResult(arm=arm, config={}, argv=["llama-server"], ready_s=0.5, runs=runs,
                     metrics=[compute_metrics(r) for r in runs])


def _judge(cand_text, checks: list[OutputCheck]):
    trial = EngineTrial(task_id="llamacpp-smollm2", engine="llama-server", seeds=SEEDS, probe=PROBE,
                        model_sha256="0" * 64, baseline=_arm("baseline", lambda s, i: f"out-{s}-{i}"),
                        candidate=_arm("candidate", cand_text), output_checks=checks)
    j = judge_trial(trial, PROTO)
    return j, next(g for g in j.gates if g.name == "output_match")


def _checks(gap: float | None, text, which=lambda s, i: True) -> list[OutputCheck]:
    return [OutputCheck(seed=s, index=i, text=text(s, i), complete=True,
                        divergences=[Divergence(at_byte=0, reference_token="out", candidate_token="alt", gap_nats=gap)])
            for s in SEEDS for i in range(N) if which(s, i)]


def test_completions_that_differ_only_at_near_ties_pass_the_gate() -> None:
    alt = lambda s, i: f"alt-{s}-{i}" if i % 2 else f"out-{s}-{i}"  # noqa: E731
    j, g = _judge(alt, _checks(TOL / 2, alt, lambda s, i: i % 2 == 1))
    assert g.passed and j.status == "accepted", g.detail
    assert "15 equal a default completion, 15 are its greedy decode up to near ties" in g.detail


def test_a_corrupting_configuration_is_still_rejected() -> None:
    # every completion differs and every check found a clear (or off-list) divergence: the shape of a
    # configuration that corrupts the output, whatever its speed
    bad = lambda s, i: f"junk-{s}-{i}"  # noqa: E731
    for gap in (TOL * 1.01, 3.0, None):
        j, g = _judge(bad, _checks(gap, bad))
        assert not g.passed and j.status == "rejected" and not j.correct, g.detail
        assert "0/30" in g.detail and "unmatched" in g.detail


def test_garbage_without_checks_or_with_failed_checks_never_passes() -> None:
    bad = lambda s, i: f"junk-{s}-{i}"  # noqa: E731
    assert not _judge(bad, [])[1].passed                       # differing text, never checked: unmatched
    errored = [c.model_copy(update={"error": "ReadTimeout", "divergences": []}) for c in _checks(0.0, bad)]
    assert not _judge(bad, errored)[1].passed                  # a check that failed is no evidence
    incomplete = [c.model_copy(update={"complete": False, "divergences": []}) for c in _checks(0.0, bad)]
    assert not _judge(bad, incomplete)[1].passed
    stale = _checks(0.0, lambda s, i: f"other-{s}-{i}")          # checks of other texts do not count
    assert not _judge(bad, stale)[1].passed


def test_the_tolerance_and_the_bar_come_from_the_protocol() -> None:
    bad = lambda s, i: f"junk-{s}-{i}" if (s, i) in {(101, 0), (202, 1), (303, 2), (404, 3)} else f"out-{s}-{i}"  # noqa: E731
    ok = _checks(TOL, bad, lambda s, i: bad(s, i).startswith("junk"))
    over = _checks(TOL + 1e-3, bad, lambda s, i: bad(s, i).startswith("junk"))
    assert _judge(bad, ok)[1].passed
    assert _judge(bad, over)[1].passed == (26 / 30 >= PROTO.engine.output_match_min_fraction)


# -- the real model ----------------------------------------------------------------------------------------

def _real_model_or_skip():
    from harness.engines.llamacpp_build import cached_binary
    from harness.engines.llamacpp_model import cached_smollm2

    if cached_binary() is None or cached_smollm2() is None:
        pytest.skip("llama-server or the SmolLM2 GGUF is not cached here: run `bash scripts/setup.sh`")


@pytest.mark.engine
@pytest.mark.slow
def test_real_model_default_passes_and_a_corrupting_config_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Short real trials on SmolLM2-135M (2 seeds x 1 repetition x 8 requests): the default against itself
    passes the output gate; a launch whose RoPE base is wrong (the model runs and answers fluently, every
    request succeeds, the text is not the model's) fails it, and so does the default's text for other
    prompts."""
    _real_model_or_skip()
    from harness.engines.adapters.llamacpp import LlamaServerAdapter
    from harness.engines.task import load_engine_task
    from harness.measure.serving.trial import run_engine_trial

    task = load_engine_task("llamacpp-smollm2")
    proto = PROTO.model_copy(update={"engine": PROTO.engine.model_copy(
        update={"requests_per_trial": 8, "reps_per_seed": 1, "warmup_requests": 1})})
    seeds = [11, 22]
    same = run_engine_trial(task, {}, proto, seeds=seeds)
    gate = next(g for g in judge_trial(same, proto).gates if g.name == "output_match")
    assert gate.passed, gate.detail

    render = LlamaServerAdapter.render_args

    def corrupting(self, config):  # the candidate (poll=49, a no-op value) also gets a wrong RoPE base
        return render(self, config) + (["--rope-freq-base", "50"] if config.get("poll") == 49 else [])

    monkeypatch.setattr(LlamaServerAdapter, "render_args", corrupting)
    bad = run_engine_trial(task, {"poll": 49}, proto, seeds=seeds)
    assert bad.candidate is not None and all(r.ok for run in bad.candidate.runs for r in run.results)
    j = judge_trial(bad, proto)
    gate = next(g for g in j.gates if g.name == "output_match")
    assert not gate.passed and j.status == "rejected" and not j.correct, gate.detail
    assert bad.output_checks and not any(c.consistent(TOL) for c in bad.output_checks)

    # garbage with the right shape: each request answered with the default's own text for the next request,
    # walked along a fresh default launch's greedy path
    from pathlib import Path
    import tempfile

    from harness.measure.serving.outputs import check_completion
    from harness.measure.serving.trial import _launch, prepare_model
    from harness.measure.serving.workload import make_workload

    monkeypatch.setattr(LlamaServerAdapter, "render_args", render)
    texts = {(run.seed, r.index): r.text for run in same.baseline.runs for r in run.results}
    with tempfile.TemporaryDirectory() as logs:
        proc = _launch(task, {}, prepare_model(task), proto, Path(logs), "reference")
        try:
            checks = [check_completion(proc.base_url, prompt=req.prompt, text=texts[(s, (req.index + 1) % 8)],
                                       max_tokens=req.max_tokens, seed=s, index=req.index, tolerance_nats=TOL,
                                       top_n=proto.engine.output_check_top_n, timeout_s=60)
                      for s in seeds for req in make_workload(task.workload, s, 8).requests]
        finally:
            proc.stop()
    assert not any(c.error for c in checks)
    assert sum(c.consistent(TOL) for c in checks) / len(checks) < proto.engine.output_match_min_fraction
