#!/usr/bin/env python3
"""Independent reference for kvevict's GGUF engine on SmolLM2-135M-Instruct (Q4_1 GGUF).

Loads the GGUF with Hugging Face transformers (which dequantizes every tensor to float32) and writes,
under tests/llama2/reference/smollm2/:
  logits_512.json     (a) 512 token ids of a fixed slice of ../shared/data/python-howto/howto-regex.rst and,
                          at 32 fixed positions, the top-20 (id, logit) of the full-cache forward pass
  greedy_128.json     (b) the ids of a fixed prompt and the 128 greedy next ids (argmax, not stopped at EOS)
  tokenizer_strings.json (c) 40 strings and their ids without BOS

The tokenizer: transformers builds its tokenizer from the GGUF metadata with a ByteLevel pre-tokenizer only,
while SmolLM2's own tokenizer.json (and llama.cpp's "smollm" pre-tokenizer) first splits every digit on its
own (Digits(individual_digits=True)) and then applies ByteLevel's GPT-2 regex. The two differ (e.g. "  42").
The ids recorded as "ids" use SmolLM2's real pre-tokenizer (the GGUF's tokens and merges unchanged);
"ids_transformers_gguf" are what transformers' GGUF tokenizer gives, kept to show where they differ.

Run outside CI (see scripts/oracle/README.md for the venv and the exact versions):
  /work/venv-oracle/bin/python scripts/oracle/smollm2_reference.py "$(bash scripts/get-models.sh)"
"""
import argparse
import hashlib
import importlib.metadata
import json
import os
import sys

import gguf  # noqa: F401 (transformers reads GGUF files through it)
import numpy
import tokenizers
import torch
import transformers
from tokenizers import pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "llama2", "reference", "smollm2")

# (a) the logits sequence: 512 ids from this file, starting at this byte offset (past the title block).
TEXT_FILE = "data/python-howto/howto-regex.rst"
TEXT_OFFSET = 1024
TEXT_BYTES = 16384  # tokenized, then cut to the first SEQ_LEN ids
SEQ_LEN = 512
POSITIONS = [round(i * (SEQ_LEN - 1) / 31) for i in range(32)]  # 0 ... 511, 32 positions
TOP_K = 20

# (b) the greedy prompt (plain text: no chat markers, so no EOS is expected within 128 tokens).
PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"
GREEDY_STEPS = 128

# (c) 40 strings: ASCII, accents, CJK, emoji, code, digits, whitespace runs, newlines, special markers.
STRINGS = [
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, we've seen what you'd do.",
    "HELLO World hello WORLD",
    "naïve café résumé",
    "Ångström, Øresund, Straße, Łódź",
    "El niño comió jalapeños en São Paulo.",
    "日本語のテキストです。",
    "中文分词测试：你好，世界！",
    "한국어 문장입니다",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "🙂🚀 emoji 👍🏽 and 👨‍👩‍👧",
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "#include <vector>\nint main() { return 0; }",
    "x = {'key': [1, 2, 3], \"other\": None}",
    "12345",
    "3.14159 and 2.71828",
    "v1.2.3 released on 2024-11-05",
    "a1b2c3 x99 1st 2nd",
    "  42",
    "Ⅻ ½ ٣ ௫",
    "    four leading spaces",
    "trailing spaces    ",
    "tabs\tand\t\tmore\ttabs",
    "line one\nline two\n\nline four",
    "\n\n\n",
    "   ",
    "windows\r\nline endings\r\n",
    "mixed \t \n whitespace \u00a0 nbsp",
    "<|im_start|>user\nHi there<|im_end|>",
    "<|endoftext|>",
    "https://example.com/path?q=1&r=two#frag",
    "email@example.org, @user #hashtag $100 50% off",
    "bell\x07 nul\x00 eot\x04 del\x7f",  # 0x04 has no token in SmolLM2's vocabulary: dropped
    "----- ===== *****",
    "a",
    "SmolLM2 is a family of compact language models.",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write(out, name, obj):
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("wrote", path, file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", help="SmolLM2-135M-Instruct.Q4_1.gguf (bash scripts/get-models.sh prints it)")
    ap.add_argument("--shared", default=os.environ.get("KVEVICT_SHARED_DIR", os.path.join(REPO, "..", "shared")))
    ap.add_argument("--out", default=OUT, help="folder for the three JSON files (default: %(default)s)")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model_dir, model_file = os.path.split(os.path.abspath(args.gguf))

    tok = AutoTokenizer.from_pretrained(model_dir, gguf_file=model_file)
    real = tokenizers.Tokenizer.from_str(tok.backend_tokenizer.to_str())
    real.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])

    def ids(text):
        return real.encode(text, add_special_tokens=False).ids

    meta = {
        "model_file": model_file,
        "model_sha256": sha256(args.gguf),
        "versions": {
            "python": sys.version.split()[0],
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
            "gguf": importlib.metadata.version("gguf"),
            "numpy": numpy.__version__,
        },
        "tokenizer": "GGUF tokens+merges, pre-tokenizer Sequence[Digits(individual_digits=True), "
                     "ByteLevel(add_prefix_space=False, use_regex=True)] (SmolLM2's tokenizer.json)",
    }

    # (c) tokenizer strings.
    rows = []
    for s in STRINGS:
        mine, theirs = ids(s), tok.encode(s, add_special_tokens=False)
        rows.append({"text": s, "ids": mine, "ids_transformers_gguf": theirs,
                     "decoded_without_control": real.decode(mine, skip_special_tokens=True)})
    assert len(rows) == 40
    write(args.out, "tokenizer_strings.json", dict(meta, strings=rows))

    model = AutoModelForCausalLM.from_pretrained(model_dir, gguf_file=model_file, dtype=torch.float32)
    model.eval()
    meta["model_dtype"] = str(next(model.parameters()).dtype)

    # (a) full-cache logits of a fixed 512-token sequence.
    with open(os.path.join(args.shared, TEXT_FILE), "rb") as f:
        text = f.read()[TEXT_OFFSET:TEXT_OFFSET + TEXT_BYTES].decode("utf-8", errors="strict")
    seq = ids(text)[:SEQ_LEN]
    assert len(seq) == SEQ_LEN
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0].float()
    top = []
    for p in POSITIONS:
        v, i = torch.topk(logits[p], TOP_K)
        top.append({"position": p, "ids": i.tolist(), "logits": [float(x) for x in v.tolist()]})
    write(args.out, "logits_512.json", dict(meta, source=TEXT_FILE, byte_offset=TEXT_OFFSET, text_bytes=TEXT_BYTES,
                                            bos=False, ids=seq, top_k=TOP_K, positions=top))

    # (b) greedy: argmax at every step with the full cache, EOS not treated specially.
    prompt_ids = ids(PROMPT)
    out, margins = [], []
    with torch.no_grad():
        res = model(torch.tensor([prompt_ids]), use_cache=True)
        for _ in range(GREEDY_STEPS):
            last = res.logits[0, -1].float()
            v, i = torch.topk(last, 2)
            out.append(int(i[0]))
            margins.append(float(v[0] - v[1]))
            res = model(torch.tensor([[out[-1]]]), past_key_values=res.past_key_values, use_cache=True)
    write(args.out, "greedy_128.json", dict(meta, prompt=PROMPT, bos=False, prompt_ids=prompt_ids, greedy_ids=out,
                                            top2_margin=margins, text=real.decode(out, skip_special_tokens=True)))


if __name__ == "__main__":
    main()
