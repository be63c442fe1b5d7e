"""A tiny llama GGUF model with random weights, for the llama.cpp recipe tests (no download).

Run it with the `gguf` package of the llama.cpp tree under test on the path (its constants match
that tree): `PYTHONPATH=<tree>/gguf-py python tinymodel.py OUT.gguf`. `write_model` does that.

Measured (see FACTS.md): with plain norm weights the logits of such a model are nearly uniform and
a subtle numerical break barely moves the KL divergence; strongly varied norm weights
(1 + 20·N(0,1)) make the logits peaked, so a broken RMS norm shows a mean KLD of about 0.1-0.4.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

N_EMBD = 128
N_LAYER = 4
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 256
N_CTX = 512


def write_model(tree: Path, out: Path, seed: int = 1) -> Path:
    """Write the model with the gguf-py of `tree` (a llama.cpp checkout) in a subprocess."""
    env = {**os.environ, "PYTHONPATH": str(tree / "gguf-py")}
    subprocess.run([sys.executable, __file__, str(out), str(seed)], env=env, check=True, timeout=120,
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


def _main(out: str, seed: int) -> None:
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocab()
    n_vocab = len(tokens)
    head_dim = N_EMBD // N_HEAD
    w = gguf.GGUFWriter(out, "llama")
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(head_dim)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(1)  # mostly F16
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float16)

    def norm() -> np.ndarray:
        return (1.0 + 20.0 * rng.standard_normal(N_EMBD)).astype(np.float32)

    w.add_tensor("token_embd.weight", matrix(n_vocab, N_EMBD))
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", norm())
        w.add_tensor(f"blk.{i}.attn_q.weight", matrix(N_EMBD, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_k.weight", matrix(N_HEAD_KV * head_dim, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_v.weight", matrix(N_HEAD_KV * head_dim, N_EMBD))
        w.add_tensor(f"blk.{i}.attn_output.weight", matrix(N_EMBD, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", norm())
        w.add_tensor(f"blk.{i}.ffn_gate.weight", matrix(N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_up.weight", matrix(N_FF, N_EMBD))
        w.add_tensor(f"blk.{i}.ffn_down.weight", matrix(N_EMBD, N_FF))
    w.add_tensor("output_norm.weight", norm())
    w.add_tensor("output.weight", matrix(n_vocab, N_EMBD))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    _main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
