#!/usr/bin/env python3
"""kvpress's presses and kvevict's policies on the same SmolLM2 windows as kvevict-quality, two protocols.

The windows are kvevict-quality's (bench/quality/run_smollm2.sh's P = 2048 part): the documents of
../shared/data/python-howto (*.rst, *.txt, by file name), each tokenized whole with SmolLM2's tokenizer (the
GGUF's tokens and merges with SmolLM2's own pre-tokenizer, digits split: scripts/oracle/README.md; no BOS),
cut into windows of P + PREDICT + 1 tokens that never cross a document, taken round-robin over the documents
(kvquality::document_windows). Each window: the first P tokens are the prompt, then PREDICT tokens are
teacher-forced and scored (the prediction of token t + 1 after token t, t = P .. P + PREDICT - 1): NLL,
KL(full || row) and top-1 agreement against the full cache (DynamicCache) on the same window. The full cache's
NLL is checked against kvevict-quality's (bench/quality/results/smollm2/smollm2.csv, column full_nll_quality).

Protocols, each row at k = floor(r * P) tokens per layer and KV head (--ratio r, default 0.1: k = 204):
  prefill  prefill-only compression, the cache then grows by the PREDICT scored tokens (kvpress's own use):
           kvpress presses with compression_ratio = 1 - r in the prompt's forward; kvevict's policies through
           KVEvictCache(evict="prefill"). Later forwards pass the original position_ids.
  step     a fixed budget at every step (kvevict's protocol, kvevict-quality's numbers): kvpress presses as
           PrefillDecodingPress(press(compression_ratio=1 - r), DecodingPress(press(), compression_interval=1,
           target_size=k)), one token per forward; kvevict's policies through KVEvictCache(evict="step").

The attention oracle (`--rows oracle:attention`, prefill protocol only): per global layer and KV head, the k prompt
positions the full cache's scored predictions attend most (`run_oracle`): what knowing the future attention buys, a
reference rather than a strict bound on ΔNLL.

Rows: kvpress SnapKV, StreamingLLM, TOVA, ObservedAttention (eager attention), KeyDiff, ExpectedAttention,
AdaKV(ExpectedAttention), PyramidKV, Knorm; kvevict keyformer (seed 1, as kvevict-quality's --seeds 1;
horizon PREDICT), h2o, streaming (4 sinks), window, tova, snapkv; kvevict rows may take kvevict-quality's SnapKV
row keys, e.g. kvevict:h2o@recent=0, kvevict:h2o+mean, kvevict:snapkv@kernel=15 or kvevict:snapkv@kernel=15@decode=keyformer,
and @window=L, @pooling=avg|max, @recent=Nt (N tokens): kvpress's SnapKVPress is
kvevict:snapkv@window=64@kernel=5@pooling=avg@recent=64t (`kvevict_row`). A row that raises is written with its error.

Resumable: results go to --out/results.csv, one line per (window, protocol, row); lines already there are not
run again. --summary prints the Markdown tables (mean over windows, and paired differences) from the file.

--family gemma3 runs the same on Gemma 3 270M (scripts/get-models.sh gemma3-270m), tokenized by llama.cpp's
tokenizer (`kvevict-llama --print-tokens`, --llama-bin; transformers 5.2's tokenizer from the GGUF is a Unigram model
over the BPE scores and cuts howto-argparse.rst into 10,564 tokens where Gemma's own makes 6,750), each window led by
Gemma's <bos>, so the prompt is BOS + P tokens and k = floor(r (P + 1)); no kvevict-quality check: its engine runs Llama-architecture models only). Its
sliding-window layers keep their window in every row: KVEvictCache leaves them to transformers, and kvpress's
presses get kvpress's own Gemma 3 rule (it skips the sliding layers of Gemma3ForConditionalGeneration; kvpress
0.5.5 applies it to that class only, and compressing the text-only Gemma3ForCausalLM's sliding layers breaks
their mask, so the rule is extended to it here: `gemma3_sliding_rule`).

  PY=$(bash scripts/get-hf-venv.sh); $PY bench/quality/kvpress/side_by_side.py --windows 1
"""
import argparse
import copy
import csv
import importlib.metadata
import json
import math
import os
import subprocess
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from tokenizers import Tokenizer, pre_tokenizers
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

