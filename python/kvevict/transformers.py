"""kvevict.transformers: kvevict's eviction policies inside Hugging Face transformers.

KVEvictCache(model, policy="keyformer", budget=0.5, ...) is a transformers ``Cache`` whose layers keep their
K/V in torch buffers that a kvevict cache wraps without a copy (kvevict.Cache(k=K.numpy(), v=V.numpy())).
Pass it where transformers takes a cache:

    cache = KVEvictCache(model, policy="keyformer", budget=0.5, horizon=64)
    out = model.generate(ids, past_key_values=cache, max_new_tokens=64, do_sample=False)

or to a hand-written loop (``model(ids, past_key_values=cache)``, then one token per call).

What it does, per layer:
  * the first forward is the prompt (P tokens): attention runs over all of it, then the layer's prompt logits
    (scale * Q K^T, [n_q_heads, P, P], from the layer's own queries and the cache's keys) go to the kvevict
    cache's prefill, which keeps k tokens per KV head (budget: an int, a fraction of P or "50%");
  * evict="step" (the default, kvevict's protocol): every later forward takes one token, attention runs over
    the k + 1 slots, then kvevict.attention_logits over the cache's keys scores the step and decode_step evicts
    one slot per KV head: the cache holds k tokens at every step;
  * evict="prefill" (kvpress's protocol): only the prompt is cut; later tokens (any number per forward) are
    appended and the cache grows;
  * positions are never renumbered: get_seq_length() is the number of tokens seen (the next position), so a
    forward without position_ids numbers new tokens from the original positions, and the causal mask of a
    multi-token forward after eviction is shifted to match (get_mask_sizes).

The queries are recomputed from the attention module's inputs by a forward hook (q_proj, q_norm for Qwen3,
RoPE), so scoring works with attn_implementation "sdpa" and "eager"; other implementations are refused.
Supported: Llama, Mistral (without sliding window), Qwen2 (without sliding layers), Qwen3 and Gemma 3 (text:
sliding-window layers keep transformers' own DynamicSlidingWindowLayer, global layers are evicted); float32 on
the CPU; one sequence (batch 1). Beam search, batched generation, crop (assisted decoding) raise errors that say
so. policy="full" keeps everything through the same storage (a reference for the others).
"""
import math
import sys
import weakref

import importlib.util

_MISSING = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment (a torch that cannot load)
    _MISSING = sorted(set(_MISSING) | {"torch"}, reverse=True)
if _MISSING:
    raise ImportError(
        "kvevict.transformers needs " + " and ".join(_MISSING) + " (pip install \"<kvevict checkout>[transformers]\" "
        "installs the tested versions, torch 2.10.0 and transformers 5.2.0; in a checkout, bash "
        "scripts/get-hf-venv.sh makes a venv with them)")
import transformers
from transformers.cache_utils import Cache, CacheLayerMixin, DynamicSlidingWindowLayer

import numpy as np

import kvevict

