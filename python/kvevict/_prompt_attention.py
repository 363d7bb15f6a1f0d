"""kvevict.transformers' prompt attention for H2O: the prompt's attention of a KVEvictCache layer computed a chunk of
queries at a time, the chunk's probabilities used twice: times V (the attention's output) and summed over the
queries (H2O's prompt score: the attention each token received, Zhang et al. 2023 §4). The layer's kvevict caches
then cut the prompt from those sums (Cache.prefill_from_attention) instead of a second Q K^T over the prompt.

While the prompt's forward runs through a layer whose policy is 'h2o' (record=False), the layer's forward pre-hook
gives the attention module a view of its config whose _attn_implementation is "kvevict_prompt" (`swap_in`), and the
forward hook puts the model's config back (`swap_out`); transformers then calls `prompt_attention` instead of SDPA
or eager attention.

Cost per layer: the logits scale * Q K^T over the causal lower triangle, CHUNK queries and one KV head's group of
g query heads at a time (torch matmuls on the model's threads), their softmax, the product with V and the column
sums: eager attention's work, about 1.45x SDPA's fused kernel at 8K on SmolLM2. Memory: one [g * CHUNK, P] block
of logits at a time plus the [B, n_q_heads, P] sums, not O(P^2).
"""
import sys
import threading

import torch
from transformers import AttentionInterface
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

NAME = "kvevict_prompt"
CHUNK = 32  # queries per chunk: a KV head's [g * 32, 8192] float32 logits are 3 MB for SmolLM2 at 8K


class _ConfigView:
    """The attention module's config with _attn_implementation = "kvevict_prompt" and the layer it scores for;
    every other attribute is the model's config's."""

    def __init__(self, config, layer):
        self.__dict__["_kvevict_config"] = config
        self.__dict__["_kvevict_layer"] = layer
        self.__dict__["_kvevict_thread"] = threading.get_ident()  # the forward that swapped it in
        self.__dict__["_attn_implementation"] = NAME

    def __getattr__(self, name):
        return getattr(self.__dict__["_kvevict_config"], name)

    def __setattr__(self, name, value):
        setattr(self.__dict__["_kvevict_config"], name, value)


def swap_in(module, layer):
    """Makes `module` call prompt_attention for this forward, scoring for `layer` (a KVEvictLayer); leaves it as it
    is while another thread's forward has it swapped (the layer then scores its prompt from Q and K instead)."""
    swap_out(module)
    if not isinstance(module.config, _ConfigView):
        module.config = _ConfigView(module.config, layer)


def swap_out(module):
    """Gives `module` the model's config back (a no-op when it has it, or when another thread's forward swapped it
    in: that forward's own hook puts it back)."""
    if isinstance(module.config, _ConfigView) and module.config.__dict__["_kvevict_thread"] == threading.get_ident():
        module.config = module.config.__dict__["_kvevict_config"]


def prompt_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """transformers' attention-function protocol: query [B, n_q, P, d], key / value [B, n_kv, P, d] (the layer's
    buffers: the prompt, left padding included), attention_mask None (causal), bool [B, 1|n_q, P, P] (True
    attends) or additive float; returns (output [B, P, n_q, d], None). Runs the model's own implementation
    instead when the call is not the swapping forward's prompt (another thread's forward through the module, a
    forward that raised before its hook put the config back, another batch or length). ValueError for softcap,
    sliding_window or attention sinks (s_aux), which it does not implement."""
    config = module.config
    view = config.__dict__ if isinstance(config, _ConfigView) else {}
    layer = view.get("_kvevict_layer")
    mine = view.get("_kvevict_thread") == threading.get_ident()
    B, H, P, d = query.shape
    if layer is None or not mine or not layer.sums_in_attention() or (layer.batch, layer.seen) != (B, P):
        # Not this layer's prompt (another thread's forward through the same module, or a forward that raised
        # before its hook put the config back): the model's own attention.
        impl = view["_kvevict_config"]._attn_implementation if view else config._attn_implementation
        fn = ALL_ATTENTION_FUNCTIONS.get(impl) if impl != "eager" else None
        fn = fn or _eager(module)
        return fn(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    for name in ("softcap", "sliding_window", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(f"KVEvictCache: the prompt's scored attention does not implement {name} (got "
                             f"{kwargs[name]!r}); this model is not supported with policy 'h2o'")
    if dropout and module.training:
        raise ValueError("KVEvictCache: the prompt's scored attention runs without dropout (module in training mode)")
    h = key.shape[1]
    g = H // h
    n = key.shape[2]
    if n != P:
        raise ValueError(f"KVEvictCache: the prompt's attention expects as many keys as queries (got {n} keys for "
                         f"{P} queries)")
    scale = float(scaling if scaling is not None else d ** -0.5)
    sums = torch.zeros(B, h, g, P, dtype=torch.float32)  # per query head: probabilities summed over its queries
    real = layer.real_queries()  # [B, P] float (1: a real token, 0: left padding), or None: all real
    out = torch.empty(B, h, g, P, d, dtype=query.dtype)
    q = (query * scale).view(B, h, g, P, d)  # scaled once, not every chunk's logits
    for c0 in range(0, P, CHUNK):
        c1 = min(P, c0 + CHUNK)
        C = c1 - c0
        for b in range(B):
            visible = None  # None: causal, only the chunk's own columns hold later tokens
            if attention_mask is not None:
                m = attention_mask[b, :, c0:c1, :c1]  # [1 | n_q, C, c1]
                visible = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
                visible = visible | ~visible.any(dim=-1, keepdim=True)  # a padded query sees nothing: a finite row
            for j in range(h):  # one KV head's group at a time: [g * C, c1] stays in the CPU's caches
                s = torch.matmul(q[b, j, :, c0:c1].reshape(g * C, d), key[b, j, :c1].T).view(g, C, c1)
                if visible is None:
                    s[..., c0:].masked_fill_(_upper(C), float("-inf"))
                else:
                    s.masked_fill_(~(visible if visible.shape[0] == 1 else visible[j * g:(j + 1) * g]), float("-inf"))
                s = torch.softmax(s, dim=-1)  # one fused pass (max, exp, sum, divide)
                out[b, j, :, c0:c1] = torch.matmul(s.view(g * C, c1), value[b, j, :c1]).view(g, C, d)
                if real is None:
                    sums[b, j, :, :c1] += s.sum(dim=1)
                else:  # a padded query's row is not attention the sequence computed: weight 0
                    sums[b, j, :, :c1] += torch.matmul(real[b, c0:c1], s)
    layer.take_attention_sums(sums.view(B, H, P))
    return out.view(B, H, P, d).transpose(1, 2).contiguous(), None


_UPPER = {}


def _upper(C):
    """[C, C] bool, True above the diagonal: the later tokens of a chunk's own columns."""
    if C not in _UPPER:
        _UPPER[C] = torch.ones(C, C, dtype=torch.bool).triu_(1)
    return _UPPER[C]


def _eager(module):
    """The eager attention function of the module's model file (transformers' `eager_attention_forward`)."""
    return sys.modules[type(module).__module__].eager_attention_forward


AttentionInterface.register(NAME, prompt_attention)
