#!/usr/bin/env python3
"""Random-weight BERT GGUFs with the keys, tensor names and shapes of real
ones and a real vocabulary (llama.cpp's models/ggml-vocab-bert-bge.gguf), for
checking ferrox's encoder against llama.cpp (llama-embedding, llama-server
/rerank) and the float64 reference (reference.py --embed).

    make_encoder.py VOCAB.gguf OUT_DIR

writes OUT_DIR/bge-small.gguf (bge-small-en-v1.5's shape: 12 layers of 384,
12 heads, feed-forward 1536, 512 positions, CLS pooling),
OUT_DIR/minilm-reranker.gguf (ms-marco-MiniLM-L-6-v2's shape: 6 layers, a
classification head, rank pooling) and OUT_DIR/nomic-embed.gguf
(nomic-embed-text-v1.5's `nomic-bert`: width 768, 12 heads, feed-forward 3072,
2048 positions, rotary base 1000, fused QKV, SwiGLU, mean pooling; 2 of its 12
layers). Matrices are F16 (as the converter writes
them by default), token types, norms and biases F32. The weights are drawn from a fixed
seed at BERT's initial scale (0.02), norms near 1.
"""
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter

SMALL = {"arch": "bert", "embd": 384, "heads": 12, "ff": 1536, "ctx": 512}
SHAPES = {
    "bge-small": {**SMALL, "layers": 12, "pooling": 2, "classifier": False},
    "minilm-reranker": {**SMALL, "layers": 6, "pooling": 4, "classifier": True},
    "nomic-embed": {"arch": "nomic-bert", "embd": 768, "heads": 12, "ff": 3072, "ctx": 2048,
                    "layers": 2, "pooling": 1, "classifier": False, "rope_base": 1000.0},
}
TYPES = 2


def vocab(path):
    r = GGUFReader(path)
    f = r.fields
    tokens = [bytes(f["tokenizer.ggml.tokens"].parts[i]).decode("utf-8") for i in f["tokenizer.ggml.tokens"].data]
    types = [int(f["tokenizer.ggml.token_type"].parts[i][0]) for i in f["tokenizer.ggml.token_type"].data]
    ids = {k: int(f[k].contents()) for k in f if k.endswith("_token_id")}
    return tokens, types, ids


def write(path, name, spec, tokens, types, ids, rng):
    arch = spec["arch"]
    EMBD, FF, CTX = spec["embd"], spec["ff"], spec["ctx"]
    w = GGUFWriter(path, arch)
    w.add_name(f"ferrox random {name}")
    w.add_block_count(spec["layers"])
    w.add_context_length(CTX)
    w.add_embedding_length(EMBD)
    w.add_feed_forward_length(FF)
    w.add_head_count(spec["heads"])
    w.add_layer_norm_eps(1e-12)
    w.add_causal_attention(False)
    w.add_uint32(f"{arch}.pooling_type", spec["pooling"])
    if "rope_base" in spec:
        w.add_rope_freq_base(spec["rope_base"])
    w.add_file_type(1)
    w.add_tokenizer_model("bert")
    w.add_tokenizer_pre("bert-bge")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(TYPES)
    for key, value in ids.items():
        w.add_uint32(key, value)
    if spec["classifier"]:
        w.add_array(f"{arch}.classifier.output_labels", ["LABEL_0"])

    def mat(name, rows, cols):
        w.add_tensor(name, (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16))

    def vec(name, n, around=0.0, spread=0.02):
        w.add_tensor(name, (around + rng.standard_normal(n) * spread).astype(np.float32))

    mat("token_embd.weight", len(tokens), EMBD)
    # Token types stay F32, as the converter keeps them (llama.cpp adds the
    # row to f32 activations and has no f16 operand there).
    w.add_tensor("token_types.weight", (rng.standard_normal((TYPES, EMBD)) * 0.02).astype(np.float32))
    rotary = arch == "nomic-bert"
    if not rotary:
        mat("position_embd.weight", CTX, EMBD)
    vec("token_embd_norm.weight", EMBD, 1.0, 0.05)
    vec("token_embd_norm.bias", EMBD)
    for i in range(spec["layers"]):
        p = f"blk.{i}."
        if rotary:
            # nomic-bert: a fused QKV, no biases; a SwiGLU feed-forward.
            mat(p + "attn_qkv.weight", 3 * EMBD, EMBD)
            mat(p + "attn_output.weight", EMBD, EMBD)
        else:
            for m in ("attn_q", "attn_k", "attn_v", "attn_output"):
                mat(p + m + ".weight", EMBD, EMBD)
                vec(p + m + ".bias", EMBD)
        vec(p + "attn_output_norm.weight", EMBD, 1.0, 0.05)
        vec(p + "attn_output_norm.bias", EMBD)
        mat(p + "ffn_up.weight", FF, EMBD)
        if rotary:
            mat(p + "ffn_gate.weight", FF, EMBD)
        else:
            vec(p + "ffn_up.bias", FF)
        mat(p + "ffn_down.weight", EMBD, FF)
        if not rotary:
            vec(p + "ffn_down.bias", EMBD)
        vec(p + "layer_output_norm.weight", EMBD, 1.0, 0.05)
        vec(p + "layer_output_norm.bias", EMBD)
    if spec["classifier"]:
        # A head whose scores spread: a larger scale than BERT's initial one.
        w.add_tensor("cls.weight", (rng.standard_normal((EMBD, EMBD)) * 0.1).astype(np.float16))
        vec("cls.bias", EMBD)
        w.add_tensor("cls.output.weight", (rng.standard_normal((1, EMBD)) * 0.5).astype(np.float16))
        vec("cls.output.bias", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    vocab_path, out = sys.argv[1:]
    tokens, types, ids = vocab(vocab_path)
    for k, (name, spec) in enumerate(SHAPES.items()):
        write(f"{out}/{name}.gguf", name, spec, tokens, types, ids, np.random.default_rng(1234 + k))


if __name__ == "__main__":
    main()
