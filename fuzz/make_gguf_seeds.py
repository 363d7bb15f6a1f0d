#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_gguf_load (fuzz/corpus/gguf_load/): tiny llama GGUF models in f32,
f16, q8_0, q4_0 and q4_1, a file with every metadata value type, and one with a q4_K, q5_K and q6_K
tensor. Plain Python (struct), no dependencies: python3 fuzz/make_gguf_seeds.py
"""
import os
import random
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "gguf_load")
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 12: (256, 144), 13: (256, 176), 14: (256, 210)}


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, t, payload):
    return s(key) + struct.pack("<I", t) + payload


def gguf(kvs, tensors, align=32, same_offset=False):
    """same_offset: every tensor's offset is 0 (its data still written one after another): overlapping tensors."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    off, infos = 0, []
    for name, ne, t, data in tensors:
        infos.append(s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
                     + struct.pack("<IQ", t, 0 if same_offset else off))
        off += (len(data) + align - 1) // align * align
    out += b"".join(infos)
    out += b"\0" * (-len(out) % align)
    for _, _, _, data in tensors:
        out += data + b"\0" * (-len(data) % align)
    return out


def blocks(t, n, rng):
    elems, nbytes = BLOCK[t]
    if t == 0:
        return b"".join(struct.pack("<f", rng.uniform(-0.3, 0.3)) for _ in range(n))
    if t == 1:
        return b"".join(struct.pack("<e", rng.uniform(-0.3, 0.3)) for _ in range(n))
    raw = bytearray(rng.getrandbits(8) for _ in range(n // elems * nbytes))
    for b in range(n // elems):
        o = b * nbytes
        at = o + 208 if t == 14 else o
        raw[at:at + 2] = struct.pack("<e", 0.01)
        if t in (3, 12, 13):
            raw[o + 2:o + 4] = struct.pack("<e", 0.01 if t != 3 else -0.1)
    return bytes(raw)


def vocab_kvs(kind, n, merges=True, eos=None):
    """A byte-level BPE ("gpt2", SmolLM2's "smollm" split) or a SentencePiece ("llama") vocabulary of n tokens.
    merges=False: a "gpt2" vocabulary without tokenizer.ggml.merges; eos: the eos id's (type, bytes)."""
    if kind == "gpt2":
        toks = ["a", "b", "Ġ", "ab", "Ġa", "1", "<|im_end|>", "c"][:n]
        out = [kv("tokenizer.ggml.model", STR, s("gpt2")), kv("tokenizer.ggml.pre", STR, s("smollm")),
               kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, n) + b"".join(s(x) for x in toks))]
        if merges:
            out.append(kv("tokenizer.ggml.merges", ARR, struct.pack("<IQ", STR, 2) + s("a b") + s("Ġ a")))
        return out + [kv("tokenizer.ggml.token_type", ARR, struct.pack("<IQ", I32, n) + b"".join(
                          struct.pack("<i", 3 if x.startswith("<|") else 1) for x in toks)),
                      kv("tokenizer.ggml.eos_token_id", *(eos or (U32, struct.pack("<I", 6))))]
    toks = ["<unk>", "<s>", "</s>", "▁a", "a", "b", "▁", "<0x41>"][:n]
    types = [2, 3, 3, 1, 1, 1, 1, 6][:n]
    return [kv("tokenizer.ggml.model", STR, s("llama")),
            kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, n) + b"".join(s(x) for x in toks)),
            kv("tokenizer.ggml.scores", ARR, struct.pack("<IQ", F32, n) + b"".join(
                struct.pack("<f", -float(i)) for i in range(n))),
            kv("tokenizer.ggml.token_type", ARR, struct.pack("<IQ", I32, n) + b"".join(struct.pack("<i", t) for t in types)),
            kv("tokenizer.ggml.bos_token_id", U32, struct.pack("<I", 1)),
            kv("tokenizer.ggml.eos_token_id", U32, struct.pack("<I", 2))]


def model(t, d, hid, vocab=8, layers=1, heads=2, kv_heads=1, ctx=8, tied=True, layers_key=None, vocab_kind="gpt2",
          eps=(F32, struct.pack("<f", 1e-5)), theta=(F32, struct.pack("<f", 10000.0)), poison=None, same_offset=False,
          merges=True, eos=None):
    """poison: (tensor name, float32 element index, value) written over an f32 tensor's element."""
    rng = random.Random(t * 1000 + d)
    hd = d // heads
    kvd = hd * kv_heads
    meta = [kv("general.architecture", STR, s("llama")), kv("llama.block_count", U32, struct.pack("<I", layers_key or layers)),
            kv("llama.embedding_length", U32, struct.pack("<I", d)),
            kv("llama.feed_forward_length", U32, struct.pack("<I", hid)),
            kv("llama.attention.head_count", U32, struct.pack("<I", heads)),
            kv("llama.attention.head_count_kv", U32, struct.pack("<I", kv_heads)),
            kv("llama.context_length", U32, struct.pack("<I", ctx)),
            kv("llama.attention.layer_norm_rms_epsilon", *eps),
            kv("llama.rope.freq_base", *theta),
            ] + vocab_kvs(vocab_kind, vocab, merges, eos)

    def w(ne):
        n = ne[0] * (ne[1] if len(ne) > 1 else 1)
        q = t if len(ne) == 2 and ne[0] % BLOCK[t][0] == 0 else 0
        return (ne, q, blocks(q, n, rng))
    ts = [("token_embd.weight",) + w([d, vocab])]
    for layer in range(layers):
        b = f"blk.{layer}."
        for name, ne in (("attn_norm", [d]), ("attn_q", [d, d]), ("attn_k", [d, kvd]), ("attn_v", [d, kvd]),
                         ("attn_output", [d, d]), ("ffn_norm", [d]), ("ffn_gate", [d, hid]), ("ffn_up", [d, hid]),
                         ("ffn_down", [hid, d])):
            ts.append((b + name + ".weight",) + w(ne))
    ts.append(("output_norm.weight",) + w([d]))
    if not tied:
        ts.append(("output.weight",) + w([d, vocab]))
    if poison:
        name, at, value = poison
        ts = [(n, ne, q, data[:4 * at] + struct.pack("<f", value) + data[4 * at + 4:] if n == name else data)
              for n, ne, q, data in ts]
    return gguf(meta, ts, same_offset=same_offset)


