#!/usr/bin/env python3
"""kvevict-quality's needle-retrieval prompts (bench/quality/retrieval.cpp, `--retrieval N --prompts-out FILE`, plain
format) for a model kvevict-quality's engine does not run: the same generator in Python over a transformers
tokenizer, writing the same file (`index depth code id id ...`, one prompt per line) that retrieval.py reads.

The generator (make_retrieval_items): the documents of --data (*.rst and *.txt, by name), each tokenized whole
without BOS; prompt i takes document i mod n, draws its 5-digit code (10000 + x mod 90000) and then its excerpt's
offset (x mod the valid offsets) from the splitmix64 stream of --seed; the needle line "\\nThe access code for the
build server is NNNNN.\\n" goes after floor(depth · E / 100) excerpt tokens; the question closes the prompt; every
prompt has exactly --prompt tokens. --family gemma3 leads each prompt with Gemma's <bos> (part of the --prompt
tokens, as the frame) and tokenizes with llama.cpp's tokenizer (side_by_side.LlamaCppTokenizer, --llama-bin); smollm2
has no BOS, as kvevict-quality's. With --family smollm2 the file equals
kvevict-quality's for the same --data, --prompt, --per-depth and --seed, byte for byte (checked:
docs/quality-gemma3.md).

  PY=$(bash scripts/get-hf-venv.sh); $PY bench/quality/kvpress/needle_prompts.py --family gemma3 --out /tmp/needles.txt
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

MASK = (1 << 64) - 1
SUBJECT = "the access code for the build server"
QUESTION = "\n\nQuestion: What is " + SUBJECT + "?\nAnswer: The access code for the build server is"  # closes a prompt


def splitmix64(state):
    """(next state, output): Steele, Lea, Flood 2014, as retrieval.cpp's."""
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def make_items(docs, encode, prompt, depths=(10, 50, 90), per_depth=1, seed=1, head=()):
    """make_retrieval_items (plain format; `head`: ids before the excerpt, e.g. a BOS). Returns
    [(depth, code, ids)], depth-major."""
    if not docs:
        raise ValueError("make_items: no documents")
    tail = encode(QUESTION)
    state, items = seed & MASK, []
    for depth in depths:
        for _ in range(per_depth):
            doc = docs[len(items) % len(docs)]
            state, x = splitmix64(state)
            code = str(10000 + x % 90000)
            needle = encode("\nThe access code for the build server is " + code + ".\n")
            frame = len(head) + len(tail) + len(needle)
            if frame >= prompt:
                raise ValueError(f"make_items: prompt {prompt} leaves no room for an excerpt ({frame} frame tokens)")
            excerpt = prompt - frame
            if len(doc) < excerpt:
                raise ValueError(f"make_items: a document has {len(doc)} tokens, fewer than the excerpt's {excerpt}")
            state, x = splitmix64(state)
            offset = x % (len(doc) - excerpt + 1)
            cut = depth * excerpt // 100
            ids = list(head) + doc[offset:offset + cut] + needle + doc[offset + cut:offset + excerpt] + tail
            assert len(ids) == prompt
            items.append((depth, code, ids))
    return items


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=("smollm2", "gemma3"), default="gemma3")
    ap.add_argument("--model", help="the family's .gguf (default: bash scripts/get-models.sh [gemma3-270m])")
    ap.add_argument("--data", default=os.path.join(os.environ.get("KVEVICT_SHARED_DIR", "../shared"), "data/python-howto"))
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--per-depth", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--llama-bin", help="gemma3: kvevict-llama (default build-llama/kvevict-llama)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import side_by_side as sbs
    from transformers import AutoTokenizer
    fetch = ["bash", os.path.join(sbs.ROOT, "scripts/get-models.sh")] + (["gemma3-270m"] if args.family == "gemma3" else [])
    path = args.model or subprocess.run(fetch, check=True, capture_output=True, text=True).stdout.strip()
    folder, gguf = os.path.split(path)
    if args.family == "smollm2":
        tok, head = sbs.smollm2_tokenizer(folder, gguf), []
    else:
        hf = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        tok = sbs.LlamaCppTokenizer(args.llama_bin or os.path.join(sbs.ROOT, "build-llama/kvevict-llama"), path,
                                    hf.backend_tokenizer)
        head = [hf.bos_token_id]

    def encode(text):
        return tok.encode(text, add_special_tokens=False).ids
    names = sorted(n for n in os.listdir(args.data)
                   if n.endswith((".rst", ".txt")) and os.path.isfile(os.path.join(args.data, n)))
    docs = []
    for n in names:
        with open(os.path.join(args.data, n), "rb") as f:
            docs.append(encode(f.read().decode("utf-8", errors="replace")))
    items = make_items(docs, encode, args.prompt, per_depth=args.per_depth, seed=args.seed, head=head)
    with open(args.out, "w") as f:
        for i, (depth, code, ids) in enumerate(items):
            f.write(f"{i} {depth} {code} " + " ".join(map(str, ids)) + "\n")
    print(f"needle_prompts: {len(items)} prompts of {args.prompt} tokens -> {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
