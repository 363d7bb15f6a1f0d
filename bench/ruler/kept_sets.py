#!/usr/bin/env python3
"""Which tokens kvevict's KVzip rows keep against kvpress's KVzipPress, on one RULER sample (issue 54's "find out why").

For one sample (task, seed), protocol and compression ratio c, the prompt (query-aware: context + question +
answer prefix; query-agnostic: the context) is compressed by kvpress 0.5.5's KVzipPress (layerwise=False, its
default) and by each kvevict row (KVEvictCache(policy="kvzip", evict="prefill", record=True): the prompt's kept
positions per layer and KV head). Per row it prints the kept tokens per KV head, the answer's expected strings'
tokens kept (how many (layer, KV head) pairs hold all of them, and their mean share), the Jaccard index of the
kept sets against kvpress's (summed over layers and KV heads), and the greedy answer with its RULER score.

  PY=$(bash scripts/get-hf-venv.sh); PYTHONPATH=<kvevict's Python module> \\
      $PY bench/ruler/kept_sets.py --task niah_single_3 --ratio 0.75 \\
      --rows kvzip+adakv@layers=shared,kvzip@layers=shared,kvzip@layers=shared@heads=shared

Cost: one KVzip prefill per row (about 50 s at 4K on 2 cores) and kvpress's (about 90 s).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench/quality/kvpress"))

import ruler  # noqa: E402


def value_spans(encode, context, expected):
    """[start, end) token spans of the context covering each expected string (RULER's answers appear verbatim);
    the prefix's tokenization decides the start, one token of slack each side for merges at the boundary."""
    spans = []
    for e in expected:
        pos = context.find(e)
        if pos < 0:
            raise SystemExit(f"kept_sets.py: the expected {e!r} is not in the context verbatim")
        spans.append((max(0, len(encode(context[:pos])) - 1), len(encode(context[:pos + len(e)])) + 1))
    return spans


def coverage(kept, spans, n_layers, n_kv):
    """(pairs holding every span whole, mean share of the spans' tokens kept over the pairs)."""
    tokens = sorted({t for a, b in spans for t in range(a, b)})
    shares = [sum(t in kept[(l, h)] for t in tokens) / len(tokens) for l in range(n_layers) for h in range(n_kv)]
    return sum(s == 1.0 for s in shares), sum(shares) / len(shares)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="SmolLM2-135M's .gguf (default: bash scripts/get-models.sh)")
    ap.add_argument("--essay", default=os.path.join(os.environ.get("KVEVICT_SHARED_DIR", os.path.join(ROOT, "..", "shared")),
                                                    "data/tinystories-val/tinystories_val.txt"))
    ap.add_argument("--task", default="niah_single_3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--ratio", type=float, default=0.75, help="compression ratio c (the fraction removed)")
    ap.add_argument("--protocol", default="aware", choices=("aware", "agnostic"))
    ap.add_argument("--rows", default="kvzip+adakv@layers=shared,kvzip@layers=shared,kvzip@layers=shared@heads=shared",
                    help="comma-separated kvevict kvzip rows (side_by_side.py's syntax)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.task not in ruler.TASKS:
        ap.error(f"--task: unknown {args.task!r} (tasks: {', '.join(ruler.TASKS)})")
    if not 0 < args.ratio < 1:
        ap.error(f"--ratio: must be in (0, 1) (got {args.ratio})")
    if args.threads < 1 or args.length < 256:
        ap.error("--threads must be >= 1 and --length >= 256")
    import side_by_side as sbs
    rows = args.rows.split(",")
    for name in rows:
        if sbs.kvevict_row(name)[0] != "kvzip":
            ap.error(f"--rows: {name!r} is not a kvzip row (kvzip[+adakv][@layers=...][@heads=shared])")
    if not os.path.isfile(args.essay):
        ap.error(f"--essay: {args.essay} is not a file")

    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    from kvevict.transformers import KVEvictCache
    import run
    torch.set_num_threads(args.threads)
    engine = run.load_engine(args.model, args.threads)
    model, hf = engine.model, engine.hf_tok
    with open(args.essay, encoding="utf-8") as f:
        sentences = ruler.essay_sentences(f.read())
    s = ruler.make_sample(args.task, args.seed, args.length, engine.encode, ruler.word_lists(), sentences)
    q, p, expected = (s["questions"] if args.protocol == "aware" else s["followups"])[0]
    ctx = engine.encode(s["context"])
    ids = ctx + engine.encode(q + p) if args.protocol == "aware" else ctx
    appended = [] if args.protocol == "aware" else engine.encode(q + p)
    spans = value_spans(engine.encode, s["context"], expected)
    P, n_layers, n_kv = len(ids), model.config.num_hidden_layers, model.config.num_key_value_heads
    max_new = s["max_new_tokens"]
    print(f"{args.task} seed {args.seed} {args.protocol} c={args.ratio:g}: {P} tokens compressed, expected "
          f"{expected} at tokens {spans}", flush=True)

    def show(name, kept, answer, secs, ref=None):
        whole, share = coverage(kept, spans, n_layers, n_kv)
        per_head = sum(len(v) for v in kept.values()) / len(kept)
        jac = ""
        if ref is not None:
            inter = sum(len(kept[x] & ref[x]) for x in kept)
            jac = f"  Jaccard vs kvpress {inter / sum(len(kept[x] | ref[x]) for x in kept):.3f}"
        print(f"{name:42s} kept/head {per_head:7.1f}  (layer, head) pairs holding the answer whole {whole}/{len(kept)}"
              f"  mean share {share:.3f}{jac}  score {ruler.score(answer, expected):.2f}  ({secs:.0f} s) {answer!r}",
              flush=True)

    with torch.no_grad():
        t0 = time.time()
        cache, first, L = sbs.kvpress_prefill(model, torch.tensor([ids]), "kvzip", args.ratio, hf_tokenizer=hf)
        ref = {}
        for i, layer in enumerate(model.model.layers):
            _, heads, pos = (x.tolist() for x in layer.self_attn.masked_key_indices)
            masked = set(zip(heads, pos))
            for h in range(n_kv):
                ref[(i, h)] = {t for t in range(P) if (h, t) not in masked}
        answers, _ = engine._answer(cache, first, P, L, [appended], max_new)
        sbs.clear_masks(model)
        show("kvpress:kvzip", ref, answers[0], time.time() - t0)
        for name in rows:
            t0 = time.time()
            _, opts = sbs.kvevict_row(name)
            cache = KVEvictCache(model, policy="kvzip", budget=1.0 - args.ratio, evict="prefill", record=True,
                                 tokenizer=hf, **opts)
            try:
                logits = model(torch.tensor([ids]), past_key_values=cache).logits[0, -1]
                kept = {(i, h): {int(t) for t in cache.layers[i].records[0][3][h]}
                        for i in range(n_layers) for h in range(n_kv)}
                if appended:
                    logits = model(torch.tensor([appended]), past_key_values=cache).logits[0, -1]
                answer = engine.greedy(logits, lambda t: model(torch.tensor([[t]]), past_key_values=cache)
                                       .logits[0, -1], max_new)
            finally:
                cache.close()
            show("kvevict:" + name, kept, answer, time.time() - t0, ref)


if __name__ == "__main__":
    main()