def many_user_defined(n=90):
    """A "gpt2" vocabulary whose n long pieces are all user-defined (issue 37: the special-token scan cost
    O(text x pieces)), in a model whose token_embd has one row per token."""
    rng = random.Random(37)
    toks = ["a", "b", "Ġ", "ab"] + ["<piece-%04d-%s>" % (i, "x" * rng.randrange(8, 40)) for i in range(n)]
    meta = [kv("general.architecture", STR, s("llama")), kv("tokenizer.ggml.model", STR, s("gpt2")),
            kv("tokenizer.ggml.pre", STR, s("smollm")),
            kv("tokenizer.ggml.tokens", ARR, struct.pack("<IQ", STR, len(toks)) + b"".join(s(x) for x in toks)),
            kv("tokenizer.ggml.merges", ARR, struct.pack("<IQ", STR, 1) + s("a b")),
            kv("tokenizer.ggml.token_type", ARR, struct.pack("<IQ", I32, len(toks)) + b"".join(
                struct.pack("<i", 4 if x.startswith("<") else 1) for x in toks)),
            kv("prompt", STR, s("".join(toks[4 + i % n][:-1 if i % 3 == 0 else None] for i in range(3 * n))))]
    return gguf(meta, [])


def every_type():
    meta = [kv("u8", U8, b"\xc8"), kv("i8", I8, b"\x9c"), kv("u16", U16, struct.pack("<H", 65000)),
            kv("i16", I16, struct.pack("<h", -3)), kv("u32", U32, struct.pack("<I", 7)),
            kv("i32", I32, struct.pack("<i", -7)), kv("f32", F32, struct.pack("<f", 0.5)), kv("b", BOOL, b"\x01"),
            kv("str", STR, s("text")), kv("u64", U64, struct.pack("<Q", 2**64 - 1)),
            kv("i64", I64, struct.pack("<q", -2**40)), kv("f64", F64, struct.pack("<d", 1e300)),
            kv("arr", ARR, struct.pack("<IQ", I32, 3) + struct.pack("<iii", 1, 2, 3)),
            kv("nested", ARR, struct.pack("<IQ", ARR, 1) + struct.pack("<IQ", U8, 2) + b"\x01\x02"),
            kv("general.alignment", U32, struct.pack("<I", 64))]
    return gguf(meta, [("t", [4], 0, struct.pack("<4f", 1, 2, 3, 4))], align=64)


def kquants():
    rng = random.Random(5)
    return gguf([kv("general.architecture", STR, s("llama"))],
                [(f"k{t}", [256], t, blocks(t, 256, rng)) for t in (12, 13, 14)])


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {"model-f32": model(0, 16, 16), "model-f16-untied-spm": model(1, 16, 16, tied=False, vocab_kind="llama"),
             "model-q8_0": model(8, 32, 32), "model-q4_0": model(2, 32, 32), "model-q4_1-2layers": model(3, 32, 32, layers=2),
             "every-value-type": every_type(), "k-quants": kquants(),
             # a block count of 2^30 over one block's tensors: refused before the loader sizes anything by it
             "regression-block-count-2pow30": model(0, 16, 16, layers_key=2**30),
             # issue 37, the attack's files (each refused now, naming the key or tensor):
             "regression-overlapping-tensors": model(0, 16, 16, layers=2, same_offset=True),
             "regression-nan-in-attn-q": model(0, 16, 16, poison=("blk.0.attn_q.weight", 5, float("nan"))),
             "regression-inf-in-ffn-down": model(0, 16, 16, poison=("blk.0.ffn_down.weight", 0, float("inf"))),
             "regression-block-count-below-stored": model(0, 16, 16, layers=2, layers_key=1),
             "regression-eps-1e-300-float64": model(0, 16, 16, eps=(F64, struct.pack("<d", 1e-300))),
             "regression-eps-1e-40-float64": model(0, 16, 16, eps=(F64, struct.pack("<d", 1e-40))),
             "regression-freq-base-1-plus-1e-12": model(0, 16, 16, theta=(F64, struct.pack("<d", 1 + 1e-12))),
             "regression-freq-base-1e300": model(0, 16, 16, theta=(F64, struct.pack("<d", 1e300))),
             "regression-gpt2-without-merges": model(0, 16, 16, merges=False),
             "regression-eos-id-2pow63-uint64": model(0, 16, 16, eos=(U64, struct.pack("<Q", 2**63))),
             "regression-many-user-defined-pieces": many_user_defined()}
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)
        print(name, len(data))


if __name__ == "__main__":
    main()
