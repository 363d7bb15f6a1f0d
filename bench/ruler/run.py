#!/usr/bin/env python3
"""RULER-style quality of KV-cache compression (issue 54): kvevict's rows and kvpress's presses on the same token ids,
under two protocols, at kvpress's compression ratios.

Protocols (stated in every table):
  aware     the question is part of the prompt that is compressed (context + question + answer prefix, compressed
            to the budget, then the answer generated: kvevict's needle protocol);
  agnostic  the context alone is prefilled and compressed to the budget; then the question and its answer prefix
            are appended (positions continuing, never compressed) and answered from the compressed cache; the
            cache is cropped back to the compressed context before the next question. niah_multiquery asks its 4
            keys as 4 questions this way (RULER's single 4-key question under `aware`).

Rows: `full` (DynamicCache, the reference), `kvevict:ROW` (KVEvictCache(evict="prefill"), kvevict-quality's row
syntax: keyformer, h2o, snapkv@kernel=15, ...), `kvpress:PRESS` (kvpress 0.5.5 through transformers: snapkv,
tova, streaming_llm, observed_attention, expected_attention, adakv_expected_attention, keydiff, knorm, kvzip).
A compression ratio c (kvpress's: the fraction removed) is kvevict's budget 1 - c of the compressed tokens.
kvpress's rows compress every pending ratio of a row from one prefill (bench/quality/kvpress/ratios.py: the same
caches and masks as a prefill per ratio, tests/transformers/test_kvpress_ratios.py); their `seconds` are an equal
share of the group's time (the prefill and every ratio's answers).

Answers: greedy, at most RULER's tokens_to_generate for the task (or --max-new-tokens), stopping at the end
token or at the end of the answer's first line. Score: RULER's string_match_all (bench/ruler/ruler.py), 0..1.

Resumable: one line per (task, seed, protocol, ratio, source, row, question) in --out/results.csv (one --out per
--length and --max-new-tokens: they are not in the key; run one process per --out); --summary only prints the
tables. The context and the question are tokenized apart and joined (the generator fits them measured together:
a prompt can be a token or two over --length). Samples run seed-major (every task's first sample, then the second, ...), so a partial run is
balanced over tasks.

  PY=$(bash scripts/get-hf-venv.sh); bash scripts/python-module-for.sh ... (see bench/ruler/run.sh)
"""
import argparse
import csv
import importlib.metadata
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench/quality/kvpress"))

import ruler  # noqa: E402

FIELDS = ["task", "seed", "protocol", "ratio", "source", "row", "question", "context_tokens", "kept", "answer",
          "expected", "score", "seconds", "error"]
KVPRESS_PRESSES = ("snapkv", "tova", "streaming_llm", "observed_attention", "expected_attention",
                   "adakv_expected_attention", "keydiff", "knorm", "kvzip")
PROTOCOLS = ("aware", "agnostic")
SKIPPED = "skipped: the full cache scored 0 on this sample under this protocol (--all-samples runs it)"


