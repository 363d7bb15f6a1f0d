"""kvevict.transformers' prompt attention: the prompt's attention of a KVEvictCache layer, which also gives the
prompt's scores, so that no second Q K^T runs over the prompt. Two ways:
- fused (H2O and Keyformer without mean_attention, head_dim a multiple of 16, float32, a mask that is causal over
  left padding: `_left_padding`): kvevict.causal_attention per sequence, from its first real token, computes the
  output and the prompt's score summed over the queries in one pass (H2O's probabilities, Zhang et al. 2023 §4;
  Keyformer's softmax((x + zeta) / tau0) with the noise of the sequence's own cache, `sums_for`), and the cut
  prefills from those sums (Cache.prefill_from_attention). Cost: SDPA's (Keyformer: plus a noise draw and an exp
  per logit); memory: K in panels and a [g * 32, P] scratch per running task. A padded query's output is 0.
- chunked (TOVA, mean_attention, and H2O / Keyformer where the kernel does not apply): CHUNK queries of every query
  head at a time, each chunk's logits used twice, by the attention itself (softmax, times V, torch matmuls into
  buffers reused by every chunk) and for the scores: the sequences' kvevict caches score the chunk's rows
  (Cache.prefill_chunk, bit for bit what Cache.prefill gives on the same logits, on the KVEvictCache's
  kvevict.ThreadPool) and the cut only finishes their prefills; H2O sums each chunk's probabilities instead.
  Memory: a [n_q_heads * CHUNK, P] block of logits and a [g * CHUNK, P] block of probabilities, not O(P^2).

While the prompt's forward runs through a layer whose policy is scored this way (KVEvictLayer.scores_in_attention),
the layer's forward pre-hook gives the attention module a view of its config whose _attn_implementation is
"kvevict_prompt" (`swap_in`), and the forward hook puts the model's config back (`swap_out`); transformers then
calls `prompt_attention` instead of SDPA or eager attention.
"""
import sys
import threading
import weakref

import torch
from transformers import AttentionInterface

import kvevict
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

