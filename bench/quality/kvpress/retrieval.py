#!/usr/bin/env python3
"""kvpress beside kvevict on kvevict-quality's needle-retrieval prompts (issues 34, 35).

The prompts are kvevict-quality's own token ids (`kvevict-quality --retrieval N --prompts-out FILE`: one line per
prompt, `index depth code id id ...`), so both engines read the same tokens. Every row prefills the prompt, then
answers greedily with kvevict-quality's rules: at most --answer-tokens tokens, stopping at the end token or once a
run of digits has ended; correct = the answer's first run of digits equals the code.

  kvpress rows: the press compresses the prefill (compression_ratio = 1 - r; ObservedAttention with eager
    attention); the answer tokens then grow the cache by at most --answer-tokens, with the original position_ids.
  kvevict rows: KVEvictCache(model, policy, budget=r, evict="step") (kvevict-quality's protocol: the prompt cut to
    k, then eviction at every answer step), with kvevict-quality's row syntax (h2o, h2o+mean@recent=0,
    snapkv@kernel=15, ...). Their answers are checked against kvevict-quality's (--quality-csv, its
    PREFIX_retrieval.csv for the same prompts) where it has the row.

Resumable: one line per (prompt, ratio, source, row) in --out/results.csv; --summary prints the table. The
prompts run depth by depth in turn (the first of each depth, then the second, ...), so a partial run is balanced.

  PY=$(bash scripts/get-hf-venv.sh); $PY bench/quality/kvpress/retrieval.py \\
      --prompts /tmp/prompts.txt --ratios 0.1,0.2 --out bench/quality/results/kvpress_retrieval
"""
import argparse
import csv
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import side_by_side as sbs  # noqa: E402  (the model, tokenizer, presses and kvevict rows of the NLL runner)

FIELDS = ["prompt", "depth", "code", "ratio", "source", "row", "answer", "correct", "seconds", "error"]


def first_digits(text):
    m = re.search(r"[0-9]+", text)
    return m.group(0) if m else ""


def read_prompts(path):
    out = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) < 4:
                continue
            out.append((int(fields[0]), int(fields[1]), fields[2], [int(t) for t in fields[3:]]))
    return out


def greedy(model, tokenizer, first_logits, step, answer_tokens, end_id):
    """kvevict-quality's answer loop: `step(id, i)` feeds answer token i and returns the next logits."""
    out, logits = [], first_logits
    for i in range(answer_tokens):
        tid = int(logits.argmax())
        if tid == end_id:
            break
        out.append(tid)
        text = tokenizer.decode(out)
        digits = first_digits(text)
        if digits and text.find(digits) + len(digits) < len(text):
            break
        if i + 1 < answer_tokens:
            logits = step(tid, i)
    return tokenizer.decode(out)


def answer_kvpress(model, tokenizer, ids, name, ratio, answer_tokens, end_id, split=None, hf_tokenizer=None):
    """kvpress's press compresses ids[:, :split] (default: all of it); the rest (the question, under the
    query-agnostic protocol) is appended uncompressed at its own positions, then the answer."""
    import torch
    P = ids.shape[1]
    C = P if split is None else split
    impl = "eager" if name == "observed_attention" else model.config._attn_implementation
    with sbs.with_attention(model, impl):  # ObservedAttention: eager for the answer too
        cache, first, L = sbs.kvpress_prefill(model, ids[:, :C], name, 1.0 - ratio, hf_tokenizer=hf_tokenizer)
        if L is None and C < P:
            raise ValueError(f"{name}: per-layer cache lengths differ; the query-agnostic protocol needs one length")
        if C < P:
            first = sbs.append_at(model, cache, ids[:, C:], C, L)[-1]
            L += P - C

        def step(tid, i):  # layers of different lengths: slot = position, as kvpress's pipeline
            return sbs.append_at(model, cache, torch.tensor([[tid]]), P + i, (P if L is None else L) + i)[-1]
        return greedy(model, tokenizer, first, step, answer_tokens, end_id)