__all__ = ["KVEvictCache", "SUPPORTED_MODEL_TYPES", "SUPPORTED_ATTENTION"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
# Model types whose sliding-window layers stay transformers' own (DynamicSlidingWindowLayer) while kvevict evicts
# in the full-attention ("global") layers (config.layer_types).
HYBRID_MODEL_TYPES = ("gemma3_text",)
SUPPORTED_ATTENTION = ("sdpa", "eager")
POLICIES = ("full", "keyformer", "h2o", "streaming", "window", "tova", "snapkv", "knorm", "keydiff",
            "expected_attention")
# Expected Attention's options (kvevict.expected_attention_logits; kvpress's ExpectedAttentionPress defaults).
_EA_OPTIONS = dict(n_future_positions=512, n_sink=4, use_covariance=True, use_vnorm=True, epsilon=0.0)
_EVICT = ("step", "prefill")
_OPTION_NAMES = ("recent", "sinks", "tau_init", "tau_end", "horizon", "noise", "seed", "shared_heads",
                 "snap_window", "snap_kernel", "snap_pooling", "snap_decode", "mean_attention", "head_budgets")


DEFAULT_SEED = 42  # kvevict's and the tools' default noise seed


def layer_seed(seed, layer):
    """Layer `layer`'s Keyformer noise seed, as kvevict-generate and kvevict-quality derive it
    (tools/llama2/eviction.cpp): seed + layer * 0x9E3779B97F4A7C15, modulo 2^64; distinct per layer."""
    return (seed + 0x9E3779B97F4A7C15 * layer) % (1 << 64)


def _check_model(model):
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"KVEvictCache supports the model types {', '.join(SUPPORTED_MODEL_TYPES)} "
                         f"(config.model_type); got {model_type!r} ({type(model).__name__})")
    layer_types = getattr(config, "layer_types", None) or []
    if model_type in HYBRID_MODEL_TYPES:
        kinds = set(layer_types)
        if not layer_types or not kinds <= {"full_attention", "sliding_attention"} or "full_attention" not in kinds:
            raise ValueError(f"KVEvictCache on {model_type} needs config.layer_types of 'full_attention' and "
                             f"'sliding_attention' with at least one full-attention layer (got {sorted(kinds) or None})")
        if getattr(config, "attn_logit_softcapping", None) is not None:
            raise ValueError("KVEvictCache does not support attention logit soft-capping "
                             f"(config.attn_logit_softcapping={config.attn_logit_softcapping}): its scores would not "
                             "be the logits the model attends with")
    elif any(t != "full_attention" for t in layer_types) or (
            model_type == "mistral" and getattr(config, "sliding_window", None) is not None):
        raise ValueError("KVEvictCache does not support sliding-window attention layers "
                         f"({type(model).__name__}: config.sliding_window={getattr(config, 'sliding_window', None)}, "
                         f"layer_types {sorted(set(layer_types)) or None}); load the model with sliding_window=None")
    _check_attention(config)
    return config


def _check_attention(config):
    impl = getattr(config, "_attn_implementation", None)
    if impl not in SUPPORTED_ATTENTION:
        raise ValueError(f"KVEvictCache works with attn_implementation 'sdpa' or 'eager' (got {impl!r}): its scores "
                         "need the layer's queries against the cache's keys; load the model with "
                         "attn_implementation='sdpa'")


def _attention_modules(model):
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    mods = [layer.self_attn for layer in decoder.layers]
    for i, m in enumerate(mods):
        if getattr(m, "layer_idx", None) != i or not hasattr(m, "q_proj"):
            raise ValueError(f"KVEvictCache: decoder layer {i} has no attention module with q_proj and layer_idx {i}")
    return mods


