"""KVEvictCache's policy 'kvzip': query-agnostic scores from context reconstruction (KVzip, Kim et al., NeurIPS 2025,
arXiv 2505.23416, section 3; kvpress 0.5.5's KVzipPress is the reference implementation it is tested against).

After the prompt (the context, P tokens) the model is asked to repeat it: for each chunk [s, e) of at most `chunk`
context tokens, "\\n\\nRepeat the previous context exactly." (the first chunk) or "\\n\\nRepeat the part of the previous
context exactly, starting with" + the 8 tokens before s (later ones), then "\\n", then the chunk's tokens, go through
the model with the context's K/V in the cache (positions P, P + 1, ...). In every full-attention layer each repeat
query's attention is taken over the first min(n_sink, s) context keys, the chunk's keys and the repeat's own keys
(causally), softmax at the layer's scale; a context key's score is its largest weight over the repeat's queries and
the query heads of its KV head's group. The repeat's K/V are then dropped. The first n_sink tokens get the largest
score of all layers + 1 (kept everywhere). Each layer then keeps, per KV head, the top-k by score through kvevict's
TOVA selection (its logits row: log score, so its softmax is the score normalised per head): uniform budgets keep
each head's k best; head_budgets='adaptive' shares the layer's budget by those normalised scores (AdaKV).
layers='shared' (KVzip's default, kvpress's layerwise=False) first shares the model's budget among the layers by
raw score (share_layers); the default 'uniform' gives every layer k per KV head, as kvevict's other policies.
heads='shared' (KVzip's own rule, kvpress's KVzipPress) shares each layer's budget among its KV heads by raw score
too: with layers='shared', every layer and KV head keeps the context tokens above one model-wide threshold. AdaKV
(head_budgets='adaptive') ranks TOVA's probabilities, softmax(log score) = score / (its head's total), which are
not comparable across heads: on RULER's niah_single_3 (c = 0.75) that lost a UUID's tail which kvpress's KVzip kept
(bench/ruler/results/smollm2/results.csv; docs/quality-ruler.md); heads='shared' keeps kvpress's sets, up to each
layer's floor (comparable_rows). It needs k >= n_sink (a head's sinks are its top scores; below that, a layer's
budget could go to one head's sinks and leave another head nothing): a smaller budget is refused.

Cost: the repeat passes are one more prefill of about P + 12 tokens per chunk header, plus the score's attention
per layer and chunk (L = the repeat's length): O(P * (C + L)) per layer, through kvevict.attention_maxes (fused, no
[n_q, L, n_sink + C + L] matrix) where the queries are float32 with head_dim a multiple of 16.
"""
import torch

import kvevict

FIRST = "\n\nRepeat the previous context exactly."
LATER = "\n\nRepeat the part of the previous context exactly, starting with"
SUFFIX = "\n"
OPTIONS = dict(tokenizer=None, chunk=2048, n_sink=4, layers="uniform", heads=None)


