"""kvevict.transformers' cache layer: one full-attention transformer layer's K/V for a batch of sequences, each
sequence with its own kvevict cache (its own budget and per-KV-head lengths) over its slice of the layer's buffers.

Layout: k_buf, v_buf [B, n_kv_heads, capacity, head_dim] torch float32 on the CPU; sequence b's kvevict.Cache wraps
k_buf[b] / v_buf[b] without a copy. Attention reads k_buf[:, :, :n], n = the longest (sequence, KV head); each query
head reads only its own sequence's and KV head's live slots through the mask this layer gives the attention module
(`attention_mask`), so sequences of a batch may hold different numbers of tokens (different prompt lengths, AdaKV's
per-head budgets). Left padding (transformers' convention for generation) is dropped at the prompt's cut: a
sequence's kvevict cache holds only its real tokens, at their own positions 0 .. P_b - 1."""
import ctypes
import sys

import numpy as np
import torch
from transformers.cache_utils import CacheLayerMixin

import kvevict
from kvevict import _reconstruct

DEFAULT_SEED = 42  # kvevict's and the tools' default noise seed
SUPPORTED_ATTENTION = ("sdpa", "eager")
_NO_LOGITS = ("streaming", "window", "knorm", "keydiff")  # scored from positions or keys
try:  # glibc: gives the heap's free pages back to the system after a layer's prompt buffers are freed
    _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim
    _MALLOC_TRIM.argtypes, _MALLOC_TRIM.restype = [ctypes.c_size_t], ctypes.c_int
except Exception:  # pragma: no cover - not glibc (musl, macOS; Windows cannot load None)
    _MALLOC_TRIM = None
_CHUNKED = ("keyformer", "h2o", "tova")  # prompt scores summed over its rows: scored inside the prompt's attention


def layer_seed(seed, layer):
    """Layer `layer`'s Keyformer noise seed, as kvevict-generate and kvevict-quality derive it
    (tools/llama2/eviction.cpp): seed + layer * 0x9E3779B97F4A7C15, modulo 2^64; distinct per layer."""
    return (seed + 0x9E3779B97F4A7C15 * layer) % (1 << 64)


def check_attention(config):
    config = getattr(config, "_kvevict_config", config)  # the model's, under a prompt's swapped view
    impl = getattr(config, "_attn_implementation", None)
    if impl not in SUPPORTED_ATTENTION:
        raise ValueError(f"KVEvictCache works with attn_implementation 'sdpa' or 'eager' (got {impl!r}): its scores "
                         "need the layer's queries against the cache's keys; load the model with "
                         "attn_implementation='sdpa'")


def _visible(mask):
    """Bool 'attends' from a transformers attention mask (bool: True attends; float: 0 attends, a large negative
    masks)."""
    return mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2