class Engine:
    """The model, its tokenizer and the answer loop shared by every row."""

    def __init__(self, model, tokenizer, hf_tokenizer, threads):
        import torch
        self.torch, self.model, self.tok, self.hf_tok = torch, model, tokenizer, hf_tokenizer
        torch.set_num_threads(threads)
        self.eos = {i for i in (hf_tokenizer.eos_token_id, hf_tokenizer.convert_tokens_to_ids("<|im_end|>"))
                    if i is not None}

    def encode(self, text):
        return self.tok.encode(text).ids

    def greedy(self, logits, step, max_new):
        """Greedy ids from `logits` on: `step(id)` feeds one id and returns the next logits; stops at the end token,
        at a newline once some text was produced, or after max_new ids."""
        out = []
        for _ in range(max_new):
            tid = int(logits.argmax())
            if tid in self.eos:
                break
            out.append(tid)
            text = self.tok.decode(out)
            if "\n" in text.lstrip():
                break
            logits = step(tid)
        text = self.tok.decode(out)
        return text.lstrip().split("\n")[0]

    # -- rows ---------------------------------------------------------------------------------------------
    def run(self, source, name, ratio, compressed, appended, max_new):
        """Answers for each ids list of `appended` (each [] or the question's ids) after compressing `compressed`
        at compression ratio `ratio`. Returns ([answer texts], kept tokens per KV head after compression, on average
        over layers and heads)."""
        with self.torch.no_grad():
            if source == "full":
                return self._dynamic(None, None, compressed, appended, max_new)
            if source == "kvpress":
                return self._dynamic(name, ratio, compressed, appended, max_new)
            return self._kvevict(name, ratio, compressed, appended, max_new)

    def run_kvpress_ratios(self, name, ratios, compressed, appended, max_new):
        """run() of kvpress's press `name` at each of `ratios` from one prefill (bench/quality/kvpress/ratios.py:
        the same caches and masks as one prefill per ratio, tested). Returns {ratio: (answers, kept) or the exception
        its answers raised} (a failed prefill raises)."""
        import ratios as kr
        import side_by_side as sbs
        torch, model = self.torch, self.model
        P = len(compressed)
        out = {}
        with torch.no_grad():
            many = kr.kvpress_prefill_ratios(model, torch.tensor([compressed]), name, ratios, hf_tokenizer=self.hf_tok)
            for r in ratios:
                got = many.pop(r)
                try:
                    got.use(model)
                    out[r] = self._answer(got.cache(model), got.logits, P, got.L, appended, max_new)
                except Exception as e:  # noqa: BLE001 - this ratio fails alone, as with a prefill per ratio
                    out[r] = e
            sbs.clear_masks(model)
        return out

    def _kvevict(self, name, ratio, compressed, appended, max_new):
        import side_by_side as sbs
        from kvevict.transformers import KVEvictCache
        torch = self.torch
        sbs.clear_masks(self.model)  # kvpress's patched attention would apply an earlier press's masked keys
        policy, opts = sbs.kvevict_row(name)
        if policy == "kvzip":
            opts.update(tokenizer=self.hf_tok)
        if policy == "keyformer" or opts.get("snap_decode") == "keyformer":
            opts.update(horizon=max_new, seed=1)
        elif policy == "streaming":
            opts.update(sinks=4)
        cache = KVEvictCache(self.model, policy=policy, budget=1.0 - ratio, evict="prefill", **opts)
        try:
            first = self.model(torch.tensor([compressed]), past_key_values=cache).logits[0, -1]
            P = cache.get_seq_length()
            lens = [cache.layers[i].lens.mean() for i in cache.global_layers]
            kept = round(sum(lens) / len(lens))  # per KV head, on average over layers (as masked_per_head)
            answers = []
            for app in appended:
                logits = first if not app else self.model(torch.tensor([app]), past_key_values=cache).logits[0, -1]
                answers.append(self.greedy(logits, lambda t: self.model(torch.tensor([[t]]), past_key_values=cache)
                                           .logits[0, -1], max_new))
                cache.crop(P)
            return answers, kept
        finally:
            cache.close()

    def _dynamic(self, press_name, ratio, compressed, appended, max_new):
        """The full cache (press_name None) or kvpress's press at compression ratio `ratio`, through
        side_by_side.py's kvpress_prefill / append_at (ObservedAttention eager for the prefill only, as before); the cache is cropped back to the compressed context after each
        question."""
        import side_by_side as sbs
        torch, model = self.torch, self.model
        P = len(compressed)
        cache, first, L = sbs.kvpress_prefill(model, torch.tensor([compressed]), press_name, ratio,
                                              hf_tokenizer=self.hf_tok)
        if L is None:
            raise ValueError(f"{press_name}: per-layer cache lengths differ (or the model has sliding-window layers); "
                             "the RULER runner needs one length")
        return self._answer(cache, first, P, L, appended, max_new)

    def _answer(self, cache, first, P, L, appended, max_new):
        """(answers, kept per KV head) from a kvpress-style DynamicCache holding L slots of a P-token prompt whose
        last logits are `first`: each ids list of `appended` fed at positions P.. (slots L..), answered greedily,
        then cropped back to L slots."""
        import side_by_side as sbs
        torch, model = self.torch, self.model
        kept = L - masked_per_head(model)
        answers = []
        for app in appended:
            logits = sbs.append_at(model, cache, torch.tensor([app]), P, L)[-1] if app else first
            state = dict(pos=P + len(app), slot=L + len(app))

            def step(t):
                out = sbs.append_at(model, cache, torch.tensor([[t]]), state["pos"], state["slot"])[-1]
                state["pos"] += 1
                state["slot"] += 1
                return out
            answers.append(self.greedy(logits, step, max_new))
            cache.crop(L)
        return answers, kept


def run_group(engine, source, name, group, protocol, ctx, q_ids, max_new):
    """{ratio: (answers, kept)} for the ratios of `group` under `protocol` (aware: each question compressed with the
    context; agnostic: the context compressed once, the questions appended one after another)."""
    def at(ratios, compressed, appended):
        if len(ratios) > 1:
            return engine.run_kvpress_ratios(name, ratios, compressed, appended, max_new)
        return {ratios[0]: engine.run(source, name, ratios[0], compressed, appended, max_new)}
    if protocol == "agnostic":
        return at(group, ctx, q_ids)
    per_q = [at(group, ctx + q, [[]]) for q in q_ids]
    failed = {r: next((p[r] for p in per_q if isinstance(p[r], Exception)), None) for r in group}
    return {r: failed[r] or ([p[r][0][0] for p in per_q], per_q[0][r][1]) for r in group}