NAME = "kvevict_prompt"
CHUNK = 64  # queries per chunk: SmolLM2 at 8K: 9 heads x 64 x 8192 float32 logits = 19 MB


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
    if layer is None or not mine or not layer.scores_in_attention() or (layer.batch, layer.seen) != (B, P):
        # Not this layer's prompt (another thread's forward through the same module, or a forward that raised
        # before its hook put the config back): the model's own attention.
        impl = view["_kvevict_config"]._attn_implementation if view else config._attn_implementation
        fn = ALL_ATTENTION_FUNCTIONS.get(impl) if impl != "eager" else None
        fn = fn or _eager(module)
        return fn(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    for name in ("softcap", "sliding_window", "s_aux"):
        if kwargs.get(name) is not None:
            raise ValueError(f"KVEvictCache: the prompt's scored attention does not implement {name} (got "
                             f"{kwargs[name]!r}); this model is not supported with policy "
                             f"'{layer._owner().policy}'")
    if dropout and module.training:
        raise ValueError("KVEvictCache: the prompt's scored attention runs without dropout (module in training mode)")
    h = key.shape[1]
    g = H // h
    n = key.shape[2]
    if n != P:
        raise ValueError(f"KVEvictCache: the prompt's attention expects as many keys as queries (got {n} keys for "
                         f"{P} queries)")
    scale = float(scaling if scaling is not None else d ** -0.5)
    summing = layer.sums_in_attention()  # H2O: the probabilities summed here; else each chunk scored by the caches
    fused = layer.fused_sums()
    if fused and d % 16 == 0 and query.dtype == key.dtype == value.dtype == torch.float32:
        firsts = _left_padding(attention_mask, B, P)
        if firsts is not None:  # the fused kernel: output and column sums in one pass, no P x P block
            return _fused(layer, fused, query, key, value, firsts, scale)
    if summing:
        sums = torch.zeros(B, h, g, P, dtype=torch.float32)  # per query head: probabilities summed over its queries
        real = layer.real_queries()  # [B, P] float (1: a real token, 0: left padding), or None: all real
    else:
        layer.open_prompt()
        if any(layer._pad):  # the caches compact their rows into these buffers while later chunks still read them
            key, value = key.clone(), value.clone()
    out = torch.empty(B, h, g, P, d, dtype=query.dtype)
    q = (query.float() * scale).view(B, h, g, P, d)  # scaled once, not every chunk's logits
    logits = torch.empty(H * min(P, CHUNK) * P, dtype=torch.float32)  # reused by every chunk
    probs = torch.empty(g * min(P, CHUNK) * P, dtype=torch.float32)
    for c0 in range(0, P, CHUNK):
        c1 = min(P, c0 + CHUNK)
        C = c1 - c0
        for b in range(B):
            x = logits[:H * C * c1].view(h, g * C, c1)  # [q_head][C][c1] row-major, q_head = j * g + t
            if not summing:  # every head's logits first: the caches score the chunk's rows of all query heads
                for j in range(h):
                    torch.matmul(q[b, j, :, c0:c1].reshape(g * C, d), key[b, j, :c1].T, out=x[j])
                layer.score_chunk(b, c0, x.view(H, C, c1), key[b], value[b])  # reads each row's causal part only
            visible = None  # None: causal, only the chunk's own columns hold later tokens
            if attention_mask is not None:
                m = attention_mask[b, :, c0:c1, :c1]  # [1 | n_q, C, c1]
                visible = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
                visible = visible | ~visible.any(dim=-1, keepdim=True)  # a padded query sees nothing: a finite row
            p = probs[:g * C * c1].view(g * C, c1)
            for j in range(h):  # one KV head's group at a time
                if summing:  # computed here, so that the group's [g * C, c1] logits stay in the CPU's caches
                    torch.matmul(q[b, j, :, c0:c1].reshape(g * C, d), key[b, j, :c1].T, out=x[j])
                s = x[j].view(g, C, c1)
                if visible is None:
                    s[..., c0:].masked_fill_(_upper(C), float("-inf"))
                else:
                    s.masked_fill_(~(visible if visible.shape[0] == 1 else visible[j * g:(j + 1) * g]), float("-inf"))
                torch.ops.aten._softmax.out(x[j], -1, False, out=p)  # one fused pass (max, exp, sum, divide)
                out[b, j, :, c0:c1] = torch.matmul(p, value[b, j, :c1]).view(g, C, d).to(out.dtype)
                if not summing:
                    continue
                if real is None:
                    sums[b, j, :, :c1] += p.view(g, C, c1).sum(dim=1)
                else:  # a padded query's row is not attention the sequence computed: weight 0
                    sums[b, j, :, :c1] += torch.matmul(real[b, c0:c1], p.view(g, C, c1))
    if summing:
        layer.take_attention_sums(sums.view(B, H, P))
    else:
        layer.prompt_scored()
    return out.view(B, H, P, d).transpose(1, 2).contiguous(), None


def _fused(layer, policy, query, key, value, firsts, scale):
    """The prompt through kvevict.causal_attention (attention/causal_attention.hpp): per sequence, the causal
    attention over its real tokens (first = its left padding) and each key's score summed over the queries, on
    the KVEvictCache's attention pool (torch's thread count): H2O's probabilities, or Keyformer's
    softmax((x + zeta) / tau0) with the noise of the sequence's own cache (sums_for: Cache.prompt_sums). The cut
    prefills from those sums. Returns transformers' (output [B, P, n_q, d], None)."""
    B, H, P, d = query.shape
    pool = layer._owner().attention_pool()
    if policy == "keyformer":
        layer.open_for_sums()
    sums = torch.empty(B, H, P, dtype=torch.float32)
    outs = []
    for b in range(B):
        kw = dict(sums_for=layer.kvs[b]) if policy == "keyformer" else dict(sums=True)
        o, s = kvevict.causal_attention(query[b], key[b], value[b], scale=scale, first=firsts[b], pool=pool, **kw)
        outs.append(torch.from_numpy(o))
        sums[b] = torch.from_numpy(s)
    layer.take_attention_sums(sums)
    return (outs[0].unsqueeze(0) if B == 1 else torch.stack(outs)), None


_MASK_SEEN = (None, None)  # the last mask _left_padding checked (a weakref) and what it gave, swapped as one tuple


def _left_padding(mask, B, P):
    """Each sequence's left padding when `mask` is None (causal, no padding: all 0) or exactly the causal mask
    over left-padded prompts that transformers builds (bool, True attends, or additive float; [B, 1, P, P]):
    every real query i >= p0 attends the keys [p0, i] and no other (a padded query's row is not read). None for
    any other mask (the chunked path then runs it as given). The answer for the forward's mask object is kept
    (a weak reference to the tensor itself, not its address: a later mask at the same address is checked again),
    so the layers after the first do not check it again. A mask changed in place between two layers of one
    forward is not seen (transformers builds a new mask per forward)."""
    if mask is None:
        return [0] * B
    if mask.dim() != 4 or tuple(mask.shape) != (B, 1, P, P):
        return None
    global _MASK_SEEN
    ref, seen = _MASK_SEEN
    if ref is not None and ref() is mask:  # the same tensor object, alive: the forward's own mask
        return seen
    visible = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    cols = torch.arange(P)
    firsts = []
    for b in range(B):
        last = visible[b, 0, P - 1]
        p0 = int(torch.argmax(last.to(torch.uint8))) if bool(last.any()) else P
        if p0 >= P:
            firsts = None
            break
        for r0 in range(p0, P, 512):  # rows p0.. in blocks: expected [p0, i] per row, memory 512 x P
            rows = torch.arange(r0, min(P, r0 + 512)).unsqueeze(1)
            if not torch.equal(visible[b, 0, r0:r0 + 512], (cols >= p0) & (cols <= rows)):
                firsts = None
                break
        if firsts is None:
            break
        firsts.append(p0)
    _MASK_SEEN = (weakref.ref(mask), firsts)
    return firsts


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
