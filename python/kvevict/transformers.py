"""kvevict.transformers: kvevict's eviction policies inside Hugging Face transformers.

KVEvictCache(model, policy="keyformer", budget=0.5, ...) is a transformers ``Cache`` whose layers keep their
K/V in torch buffers that a kvevict cache wraps without a copy (kvevict.Cache(k=K.numpy(), v=V.numpy())).
Pass it where transformers takes a cache:

    cache = KVEvictCache(model, policy="keyformer", budget=0.5, horizon=64)
    out = model.generate(ids, past_key_values=cache, max_new_tokens=64, do_sample=False)

or to a hand-written loop (``model(ids, past_key_values=cache)``, then one token per call).

What it does, per layer:
  * the first forward is the prompt (P tokens): attention runs over all of it, then the kvevict cache's prefill
    keeps k tokens per KV head (budget: an int, a fraction of P or "50%"), scored from the prompt's logits
    (Keyformer, TOVA: the logits the prompt's attention computes, a chunk of queries at a time, go to
    Cache.prefill_chunk as the attention uses them; H2O: its probabilities summed over the queries go to
    Cache.prefill_from_attention: _prompt_attention.py; SnapKV and record=True: scale * Q K^T from the layer's own
    queries and the cache's keys, Cache.prefill_qk or materialised); with
    evict="step" the layer's buffers then shrink to k + 1 slots per KV head;
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
the CPU; batches of left-padded sequences (each its own kvevict cache, budget and per-head lengths; the layer's
mask lets each read only its own kept slots: _layer.py); beam search (reorder_cache copies a beam's whole kvevict
state to another: Cache.copy_from); crop (DynamicCache's) works back to the compressed prompt with evict='prefill' (the query-agnostic
protocol: one compressed context, several questions). policy="full" keeps everything through the same storage (a reference for the others).
"""
import math
import numbers
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
from transformers.cache_utils import Cache, DynamicSlidingWindowLayer

import numpy as np

import kvevict
from kvevict import _prompt_attention, _reconstruct
from kvevict._layer import DEFAULT_SEED, SUPPORTED_ATTENTION, KVEvictLayer, check_attention, layer_seed

__all__ = ["KVEvictCache", "SUPPORTED_MODEL_TYPES", "SUPPORTED_ATTENTION"]

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")
# Model types whose sliding-window layers stay transformers' own (DynamicSlidingWindowLayer) while kvevict evicts
# in the full-attention ("global") layers (config.layer_types).
HYBRID_MODEL_TYPES = ("gemma3_text",)
POLICIES = ("full", "keyformer", "h2o", "streaming", "window", "tova", "snapkv", "knorm", "keydiff",
            "expected_attention", "kvzip")
# Expected Attention's options (kvevict.expected_attention_logits; kvpress's ExpectedAttentionPress defaults).
_EA_OPTIONS = dict(n_future_positions=512, n_sink=4, use_covariance=True, use_vnorm=True, epsilon=0.0)
_EVICT = ("step", "prefill")
_OPTION_NAMES = ("recent", "sinks", "tau_init", "tau_end", "horizon", "noise", "seed", "shared_heads",
                 "snap_window", "snap_kernel", "snap_pooling", "snap_decode", "mean_attention", "head_budgets")


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
    check_attention(config)
    return config


def _attention_modules(model):
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model.model
    mods = [layer.self_attn for layer in decoder.layers]
    for i, m in enumerate(mods):
        if getattr(m, "layer_idx", None) != i or not hasattr(m, "q_proj"):
            raise ValueError(f"KVEvictCache: decoder layer {i} has no attention module with q_proj and layer_idx {i}")
    return mods


