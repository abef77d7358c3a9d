"""Is a candidate's temperature-0 completion one the default launch could have produced?

With real weights a batched server is not bit-reproducible: which requests share a batch, and where a
slot's tokens sit in the KV cache, change the order of floating-point sums, and where the model's two best
next tokens are within a rounding error of each other (a near tie), greedy decoding may take either. On
SmolLM2-135M and this harness's word-list prompts, only 0.56-0.59 of one default launch's completions
equal another default launch's (benchmarks/results/engine_real_model.md), although every single request
sent alone to one launch is reproduced exactly. Exact text equality therefore cannot tell a wrong
configuration from a correct one there.

The check here asks the question that can: *is the candidate's text a greedy decode of the default launch,
up to near ties?* The default launch (serving one request at a time, where it is reproducible) regenerates
the completion with its top-``n`` log-probabilities. The candidate's text is walked token by token along
that reference. Where they part, the candidate's token must be among the reference's top ``n`` and its
log-probability within ``tolerance`` nats of the best token's; the reference then continues from the
candidate's own prefix, so every later token is judged in the candidate's context. A completion whose
every divergence is such a near tie is consistent; one that parts at a clear choice, or with a token
outside the top ``n``, is not. Garbage (the right length, the wrong words) parts at its first token with
a gap of nats, or outside the top ``n``.

These are facts gathered after the timed repetitions (nothing here is timed); the ``output_match`` gate
(:mod:`harness.verdict.gates.engine`) judges them against the protocol's tolerance.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Divergence(BaseModel):
    """Where the candidate's text left the reference's greedy path."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    at_byte: int = Field(ge=0, description="offset in the candidate's UTF-8 text")
    reference_token: str
    candidate_token: str = Field(description="the top-n token the candidate's text continues with; "
                                             "its next bytes when none fits")
    gap_nats: float | None = Field(default=None, description="best log-probability minus the candidate "
                                                             "token's; None when it is not in the top n")


class OutputCheck(BaseModel):
    """The check of one distinct candidate completion of one request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int
    index: int
    text: str
    complete: bool = Field(description="the whole text was walked (or a divergence beyond the tolerance "
                                       "ended the walk, which decides the check)")
    divergences: list[Divergence] = Field(default_factory=list)
    reference_requests: int = 0
    error: str = ""

    def consistent(self, tolerance_nats: float) -> bool:
        """Every divergence a near tie within ``tolerance_nats``, and the whole text walked."""
        return (self.complete and not self.error
                and all(d.gap_nats is not None and d.gap_nats <= tolerance_nats for d in self.divergences))

    def max_gap(self) -> float | None:
        gaps = [d.gap_nats for d in self.divergences]
        if any(g is None for g in gaps):
            return float("inf")
        return max((g for g in gaps if g is not None), default=None)


def _token_bytes(entry: dict) -> bytes:
    raw = entry.get("bytes")
    if isinstance(raw, list):
        return bytes(raw)
    return str(entry.get("token", "")).encode("utf-8")


def check_completion(base_url: str, *, prompt: str, text: str, max_tokens: int, seed: int, index: int,
                     tolerance_nats: float, top_n: int, timeout_s: float, client: object | None = None,
                     ignore_eos: bool = True) -> OutputCheck:
    """Walk ``text`` along the greedy path of the llama-server at ``base_url`` (its native ``/completion``
    with ``n_probs``). The server should be serving nothing else meanwhile: one request at a time is
    where its decoding is reproducible. Never raises: a failed reference request is recorded as ``error``
    (and the check then fails, closed)."""
    import httpx2

    own = client is None
    http = httpx2.Client(timeout=timeout_s, trust_env=False) if own else client
    assert isinstance(http, httpx2.Client)
    target = text.encode("utf-8")
    pos = 0
    used = 0
    divergences: list[Divergence] = []
    requests = 0
    max_requests = 2 * max_tokens + 4
    try:
        while pos < len(target):
            if requests >= max_requests:
                return OutputCheck(seed=seed, index=index, text=text, complete=False, divergences=divergences,
                                   reference_requests=requests, error=f"gave up after {requests} reference requests")
            try:
                prefix = target[:pos].decode("utf-8")
            except UnicodeDecodeError:
                return OutputCheck(seed=seed, index=index, text=text, complete=False, divergences=divergences,
                                   reference_requests=requests,
                                   error=f"divergence inside a UTF-8 character at byte {pos}: not checkable")
            body = {"prompt": prompt + prefix, "n_predict": max(1, max_tokens - used) if used < max_tokens else 4,
                    "temperature": 0.0, "n_probs": top_n, "seed": seed, "cache_prompt": True,
                    "ignore_eos": ignore_eos}
            resp = http.post(base_url.rstrip("/") + "/completion", json=body)
            requests += 1
            if resp.status_code != 200:
                return OutputCheck(seed=seed, index=index, text=text, complete=False, divergences=divergences,
                                   reference_requests=requests,
                                   error=f"reference request answered HTTP {resp.status_code}: {resp.text[:200]}")
            probs = resp.json().get("completion_probabilities") or []
            if not probs:
                return OutputCheck(seed=seed, index=index, text=text, complete=False, divergences=divergences,
                                   reference_requests=requests, error="reference returned no tokens")
            for entry in probs:
                ref = _token_bytes(entry)
                tops = entry.get("top_logprobs") or []
                best = max([float(t["logprob"]) for t in tops] + [float(entry.get("logprob", float("-inf")))])
                fits = [t for t in tops if _token_bytes(t) and target.startswith(_token_bytes(t), pos)]
                # The text does not say where its tokens end: ' they' may be ' they' or ' the' + 'y'. A longer
                # top-n token that fits within the tolerance is taken as the candidate's token (BPE emits the
                # longest piece); otherwise the reference's own token, when it fits, is followed.
                longer = [t for t in fits if len(_token_bytes(t)) > len(ref)
                          and best - float(t["logprob"]) <= tolerance_nats]
                if ref and target.startswith(ref, pos) and not longer:
                    pos += len(ref)
                    used += 1
                    if pos >= len(target):
                        break
                    continue
                if longer:
                    fits = longer
                ref_s = ref.decode("utf-8", "replace")
                if not fits:
                    divergences.append(Divergence(at_byte=pos, reference_token=ref_s,
                                                  candidate_token=target[pos:pos + 12].decode("utf-8", "replace"),
                                                  gap_nats=None))
                    return OutputCheck(seed=seed, index=index, text=text, complete=True, divergences=divergences,
                                       reference_requests=requests)
                pick = max(fits, key=lambda t: len(_token_bytes(t)))
                gap = best - float(pick["logprob"])
                divergences.append(Divergence(at_byte=pos, reference_token=ref_s,
                                              candidate_token=_token_bytes(pick).decode("utf-8", "replace"),
                                              gap_nats=round(gap, 6)))
                if gap > tolerance_nats:
                    return OutputCheck(seed=seed, index=index, text=text, complete=True, divergences=divergences,
                                       reference_requests=requests)
                pos += len(_token_bytes(pick))
                used += 1
                break  # the reference continues from the candidate's own prefix
        return OutputCheck(seed=seed, index=index, text=text, complete=True, divergences=divergences,
                           reference_requests=requests)
    except Exception as exc:  # noqa: BLE001 - a failed check is recorded and fails closed
        return OutputCheck(seed=seed, index=index, text=text, complete=False, divergences=divergences,
                           reference_requests=requests, error=f"{type(exc).__name__}: {exc}"[:300])
    finally:
        if own:
            http.close()