import kvevict
from kvevict.transformers import POLICIES, KVEvictCache

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FIELDS = ["window", "document", "protocol", "row", "source", "k", "nll", "delta_nll", "kl", "top1", "full_nll",
          "full_nll_quality", "seconds", "error"]

KVPRESS_ROWS = ["snapkv", "streaming_llm", "tova", "observed_attention", "keydiff", "expected_attention",
                "adakv_expected_attention", "pyramidkv", "knorm"]
KVEVICT_ROWS = ["keyformer", "h2o", "streaming", "window", "tova", "snapkv"]


def kvpress_press(name, compression_ratio, hf_tokenizer=None):
    """kvpress 0.5.5's press `name` at `compression_ratio` (the fraction removed). "kvzip" (KVzipPress, query-agnostic:
    scores by reconstructing the context, 2-3 prefills more) needs `hf_tokenizer`, the model's transformers
    tokenizer: KVzipPress loads one by the model's name, which a GGUF-loaded model does not have (its chat template
    is set aside: the prompts here are plain text)."""
    import kvpress
    if name == "kvzip":
        if hf_tokenizer is None:
            raise ValueError("kvpress_press: 'kvzip' needs hf_tokenizer (the model's transformers tokenizer)")
        from kvpress.presses import kvzip_press
        tok = copy.copy(hf_tokenizer)
        tok.chat_template = None

        class Tokenizers:  # what KVzipPress's AutoTokenizer.from_pretrained(model.config.name_or_path) gets
            @staticmethod
            def from_pretrained(*args, **kwargs):
                return tok
        kvzip_press.AutoTokenizer = Tokenizers
        return kvpress.KVzipPress(compression_ratio=compression_ratio)
    make = {
        "snapkv": kvpress.SnapKVPress, "streaming_llm": kvpress.StreamingLLMPress, "tova": kvpress.TOVAPress,
        "observed_attention": kvpress.ObservedAttentionPress, "keydiff": kvpress.KeyDiffPress,
        "expected_attention": kvpress.ExpectedAttentionPress, "pyramidkv": kvpress.PyramidKVPress,
        "knorm": kvpress.KnormPress,
    }
    if name == "adakv_expected_attention":
        return kvpress.AdaKVPress(kvpress.ExpectedAttentionPress(compression_ratio=compression_ratio))
    return make[name](compression_ratio=compression_ratio)


def gemma3_sliding_rule():
    """kvpress 0.5.5 skips Gemma 3's sliding-window layers for Gemma3ForConditionalGeneration only (an isinstance
    check in kvpress.presses.base_press); the text-only Gemma3ForCausalLM gets the same rule."""
    from kvpress.presses import base_press
    from transformers.models.gemma3.modeling_gemma3 import Gemma3ForCausalLM, Gemma3ForConditionalGeneration
    base_press.Gemma3ForConditionalGeneration = (Gemma3ForConditionalGeneration, Gemma3ForCausalLM)


class LlamaCppTokenizer:
    """Gemma 3's own tokenization, by llama.cpp (`kvevict-llama --model GGUF --print-tokens`): `encode(text)` returns an
    object whose `.ids` are the text's ids without BOS (as tokenizers.Tokenizer.encode); `decode(ids)` uses
    transformers' tokenizer from the GGUF (its pieces are the GGUF's, so the text is the same)."""

    def __init__(self, kvl, model_path, decoder):
        self.kvl, self.model_path, self.decoder = kvl, model_path, decoder
        if not os.access(kvl, os.X_OK):
            sys.exit(f"{kvl} is not built: bash scripts/llama-test.sh (or give --llama-bin)")

    def encode(self, text, add_special_tokens=False):
        import tempfile
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt") as f:  # a document exceeds argv's limit
            f.write(text)
            f.flush()
            out = subprocess.run([self.kvl, "--model", self.model_path, "--prompt-file", f.name, "--print-tokens"],
                                 check=True, capture_output=True, text=True).stdout.split()
        ids = [int(t) for t in out][1:]  # without the BOS llama.cpp puts first

        class Encoding:
            pass
        e = Encoding()
        e.ids = ids
        return e

    def decode(self, ids):
        return self.decoder.decode(ids)