class KVEvictCache(Cache):
    """A transformers Cache that keeps each layer's KV cache within a budget with a kvevict policy.

    KVEvictCache(model, policy="keyformer", budget=0.5, recent=None, *, evict="step", record=False, threads=1,
                 **options)

    model     a Llama / Mistral / Qwen2 / Qwen3 / Gemma 3 causal LM (float32, CPU, attn_implementation 'sdpa' or
              'eager'). Gemma 3's sliding-window layers (config.layer_types 'sliding_attention') keep
              transformers' DynamicSlidingWindowLayer (their window, never scored or evicted); the budget and
              the policy apply to each full-attention layer.
    policy    'keyformer', 'h2o', 'streaming', 'window', 'tova', 'snapkv', 'knorm' (key norm: no logits), 'keydiff'
              (KeyDiff: no logits), 'expected_attention' (Expected Attention, Devoto et al. 2025: a 'tova' cache
              ranked by kvevict.expected_attention_logits from the layer's pre-RoPE query statistics; options
              n_future_positions, n_sink, use_covariance, use_vnorm, epsilon, kvpress's defaults; the default
              RoPE only), 'kvzip' (KVzip, Kim et al. 2025: query-agnostic, the context's tokens ranked by how
              much the model attends to them while repeating the context; options tokenizer (required: the
              model's, for the repeat prompt), chunk (2048), n_sink (4), layers ('uniform': k per KV head in
              every layer; 'shared': the model's budget shared among layers by score, KVzip's default), heads
              (None: head_budgets decides; 'shared': each layer's budget shared among its KV heads by raw score,
              KVzip's rule: with layers='shared' the tokens above one model-wide threshold, kvpress's
              KVzipPress's, short by each layer's floor; needs k >= n_sink), head_budgets; batch 1; one more
              prefill of the context's length: _reconstruct.py) or 'full'.
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
    threads   workers (the calling thread included) on which the caches score the prompt's chunks where the
              prompt takes the chunked attention (TOVA, mean_attention, or where the fused kernel does not apply; a
              kvevict.ThreadPool made at the first such prompt, shared by the layers; decode steps score
              serially); default 1: inside torch's forward the pool's threads compete with torch's own, and on 2
              cores 2 workers were 1-6% slower than 1; None: torch.get_num_threads(). The results do not depend
              on it. (H2O's and Keyformer's fused prompt attention runs on torch.get_num_threads() workers.)
              TypeError for a non-int, ValueError outside [1, 1024].
    record    keep, per layer, the logits each prefill / decode step was given and the kept positions
              (layers[i].records; for tests: memory n_q_heads * P^2 floats per layer).

    Attributes: layout (kvevict.LayerLayout: the model's global and sliding-window layers, from
    config.layer_types), global_layers (the layers kvevict evicts in).
    Methods: retained_positions(layer, kv_head), kept_length(layer), is_global(layer), close() (removes the
    model hooks; also done when the cache is garbage-collected).
    """

    def __init__(self, model, policy="keyformer", budget=0.5, recent=None, *, evict="step", record=False,
                 threads=1, **options):
        config = _check_model(model)
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, numbers.Integral)):
            raise TypeError(f"KVEvictCache: threads must be an int or None (got {threads!r})")
        if threads is not None and not 1 <= threads <= 1024:
            raise ValueError(f"KVEvictCache: threads must be in [1, 1024] (got {threads!r})")
        self.threads = int(threads) if threads is not None else None
        self._pool = None  # made at the first prompt that scores its chunks (scoring_pool)
        self._attention_pool = None  # made at the first prompt whose attention runs in kvevict (attention_pool)
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
        self.reconstruct, self._recon_chunk = None, None  # policy 'kvzip': _reconstruct.py
        if policy == "kvzip":
            if recent is not None:
                raise ValueError(f"KVEvictCache: policy 'kvzip' has no recent window (got recent={recent!r}): it keeps "
                                 "the top-k by reconstruction score, its n_sink first tokens among them")
            self.reconstruct = _reconstruct.check_options(config, options, config.model_type in HYBRID_MODEL_TYPES)
            options = ({"head_budgets": "adaptive:0"} if self.reconstruct["heads"] == "shared" else
                       {k: v for k, v in options.items() if k == "head_budgets"})
            policy = "tova"  # ranked by the reconstruction scores as its row
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise TypeError(f"KVEvictCache: unknown option(s) {', '.join(unknown)}; kvevict.Cache's options are "
                            f"{', '.join(_OPTION_NAMES[1:])}")
        self.model_config = config
        self.policy, self.evict, self.record = policy, evict, record  # 'tova' for 'expected_attention'
        self.policy_name = "expected_attention" if self.expected else "kvzip" if self.reconstruct else policy
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
        # The library's rule for a model with sliding-window layers (kvevict::LayerLayout): caches in the global
        # layers only, the sliding ones keep transformers' window.
        self.layout = (kvevict.LayerLayout.from_layer_types(config.layer_types,
                                                             window=config.sliding_window)
                       if config.model_type in HYBRID_MODEL_TYPES else kvevict.LayerLayout(["global"] * self.n_layers))
        self.global_layers = self.layout.global_layers
        self._global = set(self.global_layers)
        ref = weakref.ref(self)
        super().__init__(layers=[KVEvictLayer(ref, i) if i in self._global
                                 else DynamicSlidingWindowLayer(sliding_window=config.sliding_window)
                                 for i in range(self.n_layers)])
        modules = _attention_modules(model)
        self._handles = []
        for i, m in enumerate(modules):
            if i in self._global:  # a sliding layer is not scored
                self._handles.append(m.register_forward_pre_hook(_make_mask_hook(ref), with_kwargs=True))
                self._handles.append(m.register_forward_hook(_make_hook(ref), with_kwargs=True))
                # The model's config back even when the forward raised (the pre-hook may have swapped it for the
                # prompt's attention, _prompt_attention.swap_in).
                self._handles.append(m.register_forward_hook(_restore_config, always_call=True))
        if self.reconstruct:  # the repeat passes run after the prompt's forward through the whole model
            self._handles.append(model.register_forward_hook(_reconstruct.make_model_hook(ref), with_kwargs=True))
        self._finalizer = weakref.finalize(self, _remove, self._handles)

    def scoring_pool(self):
        """The kvevict.ThreadPool the layers' caches score a prompt's chunks on (_prompt_attention, Keyformer, TOVA,
        H2O with mean_attention), made at the first use with `threads` workers (None: torch.get_num_threads(),
        at most 1024, made again if that changes; a cache keeps the pool it was given alive), shared by the
        layers; None for one worker."""
        n = self.threads if self.threads is not None else min(torch.get_num_threads(), 1024)
        if n <= 1:
            return None
        if self._pool is None or self._pool.workers != n:
            self._pool = kvevict.ThreadPool(n)
        return self._pool

    def attention_pool(self):
        """The kvevict.ThreadPool the prompt's fused attention (kvevict.causal_attention: H2O, Keyformer; KVzip's score,
        kvevict.attention_maxes) runs on: the work
        torch's own threads would do in SDPA, so torch.get_num_threads() workers whatever `threads` says (made
        again if that changes); None for one thread."""
        n = min(torch.get_num_threads(), 1024)
        if n <= 1:
            return None
        if self._attention_pool is None or self._attention_pool.workers != n:
            self._attention_pool = kvevict.ThreadPool(n)
        return self._attention_pool

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
        n_sink, future = opts["n_sink"], opts["n_future_positions"]
        limit = getattr(config, "max_position_embeddings", None)
        if limit and not isinstance(future, bool) and isinstance(future, int) and future > limit:
            raise ValueError(f"KVEvictCache: n_future_positions = {future} exceeds the model's "
                             f"max_position_embeddings = {limit} (the future positions it averages RoPE over; "
                             "kvpress's default is 512)")
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

    def retained_positions(self, layer, kv_head, seq=0):
        """The positions sequence `seq` of the batch holds in layer `layer`, KV head `kv_head`, ascending (its own
        positions: a left-padded sequence's first real token is position 0)."""
        if not self.is_global(layer):
            raise ValueError(f"KVEvictCache: layer {layer} is a sliding-window layer (transformers' "
                             "DynamicSlidingWindowLayer holds its window); kvevict evicts in the full-attention "
                             f"layers {self.global_layers}")
        lay = self.layers[layer]
        if lay.kvs is not None:
            if not 0 <= seq < len(lay.kvs):
                raise IndexError(f"KVEvictCache: seq {seq} out of range (the batch has {len(lay.kvs)} sequences)")
            return lay.kvs[seq].retained_positions(kv_head)
        raise ValueError(f"KVEvictCache: layer {layer} has no kvevict cache (policy 'full', evict='prefill' after "
                         "the prompt, or nothing seen yet)")

    def kept_length(self, layer=None):
        """Live slots of a layer (the K/V length attention reads, the longest sequence and KV head of the batch;
        default: the first full-attention layer)."""
        layer = self.global_layers[0] if layer is None else layer
        if not self.is_global(layer):
            keys = self.layers[layer].keys
            return 0 if keys is None else int(keys.shape[-2])
        return self.layers[layer].length

    def crop(self, max_length):
        """Forgets the tokens seen after the first `max_length` (negative: forgets the last -max_length), as
        transformers' DynamicCache.crop; the kept tokens' positions are unchanged and the next forward continues
        at position max_length. The query-agnostic protocol uses it: compress a context once (evict='prefill'),
        ask a question, crop back to the context, ask the next.

        Allowed back to the compressed prompt with evict='prefill' (what follows it was appended, never evicted),
        and to any length with policy 'full'. Raises ValueError, changing nothing, below that floor, with
        evict='step' (its decode steps evicted for good), or where a Gemma 3 sliding-window layer has already
        dropped what would be needed (transformers' own rule). O(layers), no copy."""
        if isinstance(max_length, bool) or not isinstance(max_length, int):
            raise TypeError(f"KVEvictCache.crop: max_length must be an int (got {max_length!r})")
        seen = self.get_seq_length()
        target = seen + max_length if max_length < 0 else max_length
        if target >= seen:
            return
        if target < 0:
            raise ValueError(f"KVEvictCache.crop: max_length {max_length} removes more than the {seen} tokens seen")
        for i, layer in enumerate(self.layers):  # every layer checked before any is cropped
            if isinstance(layer, KVEvictLayer):
                floor = layer.crop_floor()
                if target < floor:
                    raise ValueError(f"KVEvictCache.crop: max_length {max_length} would cut into the compressed prompt "
                                     f"(its {floor} tokens were evicted down to a budget and cannot be restored); crop "
                                     f"to at least {floor}")
            elif layer.get_seq_length() >= layer.sliding_window:
                raise ValueError(f"KVEvictCache.crop: sliding-window layer {i} has already dropped tokens older than "
                                 f"its window of {layer.sliding_window} (transformers' DynamicSlidingWindowLayer cannot "
                                 "crop then)")
        for layer in self.layers:
            layer.crop(target)

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
        _prompt_attention.swap_out(module)
        check_attention(module.config)
        with torch.no_grad():
            cache.layers[module.layer_idx].after_attention(module, kwargs)
        return None
    return hook


def _make_mask_hook(ref):
    """Before the attention module runs: the prompt's real tokens, then, after the cut, the mask that lets each
    sequence's query heads read their own kept slots (KVEvictLayer.before_attention)."""
    def pre_hook(module, args, kwargs):
        cache = ref()
        if cache is None or kwargs.get("past_key_values") is not cache:
            return None
        _prompt_attention.swap_out(module)  # left by a forward that raised
        q = kwargs["hidden_states"].shape[1]
        eager = getattr(module.config, "_kvevict_config", module.config)._attn_implementation == "eager"
        layer = cache.layers[module.layer_idx]
        mask = layer.before_attention(kwargs.get("attention_mask"), kwargs.get("position_ids"), q, eager)
        if layer.scores_in_attention():  # the prompt scored inside its attention (_prompt_attention)
            _prompt_attention.swap_in(module, layer)
        if mask is None:
            return None
        return args, dict(kwargs, attention_mask=mask)
    return pre_hook


def _restore_config(module, args, output):
    _prompt_attention.swap_out(module)


def _remove(handles):
    for h in handles:
        h.remove()
    handles.clear()
