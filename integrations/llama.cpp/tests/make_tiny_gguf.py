#!/usr/bin/env python3
"""Writes a tiny GGUF (random F32 weights, no vocabulary) of a model kvevict-llama must refuse to evict in:
  mamba       1-layer Mamba, which llama.cpp loads as a recurrent model (llama_memory_seq_rm cannot drop a middle
              range of a recurrent state);
  olmo2-swa   4-layer OLMo 2 with a sliding window of 4: llama.cpp runs it with its iSWA memory and a layer
              pattern that is neither in the GGUF nor among the architectures kvevict knows (llama_layers.hpp).
Standard library only (GGUF v3: header, key/values, tensor infos, 32-byte aligned data).

Usage: make_tiny_gguf.py mamba|olmo2-swa OUT.gguf"""
import random
import struct
import sys

U32, F32, STR = 4, 6, 8
arch, out_path = sys.argv[1], sys.argv[2]
if arch == "mamba":
    n_embd, d_inner, d_conv, d_state, dt_rank, n_vocab = 8, 16, 4, 4, 2, 8
    kv = [
        ("general.architecture", STR, "mamba"),
        ("mamba.context_length", U32, 64),
        ("mamba.embedding_length", U32, n_embd),
        ("mamba.block_count", U32, 1),
        ("mamba.vocab_size", U32, n_vocab),
        ("mamba.ssm.conv_kernel", U32, d_conv),
        ("mamba.ssm.inner_size", U32, d_inner),
        ("mamba.ssm.state_size", U32, d_state),
        ("mamba.ssm.time_step_rank", U32, dt_rank),
        ("mamba.attention.layer_norm_rms_epsilon", F32, 1e-5),
        ("tokenizer.ggml.model", STR, "none"),
    ]
    tensors = [  # name, dims (ggml order: ne0 first)
        ("token_embd.weight", [n_embd, n_vocab]),
        ("output_norm.weight", [n_embd]),
        ("blk.0.attn_norm.weight", [n_embd]),
        ("blk.0.ssm_in.weight", [n_embd, 2 * d_inner]),
        ("blk.0.ssm_conv1d.weight", [d_conv, d_inner]),
        ("blk.0.ssm_conv1d.bias", [d_inner]),
        ("blk.0.ssm_x.weight", [d_inner, dt_rank + 2 * d_state]),
        ("blk.0.ssm_dt.weight", [dt_rank, d_inner]),
        ("blk.0.ssm_dt.bias", [d_inner]),
        ("blk.0.ssm_a", [d_state, d_inner]),
        ("blk.0.ssm_d", [d_inner]),
        ("blk.0.ssm_out.weight", [d_inner, n_embd]),
    ]
elif arch == "olmo2-swa":
    n_embd, n_head, n_ff, n_layer, n_vocab = 8, 2, 16, 4, 8
    kv = [
        ("general.architecture", STR, "olmo2"),
        ("olmo2.context_length", U32, 64),
        ("olmo2.embedding_length", U32, n_embd),
        ("olmo2.block_count", U32, n_layer),
        ("olmo2.feed_forward_length", U32, n_ff),
        ("olmo2.attention.head_count", U32, n_head),
        ("olmo2.attention.head_count_kv", U32, n_head),
        ("olmo2.attention.layer_norm_rms_epsilon", F32, 1e-5),
        ("olmo2.attention.sliding_window", U32, 4),
        ("olmo2.vocab_size", U32, n_vocab),
        ("tokenizer.ggml.model", STR, "none"),
    ]
    tensors = [("token_embd.weight", [n_embd, n_vocab]), ("output_norm.weight", [n_embd]),
               ("output.weight", [n_embd, n_vocab])]
    for i in range(n_layer):
        tensors += [(f"blk.{i}.{name}.weight", dims) for name, dims in [
            ("attn_q", [n_embd, n_embd]), ("attn_k", [n_embd, n_embd]), ("attn_v", [n_embd, n_embd]),
            ("attn_output", [n_embd, n_embd]), ("attn_q_norm", [n_embd]), ("attn_k_norm", [n_embd]),
            ("post_attention_norm", [n_embd]), ("ffn_gate", [n_embd, n_ff]), ("ffn_up", [n_embd, n_ff]),
            ("ffn_down", [n_ff, n_embd]), ("post_ffw_norm", [n_embd])]]
else:
    sys.exit(f"make_tiny_gguf.py: unknown model '{arch}' (mamba, olmo2-swa)")


def s(text):
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
for key, typ, val in kv:
    out += s(key) + struct.pack("<I", typ)
    out += s(val) if typ == STR else struct.pack("<I" if typ == U32 else "<f", val)
offset, datas = 0, []
rng = random.Random(33)
for name, dims in tensors:
    n = 1
    for d in dims:
        n *= d
    out += s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
    out += struct.pack("<IQ", 0, offset)  # GGML_TYPE_F32
    data = struct.pack(f"<{n}f", *[rng.uniform(-0.1, 0.1) for _ in range(n)])
    datas.append(data)
    offset += (len(data) + 31) // 32 * 32
out += b"\0" * ((32 - len(out) % 32) % 32)
for data in datas:
    out += data + b"\0" * ((32 - len(data) % 32) % 32)
open(out_path, "wb").write(out)