def smollm2_tokenizer(folder, gguf):
    """SmolLM2's own tokenization (as kvevict's C++ tokenizer): the GGUF's tokens and merges, digits split."""
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    spec = json.loads(tok.backend_tokenizer.to_str())
    # A byte without a token (0x04, 0xC0, ...) is left out, as SmolLM2's tokenizer and kvevict's do; transformers'
    # conversion (tokenizers 0.22) maps it to <|endoftext|> as the unknown token instead.
    spec["model"]["unk_token"] = None
    real = Tokenizer.from_str(json.dumps(spec))
    real.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
    ])
    return real


def windows(data, tokenizer, length, count):
    """kvquality::document_windows: round-robin over the documents (by name), never crossing one."""
    names = sorted(n for n in os.listdir(data) if n.endswith((".rst", ".txt")) and os.path.isfile(os.path.join(data, n)))
    docs = []
    for n in names:
        with open(os.path.join(data, n), "rb") as f:
            docs.append(tokenizer.encode(f.read().decode("utf-8", errors="replace"), add_special_tokens=False).ids)
    out = []
    most = max(len(d) // length for d in docs)
    for i in range(most):
        for j, d in enumerate(docs):
            if i < len(d) // length and len(out) < count:
                out.append((names[j], d[i * length:(i + 1) * length]))
    return out


def quality_full_nll(path):
    """kvevict-quality's full-cache NLL per window (P = 2048 part), for the check."""
    out = {}
    if os.path.isfile(path):
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["policy"] == "full":
                    out[int(r["window"])] = float(r["nll"])
    return out


class Scorer:
    """NLL, KL(full || row) and top-1 of a row's logits [PREDICT, V] against the full cache's."""

    def __init__(self, ref_logits, targets):
        self.lp = torch.log_softmax(ref_logits.double(), -1)
        self.targets = targets
        self.argmax = self.lp.argmax(-1)
        self.nll = float(-self.lp.gather(1, targets[:, None]).mean())

    def score(self, logits):
        lq = torch.log_softmax(logits.double(), -1)
        nll = float(-lq.gather(1, self.targets[:, None]).mean())
        kl = float((self.lp.exp() * (self.lp - lq)).sum(-1).mean())
        top1 = float((lq.argmax(-1) == self.argmax).double().mean())
        return nll, kl, top1


def with_attention(model, impl):
    class Ctx:
        def __enter__(self):
            self.old = model.config._attn_implementation
            model.config._attn_implementation = impl

        def __exit__(self, *a):
            model.config._attn_implementation = self.old
    return Ctx()


def run_full(model, ids, P):
    with torch.no_grad():
        cache = DynamicCache(config=model.config)
        model(ids[:, :P], past_key_values=cache)
        return model(ids[:, P:-1], past_key_values=cache).logits[0]


def layer_lengths(cache):
    return {layer.keys.shape[-2] for layer in cache.layers}


def kvpress_prefill(model, ids, name, compression_ratio, hf_tokenizer=None):
    """The prompt `ids` [1, C] prefilled into a DynamicCache and compressed by kvpress's press `name` at
    `compression_ratio` (None: no press, the full cache; ObservedAttention runs with eager attention). Returns
    (cache, the logits after the last id [V], L): L the slots every layer holds, None when layers hold different
    lengths (PyramidKV's press; Gemma 3's sliding layers, which hold their window: None for such a model always, so
    that a budget equal to the window cannot pass for one length). The retrieval and RULER runners answer from it
    with `append_at`."""
    cache = DynamicCache(config=model.config)
    impl = "eager" if name == "observed_attention" else model.config._attn_implementation
    clear_masks(model)
    with torch.no_grad(), with_attention(model, impl):
        if name is None:
            logits = model(ids, past_key_values=cache).logits[0, -1].clone()  # not the [1, P, V] it views
        else:
            with kvpress_press(name, compression_ratio, hf_tokenizer=hf_tokenizer)(model):
                logits = model(ids, past_key_values=cache).logits[0, -1].clone()
    lengths = layer_lengths(cache)
    one = len(lengths) == 1 and len(global_layers(model)) == model.config.num_hidden_layers
    return cache, logits, (lengths.pop() if one else None)


def clear_masks(model):
    """Forgets the keys an earlier AdaKV / KVzip press masked (kvpress's `masked_key_indices` on each attention
    module). kvpress's attention patch forgets them at a prefill only through the attention functions it patches
    (sdpa, ...), not eager's nor kvevict's own: an ObservedAttention prefill (or a kvevict row) after such a press
    kept them, and its answers then masked the earlier press's indices (an IndexError past the cache's end, or wrong
    keys). Called before every kvpress prefill and kvevict row of the runners."""
    for layer in model.model.layers:
        layer.self_attn.masked_key_indices = None


def append_at(model, cache, ids, pos, slot):
    """Feeds `ids` [1, n] to a kvpress-compressed cache at the original positions pos .. pos + n - 1 (RoPE) and the
    cache's slots slot .. slot + n - 1 (the mask; with layers of different lengths, give slot = pos, as kvpress's own
    pipeline does). Returns the logits of every fed id [n, V]."""
    n = ids.shape[1]
    with torch.no_grad():
        return model(ids, past_key_values=cache, position_ids=torch.arange(pos, pos + n)[None],
                     cache_position=torch.arange(slot, slot + n)).logits[0]


def run_kvpress(model, ids, P, name, protocol, ratio, k):
    n = ids.shape[1] - 1 - P  # scored predictions
    impl = "eager" if name == "observed_attention" else model.config._attn_implementation
    if protocol == "prefill":
        with with_attention(model, impl):  # ObservedAttention: eager for the scored tokens too
            cache, _, L = kvpress_prefill(model, ids[:, :P], name, 1.0 - ratio)
            if L is not None:  # one forward: the mask over the slots (cache_position), RoPE at the positions
                return append_at(model, cache, ids[:, P:-1], P, L)
            # layers of different lengths (PyramidKV, sliding layers): one token at a time
            return torch.stack([append_at(model, cache, ids[:, t:t + 1], t, t)[-1] for t in range(P, P + n)])
    cache = DynamicCache(config=model.config)
    clear_masks(model)
    with torch.no_grad(), with_attention(model, impl):
        import kvpress
        press = kvpress.PrefillDecodingPress(
            prefilling_press=kvpress_press(name, 1.0 - ratio),
            decoding_press=kvpress.DecodingPress(base_press=kvpress_press(name, 0.0), compression_interval=1,
                                                 target_size=k))
        rows = []
        with press(model):
            model(ids[:, :P], past_key_values=cache)
            for t in range(P, P + n):
                rows.append(model(ids[:, t:t + 1], past_key_values=cache, position_ids=torch.tensor([[t]]),
                                  cache_position=torch.tensor([t])).logits[0, -1])
        return torch.stack(rows)


def global_layers(model):
    """The layers that attend every position (config.layer_types' "full_attention"; every layer when the config has
    no layer_types): the only ones a row compresses."""
    types = getattr(model.config, "layer_types", None)
    return [l for l in range(model.config.num_hidden_layers) if types is None or types[l] == "full_attention"]


def run_oracle(model, ids, P, k):
    """The attention oracle of the prefill protocol: per global layer and KV head, the k prompt positions the full cache's
    scored predictions attend most (the attention probabilities of the PREDICT query rows, summed over them and the
    KV head's query heads: eager attention over the whole window, one forward), then the predictions scored from that
    cache as a press's (`run_kvpress`). It knows the future attention, so it shows how much of a row's loss the choice
    of positions could recover; it is a reference, not a strict bound on ΔNLL (a set the predictions attend less can
    still predict better: kvpress's SnapKV beat it at r = 0.5 on Gemma 3's windows)."""
    n = ids.shape[1] - 1 - P
    layers = global_layers(model)
    with torch.no_grad():
        with with_attention(model, "eager"):
            att = model(ids[:, :-1], output_attentions=True).attentions
        kv_heads = model.config.num_key_value_heads
        keep = {}
        for l in layers:
            a = att[l][0, :, P:P + n, :P].sum(1)  # [n_q_heads, P]: the predictions' attention to the prompt
            score = a.view(kv_heads, -1, P).sum(1)  # [n_kv_heads, P]
            keep[l] = score.topk(k, dim=-1).indices.sort(-1).values
        del att
        cache = DynamicCache(config=model.config)
        model(ids[:, :P], past_key_values=cache)
        for l, idx in keep.items():
            layer = cache.layers[l]
            gather = idx[None, :, :, None].expand(1, kv_heads, k, layer.keys.shape[-1])
            layer.keys = layer.keys.gather(2, gather).contiguous()
            layer.values = layer.values.gather(2, gather).contiguous()
        lengths = layer_lengths(cache)
        if len(lengths) == 1:
            L = lengths.pop()
            return model(ids[:, P:-1], past_key_values=cache, position_ids=torch.arange(P, P + n)[None],
                         cache_position=torch.arange(L, L + n)).logits[0]
        return torch.stack([model(ids[:, t:t + 1], past_key_values=cache, position_ids=torch.tensor([[t]]),
                                  cache_position=torch.tensor([t])).logits[0, -1] for t in range(P, P + n)])


def kvevict_row(name):
    """A kvevict row's policy and options: `POLICY[+mean][+adakv][+shared][@KEY=VALUE]...`, kvevict-quality's row
    syntax: `+mean` (keyformer, h2o: mean_attention=True), `+adakv` (head_budgets='adaptive'), `+shared`
    (shared_heads=True: one selection per layer from the scores summed over its KV heads; `tova+shared@recent=1t`
    is kvpress's TOVAPress, which averages the last query's attention over all heads), `@recent=Q` (the recent window, a
    fraction Q in [0, 1] of k, or `@recent=Nt`, N tokens: keyformer, h2o, snapkv, knorm, keydiff, tova) and, for SnapKV, `@kernel=K` -> snap_kernel, `@decode=D` -> snap_decode; e.g. `h2o@recent=0`,
    `h2o+mean@recent=0`, `snapkv@kernel=15@decode=keyformer`; SnapKV's observation window `@window=L` -> snap_window
    and pooling `@pooling=avg|max` -> snap_pooling (kvpress's SnapKVPress, whose observation window is also the kept
    recent window: `snapkv@window=64@kernel=5@pooling=avg@recent=64t`; TOVAPress is `tova+shared@recent=1t`);
    kvzip `@layers=shared` (KVzip's model-wide budget) and `@heads=shared` (each layer's shared among its heads by
    raw score: `kvzip@layers=shared@heads=shared` keeps what kvpress's KVzipPress keeps).
    """
    head, *keys = name.split("@")
    policy, *mods = head.split("+")
    opts = {}
    for mod in mods:
        if mod == "mean" and policy in ("keyformer", "h2o") and "mean_attention" not in opts:
            opts["mean_attention"] = True
        elif (mod == "adakv" and policy not in ("full", "streaming", "window") and "head_budgets" not in opts
              and "shared_heads" not in opts):
            opts["head_budgets"] = "adaptive"
        elif (mod == "shared" and policy not in ("full", "streaming", "window", "kvzip") and "shared_heads" not in opts
              and "head_budgets" not in opts):
            opts["shared_heads"] = True
        else:
            sys.exit(f"side_by_side.py: --rows kvevict:{name}: unknown modifier '+{mod}' (keyformer, h2o take +mean; "
                     "every scored policy +adakv; every scored policy but kvzip +shared; not +adakv and +shared "
                     "together)")
    for kv in keys:
        key, _, value = kv.partition("=")
        recent = policy in ("keyformer", "h2o", "snapkv", "knorm", "keydiff", "tova")
        if key == "recent" and recent and value.endswith("t") and value[:-1].isdigit():
            opts["recent"] = int(value[:-1])  # tokens: @recent=64t
        elif key == "recent" and recent and value.replace(".", "", 1).isdigit() and float(value) <= 1.0:
            opts["recent"] = f"{float(value) * 100:g}%"  # a fraction of k, as kvevict-quality's @recent=Q
        elif policy == "kvzip" and key == "layers" and value in ("uniform", "shared"):
            opts["layers"] = value
        elif policy == "kvzip" and key == "heads" and value == "shared" and "head_budgets" not in opts:
            opts["heads"] = value
        elif policy == "snapkv" and key in ("kernel", "window") and value.isdigit():
            opts["snap_" + key] = int(value)
        elif policy == "snapkv" and key in ("decode", "pooling") and value:
            opts["snap_" + key] = value
        else:
            sys.exit(f"side_by_side.py: --rows kvevict:{name}: unknown key '@{kv}' (keyformer, h2o, snapkv, knorm, keydiff "
                     "and tova take @recent=Q, a fraction of k in [0, 1], or @recent=Nt, N tokens; snapkv @kernel=K, "
                     "@window=L, @pooling=avg|max, @decode=D; kvzip @layers=uniform|shared and, without +adakv, "
                     "@heads=shared)")
    return policy, opts


def run_kvevict(model, ids, P, name, protocol, ratio):
    n = ids.shape[1] - 1 - P
    clear_masks(model)  # an earlier AdaKV / KVzip row's masked keys would reach this row's decode steps
    policy, opts = kvevict_row(name)
    if policy == "keyformer" or opts.get("snap_decode") == "keyformer":
        opts.update(horizon=n, seed=1)
    elif policy == "streaming":
        opts.update(sinks=4)
    cache = KVEvictCache(model, policy=policy, budget=ratio, evict=protocol, **opts)
    try:
        with torch.no_grad():
            model(ids[:, :P], past_key_values=cache)
            if protocol == "prefill":
                return model(ids[:, P:-1], past_key_values=cache).logits[0]
            return torch.stack([model(ids[:, t:t + 1], past_key_values=cache).logits[0, -1] for t in range(P, P + n)])
    finally:
        cache.close()


def read_done(path):
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def quality_rows(path, ratio):
    """kvevict-quality's ΔNLL per (policy, window) at this ratio (smollm2.csv), for the step protocol's check."""
    nll, out = {}, {}
    if os.path.isfile(path):
        with open(path) as f:
            rows = list(csv.DictReader(f))
        full = {r["window"]: float(r["nll"]) for r in rows if r["policy"] == "full"}
        for r in rows:
            if r["policy"] != "full" and abs(float(r["ratio"]) - ratio) < 1e-9:
                out[(r["policy"], r["window"])] = float(r["nll"]) - full[r["window"]]
    return out


def summary(rows, ratio, quality=None):
    """Markdown: mean over windows per (protocol, row), and paired differences against kvevict's rows."""
    import statistics
    quality = quality or {}
    ok = [r for r in rows if not r["error"]]
    wins = sorted({int(r["window"]) for r in ok})
    lines = [f"{len(wins)} window(s): {', '.join(sorted({r['document'] for r in ok}))}; r = {ratio}\n"]
    for protocol in ("prefill", "step"):
        pr = [r for r in rows if r["protocol"] == protocol]
        if not pr:
            continue
        title = ("prefill-only compression, cache grows by the scored tokens" if protocol == "prefill"
                 else "fixed budget k at every step")
        lines.append(f"\n**{protocol}** ({title}); ΔNLL over the full cache, ± standard error over windows:\n")
        check = protocol == "step" and quality
        lines.append("| row | source | windows | ΔNLL (nats/token) | KL(full ‖ row) | top-1 |"
                     + (" kvevict-quality's ΔNLL, same windows |" if check else ""))
        lines.append("|---|---|---|---|---|---|" + ("---|" if check else ""))
        names = []
        for r in pr:
            if (r["source"], r["row"]) not in names:
                names.append((r["source"], r["row"]))
        stats = []
        for source, name in names:
            rr = [r for r in pr if r["row"] == name and r["source"] == source]
            good = [r for r in rr if not r["error"]]
            if not good:
                lines.append(f"| {name} | {source} | 0 | failed: {rr[0]['error'][:120]} | | |" + (" |" if check else ""))
                continue
            d = [float(r["delta_nll"]) for r in good]
            se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
            q = [quality.get((name, r["window"])) for r in good] if source == "kvevict" else []
            qcell = f"{statistics.mean(q):+.3f}" if q and None not in q else "—"
            stats.append((statistics.mean(d), source, name, len(good), se,
                          statistics.mean(float(r["kl"]) for r in good), statistics.mean(float(r["top1"]) for r in good),
                          qcell))
        for m, source, name, n, se, kl, top1, qcell in sorted(stats):
            sev = "" if math.isnan(se) else f" ± {se:.3f}"
            lines.append(f"| {name} | {source} | {n} | {m:+.3f}{sev} | {kl:.3f} | {top1:.3f} |"
                         + (f" {qcell} |" if check else ""))
        # Paired per window: each row minus kvevict's keyformer and h2o rows of the same protocol and window.
        base = {(r["source"], r["row"], r["window"]): float(r["delta_nll"]) for r in pr if not r["error"]}
        refs = [("kvevict", "keyformer"), ("kvevict", "h2o")]
        lines.append(f"\nPaired per window ({protocol}): the row's ΔNLL minus kvevict keyformer's and h2o's on the same "
                     "window, mean ± standard error (windows where the row is lower / windows):\n")
        lines.append("| row | source | minus keyformer | minus h2o |")
        lines.append("|---|---|---|---|")
        for m, source, name, n, se, kl, top1, _ in sorted(stats):
            cells = []
            for ref in refs:
                d = [base[(source, name, wi)] - base[ref + (wi,)]
                     for (s_, n_, wi) in base if (s_, n_) == (source, name) and ref + (wi,) in base]
                if (source, name) == ref or not d:
                    cells.append("—")
                    continue
                se_d = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
                sev = "" if math.isnan(se_d) else f" ± {se_d:.3f}"
                cells.append(f"{statistics.mean(d):+.3f}{sev} ({sum(x < 0 for x in d)}/{len(d)})")
            lines.append(f"| {name} | {source} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=("smollm2", "gemma3"), default="smollm2",
                    help="the model: SmolLM2-135M (default) or Gemma 3 270M")
    ap.add_argument("--model", help="the family's .gguf (default: bash scripts/get-models.sh [gemma3-270m])")
    ap.add_argument("--llama-bin", default=os.path.join(ROOT, "build-llama/kvevict-llama"),
                    help="gemma3: kvevict-llama, whose --print-tokens tokenizes (default build-llama/kvevict-llama)")
    ap.add_argument("--data", default=os.path.join(os.environ.get("KVEVICT_SHARED_DIR", os.path.join(ROOT, "..", "shared")),
                                                   "data/python-howto"))
    ap.add_argument("--windows", type=int, default=12)
    ap.add_argument("--first-window", type=int, default=0)
    ap.add_argument("--prompt", type=int, default=2048)
    ap.add_argument("--predict", type=int, default=255)
    ap.add_argument("--ratio", type=float, default=0.1)
    ap.add_argument("--protocols", default="prefill,step")
    ap.add_argument("--rows", default=",".join([f"kvpress:{r}" for r in KVPRESS_ROWS] + [f"kvevict:{r}" for r in KVEVICT_ROWS]))
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (default 1: on a shared 2-core machine 2 threads oversubscribe and a decode step took 13x longer)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/quality/results/kvpress"))
    ap.add_argument("--quality-csv", default=os.path.join(ROOT, "bench/quality/results/smollm2/smollm2.csv"))
    ap.add_argument("--summary", action="store_true", help="only print the tables of --out/results.csv")
    args = ap.parse_args()
    results = os.path.join(args.out, "results.csv")
    if args.summary:
        print(summary(read_done(results), args.ratio,
                      quality_rows(args.quality_csv, args.ratio) if args.family == "smollm2" else {}))
        return
    rows = [spec for spec in args.rows.split(",") if spec]  # an empty entry (a list joined with an empty one) is none
    for spec in rows:
        parts = spec.split(":")
        if len(parts) != 2 or parts[0] not in ("kvpress", "kvevict", "oracle") or not parts[1]:
            sys.exit(f"side_by_side.py: --rows: '{spec}' is not SOURCE:ROW with SOURCE kvpress, kvevict or oracle")
        source, name = parts
        if source == "kvpress" and name not in KVPRESS_ROWS + ["kvzip"]:
            sys.exit(f"side_by_side.py: --rows: unknown press '{name}' (kvpress: {', '.join(KVPRESS_ROWS)}, kvzip)")
        if source == "oracle" and name != "attention":
            sys.exit(f"side_by_side.py: --rows: unknown oracle '{name}' (the oracle row is oracle:attention)")
        if source == "kvevict" and kvevict_row(name)[0] not in POLICIES:  # kvevict_row exits naming a bad key
            sys.exit(f"side_by_side.py: --rows: unknown kvevict policy in '{name}' ({', '.join(POLICIES)})")
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    fetch = ["bash", os.path.join(ROOT, "scripts/get-models.sh")] + (["gemma3-270m"] if args.family == "gemma3" else [])
    model_path = args.model or subprocess.run(fetch, check=True, capture_output=True, text=True).stdout.strip()
    folder, gguf = os.path.split(model_path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    prefix = []  # Gemma 3 expects <bos> first (its attention sink)
    if args.family == "smollm2":
        tokenizer = smollm2_tokenizer(folder, gguf)
    else:
        hf_tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
        tokenizer = LlamaCppTokenizer(args.llama_bin, model_path, hf_tokenizer.backend_tokenizer)
        prefix = [hf_tokenizer.bos_token_id]
    if args.family == "gemma3":
        gemma3_sliding_rule()
    length = args.prompt + args.predict + 1
    wins = windows(args.data, tokenizer, length, args.first_window + args.windows)[args.first_window:]
    P = args.prompt + len(prefix)
    k = math.floor(args.ratio * P)
    quality = (quality_full_nll(args.quality_csv) if args.family == "smollm2" and args.prompt == 2048
               and args.predict == 255 else {})
    os.makedirs(args.out, exist_ok=True)
    done = {(r["window"], r["protocol"], r["source"], r["row"]) for r in read_done(results)}
    new_file = not os.path.isfile(results) or os.path.getsize(results) == 0  # a run killed before its first line
    versions = (f"kvpress {importlib.metadata.version('kvpress')}, transformers {transformers.__version__}, "
                f"torch {torch.__version__}, kvevict {kvevict.__version__}")
    print(f"side_by_side: {versions}; {len(wins)} window(s) of {length} tokens, k = {k}", file=sys.stderr, flush=True)
    with open(results, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new_file:
            w.writeheader()
        for wi, (doc, tokens) in enumerate(wins, start=args.first_window):
            ids = torch.tensor([prefix + tokens])
            targets = ids[0, P + 1:]
            t0 = time.time()
            ref = Scorer(run_full(model, ids, P), targets)
            print(f"window {wi} ({doc}): full NLL {ref.nll:.6f} (kvevict-quality {quality.get(wi, float('nan')):.6f}), "
                  f"{time.time() - t0:.0f} s", file=sys.stderr, flush=True)
            for protocol in args.protocols.split(","):
                for spec in rows:
                    source, name = spec.split(":")
                    if (str(wi), protocol, source, name) in done:
                        continue
                    t0 = time.time()
                    row = dict(window=wi, document=doc, protocol=protocol, row=name, source=source, k=k,
                               full_nll=f"{ref.nll:.6f}", full_nll_quality=quality.get(wi, ""), error="")
                    try:
                        if source == "oracle" and (name != "attention" or protocol != "prefill"):
                            raise ValueError(f"the oracle row is oracle:attention, prefill protocol only (got "
                                             f"{source}:{name}, {protocol})")
                        logits = (run_kvpress(model, ids, P, name, protocol, args.ratio, k) if source == "kvpress"
                                  else run_oracle(model, ids, P, k) if source == "oracle"
                                  else run_kvevict(model, ids, P, name, protocol, args.ratio))
                        nll, kl, top1 = ref.score(logits)
                        row.update(nll=f"{nll:.6f}", delta_nll=f"{nll - ref.nll:.6f}", kl=f"{kl:.6f}", top1=f"{top1:.6f}")
                    except Exception as e:  # noqa: BLE001 - a row that fails is reported as such
                        row.update(nll="", delta_nll="", kl="", top1="", error=f"{type(e).__name__}: {e}".replace("\n", " "))
                    row["seconds"] = f"{time.time() - t0:.1f}"
                    w.writerow(row)
                    f.flush()
                    print(f"  {protocol} {source}:{name}: "
                          + (f"ΔNLL {row['delta_nll']}, KL {row['kl']}, top-1 {row['top1']}" if not row["error"]
                             else row["error"][:200]) + f" ({row['seconds']} s)", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
