"""The workload an engine task declares (:class:`WorkloadSpec`) and the words its prompts are made of.

Prompts are sequences of words from :data:`WORDS` (each one token in the tiny model's vocabulary, and
ordinary English for a real model). The seeded requests themselves are drawn when a trial measures
(:func:`harness.measure.serving.workload.make_workload`); here is only what a task file states.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

WORDS: tuple[str, ...] = tuple(dict.fromkeys("""
the of and to in is was that for on with as by at from it his an be are this which or had her not but
have one were all their they has been more its also new first two after who other time only over such
when can into most some these year would she him made them than then there many where up out about later
between during under three world state city used part known may both while well each school including
early through since before being became same people high name family found any system until work second
war took life several because house four through group member area team film season water small large
number music since body book story light road river field power place point order game line hand head
side word view form land town model end mind open color bird tree stone sound cloud fire wind rain snow
green blue black white red gold silver quiet bright dark warm cold long short old young fast slow round
""".split()))


class WorkloadSpec(BaseModel):
    """The shape of a task's traffic. The request count comes from the protocol, not from here."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_words_min: int = Field(ge=1)
    prompt_words_max: int = Field(ge=1)
    output_tokens_min: int = Field(ge=1)
    output_tokens_max: int = Field(ge=1)
    arrival: Literal["all_at_once", "poisson", "fixed_concurrency"] = "all_at_once"
    rate_per_s: float | None = Field(default=None, gt=0, description="Poisson arrival rate")
    concurrency: int | None = Field(default=None, ge=1, description="requests in flight (fixed_concurrency)")
    shared_prefix_words: int = Field(default=0, ge=0)
    ignore_eos: bool = Field(default=True, description="generate exactly max_tokens (the usual benchmark "
                                                       "convention; a random model's EOS is noise)")
    # Issue 30: text a model can continue by copying. ``repeated`` prompts are one seeded unit of
    # ``repeat_unit_words`` words said over and over (cut at the prompt's drawn length): a real model's greedy
    # continuation goes on repeating it, which is where model-free n-gram speculation drafts tokens that are
    # accepted. ``words`` (or unset) prompts are independent draws, where it finds little to draft.
    # Unset fields are left out of the serialized spec, so every task written before them keeps its digest.
    prompt_style: Literal["words", "repeated"] | None = Field(
        default=None, description="how a prompt's words are drawn; unset: independently ('words')")
    repeat_unit_words: int | None = Field(default=None, ge=1, description="words in the repeated unit")

    @model_serializer(mode="wrap")
    def _omit_unset_additions(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for key in _ADDED_FIELDS:
                if data.get(key) is None:
                    data.pop(key, None)
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "WorkloadSpec":
        if self.prompt_words_min > self.prompt_words_max or self.output_tokens_min > self.output_tokens_max:
            raise ValueError("workload: each *_min must not exceed its *_max")
        if self.arrival == "poisson" and self.rate_per_s is None:
            raise ValueError("workload: Poisson arrival needs rate_per_s")
        if self.arrival == "fixed_concurrency" and self.concurrency is None:
            raise ValueError("workload: fixed_concurrency arrival needs concurrency")
        if (self.prompt_style == "repeated") != (self.repeat_unit_words is not None):
            raise ValueError("workload: repeat_unit_words is given exactly when prompt_style is 'repeated'")
        return self


#: fields added after tasks were stored: omitted from the serialized spec while unset (task digests hold)
_ADDED_FIELDS = ("prompt_style", "repeat_unit_words")

#: Serving workloads at GPU scale (issue 30, step 3), by name. Both send the protocol's requests 16 at a time
#: (``fixed_concurrency``: 16 clients, each sending its next request when the last is answered), long enough
#: prompts and answers for batching to matter; they differ only in what the prompts say.
NAMED_WORKLOADS: dict[str, WorkloadSpec] = {
    # a seeded 24-word unit repeated through a 96-256 word prompt: a real model goes on repeating it, so
    # n-gram speculation (model-free drafting from the context) can win here
    "gpu-repetitive": WorkloadSpec(prompt_words_min=96, prompt_words_max=256, output_tokens_min=128,
                                   output_tokens_max=256, arrival="fixed_concurrency", concurrency=16,
                                   prompt_style="repeated", repeat_unit_words=24),
    # independent words, no shared prefix: little in the context to draft from, so speculation cannot win
    "gpu-random": WorkloadSpec(prompt_words_min=96, prompt_words_max=256, output_tokens_min=128,
                               output_tokens_max=256, arrival="fixed_concurrency", concurrency=16,
                               prompt_style="words"),
}


__all__ = ["NAMED_WORKLOADS", "WORDS", "WorkloadSpec"]