def _encode(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    ids = ids.ids if hasattr(ids, "ids") else ids  # a tokenizers.Tokenizer's Encoding
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if not ids or not all(isinstance(i, int) for i in ids):
        raise ValueError(f"KVEvictCache(policy='kvzip'): tokenizer.encode({text!r}) gave {ids!r}, not a list of ids")
    return ids


def check_options(config, options, hybrid):
    """policy='kvzip': its options checked, the repeat prompts tokenized. Returns dict(first, later, suffix, chunk,
    n_sink, layers, heads). TypeError for an unknown option, ValueError for a missing tokenizer, a bad value,
    heads='shared' with head_budgets (it sets them) or with n_sink = 0 (the sinks carry its normalisation), or a
    hybrid (sliding-window) model."""
    unknown = sorted(set(options) - set(OPTIONS) - {"head_budgets"})
    if unknown:
        raise TypeError(f"KVEvictCache: policy 'kvzip' takes tokenizer, chunk, n_sink, layers, heads and head_budgets "
                        f"(got {', '.join(unknown)})")
    if hybrid:
        raise ValueError(f"KVEvictCache: policy 'kvzip' is not supported on {config.model_type}: the repeat passes "
                         "would fill its sliding-window layers, which cannot drop them again")
    opts = dict(OPTIONS, **{k: v for k, v in options.items() if k in OPTIONS})
    if opts["tokenizer"] is None or not hasattr(opts["tokenizer"], "encode"):
        raise ValueError("KVEvictCache: policy 'kvzip' needs tokenizer=, the model's tokenizer (its encode writes "
                         f"the repeat prompt {FIRST!r})")
    for name, low in (("chunk", 16), ("n_sink", 0)):
        v = opts[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ValueError(f"KVEvictCache: policy 'kvzip' needs {name} an int >= {low} (got {v!r})")
    if opts["layers"] not in ("uniform", "shared"):
        raise ValueError(f"KVEvictCache: policy 'kvzip' takes layers='uniform' (k per KV head in every layer) or "
                         f"'shared' (the model's budget shared among layers by score, KVzip's default; got "
                         f"{opts['layers']!r})")
    if opts["heads"] not in (None, "shared"):
        raise ValueError(f"KVEvictCache: policy 'kvzip' takes heads=None (head_budgets decides: k per KV head, or "
                         f"AdaKV's share) or 'shared' (the layer's budget shared among its KV heads by raw score, "
                         f"KVzip's rule; got {opts['heads']!r})")
    if opts["heads"] == "shared" and "head_budgets" in options:
        raise ValueError(f"KVEvictCache: policy 'kvzip' with heads='shared' sets the head budgets itself (AdaKV's "
                         f"allocation with no floor, on raw scores); drop head_budgets={options['head_budgets']!r}")
    if opts["heads"] == "shared" and opts["n_sink"] < 1:
        raise ValueError("KVEvictCache: policy 'kvzip' with heads='shared' needs n_sink >= 1 (each head's sinks carry "
                         "the normalisation that makes the heads' scores comparable; got n_sink=0)")
    tok = opts["tokenizer"]
    return dict(first=_encode(tok, FIRST), later=_encode(tok, LATER), suffix=_encode(tok, SUFFIX),
                chunk=opts["chunk"], n_sink=opts["n_sink"], layers=opts["layers"], heads=opts["heads"])


def score_chunk(layer, queries, scaling, start, end, prompt_len):
    """One layer's scores of context keys [start, end) from the repeat pass's queries [n_q, L, d] (after RoPE), the
    repeat's keys sitting at slots prompt_len .. prompt_len + L - 1. Writes layer.recon[:, start:end] ([n_kv, P]).
    float32 with head_dim a multiple of 16: kvevict.attention_maxes (one fused pass, no [n_q, L, m] matrix; on
    KVEvictCache.attention_pool()); otherwise the same in torch, materialised (score_chunk_torch)."""
    o = layer._owner()
    g = o.n_q_heads // o.n_kv_heads
    L = queries.shape[1]
    sink = min(o.reconstruct["n_sink"], start)
    kb = layer.k_buf[0]
    keys = torch.cat([kb[:, :sink], kb[:, start:end], kb[:, prompt_len:prompt_len + L]], dim=1)  # [n_kv, m, d]
    if fused_applies(queries, keys):
        m = sink + end - start  # the keys every repeat query sees; the repeat's own follow, causally
        maxes = kvevict.attention_maxes(queries, keys, query_offset=m, scale=scaling, pool=o.attention_pool())
        layer.recon[:, start:end] = torch.from_numpy(maxes)[:, sink:m].view(o.n_kv_heads, g, end - start).amax(dim=1)
        return
    score_chunk_torch(layer, queries, keys, scaling, start, end, sink)


def fused_applies(queries, keys):
    """Whether kvevict.attention_maxes takes these operands: float32, head_dim a multiple of 16."""
    return queries.dtype == keys.dtype == torch.float32 and queries.shape[-1] % 16 == 0


def score_chunk_torch(layer, queries, keys, scaling, start, end, sink):
    """score_chunk in torch: the [n_q, L, sink + C + L] attention materialised (any dtype, any head_dim)."""
    o = layer._owner()
    g = o.n_q_heads // o.n_kv_heads
    L = queries.shape[1]
    keys = keys.repeat_interleave(g, dim=0)
    w = torch.matmul(queries, keys.transpose(1, 2)) * scaling  # [n_q, L, m]
    causal = torch.ones(L, L, dtype=torch.bool).triu(1)
    w[:, :, -L:].masked_fill_(causal, float("-inf"))
    w = torch.softmax(w, dim=-1)[:, :, sink:sink + end - start]
    layer.recon[:, start:end] = w.amax(dim=1).view(o.n_kv_heads, g, end - start).amax(dim=1)


def logits_rows(layer):
    """The TOVA row [n_q_heads, P] that ranks a KV head's tokens by their score: log(score), the same for every
    query head of the group (a zero score, an underflow, ranks last); heads='shared': of comparable_rows's scores."""
    o = layer._owner()
    g = o.n_q_heads // o.n_kv_heads
    scores = layer.recon
    if o.reconstruct["heads"] == "shared":
        scores = comparable_rows(scores, o.reconstruct["n_sink"])
    rows = torch.log(scores.clamp_min(torch.finfo(torch.float32).tiny))
    return rows.repeat_interleave(g, dim=0).contiguous().numpy()


def comparable_rows(scores, n_sink):
    """scores [n_kv, P] (the sinks, the first n_sink >= 1 columns, already the largest: run) with each head's sinks
    raised so that every head's row sums to one C = max_h (head h's non-sink total) + n_sink * (the sinks' score).
    TOVA's selection ranks softmax(log s) = s / (the row's total); with every total C, AdaKV's allocation across a
    layer's heads (no floor) ranks the raw scores, as KVzip's threshold does, and the sinks stay every head's top
    (each is at least the sinks' old score). Computed in float64 (a copy); the ranking is then exact up to the
    float32 rounding of the selection (raw scores within about 1e-6 of each other on different heads can swap).
    O(n_kv P)."""
    s = scores.to(torch.float64, copy=True)
    body = s[:, n_sink:].sum(dim=1)
    top = s[:, :n_sink].max()
    C = body.max() + n_sink * top
    s[:, :n_sink] = ((C - body) / n_sink)[:, None]
    return s.to(torch.float32)


def run(cache, model, input_ids):
    """The repeat passes after the prompt's forward, then every full-attention layer's cut. Everything that can be
    refused is checked first (the ids, one unpadded sequence, the budget); if the passes or the cut raise anyway
    (an interrupt, memory), every layer is reset: the cache is left empty, as new, never half-scored."""
    layers = [cache.layers[i] for i in cache.global_layers]
    try:
        if input_ids is None:
            raise ValueError("KVEvictCache(policy='kvzip') needs the prompt's input_ids (the repeat passes copy the "
                             "context's tokens); inputs_embeds is not supported")
        if input_ids.shape[0] != 1:
            raise ValueError(f"KVEvictCache(policy='kvzip') scores one sequence (got a batch of {input_ids.shape[0]})")
        real = layers[0]._real
        if real is not None and not bool(real.all()):
            raise ValueError("KVEvictCache(policy='kvzip') takes an unpadded prompt (its attention mask has zeros: the "
                             "repeat passes would copy the padding)")
        ctx = input_ids[0].tolist()
        P = len(ctx)
        k = cache.resolve_budget(P)  # a budget the prompt cannot hold is refused before the passes' cost
        r = cache.reconstruct
        if r["heads"] == "shared" and k < min(r["n_sink"], P):
            raise ValueError(f"KVEvictCache(policy='kvzip', heads='shared') needs a budget of at least n_sink = "
                             f"{r['n_sink']} tokens per KV head (every head keeps its sinks; got k = {k} of a {P}-token "
                             "prompt): raise the budget or lower n_sink")
        inner = getattr(model, model.base_model_prefix)
        for start in range(0, P, r["chunk"]):
            end = min(start + r["chunk"], P)
            head = r["first"] if start == 0 else r["later"] + ctx[max(0, start - 8):start]
            cache._recon_chunk = (start, end, P)
            inner(input_ids=torch.tensor([head + r["suffix"] + ctx[start:end]]), past_key_values=cache, use_cache=True)
            for layer in layers:
                layer.drop_after(P)
        top = max(float(layer.recon.max()) for layer in layers) + 1.0
        for layer in layers:
            layer.recon[:, :r["n_sink"]] = top
        if r["layers"] == "shared":
            share_layers(cache, layers, P)
        for layer in layers:
            layer.pending = False
            layer.cut_prompt_now()
    except BaseException:
        for layer in cache.layers:
            layer.reset()
        raise
    finally:
        cache._recon_chunk = None


def share_layers(cache, layers, prompt_len):
    """layers='shared' (KVzip's default, kvpress's layerwise=False): the model's budget, k per KV head in every
    layer, goes to the highest scores of all layers and KV heads together; layer l then keeps
    k_l = max(1, floor(c_l / n_kv_heads)) per KV head, c_l its scores at or above the model-wide threshold (the
    sinks, top-scored, are always among them). The layers' total can differ from the model's budget by the floor
    (less) and by scores tied at the threshold (more)."""
    k = cache.resolve_budget(prompt_len)
    scores = torch.cat([layer.recon.flatten() for layer in layers])
    threshold = torch.topk(scores, k * cache.n_kv_heads * len(layers)).values[-1]
    for layer in layers:
        c = int((layer.recon >= threshold).sum())
        layer.budget_override = min(prompt_len, max(1, c // cache.n_kv_heads))


def make_model_hook(ref):
    """A forward hook on the model: after the prompt's forward, the repeat passes and the cut."""
    def hook(module, args, kwargs, output):
        cache = ref()
        if cache is None or kwargs.get("past_key_values") is not cache or cache._recon_chunk is not None:
            return None
        if not any(cache.layers[i].pending for i in cache.global_layers):
            return None
        ids = kwargs.get("input_ids", args[0] if args else None)
        with torch.no_grad():
            run(cache, module, ids)
        return None
    return hook