class KVEvictLayer(CacheLayerMixin):
    """One full-attention ("global") layer of a batch of B sequences (a sliding-window layer of a hybrid model is
    transformers' own DynamicSlidingWindowLayer). `lens[b, j]`: live slots of sequence b, KV head j; `length`: the
    K/V view's length (their maximum); `seen`: tokens per row of the batch so far (prompt padding included: the
    model's cache_position); `next_pos[b]`: sequence b's next position (its real tokens)."""

    is_sliding = False
    is_compileable = False

    def __init__(self, owner, layer_idx):
        super().__init__()
        self._owner = owner  # a weakref.ref to the KVEvictCache
        self.layer_idx = layer_idx
        self.reset()

    def reset(self):
        self.kvs = None  # one kvevict.Cache per sequence (None: policy 'full', or evict='prefill' after the cut)
        self.stats = None  # policy 'expected_attention': one kvevict.QueryStatistics per sequence
        self.batch = 0
        self.lens = None
        self.length = 0
        self.seen = 0
        self.next_pos = None
        self.prefilled = False
        self.cut_seen = None  # tokens seen when the prompt was cut (crop's floor with evict='prefill')
        self.pending = False  # policy 'kvzip': the prompt is held whole while the repeat passes score it
        self.recon = None  # policy 'kvzip': the context's scores [n_kv, P] (_reconstruct.py)
        self.budget_override = None  # policy 'kvzip', layers='shared': this layer's k (_reconstruct.run)
        self.compacted = False  # the prompt was cut: slots no longer follow the model's columns
        self.k_buf = self.v_buf = None
        self.records = []  # with record=True (batch 1): what the kvevict cache was given and what it kept
        self._real = None  # [B, P] bool: the prompt's real (unpadded) tokens, from its attention mask
        self._pad = None  # each sequence's left padding (columns), once the prompt's caches exist
        self._scored = False  # the prompt's rows already scored chunk by chunk in its attention (_prompt_attention)
        self._attention_sums = None  # H2O: the prompt's attention summed over its queries (_prompt_attention)
        self._beam_spare = None  # beam search: the second set of buffers and caches (reorder_cache)

    @property
    def kv(self):
        """Sequence 0's kvevict cache (the only one at batch 1), or None."""
        return self.kvs[0] if self.kvs else None

    # -- storage ---------------------------------------------------------------------------------------
    def lazy_initialization(self, key_states, value_states):
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def _alloc(self, capacity):
        """(Re)allocates the buffers with `capacity` slots per (sequence, KV head), keeping the live slots."""
        o = self._owner()
        k = torch.zeros(self.batch, o.n_kv_heads, capacity, o.head_dim, dtype=torch.float32)
        v = torch.zeros_like(k)
        if self.k_buf is not None and self.length:
            k[:, :, :self.length] = self.k_buf[:, :, :self.length]
            v[:, :, :self.length] = self.v_buf[:, :, :self.length]
        self.k_buf, self.v_buf = k, v

    def _views(self):
        n = self.length
        return self.k_buf[:, :, :n], self.v_buf[:, :, :n]

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
        check_attention(o.model_config)
        b, h, q, d = key_states.shape
        if key_states.dtype != torch.float32 or key_states.device.type != "cpu":
            raise ValueError(f"KVEvictCache keeps float32 K/V on the CPU; got {key_states.dtype} on "
                             f"{key_states.device}: load the model with dtype=torch.float32 on the CPU")
        if (h, d) != (o.n_kv_heads, o.head_dim):
            raise ValueError(f"KVEvictCache: layer {self.layer_idx} got K/V of {h} heads x {d}, expected "
                             f"{o.n_kv_heads} x {o.head_dim} (the model's config)")
        if self.batch and b != self.batch:
            raise ValueError(f"KVEvictCache: layer {self.layer_idx} holds {self.batch} sequences; got a batch of {b} "
                             "(a batch's size cannot change; beam search reorders rows: reorder_cache)")
        cache_position = (cache_kwargs or {}).get("cache_position")
        positions = (torch.arange(self.seen, self.seen + q) if cache_position is None
                     else cache_position.reshape(-1).to("cpu"))
        if positions.numel() != q or int(positions[0]) != self.seen:
            raise ValueError(f"KVEvictCache: layer {self.layer_idx} expects the next token at position {self.seen} "
                             f"(the tokens it has seen); got cache_position starting at {int(positions[0])}")
        if self.pending:  # a repeat pass (policy 'kvzip'): its K/V sit after the prompt until drop_after
            if self.length + q > self.k_buf.shape[2]:
                self._alloc(self.length + q)
            self.k_buf[:, :, self.length:self.length + q] = key_states
            self.v_buf[:, :, self.length:self.length + q] = value_states
            self.lens += q
            self.length = int(self.lens.max())
            self.seen += q
            return self._views()
        if self.kvs is not None and q != 1:
            raise ValueError(f"KVEvictCache(evict='step') takes one new token per forward after the prompt (got {q}); "
                             "feed tokens one at a time, or use evict='prefill' (eviction of the prompt only)")
        if not self.prefilled:  # the prompt: stored as given (padding included) until the hook cuts it
            self.batch = b
            self._alloc(q + 1 if o.policy != "full" else max(16, 2 * q))
            self.k_buf[:, :, :q] = key_states
            self.v_buf[:, :, :q] = value_states
            self.lens = np.full((b, h), q, dtype=np.int64)
        elif self.kvs is not None:  # one token, appended by each sequence's cache at its own slots
            kn = key_states[:, :, 0].contiguous().numpy()
            vn = value_states[:, :, 0].contiguous().numpy()
            for s, kv in enumerate(self.kvs):
                kv.append(int(self.next_pos[s]), kn[s], vn[s])
                self.lens[s] = kv.lengths
        else:  # the cache grows: policy 'full' (the model's columns), or evict='prefill' after the cut
            if self.length + q > self.k_buf.shape[2]:
                self._alloc(max(2 * self.k_buf.shape[2], self.length + q))
            if not self.compacted:
                self.k_buf[:, :, self.length:self.length + q] = key_states
                self.v_buf[:, :, self.length:self.length + q] = value_states
            else:
                for s in range(b):
                    for j in range(h):
                        n = int(self.lens[s, j])
                        self.k_buf[s, j, n:n + q] = key_states[s, j]
                        self.v_buf[s, j, n:n + q] = value_states[s, j]
            self.lens += q
        if self.next_pos is not None:
            self.next_pos += q
        self.length = int(self.lens.max())
        self.seen += q
        return self._views()

    def before_attention(self, attention_mask, position_ids, q, eager):
        """The forward pre-hook's part, before the attention module runs (and calls update). At the prompt: reads
        which tokens are real from the mask. After the cut: checks the new tokens' positions and returns the mask
        [B, n_q_heads, q, n] that lets query i of sequence b, query head h read slots s < lens[b, h // g] + i + 1
        (its own kept tokens, then the new ones causally); None where the model's mask is right as it is."""
        o = self._owner()
        if self.pending:  # a repeat pass: the model's causal mask over the prompt and the repeat is right
            return None
        if not self.prefilled:
            self._scored = False  # a forward that raised after its attention: its chunks are never reused
            self._attention_sums = None  # nor its sums
            if o.policy != "full":
                if attention_mask is not None:  # the last query sees every real token
                    self._real = _visible(attention_mask[:, 0, -1, :q]).clone()
                if position_ids is not None:
                    self._check_prompt_positions(position_ids, q)
            return None
        if not self.compacted:
            return None
        if position_ids is not None:
            want = torch.as_tensor(self.next_pos)[:, None] + torch.arange(q)[None, :]
            got = position_ids.to("cpu").expand(self.batch, q)
            if not torch.equal(got, want):
                s = int((got != want).any(dim=1).nonzero()[0])
                raise ValueError(f"KVEvictCache: sequence {s} of the batch is at position {int(want[s, 0])} (its real "
                                 f"tokens so far), but the model was given position_ids {got[s].tolist()}: pass "
                                 "position_ids = attention_mask.cumsum(-1) - 1 for left-padded batches, as generate does")
        g = o.n_q_heads // o.n_kv_heads
        n = self.length + q
        if self.batch == 1 and int(self.lens.min()) == self.length and (
                attention_mask is None or attention_mask.shape[-1] == n):
            # One sequence, every head at the same length: the model's own mask (get_mask_sizes' offset) is right,
            # and SDPA keeps its fast path. (It is made once for all layers, sized by the first: another size
            # is replaced below.)
            return None
        own = torch.as_tensor(self.lens).repeat_interleave(g, dim=1)  # [B, n_q]
        limit = own[:, :, None, None] + torch.arange(q)[None, None, :, None] + 1
        valid = torch.arange(n)[None, None, None, :] < limit  # [B, n_q, q, n]
        if not eager:
            return valid
        return torch.zeros(valid.shape).masked_fill_(~valid, torch.finfo(torch.float32).min)

    def _check_prompt_positions(self, position_ids, q):
        """The prompt's real tokens must sit at positions 0 .. P_b - 1 (what the cache records for them, what
        generate gives a left-padded batch): a key rotated elsewhere would not be at the position the cache holds."""
        b = position_ids.shape[0] if position_ids.dim() == 2 else 1
        pos = position_ids.to("cpu").reshape(b, -1)
        real = self._real if self._real is not None else torch.ones(max(b, 1), q, dtype=torch.bool)
        for s in range(real.shape[0]):
            n = int(real[s].sum())
            if n == 0 or not bool(real[s, q - n:].all()):
                continue  # not left-padded (or empty): the cut refuses it, saying so
            got = pos[min(s, b - 1), q - n:]
            if n and not torch.equal(got, torch.arange(n)):
                raise ValueError(f"KVEvictCache: the prompt's real tokens of sequence {s} of the batch are at positions "
                                 f"{got[:4].tolist()}..., but the cache numbers them 0 .. {n - 1}: pass no position_ids "
                                 "(one sequence) or attention_mask.cumsum(-1) - 1 (a left-padded batch), as generate does")

    def after_attention(self, module, kwargs):
        """The forward hook: after the layer attended, cut the prompt (per sequence) or score and evict one step."""
        o = self._owner()
        if o.policy == "full" and not self.prefilled:
            self.prefilled = True
            return
        if self.pending:
            start, end, prompt_len = o._recon_chunk
            _reconstruct.score_chunk(self, self._queries(module, kwargs)[0], module.scaling, start, end, prompt_len)
            return
        if not self.prefilled:
            if o.reconstruct:  # the cut waits for the repeat passes (KVEvictCache's model hook runs them)
                self.pending = True
                self.recon = torch.zeros(o.n_kv_heads, self.seen)
                return
            self._cut_prompt(module, kwargs)
            return
        if self.kvs is None:
            return
        queries = None
        if o.expected:
            pre = self._queries(module, kwargs, rope=False)[:, :, -1:, :].transpose(1, 2).contiguous().numpy()
        elif o.policy not in _NO_LOGITS:
            queries = self._queries(module, kwargs)[:, :, -1, :].contiguous().numpy()  # [B, n_q, d]
        for s, kv in enumerate(self.kvs):
            x = None
            if o.expected:
                self.stats[s].add(pre[s])
                x = self._expected_logits(s)
            elif queries is not None:
                x = kvevict.attention_logits(kv, queries[s], module.scaling)
            if o.record:
                before = [kv.positions(j) for j in range(o.n_kv_heads)]
            kv.decode_step(x)
            self.lens[s] = kv.lengths
            if o.record:
                self.records.append(("step", None if x is None else x.copy(), before, self._kept(s)))
        self.length = int(self.lens.max())

    def _pads(self):
        """Each sequence's left padding (from the prompt's attention mask), checked: every sequence has a real token
        and its real tokens end the prompt."""
        B, P = self.batch, self.seen
        real = self._real if self._real is not None else torch.ones(B, P, dtype=torch.bool)
        pads = []
        for s in range(B):
            n_real = int(real[s].sum())
            if n_real == 0:
                raise ValueError(f"KVEvictCache: sequence {s} of the batch has no real token (its attention mask is all "
                                 "zeros)")
            if not bool(real[s, P - n_real:].all()):
                raise ValueError(f"KVEvictCache: sequence {s} of the batch is not left-padded (its real tokens must end "
                                 "the prompt): use tokenizer.padding_side = 'left', as transformers does for generation")
            pads.append(P - n_real)
        return pads

    def _open_caches(self, P):
        """One empty kvevict cache per sequence over its slice of the buffers, at its own budget (for a prompt of P
        tokens, left padding included); sets kvs, stats, next_pos and _pad. Raises (naming the sequence) before
        any cache exists."""
        o = self._owner()
        B = self.batch
        if o.record and B != 1:
            raise ValueError("KVEvictCache(record=True) records batch 1 only")
        pads = self._pads()
        budgets = []
        for s in range(B):
            n = P - pads[s]
            try:
                budgets.append(o.resolve_budget(n) if self.budget_override is None else self.budget_override)
            except ValueError as e:
                raise ValueError(f"{e}" + (f" (sequence {s} of the batch)" if B > 1 else "")) from None
            if o.expected and n <= o.expected["n_sink"]:
                raise ValueError(f"KVEvictCache: policy 'expected_attention' needs more prompt tokens than n_sink = "
                                 f"{o.expected['n_sink']} (its statistics leave those out); the prompt of sequence {s} "
                                 f"has {n}: lower n_sink or give a longer prompt")
        self.kvs = [self._new_cache(budgets[s], self.k_buf[s], self.v_buf[s]) for s in range(B)]
        self.stats = [] if o.expected else None
        self.next_pos = np.zeros(B, dtype=np.int64)
        self._pad = pads

    def _new_cache(self, budget, k, v):
        """A kvevict cache of this layer's policy and options (Keyformer's noise seed per layer, as kvevict-generate
        derives it) over the storage k, v [n_kv_heads, capacity, head_dim] (torch views, no copy)."""
        o = self._owner()
        options = dict(o.options)
        if o.policy == "keyformer" or options.get("snap_decode") == "keyformer":
            options["seed"] = layer_seed(options.get("seed", DEFAULT_SEED), self.layer_idx)
        return kvevict.Cache(o.policy, n_q_heads=o.n_q_heads, budget=budget, k=k.numpy(), v=v.numpy(), **options)

    def _shrink(self):
        """After the prompt's cut with evict='step' and uniform budgets: each sequence's cache moves (Cache.copy_from,
        its whole state) into buffers of max(k_b) + 1 slots per KV head, the most a decode step holds, so the layer
        keeps k slots per head instead of the prompt's P. (Head-adaptive budgets keep the prompt's capacity: it caps
        a head's share.)"""
        o = self._owner()
        if str(o.options.get("head_budgets", "uniform")).startswith("adaptive"):
            return
        cap = max(kv.budget for kv in self.kvs) + 1
        if cap >= self.k_buf.shape[2]:
            return
        k = torch.zeros(self.batch, o.n_kv_heads, cap, o.head_dim, dtype=torch.float32)
        v = torch.zeros_like(k)
        kvs = [self._new_cache(kv.budget, k[s], v[s]) for s, kv in enumerate(self.kvs)]
        for new, old in zip(kvs, self.kvs):
            new.copy_from(old)
        self.k_buf, self.v_buf, self.kvs = k, v, kvs

    def _append_prompt(self, s):
        """Sequence s's real prompt tokens into its kvevict cache (slots and positions from 0, its left padding
        skipped); returns their number."""
        p0, P = self._pad[s], self.seen
        rows_k = torch.empty(P - p0, self.k_buf.shape[1], self.k_buf.shape[3])  # [n, n_kv, d], always a copy
        rows_v = torch.empty_like(rows_k)
        rows_k.copy_(self.k_buf[s, :, p0:P].transpose(0, 1))
        rows_v.copy_(self.v_buf[s, :, p0:P].transpose(0, 1))
        self.kvs[s].extend(np.arange(P - p0, dtype=np.int64), rows_k.numpy(), rows_v.numpy())
        return P - p0

    def scores_in_attention(self):
        """Whether the prompt's forward, now, scores the prompt inside its attention (_prompt_attention): a policy
        whose prompt score is a sum over the prompt's rows ('keyformer', 'h2o', 'tova'), record=False, before the
        cut. H2O (sums_in_attention) sums the attention's own probabilities; the others give each chunk of logits
        the attention computes to the sequences' kvevict caches (score_chunk, Cache.prefill_chunk)."""
        o = self._owner()
        return (not self.prefilled and not self.pending and o.policy in _CHUNKED and not o.record
                and not o.expected and not o.reconstruct)

    def sums_in_attention(self):
        """Whether the prompt's attention, now, sums its probabilities over the queries for H2O's prompt score
        (take_attention_sums, then Cache.prefill_from_attention: a column sum of what the attention computed is
        cheaper than the cache's own pass over the logits): policy 'h2o' without mean_attention."""
        o = self._owner()
        return self.scores_in_attention() and o.policy == "h2o" and not o.options.get("mean_attention")

    def fused_sums(self):
        """'h2o' or 'keyformer' (no mean_attention) while kvevict.causal_attention can hand the cut its prompt
        sums (Cache.prompt_sums), else None."""
        o = self._owner()
        ok = self.scores_in_attention() and not o.options.get("mean_attention") and o.policy in ("h2o", "keyformer")
        return o.policy if ok else None

    def open_for_sums(self):
        """The caches before the prompt's attention, which reads their prompt_sums (the cut opens them again)."""
        self._open_caches(self.seen)

    def real_queries(self):
        """[B, P] float32: 1 for the prompt's real tokens, 0 for left padding; None when none is padded."""
        if self._real is None or bool(self._real.all()):
            return None
        return self._real.to(torch.float32)

    def take_attention_sums(self, sums):
        """The prompt's attention probabilities summed over its queries, [B, n_q_heads, P] (padded columns
        included): the cut (_cut_prompt) gives each sequence its own columns."""
        self._attention_sums = sums

    def open_prompt(self):
        """The prompt's attention starts (_prompt_attention): one empty kvevict cache per sequence (_open_caches),
        on the owner's thread pool while the prompt is scored. Raises as _open_caches."""
        self._scored = False
        self._open_caches(self.seen)
        pool = self._owner().scoring_pool()
        if pool is not None:
            for kv in self.kvs:
                kv.set_executor(pool)

    def score_chunk(self, s, c0, logits, key, value):
        """Sequence s's rows of the prompt's queries [c0, c1) into its kvevict cache: their K/V (key / value [n_kv,
        c1, d], the attention's, left padding included) appended, then Cache.prefill_chunk on logits [n_q_heads,
        c1 - c0, c1] (scale * Q K^T of the batch's columns; only the causal part of each row is read). Rows and
        columns of its left padding are dropped."""
        p0 = self._pad[s]
        c1 = logits.shape[2]
        r0 = max(c0, p0)
        if r0 >= c1:
            return
        kv = self.kvs[s]
        k_rows = torch.empty(c1 - r0, key.shape[0], key.shape[2])  # [C_s, n_kv, d], always a copy (with one KV
        v_rows = torch.empty_like(k_rows)                            # head a transposed view is the cache's own rows)
        k_rows.copy_(key[:, r0:c1].transpose(0, 1))
        v_rows.copy_(value[:, r0:c1].transpose(0, 1))
        kv.extend(np.arange(r0 - p0, c1 - p0, dtype=np.int64), k_rows.numpy(), v_rows.numpy())
        rows = logits[:, r0 - c0:, p0:]
        kv.prefill_chunk(c1 - r0, (rows if p0 == 0 and r0 == c0 else rows.contiguous()).numpy())

    def prompt_scored(self):
        """The prompt's attention scored every chunk (score_chunk): the cut only finishes the caches' prefills."""
        self._scored = True

    def _cut_prompt(self, module, kwargs):
        """The prompt's cut: each sequence's real tokens into its own kvevict cache (slots 0 .. P_b - 1, positions
        0 .. P_b - 1), its prefill at its own budget k_b (already scored chunk by chunk when the prompt's attention
        did it, score_chunk: then only finish_prefill; H2O: from the sums attention gave, take_attention_sums),
        then the layer's view over the longest."""
        o = self._owner()
        P = self.seen
        sums, self._attention_sums = self._attention_sums, None
        if sums is not None and tuple(sums.shape) != (self.batch, o.n_q_heads, P):
            raise ValueError(f"KVEvictCache: layer {self.layer_idx}'s prompt attention summed {tuple(sums.shape)}, "
                             f"not [{self.batch}, {o.n_q_heads}, {P}] (the batch, query heads and prompt)")
        if self._scored:
            self._scored = False
            for s, kv in enumerate(self.kvs):
                kv.finish_prefill()
                self.next_pos[s] = P - self._pad[s]
                self.lens[s] = kv.lengths
            self._after_cut()
            return
        self._open_caches(P)
        needs_logits = o.policy not in _NO_LOGITS and not o.expected and not o.reconstruct
        queries = self._queries(module, kwargs) if needs_logits and sums is None else None  # [B, n_q, P, d]
        pre = self._queries(module, kwargs, rope=False) if o.expected else None
        g = o.n_q_heads // o.n_kv_heads
        for s, kv in enumerate(self.kvs):
            p0 = self._pad[s]
            n = self._append_prompt(s)
            self.next_pos[s] = n
            logits = None
            if o.reconstruct:  # policy 'kvzip': the repeat passes' scores as TOVA's row
                logits = _reconstruct.logits_rows(self)
            elif o.expected:  # the prompt's queries past the sinks, then the prompt's last row of expected logits
                self.stats.append(kvevict.QueryStatistics(o.n_q_heads, o.head_dim))
                self.stats[s].add(pre[s, :, p0 + o.expected["n_sink"]:].transpose(0, 1).contiguous().numpy())
                logits = self._expected_logits(s)
            elif needs_logits and (o.record or o.policy == "snapkv"):  # the [n_q, P_b, P_b] logits, materialised
                keys = self.k_buf[s, :, :n].repeat_interleave(g, dim=0)  # [n_q, n, d]
                logits = (torch.matmul(queries[s, :, p0:], keys.transpose(1, 2)) * module.scaling).contiguous().numpy()
            if sums is not None:  # H2O: the attention's own probabilities, summed (_prompt_attention)
                kv.prefill_from_attention(sums[s, :, p0:].contiguous().numpy())
            elif needs_logits and logits is None:  # scored from Q and K a few rows at a time: memory O(16 P)
                kv.prefill_qk(queries[s, :, p0:].transpose(0, 1).contiguous().numpy(), scale=module.scaling)
            else:
                kv.prefill(logits)
            if o.record:
                self.records.append(("prefill", logits, None, self._kept(s)))
            self.lens[s] = kv.lengths
        self._after_cut()

    def _after_cut(self):
        """The layer after its sequences' prefills: the view over the longest, then (evict='prefill') plain growing
        buffers, or (evict='step') the caches in buffers of k + 1 slots, scoring serially from now on."""
        o = self._owner()
        self.prefilled = self.compacted = True
        self.cut_seen = self.seen
        self.length = int(self.lens.max())
        if o.evict == "prefill":  # from now on the layer only grows (no kvevict cache)
            self.kvs = self.stats = None
            self._alloc(max(2 * self.length, self.length + 256))
        else:
            for kv in self.kvs:  # decode steps score serially (a step's rows are too short to share)
                kv.set_executor(None)
            self._shrink()
        if _MALLOC_TRIM is not None:  # the prompt-sized buffers just freed: peak memory grows by k, not P, per layer
            _MALLOC_TRIM(0)

    def drop_after(self, n):
        """Forgets what a repeat pass appended after the prompt's n tokens (policy 'kvzip')."""
        self.lens[:] = n
        self.length = self.seen = n

    def cut_prompt_now(self):
        """The prompt's cut once its scores came from elsewhere (policy 'kvzip': _reconstruct.run)."""
        self._cut_prompt(None, None)

    def _kept(self, s):
        kv = self.kvs[s]
        return [kv.retained_positions(j) for j in range(self._owner().n_kv_heads)]

    def _expected_logits(self, s):
        """Expected Attention's rows over sequence s's held slots, [n_q_heads, n]."""
        return kvevict.expected_attention_logits(self.stats[s], self.kvs[s], next_position=int(self.next_pos[s]),
                                                 rope_style="half_split", **self._owner().expected)

    def _queries(self, module, kwargs, rope=True):
        """The layer's queries [B, n_q, q, d] (float32), after RoPE, or before it (Expected Attention's statistics)."""
        o = self._owner()
        hidden = kwargs["hidden_states"]
        b, s, _ = hidden.shape
        q = module.q_proj(hidden).view(b, s, -1, o.head_dim)
        if getattr(module, "q_norm", None) is not None:  # Qwen3, Gemma 3
            q = module.q_norm(q)
        q = q.transpose(1, 2)
        if not rope:
            return q.float()
        cos, sin = kwargs["position_embeddings"]
        apply = sys.modules[type(module).__module__].apply_rotary_pos_emb
        q, _ = apply(q, q, cos, sin)
        return q.float()

    def get_mask_sizes(self, cache_position):
        q = cache_position.shape[0]
        # The live slots hold positions < seen (in any order); the q new tokens go to slots length ..
        # length + q - 1 with positions seen .. seen + q - 1. transformers' causal mask compares the query's
        # position with kv_offset + slot: this offset gives the new slots their positions and keeps every live
        # slot (all older) visible. (After the prompt's cut, before_attention replaces the mask.)
        return self.length + q, self.seen - self.length

    def get_seq_length(self):
        return self.seen

    def get_max_cache_shape(self):
        return -1

    def reorder_cache(self, beam_idx):
        """Beam search (generate calls it after every step): row i of the batch takes the state of row beam_idx[i].
        Before the prompt's cut, and where no kvevict cache runs (policy 'full', evict='prefill' after the cut), the
        buffers' rows and lengths are selected. After the cut, each row's kvevict cache gets a copy of its source's
        whole state (Cache.copy_from: kept slots, scores, recent window, step, tau, noise seed, ...) in a second set
        of buffers and caches, which then become the layer's (the first set is kept for the next call: no allocation
        after the first). Expected Attention's query statistics are copied with it. KVzip is refused (batch 1)."""
        if self.k_buf is None or not self.batch:
            return
        idx = [int(i) for i in torch.as_tensor(beam_idx).reshape(-1).tolist()]
        if len(idx) != self.batch or any(i < 0 or i >= self.batch for i in idx):
            raise ValueError(f"KVEvictCache.reorder_cache: beam_idx must hold {self.batch} row indices in "
                             f"[0, {self.batch}) (the batch's rows); got {idx}")
        if idx == list(range(self.batch)):
            return
        o = self._owner()
        if self.pending or o.reconstruct:
            raise NotImplementedError("KVEvictCache(policy='kvzip') does not support beam search (it runs batch 1)")
        if self.kvs is None:  # raw buffers: before the cut, policy 'full', or evict='prefill' after the cut
            sel = torch.as_tensor(idx)
            self.k_buf = self.k_buf.index_select(0, sel)
            self.v_buf = self.v_buf.index_select(0, sel)
        else:
            self._copy_beams(idx)
        self.lens = self.lens[idx].copy()
        if self.next_pos is not None:
            self.next_pos = self.next_pos[idx].copy()
        if self._real is not None and self._real.shape[0] == self.batch:
            self._real = self._real[idx]
        if getattr(self, "_pad", None) is not None:
            self._pad = [self._pad[i] for i in idx]
        self.length = int(self.lens.max())

    def _copy_beams(self, idx):
        """reorder_cache's kvevict part: row i's cache of the spare set copies the current row idx[i]'s, then the
        sets swap. A spare cache is (re)built over its slice of the spare buffers when the budget it was built with
        is not its source's (a new prompt) or the buffers changed shape."""
        o = self._owner()
        spare = self._beam_spare
        if spare is None or spare["k_buf"].shape != self.k_buf.shape or len(spare["kvs"]) != self.batch:
            k = torch.zeros_like(self.k_buf)
            spare = {"k_buf": k, "v_buf": torch.zeros_like(self.v_buf), "kvs": [None] * self.batch,
                     "budgets": [None] * self.batch, "stats": [None] * self.batch}
        for i, src in enumerate(idx):
            budget = self.kvs[src].budget
            if spare["kvs"][i] is None or spare["budgets"][i] != budget:
                spare["kvs"][i] = self._new_cache(budget, spare["k_buf"][i], spare["v_buf"][i])
                spare["budgets"][i] = budget
            spare["kvs"][i].copy_from(self.kvs[src])
            if self.stats is not None:
                if spare["stats"][i] is None:
                    spare["stats"][i] = kvevict.QueryStatistics(o.n_q_heads, o.head_dim)
                spare["stats"][i].copy_from(self.stats[src])
        self._beam_spare = {"k_buf": self.k_buf, "v_buf": self.v_buf, "kvs": self.kvs,
                            "budgets": [kv.budget for kv in self.kvs],
                            "stats": self.stats if self.stats is not None else [None] * self.batch}
        self.k_buf, self.v_buf, self.kvs = spare["k_buf"], spare["v_buf"], spare["kvs"]
        if self.stats is not None:
            self.stats = spare["stats"]

    def crop_floor(self):
        """The fewest tokens seen this layer can be cropped back to: 0 for policy 'full' (its slots are the model's
        columns), the prompt's length once it was cut with evict='prefill' (later tokens were only appended). Raises
        ValueError with the reason where nothing can be cropped (evict='step': decode steps evicted for good)."""
        o = self._owner()
        if not self.compacted:
            if o.policy == "full" or self.seen == 0:
                return 0
            raise ValueError("KVEvictCache cannot crop a prompt it has not cut yet")
        if self.kvs is None:
            return self.cut_seen
        raise ValueError("KVEvictCache(evict='step') cannot crop: every decode step since the prompt evicted a token "
                         "for good; use evict='prefill' (the prompt cut once, later tokens appended), which crops "
                         f"back to as far as the compressed prompt (position {self.cut_seen})")

    def crop(self, max_length):
        """Drops the tokens seen after the first `max_length` (KVEvictCache.crop checked the floor): each sequence
        and KV head loses its last `seen - max_length` slots; positions of what stays are unchanged."""
        drop = self.seen - max_length
        if drop <= 0:
            return
        self.lens = self.lens - drop
        if self.next_pos is not None:
            self.next_pos -= drop
        self.seen = max_length
        self.length = int(self.lens.max())

    def batch_repeat_interleave(self, repeats):
        raise NotImplementedError("KVEvictCache cannot repeat its sequences over a batch (contrastive search, "
                                  "num_return_sequences after the prompt)")

    def batch_select_indices(self, indices):
        raise NotImplementedError("KVEvictCache cannot select batch indices of its sequences")