def answer_kvevict(model, tokenizer, ids, name, ratio, answer_tokens, end_id, split=None, hf_tokenizer=None):
    """kvevict's row: the whole prompt compressed then k at every answer step (evict="step", kvevict-quality's
    protocol), or, with `split` (query-agnostic), ids[:, :split] compressed (evict="prefill") and the question
    appended after it, the cache then growing by the answer."""
    import torch
    from kvevict.transformers import KVEvictCache
    sbs.clear_masks(model)  # an earlier AdaKV / KVzip row's masked keys would reach this row's decode steps
    policy, opts = sbs.kvevict_row(name)
    if policy == "keyformer" or opts.get("snap_decode") == "keyformer":
        opts.update(horizon=answer_tokens, seed=1)
    elif policy == "streaming":
        opts.update(sinks=4)
    elif policy == "kvzip":
        opts.update(tokenizer=hf_tokenizer)
    cache = KVEvictCache(model, policy=policy, budget=ratio, evict="step" if split is None else "prefill", **opts)
    try:
        with torch.no_grad():
            if split is None:
                first = model(ids, past_key_values=cache).logits[0, -1]
            else:
                model(ids[:, :split], past_key_values=cache)
                first = model(ids[:, split:], past_key_values=cache).logits[0, -1]

            def step(tid, i):
                return model(torch.tensor([[tid]]), past_key_values=cache).logits[0, -1]
            return greedy(model, tokenizer, first, step, answer_tokens, end_id)
    finally:
        cache.close()


def quality_answers(path):
    """kvevict-quality's answers per (policy, ratio, prompt) from PREFIX_retrieval.csv."""
    out = {}
    if path and os.path.isfile(path):
        with open(path) as f:
            for r in csv.DictReader(f):
                out[(r["policy"], float(r["ratio"]), int(r["prompt"]))] = r["answer"]  # newlines as \\n, as ours
    return out