def load_engine(model_path, threads):
    """An Engine over SmolLM2-135M's .gguf at `model_path` (None: bash scripts/get-models.sh fetches it), float32,
    sdpa attention, transformers' logging quiet. Raises subprocess.CalledProcessError if the fetch fails."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    import side_by_side as sbs
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model_path = model_path or subprocess.run(["bash", os.path.join(ROOT, "scripts/get-models.sh")], check=True,
                                              capture_output=True, text=True).stdout.strip()
    folder, gguf = os.path.split(model_path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    hf_tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    return Engine(model, sbs.smollm2_tokenizer(folder, gguf), hf_tok, threads)


def masked_per_head(model):
    """kvpress's masked (fake-compressed) keys per KV head, on average over layers and heads (AdaKV, KVzip)."""
    n, count = 0, 0
    for layer in model.model.layers:
        idx = getattr(layer.self_attn, "masked_key_indices", None)
        count += 1
        if idx is not None:
            n += idx[0].numel() / (model.config.num_key_value_heads)
    return round(n / max(count, 1))


def read_done(path):
    if not os.path.isfile(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="SmolLM2-135M's .gguf (default: bash scripts/get-models.sh)")
    ap.add_argument("--essay", default=os.path.join(os.environ.get("KVEVICT_SHARED_DIR", os.path.join(ROOT, "..", "shared")),
                                                    "data/tinystories-val/tinystories_val.txt"),
                    help="the essay haystack's text (default: ../shared's TinyStories validation text)")
    ap.add_argument("--tasks", default=",".join(ruler.TASKS), help="comma-separated (default: all 11)")
    ap.add_argument("--samples", type=int, default=1, help="samples per task (seeds 0 .. N-1; default 1)")
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--length", type=int, default=4096, help="prompt tokens: context + question + answer prefix")
    ap.add_argument("--ratios", default="0.25,0.5,0.75,0.875", help="compression ratios (the fraction removed)")
    ap.add_argument("--protocols", default="aware,agnostic")
    ap.add_argument("--rows", default="full,kvevict:keyformer,kvevict:h2o,kvevict:snapkv@kernel=15",
                    help="full, kvevict:ROW, kvpress:PRESS (" + ", ".join(KVPRESS_PRESSES) + ")")
    ap.add_argument("--max-new-tokens", type=int, default=0, help="answer length cap (default: RULER's per task)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/ruler/results/smollm2"))
    ap.add_argument("--all-samples", action="store_true",
                    help="run every row on every sample (default: a sample whose full-cache score is 0 under a "
                         "protocol is recorded as skipped for the other rows: nothing to lose, and a row costs 2-6x "
                         "the full cache's time)")
    ap.add_argument("--summary", action="store_true", help="only print the tables of --out/results.csv")
    args = ap.parse_args()
    tasks = args.tasks.split(",")
    bad = [t for t in tasks if t not in ruler.TASKS]
    if bad:
        ap.error(f"--tasks: unknown {', '.join(bad)} (tasks: {', '.join(ruler.TASKS)})")
    protocols = args.protocols.split(",")
    if not set(protocols) <= set(PROTOCOLS):
        ap.error(f"--protocols: {args.protocols!r}; expected aware, agnostic or both")
    try:
        ratios = [float(r) for r in args.ratios.split(",")]
    except ValueError:
        ap.error(f"--ratios: {args.ratios!r} is not a comma-separated list of numbers")
    if len(set(ratios)) != len(ratios):
        ap.error(f"--ratios: {args.ratios!r} names a ratio twice")
    if not all(0 < r < 1 for r in ratios):
        ap.error(f"--ratios: each must be in (0, 1) (the fraction of the KV removed); got {args.ratios}")
    rows = []
    for spec in args.rows.split(","):
        source, _, name = spec.partition(":")
        if spec == "full":
            rows.append(("full", "full"))
        elif source == "kvpress" and name in KVPRESS_PRESSES:
            rows.append((source, name))
        elif source == "kvevict" and name:
            import side_by_side as sbs
            sbs.kvevict_row(name)  # exits naming the row if it is not kvevict-quality syntax
            rows.append((source, name))
        else:
            ap.error(f"--rows: {spec!r}; expected full, kvevict:ROW or kvpress:PRESS ({', '.join(KVPRESS_PRESSES)})")
    if args.samples < 1 or args.length < 256 or args.threads < 1 or args.max_new_tokens < 0:
        ap.error("--samples and --threads must be >= 1, --length >= 256, --max-new-tokens >= 0")
    results = os.path.join(args.out, "results.csv")
    if args.summary:
        import report
        print(report.tables(read_done(results)))
        return
    if not os.path.isfile(args.essay):
        ap.error(f"--essay: {args.essay} is not a file")

    os.environ.setdefault("TQDM_DISABLE", "1")
    import torch
    import transformers
    import kvevict
    import side_by_side as sbs
    engine = load_engine(args.model, args.threads)
    words = ruler.word_lists()
    with open(args.essay, encoding="utf-8") as f:
        sentences = ruler.essay_sentences(f.read())
    os.makedirs(args.out, exist_ok=True)
    previous = read_done(results)
    # Rows answered are done; a failed row is run again, a skipped one too with --all-samples (report.py keeps
    # the last line of each).
    done = {(r["task"], r["seed"], r["protocol"], r["ratio"], r["source"], r["row"]) for r in previous
            if not r["error"] or (r["error"] == SKIPPED and not args.all_samples)}
    full_scores = {}  # (task, seed, protocol) -> the full cache's mean score
    for r in previous:
        if r["source"] == "full" and not r["error"]:
            full_scores.setdefault((r["task"], r["seed"], r["protocol"]), []).append(float(r["score"]))
    new_file = not os.path.isfile(results) or os.path.getsize(results) == 0  # a run killed before its first line
    versions = (f"kvpress {importlib.metadata.version('kvpress')}, transformers {transformers.__version__}, "
                f"torch {torch.__version__}, kvevict {kvevict.__version__}")
    print(f"ruler: {versions}; {len(tasks)} task(s) x {args.samples} sample(s) at {args.length} tokens", file=sys.stderr,
          flush=True)
    with open(results, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new_file:
            w.writeheader()
        for seed in range(args.first_seed, args.first_seed + args.samples):
            for task in tasks:
                sample = ruler.make_sample(task, seed, args.length, engine.encode, words, sentences)
                ctx = engine.encode(sample["context"])
                max_new = args.max_new_tokens or sample["max_new_tokens"]
                for protocol in protocols:
                    qs = sample["questions"] if protocol == "aware" else sample["followups"]
                    q_ids = [engine.encode(q + p) for q, p, _ in qs]
                    for source, name in rows:
                        pending = [r for r in ([0.0] if source == "full" else ratios)
                                   if (task, str(seed), protocol, f"{r:g}", source, name) not in done]
                        if not pending:
                            continue
                        full = full_scores.get((task, str(seed), protocol))
                        if source != "full" and not args.all_samples and full is not None and sum(full) == 0:
                            for ratio in pending:
                                for i, (q, p, expected) in enumerate(qs):
                                    w.writerow(dict(task=task, seed=seed, protocol=protocol, ratio=f"{ratio:g}",
                                                    source=source, row=name, question=i, context_tokens=len(ctx),
                                                    kept="", answer="", expected="|".join(expected), score="",
                                                    seconds="0", error=SKIPPED))
                            continue
                        # kvpress's rows: every pending ratio from one prefill (its seconds: an equal share of it)
                        groups = [pending] if source == "kvpress" and len(pending) > 1 else [[r] for r in pending]
                        for group in groups:
                            t0 = time.time()
                            try:
                                results = run_group(engine, source, name, group, protocol, ctx, q_ids, max_new)
                            except Exception as e:  # noqa: BLE001 - a row that fails is reported as such
                                results = {r: e for r in group}
                            secs = (time.time() - t0) / len(qs) / len(group)
                            for ratio in group:
                                err = results[ratio] if isinstance(results[ratio], Exception) else None
                                answers, kept = ([""] * len(qs), "") if err else results[ratio]
                                err = f"{type(err).__name__}: {err}".replace("\n", " ") if err else ""
                                for i, ((q, p, expected), ans) in enumerate(zip(qs, answers)):
                                    w.writerow(dict(task=task, seed=seed, protocol=protocol, ratio=f"{ratio:g}",
                                                    source=source, row=name, question=i, context_tokens=len(ctx),
                                                    kept=kept, answer=ans, expected="|".join(expected),
                                                    score="" if err else f"{ruler.score(ans, expected):.4f}",
                                                    seconds=f"{secs:.1f}", error=err))
                                f.flush()
                                if source == "full" and not err:
                                    full_scores[(task, str(seed), protocol)] = [ruler.score(a, e) for a, (_, _, e)
                                                                                in zip(answers, qs)]
                                mean = (sum(ruler.score(a, e) for a, (_, _, e) in zip(answers, qs)) / len(qs)
                                        if not err else float("nan"))
                                print(f"  {task} seed {seed} {protocol} c={ratio:g} {source}:{name}: score {mean:.2f} "
                                      f"({secs * len(qs):.0f} s) {err[:160] or repr(answers[0][:60])}",
                                      file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
