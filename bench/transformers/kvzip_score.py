#!/usr/bin/env python3
"""KVzip's per-layer score (KVEvictCache(policy="kvzip"), kvevict/_reconstruct.py): kvevict.attention_maxes (one
fused pass, no [n_q, L, m] matrix) against the torch computation it replaced (the repeat's attention materialised,
softmax, max over the queries), side by side in one run on the same random operands.

Shapes of one layer and chunk of SmolLM2-135M's repeat pass over a context of --context tokens in chunks of
--chunk (9 query heads, 3 KV heads, head_dim 64): the repeat's L = chunk + 12 queries over [4 sinks | the chunk |
the repeat's own keys]. --repeats rounds, the two interleaved; prints each one's median and the ratio, and the
largest difference between their scores. Threads: torch.get_num_threads() for torch, a kvevict.ThreadPool of as
many workers for the kernel (as KVEvictCache.attention_pool() does).

  PY=$(bash scripts/get-hf-venv.sh); $PY bench/transformers/kvzip_score.py --chunk 2048 --repeats 7
"""
import argparse
import statistics
import time

import torch

import kvevict


def torch_score(q, keys, g, sink, C, L, scale):
    w = torch.matmul(q, keys.repeat_interleave(g, dim=0).transpose(1, 2)) * scale
    w[:, :, -L:].masked_fill_(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(w, dim=-1)[:, :, sink:sink + C].amax(dim=1).view(keys.shape[0], g, C).amax(dim=1)


def fused_score(q, keys, g, sink, C, pool, scale):
    m = torch.from_numpy(kvevict.attention_maxes(q, keys, query_offset=sink + C, scale=scale, pool=pool))
    return m[:, sink:sink + C].view(keys.shape[0], g, C).amax(dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunk", type=int, default=2048, help="context tokens per repeat chunk (KVzip's 2048)")
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if args.chunk < 1 or args.repeats < 1:
        ap.error("--chunk and --repeats must be >= 1")
    nq, nkv, d, sink = 9, 3, 64, 4
    C, L, g = args.chunk, args.chunk + 12, 3
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(nq, L, d, generator=gen)
    keys = torch.randn(nkv, sink + C + L, d, generator=gen)
    scale = d ** -0.5
    n = torch.get_num_threads()
    pool = kvevict.ThreadPool(n) if n > 1 else None
    times = {"torch": [], "attention_maxes": []}
    for _ in range(args.repeats):
        t = time.perf_counter()
        want = torch_score(q, keys, g, sink, C, L, scale)
        times["torch"].append(time.perf_counter() - t)
        t = time.perf_counter()
        got = fused_score(q, keys, g, sink, C, pool, scale)
        times["attention_maxes"].append(time.perf_counter() - t)
    base = statistics.median(times["torch"])
    print(f"KVzip score of one layer and chunk: {nq} query heads, L = {L} queries, {sink + C + L} keys, d = {d}, "
          f"{n} thread(s), median of {args.repeats}")
    for name, ts in times.items():
        print(f"  {name:16s} {statistics.median(ts) * 1e3:8.1f} ms  {statistics.median(ts) / base:5.2f}x torch's")
    print(f"  largest |difference| of the scores: {float((got - want).abs().max()):.2e} "
          f"(largest score {float(want.max()):.3f})")


if __name__ == "__main__":
    main()