class KVEvictLayer(CacheLayerMixin):
    """One full-attention ("global") transformer layer: K/V buffers [n_kv_heads, capacity, head_dim] (torch,
    float32) and, for an evicting policy, the kvevict cache over them (no copy). ``length`` live slots; ``seen``
    tokens so far. (A sliding-window layer of a hybrid model is transformers' own DynamicSlidingWindowLayer.)"""

    is_sliding = False
    is_compileable = False

    def __init__(self, owner, layer_idx):
        super().__init__()
        self._owner = weakref.ref(owner)
        self.layer_idx = layer_idx
        self.kv = None  # the kvevict cache (None: policy 'full', or after the prompt with evict='prefill')
        self.length = 0
        self.seen = 0
        self.prefilled = False
        self.k_buf = self.v_buf = None
        self.records = []  # with record=True: what the kvevict cache was given and what it kept
        self.stats = None  # policy 'expected_attention': the layer's kvevict.QueryStatistics
        self._pending = 0

    # -- storage ---------------------------------------------------------------------------------------
    def lazy_initialization(self, key_states, value_states):
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def _alloc(self, capacity):
        o = self._owner()
        k = torch.zeros(o.n_kv_heads, capacity, o.head_dim, dtype=torch.float32)
        v = torch.zeros_like(k)
        if self.k_buf is not None and self.length:
            k[:, :self.length] = self.k_buf[:, :self.length]
            v[:, :self.length] = self.v_buf[:, :self.length]
        self.k_buf, self.v_buf = k, v

    def _views(self):
        n = self.length
        return self.k_buf[:, :n].unsqueeze(0), self.v_buf[:, :n].unsqueeze(0)

    @property
    def keys(self):
        return None if self.k_buf is None else self._views()[0]

    @keys.setter
    def keys(self, value):  # CacheLayerMixin.__init__ sets None
        pass

    @property
    def values(self):
        return None if self.v_buf is None else self._views()[1]

    @values.setter
    def values(self, value):
        pass

    # -- the transformers protocol -----------------------------------------------------------------------
    def update(self, key_states, value_states, cache_kwargs=None):
        o = self._owner()
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        _check_attention(o.model_config)
        b, h, q, d = key_states.shape
        if b != 1:
            raise ValueError(f"KVEvictCache holds one sequence (batch size 1); got batch size {b}: batched "
                             "generation and beam search (num_beams > 1) are not supported")
        if key_states.dtype != torch.float32 or key_states.device.type != "cpu":
            raise ValueError(f"KVEvictCache keeps float32 K/V on the CPU; got {key_states.dtype} on "
                             f"{key_states.device}: load the model with dtype=torch.float32 on the CPU")
        if (h, d) != (o.n_kv_heads, o.head_dim):
            raise ValueError(f"KVEvictCache: layer {self.layer_idx} got K/V of {h} heads x {d}, expected "
                             f"{o.n_kv_heads} x {o.head_dim} (the model's config)")
        cache_position = (cache_kwargs or {}).get("cache_position")
        positions = (torch.arange(self.seen, self.seen + q) if cache_position is None
                     else cache_position.reshape(-1).to("cpu"))
        if positions.numel() != q or int(positions[0]) != self.seen:
            raise ValueError(f"KVEvictCache: layer {self.layer_idx} expects the next token at position {self.seen} "
                             f"(the tokens it has seen); got cache_position starting at {int(positions[0])}")
        if self.prefilled and self.kv is not None and q != 1:
            raise ValueError(f"KVEvictCache(evict='step') takes one new token per forward after the prompt (got {q}); "
                             "feed tokens one at a time, or use evict='prefill' (eviction of the prompt only)")
        if not self.prefilled:
            self._start(q)
        elif self.kv is None and self.length + q > self.k_buf.shape[1]:
            self._alloc(max(2 * self.k_buf.shape[1], self.length + q))
        ks = key_states[0].transpose(0, 1).contiguous()  # [q, n_kv, d]
        vs = value_states[0].transpose(0, 1).contiguous()
        if self.kv is not None:
            kn, vn = ks.numpy(), vs.numpy()
            pos = positions.tolist()
            for t in range(q):
                self.kv.append(pos[t], kn[t], vn[t])
        else:
            self.k_buf[:, self.length:self.length + q] = ks.transpose(0, 1)
            self.v_buf[:, self.length:self.length + q] = vs.transpose(0, 1)
        self.length += q
        self.seen += q
        self._pending = q
        return self._views()

    def _start(self, prompt_len):
        """The prompt's forward: resolves the budget against P and makes the kvevict cache (if any)."""
        o = self._owner()
        self.prompt_len = prompt_len
        if o.policy == "full":
            self._alloc(max(16, 2 * prompt_len))
            return
        # k <= P tokens (floor(r * P) for a fraction, as kvevict resolves it), passed as tokens: SnapKV's window
        # is then min(32, k), as in kvevict-quality.
        k = o.resolve_budget(prompt_len)
        self._alloc(prompt_len + 1)  # the prompt, then k + 1 slots at every step
        options = dict(o.options)
        if o.policy == "keyformer" or options.get("snap_decode") == "keyformer":  # Keyformer's noise, per layer
            options["seed"] = layer_seed(options.get("seed", DEFAULT_SEED), self.layer_idx)
        self.kv = kvevict.Cache(o.policy, n_q_heads=o.n_q_heads, budget=k, k=self.k_buf.numpy(),
                                v=self.v_buf.numpy(), **options)
        if o.expected:
            self.stats = kvevict.QueryStatistics(o.n_q_heads, o.head_dim)

    def after_attention(self, module, kwargs):
        """The forward hook: after the layer attended with every slot, score and evict."""
        o = self._owner()
        q_len = self._pending
        self._pending = 0
        if self.kv is None:
            if not self.prefilled:
                self.prefilled = True
            return
        needs_logits = o.policy not in ("streaming", "window", "knorm", "keydiff")  # knorm, keydiff: from the keys
        if not self.prefilled:
            if o.expected:  # the prompt's queries past the sinks, then the prompt's last row of expected logits
                q = self._queries(module, kwargs, rope=False)[0, :, o.expected["n_sink"]:]  # [n_q, P - n_sink, d]
                self.stats.add(q.transpose(0, 1).contiguous().numpy())
                logits = self._expected_logits()
            else:
                logits = self._prompt_logits(module, kwargs) if needs_logits else None
            self.kv.prefill(logits)
            self.prefilled = True
            if o.record:
                self.records.append(("prefill", logits, None, self._kept()))
            self.length = max(self.kv.lengths)
            if o.evict == "prefill":
                self._detach()
            return
        x = None
        if o.expected:
            self.stats.add(self._queries(module, kwargs, rope=False)[0, :, -1:, :].transpose(0, 1).contiguous().numpy())
            x = self._expected_logits()
        elif needs_logits:
            q = self._queries(module, kwargs)[0, :, -1, :].contiguous().numpy()  # [n_q, d]
            x = kvevict.attention_logits(self.kv, q, module.scaling)
        if o.record:
            before = [self.kv.positions(h) for h in range(o.n_kv_heads)]
        self.kv.decode_step(x)
        self.length = max(self.kv.lengths)
        if o.record:
            self.records.append(("step", None if x is None else x.copy(), before, self._kept()))
        assert q_len == 1

    def head_mask(self, attention_mask, q, eager):
        """The attention module's mask with head-adaptive budgets (head_budgets='adaptive'), after the prompt: the
        given mask ([b, 1, q, n'] or None) cut to this layer's n = max(lengths) + q slots (the model makes one mask
        for every layer, sized by the first layer's length, and the layers' longest heads differ) and restricted,
        per query head, to its KV head's live slots plus the q new ones: [1, n_q_heads, q, n]. Bool for SDPA
        (True = attend), additive float for eager. None before the prompt is cut (every head then even)."""
        if self.kv is None or not self.prefilled:
            return None
        lengths = self.kv.lengths
        o = self._owner()
        n = max(lengths) + q
        own = torch.tensor(lengths).repeat_interleave(o.n_q_heads // o.n_kv_heads) + q  # [n_q]
        valid = (torch.arange(n)[None, :] < own[:, None])[None, :, None, :]  # [1, n_q, 1, n]
        if attention_mask is not None and attention_mask.dtype == torch.bool:
            return attention_mask[..., :n] & valid
        if attention_mask is not None or eager:
            base = attention_mask[..., :n] if attention_mask is not None else torch.zeros(1, 1, q, n)
            return torch.where(valid, base, torch.tensor(torch.finfo(base.dtype).min, dtype=base.dtype))
        return valid.expand(1, o.n_q_heads, q, n)

    def _kept(self):
        return [self.kv.retained_positions(h) for h in range(self._owner().n_kv_heads)]

    def _detach(self):
        """evict='prefill': the prompt is cut; from now on the layer only grows (no kvevict cache)."""
        self.kv = None
        self._alloc(max(2 * self.length, self.length + 256))

    def _expected_logits(self):
        """Expected Attention's rows over the held slots, [n_q_heads, n], the next position being the tokens seen."""
        return kvevict.expected_attention_logits(self.stats, self.kv, next_position=self.seen, rope_style="half_split",
                                                 **self._owner().expected)

    def _queries(self, module, kwargs, rope=True):
        """The layer's queries [1, n_q, q, d] (float32), after RoPE, or before it (Expected Attention's statistics)."""
        o = self._owner()
        hidden = kwargs["hidden_states"]
        b, s, _ = hidden.shape
        q = module.q_proj(hidden).view(b, s, -1, o.head_dim)
        if getattr(module, "q_norm", None) is not None:  # Qwen3
            q = module.q_norm(q)
        q = q.transpose(1, 2)
        if not rope:
            return q.float()
        cos, sin = kwargs["position_embeddings"]
        rope = sys.modules[type(module).__module__].apply_rotary_pos_emb
        q, _ = rope(q, q, cos, sin)
        return q.float()

    def _prompt_logits(self, module, kwargs):
        o = self._owner()
        q = self._queries(module, kwargs)[0]  # [n_q, P, d]
        P = q.shape[1]
        k = self.k_buf[:, :P].repeat_interleave(o.n_q_heads // o.n_kv_heads, dim=0)  # [n_q, P, d]
        x = torch.matmul(q, k.transpose(1, 2)) * module.scaling
        return x.contiguous().numpy()

    def get_mask_sizes(self, cache_position):
        q = cache_position.shape[0]
        # The live slots hold positions < seen (in any order); the q new tokens go to slots length ..
        # length + q - 1 with positions seen .. seen + q - 1. transformers' causal mask compares the query's
        # position with kv_offset + slot: this offset gives the new slots their positions and keeps every live
        # slot (all older) visible.
        return self.length + q, self.seen - self.length

    def get_seq_length(self):
        return self.seen

    def get_max_cache_shape(self):
        return -1

    def reset(self):
        self.kv = None
        self.stats = None
        self.length = self.seen = 0
        self.prefilled = False
        self.k_buf = self.v_buf = None
        self.records = []

    def reorder_cache(self, beam_idx):
        raise NotImplementedError("KVEvictCache does not support beam search (reorder_cache): it holds one "
                                  "sequence; use num_beams=1")

    def crop(self, max_length):
        raise NotImplementedError("KVEvictCache cannot crop (assisted / speculative decoding): evicted tokens "
                                  "cannot be restored")

    def batch_repeat_interleave(self, repeats):
        raise NotImplementedError("KVEvictCache holds one sequence: it cannot be repeated over a batch")

    def batch_select_indices(self, indices):
        raise NotImplementedError("KVEvictCache holds one sequence: it cannot select batch indices")


class KVEvictCache(Cache):
    """A transformers Cache that keeps each layer's KV cache within a budget with a kvevict policy.

    KVEvictCache(model, policy="keyformer", budget=0.5, recent=None, *, evict="step", record=False, **options)

    model     a Llama / Mistral / Qwen2 / Qwen3 / Gemma 3 causal LM (float32, CPU, attn_implementation 'sdpa' or
              'eager'). Gemma 3's sliding-window layers (config.layer_types 'sliding_attention') keep
              transformers' DynamicSlidingWindowLayer (their window, never scored or evicted); the budget and
              the policy apply to each full-attention layer.
    policy    'keyformer', 'h2o', 'streaming', 'window', 'tova', 'snapkv', 'knorm' (key norm: no logits), 'keydiff'
              (KeyDiff: no logits), 'expected_attention' (Expected Attention, Devoto et al. 2025: a 'tova' cache
              ranked by kvevict.expected_attention_logits from the layer's pre-RoPE query statistics; options
              n_future_positions, n_sink, use_covariance, use_vnorm, epsilon, kvpress's defaults; the default
              RoPE only) or 'full' (no eviction).
    budget    k per KV head: an int (tokens, at most the prompt's length), a float in (0, 1] (k = floor(r P)) or
              a string ('64', '0.5', '50%'), as kvevict.Cache and the command-line tools take it.
    recent    the recent window w, as kvevict.Cache (default 30% of k for keyformer, h2o, snapkv).
    evict     'step': the prompt is cut to k, then one token per forward with eviction at every step (the
              cache holds k); 'prefill': only the prompt is cut, later tokens grow the cache.
    options   kvevict.Cache's policy options: sinks, tau_init, tau_end, horizon (Keyformer: required, the
              decode steps tau rises over, e.g. max_new_tokens), noise, seed (default 42; layer l's noise is
              seeded with layer_seed(seed, l), as kvevict-generate does), shared_heads, snap_window,
              snap_kernel, snap_pooling, snap_decode, mean_attention (h2o, keyformer), head_budgets ('adaptive'
              or 'adaptive:ALPHA': AdaKV, the layer's k * n_kv_heads shared among its KV heads by score; the
              heads then hold different lengths and attention masks each head past its own). A wrong one raises
              kvevict's ValueError here.
    record    keep, per layer, the logits each prefill / decode step was given and the kept positions
              (layers[i].records; for tests: memory n_q_heads * P^2 floats per layer).

    Methods: retained_positions(layer, kv_head), kept_length(layer), is_global(layer), close() (removes the
    model hooks; also done when the cache is garbage-collected).
    """

    def __init__(self, model, policy="keyformer", budget=0.5, recent=None, *, evict="step", record=False,
                 **options):
        config = _check_model(model)
        if policy not in POLICIES:
            raise ValueError(f"KVEvictCache: unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")
        if evict not in _EVICT:
            raise ValueError(f"KVEvictCache: evict must be 'step' or 'prefill' (got {evict!r})")
        self.expected = None  # policy 'expected_attention': its options, and RoPE's theta
        if policy == "expected_attention":
            if recent is not None:
                raise ValueError(f"KVEvictCache: policy 'expected_attention' has no recent window (got recent={recent!r}):"
                                 " it keeps the top-k by expected attention, its n_sink first tokens among them")
            self.expected = self._expected_attention_options(config, options)
            options = {}
            policy = "tova"  # ranked by the logits expected_attention_logits gives, as kvevict-quality does
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise TypeError(f"KVEvictCache: unknown option(s) {', '.join(unknown)}; kvevict.Cache's options are "
                            f"{', '.join(_OPTION_NAMES[1:])}")
        self.model_config = config
        self.policy, self.evict, self.record = policy, evict, record  # 'tova' for 'expected_attention'
        self.policy_name = "expected_attention" if self.expected else policy
        self.n_layers = config.num_hidden_layers
        self.n_q_heads = config.num_attention_heads
        self.n_kv_heads = getattr(config, "num_key_value_heads", None) or self.n_q_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.n_q_heads
        self.budget = budget
        self.options = {k: v for k, v in dict(options, recent=recent).items() if v is not None}
        if policy == "full":
            if self.options:
                raise ValueError(f"KVEvictCache: policy 'full' takes no options (got {', '.join(self.options)})")
        else:
            if (policy == "keyformer" or self.options.get("snap_decode") == "keyformer") and "horizon" not in self.options:
                raise ValueError(f"KVEvictCache: policy '{policy}'"
                                 + (" with snap_decode='keyformer'" if policy != "keyformer" else "")
                                 + " needs horizon=T, the decode steps over which its "
                                 "temperature rises from tau_init to tau_end (e.g. max_new_tokens)")
            # kvevict's own checks of the options, now rather than at the first forward.
            parsed = self._parse_budget()
            tokens = parsed if isinstance(parsed, int) else 1
            kvevict.Cache(policy, n_q_heads=self.n_q_heads, n_kv_heads=self.n_kv_heads, capacity=tokens + 1,
                          head_dim=self.head_dim, budget=budget, **self.options)
        layer_types = getattr(config, "layer_types", None) or []
        self.global_layers = [i for i in range(self.n_layers)
                              if config.model_type not in HYBRID_MODEL_TYPES or layer_types[i] == "full_attention"]
        self._global = set(self.global_layers)
        super().__init__(layers=[KVEvictLayer(self, i) if i in self._global
                                 else DynamicSlidingWindowLayer(sliding_window=config.sliding_window)
                                 for i in range(self.n_layers)])
        modules = _attention_modules(model)
        self._handles = []
        ref = weakref.ref(self)
        for i, m in enumerate(modules):
            if i in self._global:  # a sliding layer is not scored
                self._handles.append(m.register_forward_hook(_make_hook(ref), with_kwargs=True))
                if "head_budgets" in self.options and self.options["head_budgets"] != "uniform":
                    self._handles.append(m.register_forward_pre_hook(_make_mask_hook(ref), with_kwargs=True))
        self._finalizer = weakref.finalize(self, _remove, self._handles)

    @staticmethod
    def _expected_attention_options(config, options):
        """policy='expected_attention': its options (kvpress's defaults), checked, and the model's RoPE theta."""
        unknown = sorted(set(options) - set(_EA_OPTIONS))
        if unknown:
            raise TypeError(f"KVEvictCache: policy 'expected_attention' takes {', '.join(_EA_OPTIONS)} "
                            f"(got {', '.join(unknown)})")
        if config.model_type in HYBRID_MODEL_TYPES:
            raise ValueError(f"KVEvictCache: policy 'expected_attention' is not supported on {config.model_type} "
                             "(its query scaling and per-layer-type RoPE are not the statistics' model)")
        rope = getattr(config, "rope_parameters", None) or {}
        theta = rope.get("rope_theta", getattr(config, "rope_theta", None))
        if rope.get("rope_type", "default") != "default" or theta is None:
            raise ValueError("KVEvictCache: policy 'expected_attention' needs the default RoPE (got "
                             f"{rope or 'no rope_theta'}): the average rotation of future positions assumes it")
        opts = dict(_EA_OPTIONS, **options)
        n_sink = opts["n_sink"]
        # kvevict's own checks of the options, on a one-token cache.
        d = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        probe = kvevict.Cache("tova", n_q_heads=1, n_kv_heads=1, capacity=2, head_dim=d, budget=1)
        probe.append(0, np.ones((1, d), np.float32), np.ones((1, d), np.float32))
        stats = kvevict.QueryStatistics(1, d)
        stats.add(np.zeros((1, 1, d), np.float32))
        kvevict.expected_attention_logits(stats, probe, next_position=1, rope_theta=float(theta), **opts)
        if isinstance(n_sink, bool) or not isinstance(n_sink, int):
            raise TypeError(f"KVEvictCache: n_sink must be an int (got {n_sink!r})")
        return dict(opts, rope_theta=float(theta))

    def _parse_budget(self):
        """The budget as an int (tokens) or a float (a fraction of the prompt), as kvevict reads it."""
        b = self.budget
        if isinstance(b, str):
            s = b.strip()
            try:
                b = float(s[:-1]) / 100.0 if s.endswith("%") else (float(s) if "." in s else int(s))
            except ValueError:
                raise ValueError(f"KVEvictCache: budget {self.budget!r} is not a token count, a fraction or a "
                                 "percentage ('64', '0.5', '50%')") from None
        if isinstance(b, bool) or not isinstance(b, (int, float)):
            raise TypeError(f"KVEvictCache: budget must be an int, a float or a string (got {self.budget!r})")
        return b

    def resolve_budget(self, prompt_len):
        """k for a prompt of prompt_len tokens; ValueError if it exceeds the prompt."""
        b = self._parse_budget()
        if isinstance(b, float):
            k = math.floor(b * prompt_len)
        else:
            k = b
            if k > prompt_len:
                raise ValueError(f"KVEvictCache: budget {k} tokens is larger than the prompt's {prompt_len} tokens; "
                                 "give at most the prompt's length or a fraction such as 0.5")
        if k < 1:
            raise ValueError(f"KVEvictCache: budget {self.budget!r} keeps no token of a {prompt_len}-token prompt")
        return k

    def is_global(self, layer):
        """Whether layer `layer` is a full-attention layer kvevict evicts in (False: a sliding-window layer)."""
        return layer in self._global

    def retained_positions(self, layer, kv_head):
        """The positions layer `layer`, KV head `kv_head` holds, ascending."""
        if not self.is_global(layer):
            raise ValueError(f"KVEvictCache: layer {layer} is a sliding-window layer (transformers' "
                             "DynamicSlidingWindowLayer holds its window); kvevict evicts in the full-attention "
                             f"layers {self.global_layers}")
        lay = self.layers[layer]
        if lay.kv is not None:
            return lay.kv.retained_positions(kv_head)
        raise ValueError(f"KVEvictCache: layer {layer} has no kvevict cache (policy 'full', evict='prefill' after "
                         "the prompt, or nothing seen yet)")

    def kept_length(self, layer=None):
        """Live slots of a layer (the K/V length attention reads; default: the first full-attention layer)."""
        layer = self.global_layers[0] if layer is None else layer
        if not self.is_global(layer):
            keys = self.layers[layer].keys
            return 0 if keys is None else int(keys.shape[-2])
        return self.layers[layer].length

    def close(self):
        """Removes the forward hooks from the model's attention modules."""
        self._finalizer()

    def __repr__(self):
        lay = self.layers[self.global_layers[0]] if self.layers else None
        kept = "nothing yet" if lay is None or not lay.prefilled else f"{lay.length} kept per KV head"
        sliding = self.n_layers - len(self.global_layers)
        layers = f"{self.n_layers} layers" + (f" ({sliding} of them sliding-window)" if sliding else "")
        return (f"KVEvictCache(policy={self.policy_name!r}, budget={self.budget!r}, evict={self.evict!r}, "
                f"{layers} x {self.n_kv_heads} KV heads: {lay.seen if lay else 0} tokens seen, {kept})")


def _make_hook(ref):
    def hook(module, args, kwargs, output):
        cache = ref()
        if cache is None or kwargs.get("past_key_values") is not cache:
            return None
        _check_attention(module.config)
        with torch.no_grad():
            cache.layers[module.layer_idx].after_attention(module, kwargs)
        return None
    return hook


def _make_mask_hook(ref):
    """Head-adaptive budgets: before the attention module runs, its mask masks each query head past its KV head's
    own length (KVEvictLayer.head_mask)."""
    def pre_hook(module, args, kwargs):
        cache = ref()
        if cache is None or kwargs.get("past_key_values") is not cache:
            return None
        q = kwargs["hidden_states"].shape[1]
        eager = module.config._attn_implementation == "eager"
        mask = cache.layers[module.layer_idx].head_mask(kwargs.get("attention_mask"), q, eager)
        if mask is None:
            return None
        return args, dict(kwargs, attention_mask=mask)
    return pre_hook


def _remove(handles):
    for h in handles:
        h.remove()
    handles.clear()