def summary(rows, quality):
    by = {}
    for r in rows:
        by.setdefault((float(r["ratio"]), r["source"], r["row"]), []).append(r)
    ratios = sorted({k[0] for k in by})
    depths = sorted({int(r["depth"]) for r in rows})
    n_prompts = len({r["prompt"] for r in rows})
    lines = [f"{n_prompts} prompt(s); correct = the answer's first run of digits equals the code.", ""]
    head = "| row | source | r | " + " | ".join(f"depth {d}%" for d in depths) + " | all | kvevict-quality's answers |"
    lines += [head, "|" + "---|" * (len(depths) + 5)]
    for r in ratios:
        keys = sorted((k for k in by if k[0] == r), key=lambda k: (-sum(int(x["correct"] or 0) for x in by[k]), k[1], k[2]))
        for k in keys:
            items = by[k]
            errs = [x for x in items if x["error"]]
            cells = []
            for d in depths:
                ds = [x for x in items if int(x["depth"]) == d and not x["error"]]
                cells.append(f"{sum(int(x['correct']) for x in ds)}/{len(ds)}")
            ok = [x for x in items if not x["error"]]
            check = ""
            if k[1] == "kvevict":
                same = [quality.get((k[2], r, int(x["prompt"]))) for x in ok]
                known = [(x, q) for x, q in zip(ok, same) if q is not None]
                if known:
                    check = f"{sum(x['answer'] == q for x, q in known)}/{len(known)} identical"
            all_cell = f"{sum(int(x['correct']) for x in ok)}/{len(ok)}" + (f" ({len(errs)} failed: {errs[0]['error'][:80]})" if errs else "")
            lines.append(f"| {k[2]} | {k[1]} | {r:g} | " + " | ".join(cells) + f" | {all_cell} | {check} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=("smollm2", "gemma3"), default="smollm2",
                    help="the model: SmolLM2-135M (default) or Gemma 3 270M (prompts: needle_prompts.py)")
    ap.add_argument("--model", help="the family's .gguf (default: bash scripts/get-models.sh [gemma3-270m])")
    ap.add_argument("--prompts", required=True, help="kvevict-quality --prompts-out FILE")
    ap.add_argument("--ratios", default="0.1,0.2")
    ap.add_argument("--rows", default=",".join([f"kvpress:{r}" for r in sbs.KVPRESS_ROWS]
                                               + ["kvevict:h2o", "kvevict:snapkv@kernel=15"]))
    ap.add_argument("--answer-tokens", type=int, default=8)
    ap.add_argument("--protocol", choices=("aware", "agnostic"), default="aware",
                    help="aware (default): the whole prompt, question included, is compressed; agnostic: the excerpt "
                         "and needle are compressed first, the question is appended after (issue 54; smollm2 only)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quality-csv", help="kvevict-quality's PREFIX_retrieval.csv of the same prompts (a check)")
    ap.add_argument("--summary", action="store_true", help="only print the table of --out/results.csv")
    args = ap.parse_args()
    results = os.path.join(args.out, "results.csv")
    quality = quality_answers(args.quality_csv)
    if args.summary:
        print(summary(sbs.read_done(results), quality))
        return
    if args.protocol == "agnostic" and args.family != "smollm2":
        ap.error("--protocol agnostic: --family smollm2 only (the question's tokens are found by SmolLM2's tokenizer)")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    fetch = ["bash", os.path.join(sbs.ROOT, "scripts/get-models.sh")] + (["gemma3-270m"] if args.family == "gemma3" else [])
    model_path = args.model or subprocess.run(fetch, check=True, capture_output=True, text=True).stdout.strip()
    folder, gguf = os.path.split(model_path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    if args.family == "smollm2":
        tokenizer = sbs.smollm2_tokenizer(folder, gguf)
    else:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=gguf).backend_tokenizer  # decodes only
        sbs.gemma3_sliding_rule()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    end_id = model.config.eos_token_id if isinstance(model.config.eos_token_id, int) else model.config.eos_token_id[0]
    # Depth round-robin (prompt 0 of each depth, then 1, ...): a run stopped early still covers every depth.
    prompts = read_prompts(args.prompts)
    split = None
    if args.protocol == "agnostic":  # the question closes every prompt (make_retrieval_items' tail)
        import needle_prompts
        tail = tokenizer.encode(needle_prompts.QUESTION, add_special_tokens=False).ids
        bad = [p[0] for p in prompts if p[3][-len(tail):] != tail]
        if bad:
            sys.exit(f"retrieval.py: --protocol agnostic: prompt(s) {bad[:5]} do not end with the question's "
                     f"{len(tail)} tokens (not kvevict-quality's needle prompts?)")
        split = {p[0]: len(p[3]) - len(tail) for p in prompts}  # per prompt: the question's tokens end each
    by_depth = {}
    for p in prompts:
        by_depth.setdefault(p[1], []).append(p)
    prompts = [p for group in zip(*by_depth.values()) for p in group]
    os.makedirs(args.out, exist_ok=True)
    done = {(r["prompt"], float(r["ratio"]), r["source"], r["row"]) for r in sbs.read_done(results)}
    new_file = not os.path.isfile(results) or os.path.getsize(results) == 0  # a run killed before its first line
    print(f"retrieval: {len(prompts)} prompts of {len(prompts[0][3])} tokens, end id {end_id}, protocol "
          f"{args.protocol}" + (f" (the question's {len(prompts[0][3]) - split[prompts[0][0]]} tokens appended after "
                                "the rest is compressed)" if split else ""), file=sys.stderr, flush=True)
    with open(results, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new_file:
            w.writeheader()
        for index, depth, code, prompt in prompts:
            ids = torch.tensor([prompt])
            for ratio in [float(r) for r in args.ratios.split(",")]:
                for spec in args.rows.split(","):
                    source, name = spec.split(":")
                    if (str(index), ratio, source, name) in done:
                        continue
                    t0 = time.time()
                    row = dict(prompt=index, depth=depth, code=code, ratio=ratio, source=source, row=name, error="")
                    try:
                        run = answer_kvpress if source == "kvpress" else answer_kvevict
                        text = run(model, tokenizer, ids, name, ratio, args.answer_tokens, end_id,
                                   split=split[index] if split else None,
                                   hf_tokenizer=hf_tokenizer)
                        row.update(answer=text.replace("\n", "\\n"), correct=int(first_digits(text) == code))
                    except Exception as e:  # noqa: BLE001 - a row that fails is reported as such
                        row.update(answer="", correct="", error=f"{type(e).__name__}: {e}".replace("\n", " "))
                    row["seconds"] = f"{time.time() - t0:.1f}"
                    w.writerow(row)
                    f.flush()
                    print(f"  prompt {index} r={ratio:g} {source}:{name}: {row['answer'] or row['error'][:120]} "
                          f"({'ok' if row.get('correct') == 1 else 'miss'}, {row['seconds']} s)", file=sys.stderr,
                          flush=True)


if __name__ == "__main__":
    main()
