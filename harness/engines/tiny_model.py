"""Write a tiny random-weight llama-architecture GGUF, seeded, with no download.

No model can be fetched on this machine, and a trial must take seconds on two cores; throughput of an
engine serving random weights is still a real measurement of the engine (scheduling, batching, KV
cache, HTTP). The vocabulary is llama's SentencePiece layout: ``<unk>``, ``<s>``, ``</s>``, the 256
``<0xXX>`` byte tokens, then one token per workload word (``▁word``) and per letter, so workload prompts
tokenize to about one token per word. Weights are float32 so that results do not depend on a
quantisation kernel's rounding.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from harness.engines._errors import ModelWriteError
from harness.engines.workload import WORDS


class TinyModelSpec(BaseModel):
    """Hyperparameters of the tiny model (recorded in the engine task)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    seed: int = 0
    context_length: int = Field(default=2048, ge=64)
    embedding_length: int = Field(default=128, ge=16)
    block_count: int = Field(default=2, ge=1)
    feed_forward_length: int = Field(default=256, ge=16)
    head_count: int = Field(default=4, ge=1)
    head_count_kv: int = Field(default=2, ge=1)
    rms_eps: float = Field(default=1e-5, gt=0)
    output_scale: float = Field(default=4.0, gt=0, description="std of the output projection: peaked "
                                                                "logits keep greedy decoding stable")


class TinyModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    sha256: str
    bytes: int
    vocab_size: int
    spec: TinyModelSpec


def _vocab() -> tuple[list[str], list[float], list[int]]:
    import gguf

    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + \
        [gguf.TokenType.BYTE] * 256
    scores = [0.0] * len(tokens)
    pieces = ["\u2581"] + [chr(c) for c in range(ord("a"), ord("z") + 1)] + \
        ["\u2581" + chr(c) for c in range(ord("a"), ord("z") + 1)] + ["\u2581" + w for w in WORDS]
    for p in dict.fromkeys(pieces):
        tokens.append(p)
        types.append(gguf.TokenType.NORMAL)
        scores.append(float(len(p)))  # longer pieces win SentencePiece's merges
    return tokens, scores, [int(t) for t in types]


def write_tiny_model(path: Path, spec: TinyModelSpec | None = None) -> TinyModel:
    """Write the model to ``path`` (overwriting) and return its digest.

    Raises:
        ModelWriteError: inconsistent head counts, or the file cannot be written.
    """
    import gguf

    spec = spec or TinyModelSpec()
    d, h, hkv = spec.embedding_length, spec.head_count, spec.head_count_kv
    if d % h or h % hkv:
        raise ModelWriteError(f"embedding_length {d} must divide by head_count {h}, "
                              f"and head_count by head_count_kv {hkv}")
    head_dim = d // h
    tokens, scores, types = _vocab()
    n_vocab = len(tokens)
    rng = np.random.default_rng(spec.seed)

    def w(out_dim: int, in_dim: int, std: float | None = None) -> np.ndarray:
        s = std if std is not None else 1.0 / np.sqrt(in_dim)
        return (rng.standard_normal((out_dim, in_dim)) * s).astype(np.float32)

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        wr = gguf.GGUFWriter(str(path), arch="llama")
        wr.add_name(f"atb-tiny-llama-seed{spec.seed}")
        wr.add_context_length(spec.context_length)
        wr.add_embedding_length(d)
        wr.add_block_count(spec.block_count)
        wr.add_feed_forward_length(spec.feed_forward_length)
        wr.add_head_count(h)
        wr.add_head_count_kv(hkv)
        wr.add_layer_norm_rms_eps(spec.rms_eps)
        wr.add_rope_dimension_count(head_dim)
        wr.add_vocab_size(n_vocab)
        wr.add_file_type(gguf.LlamaFileType.ALL_F32)
        wr.add_tokenizer_model("llama")
        wr.add_token_list(tokens)
        wr.add_token_scores(scores)
        wr.add_token_types(types)
        wr.add_unk_token_id(0)
        wr.add_bos_token_id(1)
        wr.add_eos_token_id(2)
        wr.add_add_bos_token(True)
        wr.add_add_eos_token(False)
        wr.add_tensor("token_embd.weight", w(n_vocab, d, 1.0))
        wr.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
        wr.add_tensor("output.weight", w(n_vocab, d, spec.output_scale / np.sqrt(d)))
        for i in range(spec.block_count):
            wr.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, dtype=np.float32))
            wr.add_tensor(f"blk.{i}.attn_q.weight", w(d, d))
            wr.add_tensor(f"blk.{i}.attn_k.weight", w(hkv * head_dim, d))
            wr.add_tensor(f"blk.{i}.attn_v.weight", w(hkv * head_dim, d))
            wr.add_tensor(f"blk.{i}.attn_output.weight", w(d, d))
            wr.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, dtype=np.float32))
            wr.add_tensor(f"blk.{i}.ffn_gate.weight", w(spec.feed_forward_length, d))
            wr.add_tensor(f"blk.{i}.ffn_up.weight", w(spec.feed_forward_length, d))
            wr.add_tensor(f"blk.{i}.ffn_down.weight", w(d, spec.feed_forward_length))
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_tensors_to_file()
        wr.close()
        data = path.read_bytes()
    except OSError as exc:
        raise ModelWriteError(f"could not write the tiny model to {path}: {exc}") from exc
    return TinyModel(path=str(path), sha256=hashlib.sha256(data).hexdigest(), bytes=len(data),
                     vocab_size=n_vocab, spec=spec)
