#!/usr/bin/env python3
"""Keyformer's Gumbel noise against SmolLM2's logits: how large the noise is next to the logits, and how
much of the prompt selection it changes (issue 35, "Keyformer at small budgets, explained").

Reads kvevict-replay traces of one block's pre-softmax attention logits over a prompt (written by
`kvevict-generate --policy full --dump-logits FILE.npy --dump-layer L`, float32 [H_q, N, N], row t the
query at position t against positions 0..t) and prints, per block, a Markdown row of:
  - the median over query rows (t >= 64) of the standard deviation of the row's logits, next to the
    noise's, pi / sqrt(6) = 1.28 for Gumbel(0, 1);
  - the median total-variation distance between softmax(x) and softmax(x + zeta) of a row, at tau = 1;
  - for budgets r = 0.1, 0.2, 0.5 of the prompt (w = floor(0.3 k) recent tokens, as the report): the
    share of the prefill's kept tokens that Keyformer's noise changes, 1 - |keep(noise) & keep(none)| / k,
    averaged over KV heads, where keep() is the prefill cut of kvevict (recent w + top k - w of the
    accumulated softmax rows summed over the GQA group; ties to the older token), zeta drawn by NumPy
    (seeds 1..S), not kvevict's generator: the statistic, not the bits.
Usage: keyformer_noise.py --group G [--seeds S] LAYER=FILE.npy ...
"""
import argparse
import math
import sys

import numpy as np


def softmax_rows(x):
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=-1, keepdims=True)


def accumulated(x, zeta):
    """[H, N, N] causal logits (-inf above the diagonal) -> [H, N] summed softmax rows of x + zeta."""
    return softmax_rows(x + zeta if zeta is not None else x).sum(axis=1)


def keep(scores, k, w):
    """kvevict's prefill cut of one head: the last w, plus the top k - w of the others (ties: older)."""
    n = scores.shape[0]
    recent = set(range(n - w, n))
    others = np.arange(n - w)
    order = others[np.lexsort((others, -scores[: n - w]))]  # score descending, then position ascending
    return recent | set(order[: k - w].tolist())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", type=int, required=True, help="query heads per KV head (SmolLM2: 3)")
    ap.add_argument("--seeds", type=int, default=3, help="noise draws per block (default 3)")
    ap.add_argument("traces", nargs="+", help="LAYER=FILE.npy")
    a = ap.parse_args()
    ratios = (0.1, 0.2, 0.5)
    print("| block | median row std of the logits (Gumbel: 1.28) | median TV(softmax(x), softmax(x + ζ)) | "
          + " | ".join(f"kept set changed by the noise, r = {r}" for r in ratios) + " |")
    print("|---|---|---|" + "---|" * len(ratios))
    for spec in a.traces:
        layer, path = spec.split("=", 1)
        x = np.load(path).astype(np.float64)  # [H, N, N]
        H, N, _ = x.shape
        P = N  # the whole trace is the prompt here (--steps 1 adds one row; it is scored like the others)
        mask = np.tril(np.ones((N, N), dtype=bool))
        x = np.where(mask[None], x, -np.inf)
        stds, tvs = [], []
        rng0 = np.random.default_rng(0)
        for t in range(64, N):
            row = x[:, t, : t + 1]
            stds.extend(np.std(row, axis=1).tolist())
            z = -np.log(-np.log(rng0.uniform(size=row.shape)))
            p, q = softmax_rows(row), softmax_rows(row + z)
            tvs.extend((0.5 * np.abs(p - q).sum(axis=1)).tolist())
        base = accumulated(x, None)
        changed = {r: [] for r in ratios}
        for s in range(1, a.seeds + 1):
            rng = np.random.default_rng(s)
            z = -np.log(-np.log(rng.uniform(size=x.shape)))
            noisy = accumulated(x, z)
            for r in ratios:
                k = max(1, math.floor(r * P))
                w = max(1, math.floor(0.3 * k)) if k >= 2 else 0
                for j in range(H // a.group):
                    g = slice(j * a.group, (j + 1) * a.group)
                    kn, k0 = keep(noisy[g].sum(axis=0), k, w), keep(base[g].sum(axis=0), k, w)
                    changed[r].append(1.0 - len(kn & k0) / k)
        print(f"| {layer} | {np.median(stds):.2f} | {np.median(tvs):.3f} | "
              + " | ".join(f"{100 * np.mean(changed[r]):.1f} %" for r in ratios) + " |")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
