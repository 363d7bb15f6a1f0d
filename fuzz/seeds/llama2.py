"""fuzz/seeds/llama2.py — the seeds of fuzz_llama2_load: structured llama2.c checkpoints for every policy, raw
files (the 2^31 − 1 layers regression among them) and hand-made SentencePiece tokenizers."""
import struct

from .encoder import Encoder, write


# ---------------------------------------------------------------- llama2_load
def llama2_settings(e, raw, tok_mode, policy=1, prompt=(1, 2, 3)):
    e.int_in(0 if raw else 1, 0, 3).int_in(tok_mode, 0, 3).pick(policy, 6)
    e.boolean(True).int_in(2, 1, 6)  # budget: 2 tokens
    if policy != 5:
        e.boolean(True).int_in(1, 0, 2)  # recent: 1 token
    e.int_in(1, 0, 2).u8(0).int_in(len(prompt), 1, 14)
    for t in prompt:
        e.int_in(t, -1, 44)
    return e


def llama2_seeds():
    # Structured: dim 4, hidden 6, 2 layers, 2 heads, 1 KV head, vocab 12, seq_len 8; body of the exact size.
    header = [4, 6, 2, 2, 1, 12, 8]
    lo_hi = [(1, 16), (1, 16), (1, 3), (1, 4), (1, 4), (-40, 40), (1, 12)]
    for policy in range(6):
        e = llama2_settings(Encoder(), False, 0, policy=policy)
        for i, (v, (lo, hi)) in enumerate(zip(header, lo_hi)):
            if i == 5:
                e.int_in(1, 0, 3)  # not one of the real tokenizers' sizes
            e.int_in(1, 0, 15).int_in(v, lo, hi)
        e.int_in(9, 0, 9).int_in(1, 0, 7)  # exact size, clean weights
        d, hid, L, nh, nkv, V, S = header
        hd = d // nh
        floats = V * d + L * d * 2 + L * d * d * 2 + L * hd * nkv * d * 2 + L * hid * d * 3 + d + S * hd
        for i in range(floats):
            e.u8((i * 37) % 251)
        write("llama2_load", "structured-policy%d" % policy, e.bytes())
    # Raw files: the header claiming 2^31 - 1 layers, a truncated header, the newer format.
    for name, body in [("regression-2pow31-layers", struct.pack("<7i", 8, 8, 2**31 - 1, 2, 2, 16, 8) + b"\0" * 64),
                       ("truncated-header", struct.pack("<5i", 8, 8, 1, 2, 2)),
                       ("ak42", b"ak42" + struct.pack("<6i", 1, 8, 8, 1, 2, 2) + b"\0" * 32)]:
        e = llama2_settings(Encoder(), True, 0)
        e.int_in(len(body), 0, len(body) + len(e.tail) - 0 if False else len(body))  # placeholder, fixed below
        write("llama2_load", name, body)  # raw mode needs the exact remaining-bytes range: see raw_seed()
    for name, body in [("regression-2pow31-layers", struct.pack("<7i", 8, 8, 2**31 - 1, 2, 2, 16, 8) + b"\0" * 64),
                       ("truncated-header", struct.pack("<5i", 8, 8, 1, 2, 2)),
                       ("ak42", b"ak42" + struct.pack("<6i", 1, 8, 8, 1, 2, 2) + b"\0" * 32)]:
        write("llama2_load", name, raw_seed(body))


def sp_model(pieces):
    """A minimal SentencePiece ModelProto: pieces (text, type), UNIGRAM trainer spec."""
    def field(tag, payload):
        n, out = len(payload), b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if n == 0:
                break
        return bytes([tag]) + out + payload
    body = b""
    for text, kind in pieces:
        piece = field(0x0A, text.encode()) + b"\x15" + struct.pack("<f", -1.0) + bytes([0x18, kind])
        body += field(0x0A, piece)
    return body + field(0x12, bytes([0x18, 1]))


def tokenizer_seeds():
    """Structured checkpoint with vocab 7 + a fuzzed (here: hand-made) 7-piece tokenizer + text."""
    tok = sp_model([("<unk>", 2), ("<s>", 3), ("</s>", 3), ("\u2581", 1), ("a", 1), ("b", 1), ("\u2581a", 1)])
    header = [4, 4, 1, 2, 2, 7, 6]
    lo_hi = [(1, 16), (1, 16), (1, 3), (1, 4), (1, 4), (-40, 40), (1, 12)]
    for name, vocab, text in [("tokenizer-handmade-vocab7", 7, b"a ab b"), ("tokenizer-vocab-mismatch", 9, b"ba")]:
        header[5] = vocab
        e = llama2_settings(Encoder(), False, 1, policy=2)
        for i, (v, (lo, hi)) in enumerate(zip(header, lo_hi)):
            if i == 5:
                e.int_in(1, 0, 3)
            e.int_in(1, 0, 15).int_in(v, lo, hi)
        e.int_in(9, 0, 9).int_in(1, 0, 7)
        d, hid, L, nh, nkv, V, S = header
        hd = d // nh
        floats = V * d + L * d * 2 + L * d * d * 2 + L * hd * nkv * d * 2 + L * hid * d * 3 + d + S * hd
        for i in range(floats):
            e.u8((i * 53) % 247)
        front = tok + text
        for n in (1, 2):
            f = Encoder()
            f.tail = list(e.tail)
            f.int_in(len(tok), 0, len(front) + n)
            if len(f.tail) - len(e.tail) == n:
                write("llama2_load", name, f.bytes(front))
                break
        else:
            raise AssertionError("no consistent length encoding")


def raw_seed(body):
    """Raw mode: the model bytes are the front `len(body)` bytes; their length is an integer drawn
    in [0, remaining], where remaining counts the bytes not consumed yet at that point."""
    settings = llama2_settings(Encoder(), True, 0)
    # remaining at the length draw = len(body) + bytes of the length draw itself (1 or 2).
    for n in (1, 2, 3):
        remaining = len(body) + n
        e = Encoder()
        e.tail = list(settings.tail)
        e.int_in(len(body), 0, remaining)
        if len(e.tail) - len(settings.tail) == n:
            return e.bytes(body)
    raise AssertionError("no consistent length encoding")
