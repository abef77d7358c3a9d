"""Send a workload to an engine's OpenAI-compatible endpoint and time every request.

The official ``openai`` async client (3.x, over ``httpx2``) streams ``/v1/completions`` with
``temperature=0`` and an explicit seed; retries are off so a failure is counted, never hidden by a
second attempt. Time to first token is taken at the first streamed chunk carrying text, end-to-end at
the end of the stream, both on the harness's monotonic clock. A request that raises, times out or
returns no text is a failed request and stays in the result (and in every denominator).
"""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, ConfigDict, Field

from harness.measure.serving.workload import RequestSpec, Workload


class RequestResult(BaseModel):
    """One request as the client saw it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    ok: bool
    error: str = ""
    text: str = ""
    completion_tokens: int = 0
    finish_reason: str | None = None
    sent_at_s: float = 0.0
    ttft_s: float | None = None
    e2e_s: float | None = None

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first, or None with fewer than two tokens."""
        if self.ttft_s is None or self.e2e_s is None or self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)


class WorkloadRun(BaseModel):
    """Every request of one workload run, with the wall-clock span from first send to last answer."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    rep: int = Field(default=0, ge=0, description="repetition of this seed's workload within a trial")
    results: list[RequestResult] = Field(min_length=1)
    duration_s: float = Field(gt=0)


async def _one(client: object, model: str, req: RequestSpec, seed: int, ignore_eos: bool, t0: float,
               timeout_s: float) -> RequestResult:
    from openai import AsyncOpenAI

    assert isinstance(client, AsyncOpenAI)
    sent = time.monotonic()
    ttft: float | None = None
    pieces: list[str] = []
    chunks_with_text = 0
    usage_tokens: int | None = None
    finish: str | None = None
    try:
        async with asyncio.timeout(timeout_s):
            stream = await client.completions.create(
                model=model, prompt=req.prompt, max_tokens=req.max_tokens, temperature=0.0, seed=seed,
                stream=True, stream_options={"include_usage": True},
                extra_body={"ignore_eos": ignore_eos} if ignore_eos else None)
            async for chunk in stream:
                if chunk.usage is not None and chunk.usage.completion_tokens is not None:
                    usage_tokens = int(chunk.usage.completion_tokens)
                for choice in chunk.choices:
                    if choice.text:
                        if ttft is None:
                            ttft = time.monotonic() - sent
                        pieces.append(choice.text)
                        chunks_with_text += 1
                    if choice.finish_reason:
                        finish = choice.finish_reason
    except Exception as exc:  # noqa: BLE001 - every failure is a counted, described failed request
        return RequestResult(index=req.index, ok=False, error=f"{type(exc).__name__}: {exc}"[:300],
                             sent_at_s=sent - t0, text="".join(pieces))
    e2e = time.monotonic() - sent
    text = "".join(pieces)
    tokens = usage_tokens if usage_tokens is not None else chunks_with_text
    if not text:
        return RequestResult(index=req.index, ok=False, error="empty completion", sent_at_s=sent - t0,
                             e2e_s=e2e, finish_reason=finish)
    return RequestResult(index=req.index, ok=True, text=text, completion_tokens=tokens, finish_reason=finish,
                         sent_at_s=sent - t0, ttft_s=ttft, e2e_s=e2e)


async def _run(base_url: str, model: str, workload: Workload, timeout_s: float) -> WorkloadRun:
    import httpx2
    from openai import AsyncOpenAI

    spec = workload.spec
    # No connection is kept alive for reuse: llama-server's HTTP layer closes idle keep-alive connections, and a
    # request sent on one it has just closed fails with "Server disconnected without sending a response" (seen
    # under fixed_concurrency, where each client sends its next request on the connection of its last: 1-6 of
    # 24 requests per run failed on SmolLM2). Each request opens its own connection, as all-at-once ones always did.
    limits = httpx2.Limits(max_connections=len(workload.requests) + 4, max_keepalive_connections=0)
    async with httpx2.AsyncClient(limits=limits, timeout=timeout_s, trust_env=False) as http:
        client = AsyncOpenAI(base_url=base_url.rstrip("/") + "/v1", api_key="atb-local", max_retries=0,
                             timeout=timeout_s, http_client=http)
        gate = asyncio.Semaphore(spec.concurrency) if spec.arrival == "fixed_concurrency" and spec.concurrency \
            else None
        t0 = time.monotonic()

        async def send(req: RequestSpec) -> RequestResult:
            if spec.arrival == "poisson":
                await asyncio.sleep(max(0.0, t0 + req.send_at_s - time.monotonic()))
            if gate is None:
                return await _one(client, model, req, workload.seed, spec.ignore_eos, t0, timeout_s)
            async with gate:
                return await _one(client, model, req, workload.seed, spec.ignore_eos, t0, timeout_s)

        results = await asyncio.gather(*(send(r) for r in workload.requests))
        duration = time.monotonic() - t0
    return WorkloadRun(seed=workload.seed, results=sorted(results, key=lambda r: r.index),
                       duration_s=max(duration, 1e-9))


def run_workload(base_url: str, model: str, workload: Workload, timeout_s: float) -> WorkloadRun:
    """Send ``workload`` to ``base_url`` and return every request's result; never raises for a failed
    request (it is recorded with ``ok=False``)."""
    return asyncio.run(_run(base_url, model, workload, timeout_s))
