"""A tiny llama GGUF model with random weights, for the llama.cpp recipe tests (no download).

Run it with the `gguf` package of the llama.cpp tree under test on the path (its constants match
that tree): `PYTHONPATH=<tree>/gguf-py python tinymodel.py OUT.gguf [SEED [SHAPE]]`. `write_model`
does that. SHAPE is `TINY` (the default: n_embd 128, F16, fast enough for every test) or
`REHEARSAL` (TinyLlama's widths with 4 layers in Q4_0: the model of issue 26's rehearsal, whose op
shapes are those of a real small model).

Measured (see FACTS.md): with plain norm weights the logits of such a model are nearly uniform and
a subtle numerical break barely moves the KL divergence; strongly varied norm weights
(1 + 20·N(0,1)) make the logits peaked, so a broken RMS norm shows a mean KLD of about 0.1-0.4.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    quantized: bool  # projections in Q4_0 (else F16)
    n_ctx: int = 2048
    vocab_multiple: int = 1  # unused tokens pad the vocabulary to a multiple of this


TINY = Shape(n_embd=128, n_layer=4, n_head=4, n_head_kv=2, n_ff=256, quantized=False, n_ctx=512)
# The output matrix's rows are the vocabulary: ggml-cpu's AMX path for Q4_0 (Sapphire Rapids) crashed on
# 341 of them (llama.cpp 0.3.19); real vocabularies (TinyLlama's 32,000) are multiples of 256.
REHEARSAL = Shape(n_embd=2048, n_layer=4, n_head=32, n_head_kv=4, n_ff=5632, quantized=True, vocab_multiple=256)
SHAPES = {"TINY": TINY, "REHEARSAL": REHEARSAL}


def write_model(tree: Path, out: Path, seed: int = 1, shape: str = "TINY") -> Path:
    """Write the model with the gguf-py of `tree` (a llama.cpp checkout) in a subprocess."""
    env = {**os.environ, "PYTHONPATH": str(tree / "gguf-py")}
    subprocess.run([sys.executable, __file__, str(out), str(seed), shape], env=env, check=True, timeout=600,
                   capture_output=True)
    return out


def _vocab() -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style vocabulary: control tokens, the 256 byte fallbacks, then common pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    pieces = [chr(c) for c in range(ord("a"), ord("z") + 1)] + list(".,;:'!?-()0123456789")
    pieces += ["▁" + p for p in pieces[:26]] + ["▁", "▁the", "▁and", "▁of", "▁to", "in", "er", "th", "on", "re"]
    tokens += pieces
    types += [1] * len(pieces)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(pieces))]
    return tokens, scores, types


def _main(out: str, seed: int, shape: Shape) -> None:
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    while len(tokens) % shape.vocab_multiple:
        tokens.append(f"<unused{len(tokens)}>")
        scores.append(-1e4)
        types.append(5)
    n_vocab = len(tokens)
    n_embd, n_ff, n_head_kv = shape.n_embd, shape.n_ff, shape.n_head_kv
    head_dim = n_embd // shape.n_head
    w = gguf.GGUFWriter(out, "llama")
    w.add_context_length(shape.n_ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if shape.quantized else gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)

    def matrix(rows: int, cols: int, quantize: bool = shape.quantized) -> tuple[Any, Any]:
        data = rng.standard_normal((rows, cols)) / np.sqrt(cols)
        if quantize:
            q4 = gguf.GGMLQuantizationType.Q4_0
            return gguf.quants.quantize(data.astype(np.float32), q4), q4
        return data.astype(np.float16), None

    def add(name: str, made: tuple[Any, Any]) -> None:
        data, qtype = made
        if qtype is None:
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)

    def norm() -> np.ndarray:
        return (1.0 + 20.0 * rng.standard_normal(n_embd)).astype(np.float32)

    add("token_embd.weight", matrix(n_vocab, n_embd, quantize=False))
    for i in range(shape.n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm())
        add(f"blk.{i}.attn_q.weight", matrix(n_embd, n_embd))
        add(f"blk.{i}.attn_k.weight", matrix(n_head_kv * head_dim, n_embd))
        add(f"blk.{i}.attn_v.weight", matrix(n_head_kv * head_dim, n_embd))
        add(f"blk.{i}.attn_output.weight", matrix(n_embd, n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", norm())
        add(f"blk.{i}.ffn_gate.weight", matrix(n_ff, n_embd))
        add(f"blk.{i}.ffn_up.weight", matrix(n_ff, n_embd))
        add(f"blk.{i}.ffn_down.weight", matrix(n_embd, n_ff))
    w.add_tensor("output_norm.weight", norm())
    add("output.weight", matrix(n_vocab, n_embd))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    args = sys.argv[1:] + ["1", "TINY"][len(sys.argv) - 2:]
    _main(args[0], int(args[1]), SHAPES[args[2]])
