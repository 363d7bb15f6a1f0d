#!/usr/bin/env python3
"""Per-token cost of KVEvictCache against DynamicCache in model.generate, measured in one run.

SmolLM2-135M-Instruct (the project's Q4_1 GGUF through transformers' GGUF loader, float32, sdpa), a prompt of
--prompt tokens (default 2048: the start of ../shared/data/python-howto/howto-logging.rst, tokenized without
BOS), greedy generate of --new + 1 tokens with each cache in turn, --repeats rounds (the variants interleaved,
so load on the machine hits them alike). A streamer timestamps every token: the decode time per token is
(last token - first token) / (new - 1) ... per generated token after the first, the prefill time is the
first token's. Prints a Markdown table: median over the rounds, and each variant's ratio to DynamicCache.

  PY=$(bash scripts/get-hf-venv.sh); $PY bench/transformers/speed.py
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

import kvevict
from kvevict.transformers import KVEvictCache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Clock:
    """A generate streamer that records when each token arrives (the first put is the prompt)."""

    def __init__(self):
        self.times = []

    def put(self, value):
        self.times.append(time.perf_counter())

    def end(self):
        pass


VARIANTS = [
    ("DynamicCache", lambda m, new: DynamicCache(config=m.config)),
    ("KVEvictCache full", lambda m, new: KVEvictCache(m, policy="full")),
    ("KVEvictCache keyformer 50%", lambda m, new: KVEvictCache(m, policy="keyformer", budget=0.5, horizon=new)),
    ("KVEvictCache h2o 50%", lambda m, new: KVEvictCache(m, policy="h2o", budget=0.5)),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="SmolLM2 .gguf (default: bash scripts/get-models.sh)")
    ap.add_argument("--text", default=os.path.join(os.environ.get("KVEVICT_SHARED_DIR", os.path.join(ROOT, "..", "shared")),
                                                   "data/python-howto/howto-logging.rst"))
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--new", type=int, default=16, help="generated tokens (default 16)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared 2-core machine 2 threads oversubscribe and a decode step took 13x longer)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    model_path = args.model or subprocess.run(["bash", os.path.join(ROOT, "scripts/get-models.sh")], check=True,
                                              capture_output=True, text=True).stdout.strip()
    folder, gguf = os.path.split(model_path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    with open(args.text, encoding="utf-8") as f:
        ids = tok(f.read(), add_special_tokens=False, return_tensors="pt").input_ids[:, :args.prompt]
    if ids.shape[1] < args.prompt:
        sys.exit(f"speed.py: {args.text} has only {ids.shape[1]} tokens")
    decode = {name: [] for name, _ in VARIANTS}
    prefill = {name: [] for name, _ in VARIANTS}
    outputs = {}
    for r in range(args.repeats):
        for name, make in VARIANTS:
            cache = make(model, args.new)
            clock = Clock()
            t0 = time.perf_counter()
            with torch.no_grad():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache,
                                     max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False,
                                     streamer=clock, pad_token_id=0)
            t = clock.times[1:]  # the generated tokens
            prefill[name].append(t[0] - t0)
            decode[name].append((t[-1] - t[0]) / (len(t) - 1))
            outputs[name] = out[0, args.prompt:].tolist()
            print(f"round {r + 1} {name}: prefill {prefill[name][-1]:.2f} s, decode {1000 * decode[name][-1]:.1f} "
                  f"ms/token", file=sys.stderr, flush=True)
            if hasattr(cache, "close"):
                cache.close()
    base = statistics.median(decode["DynamicCache"])
    print(f"SmolLM2-135M-Instruct (GGUF Q4_1 -> float32, sdpa), P = {args.prompt}, {args.new} generated tokens "
          f"(decode time over the last {args.new - 1}), {args.repeats} rounds, median; torch {torch.__version__}, "
          f"transformers {transformers.__version__}, kvevict {kvevict.__version__}, {args.threads} threads, "
          f"{os.cpu_count()} cores\n")
    print("| cache | prefill (s) | decode (ms/token) | decode ratio to DynamicCache | same ids as DynamicCache |")
    print("|---|---|---|---|---|")
    for name, _ in VARIANTS:
        d = statistics.median(decode[name])
        same = "yes" if outputs[name] == outputs["DynamicCache"] else "no"
        print(f"| {name} | {statistics.median(prefill[name]):.2f} | {1000 * d:.1f} | {d / base:.2f} | {same} |")


if __name__ == "__main__":
    main()
