"""kvpress's press at several compression ratios from one prefill (the RULER runner's kvpress rows): what
side_by_side.kvpress_prefill gives at each ratio, bit for bit, for the cost of one prefill and one scoring per ratio.

A press compresses inside the prompt's forward, after each layer's attention, so the prompt's hidden states, its last
logits and each layer's K/V before compression do not depend on the ratio; only the compression does. Here the
press's own compression runs once per ratio on the same inputs: a ScorerPress's or AdaKVPress's `compress` for every
ratio in its forward hook (the model's cache keeps the uncompressed K/V meanwhile), KVzipPress's `compress_post`
once per ratio after its reconstruction passes (its score is computed once). Each ratio then gets its own
DynamicCache (copies: kvpress's decoding writes fake keys into the cache's keys in place) and, for the presses that
mask instead of dropping (AdaKV, KVzip), its own `masked_key_indices` per attention module, which `use` sets before
answering. tests/transformers/test_kvpress_ratios.py checks the equality with kvpress_prefill press by press."""
import torch
from transformers import DynamicCache

import side_by_side as sbs


class Compressed:
    """One ratio's result: `cache()` a fresh DynamicCache of the compressed K/V, `logits` after the prompt's last id,
    `L` the slots every layer holds, `masks` each attention module's masked_key_indices (None: none)."""

    def __init__(self, layers, logits, masks):
        self._layers, self.logits, self.masks = layers, logits, masks
        self.L = self._layers[0][0].shape[-2]

    def cache(self, model):
        cache = DynamicCache(config=model.config)
        for i, (k, v) in enumerate(self._layers):
            cache.update(k.clone(), v.clone(), i)
        return cache

    def use(self, model):
        """Sets each attention module's masked_key_indices to this ratio's (kvpress's attention patch reads them)."""
        for layer, m in zip(model.model.layers, self.masks):
            layer.self_attn.masked_key_indices = m


def kvpress_prefill_ratios(model, ids, name, ratios, hf_tokenizer=None):
    """kvpress's press `name` over the prompt `ids` [1, C] at each compression ratio of `ratios` (each in (0, 1)),
    from one prefill. Returns {ratio: Compressed}. Models whose layers all attend every position only (no sliding
    window, no per-layer budgets): ValueError otherwise."""
    ratios = list(ratios)
    if not ratios or not all(0 < r < 1 for r in ratios):
        raise ValueError(f"kvpress_prefill_ratios: ratios must be in (0, 1) (got {ratios})")
    if len(sbs.global_layers(model)) != model.config.num_hidden_layers or name == "pyramidkv":
        raise ValueError("kvpress_prefill_ratios: one cache length per ratio needed (no sliding-window layers, "
                         "no pyramidkv)")
    n_layers = model.config.num_hidden_layers
    got = {r: [None] * n_layers for r in ratios}  # ratio -> layer -> (keys, values) or None (the prompt's own)
    masks = {r: [None] * n_layers for r in ratios}
    press = sbs.kvpress_press(name, ratios[0], hf_tokenizer=hf_tokenizer)
    if name == "kvzip":
        post = press.compress_post

        def compress_post(model):  # the score is computed once; only the cut is per ratio
            scores = press.score_val.clone()  # compress_post raises the sinks' scores in place: each cut from these
            for r in ratios:
                press.compression_ratio = r
                press.score_val.copy_(scores)
                post(model)
                for i, layer in enumerate(model.model.layers):
                    masks[r][i] = layer.self_attn.masked_key_indices
                    layer.self_attn.masked_key_indices = None
            press.compression_ratio = ratios[0]
        press.compress_post = compress_post
    else:
        compress = type(press).compress

        def compress_all(module, hidden_states, keys, values, attentions, kwargs):
            for r in ratios:
                press.compression_ratio = r
                module.masked_key_indices = None
                k, v = compress(press, module, hidden_states, keys, values, attentions, kwargs)
                got[r][module.layer_idx] = None if k is keys else (k, v)
                masks[r][module.layer_idx] = getattr(module, "masked_key_indices", None)
            module.masked_key_indices = None
            press.compression_ratio = ratios[0]
            return keys, values  # the model's cache keeps the prompt's K/V: each ratio has its own above
        press.compress = compress_all
    cache = DynamicCache(config=model.config)
    impl = "eager" if name == "observed_attention" else model.config._attn_implementation
    sbs.clear_masks(model)
    with torch.no_grad(), sbs.with_attention(model, impl), press(model):
        logits = model(ids, past_key_values=cache).logits[0, -1].clone()  # not the [1, P, V] it views
    full = [(layer.keys, layer.values) for layer in cache.layers]
    return {r: Compressed([got[r][i] or full[i] for i in range(n_layers)], logits, masks[r]) for r in ratios}
