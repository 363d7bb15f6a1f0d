// python/docstrings.hpp — the docstrings of the kvevict module (what help() prints after the signatures that
// pybind11 writes from the py::arg lists), kept apart so that the binding files read as code.
// SPDX-License-Identifier: Apache-2.0
#pragma once

namespace kvpy::doc {

constexpr const char* kModule =
    R"doc(kvevict: KV-cache eviction (Keyformer, H2O, StreamingLLM, window, TOVA, SnapKV) for your
own decode loop. One cache per transformer layer (and sequence); K/V live in NumPy arrays (float32 or
float16) that the cache owns or wraps, usable from PyTorch with torch.from_numpy without copying:
kvevict.Cache over contiguous storage [n_kv_heads, capacity, head_dim], kvevict.PagedCache over a
kvevict.PagePool of K/V pages shared by the sequences of a layer.

Protocol per sequence: append the prompt's K/V (cache.append), cache.prefill(logits[H_q, P, P]),
then per generated token cache.append(...) and cache.decode_step(logits[H_q, n]) with the
logits over slots [0, n) in slot order (kvevict.attention_logits computes them).

Options are keyword-only; an unknown keyword raises pybind11's TypeError (its message lists the
keywords of the call). Errors: ValueError (bad argument; the C++ std::invalid_argument message),
IndexError (KV head out of range), OverflowError (a full KV head or page pool on append, or an int
too large for 64 bits), TypeError (an argument of the wrong kind).

Threads: prefill, decode_step, attention_logits and replay release the GIL, so caches of
different layers or sequences can run in parallel threads; calls on one cache (on one page pool,
for paged caches) are serialised by a lock. The K/V arrays themselves are not locked: do not write
them from another thread while that cache's prefill or decode_step moves rows.)doc";

constexpr const char* kCache = R"doc(One transformer layer's evicting KV cache (kvevict::make_cache over a KVView).

Cache(policy, *, n_q_heads, budget='50%', recent=None, n_kv_heads=None, capacity=None, head_dim=None,
      dtype=None, k=None, v=None, sinks=None, tau_init=None, tau_end=None, horizon=None,
      noise=None, seed=None, shared_heads=False, snap_window=None, snap_kernel=None,
      snap_pooling=None, snap_decode=None, mean_attention=None, head_budgets=None)

policy      'keyformer', 'h2o', 'streaming', 'window', 'tova', 'snapkv', 'knorm' (key norm: each
            token scored 1 / (1 + ||k||) from its key when appended, no logits) or 'keydiff' (every
            held token scored 1 - cos(k, mean unit key) whenever tokens enter, no logits) (or use the
            subclasses kvevict.Keyformer, H2O, StreamingLLM, Window, TOVA, SnapKV, KeyNorm, KeyDiff).
n_q_heads   query heads of the layer, a positive multiple g * n_kv_heads (GQA: query head h
            reads KV head h // g). Required.
budget      k, tokens kept per KV head: an int (tokens), a float r (k = floor(r * P) at
            prefill) or a percentage string ('50%', the default).
recent      w, the recent window always kept: an int (tokens), a float q (w = floor(q * k)) or
            '30%' (the default for 'keyformer', 'h2o', 'snapkv', 'knorm' and 'keydiff'). Must resolve to <= k. 'tova':
            none by default (the paper's rule), any window when given (1: kvpress's TOVAPress, the newest token
            never evicted); must be 0 for 'streaming' and 'window' (they keep the most recent k - sinks tokens).
Storage     owned: n_kv_heads, capacity (slots per KV head; at least max(P, k + 1)), head_dim
            and dtype ('float32', the default, or 'float16'), zero-initialised; or wrapped: k and v,
            writeable C-contiguous arrays [n_kv_heads, capacity, head_dim] of one dtype (no copy; the
            cache keeps them alive; do not pass n_kv_heads/capacity/head_dim then).
sinks       'streaming' only: attention sinks (default 4).
tau_init, tau_end, horizon, noise
            'keyformer' only: temperature rises linearly from tau_init (default 1) to tau_end
            (default 2) over horizon T decode steps (required, >= 1); noise=False drops the
            Gumbel noise (deterministic variant; default True).
seed        'keyformer' only: seed of the Gumbel noise generator (default 42; same seed, same result).
snap_window, snap_kernel, snap_pooling, snap_decode
            'snapkv' only (SnapKV, Li et al. 2024): the last snap_window = L prompt rows score the
            prompt (default min(32, k), must be <= k), pooled with an odd kernel (default 7) by 'max'
            (default) or 'avg'; decoding continues by 'h2o' (default, kvevict::SnapKV) or 'window'
            (kvevict::SnapKVWindow). prefill only (no prefill_chunk).
shared_heads
            True: one selection per layer from scores summed over KV heads.
mean_attention
            'h2o' and 'keyformer' only: True ranks each token's accumulated score divided by the
            number of queries that scored it (newest position - its position + 1; C++ kvevict::H2OMean,
            KeyformerMean; kvpress's ObservedAttention is 'h2o' with recent=0) instead of the sum. The
            stored scores stay the sums. PagedCache: unit='token' only.
head_budgets
            'uniform' (the default: every KV head keeps k) or 'adaptive' / 'adaptive:ALPHA' (AdaKV,
            Feng et al. 2024: the layer keeps k * n_kv_heads tokens, shared among its KV heads by
            score at the first cut; each head keeps its recent window and at least ALPHA (default
            0.2) of its k - w key tokens). 'keyformer', 'h2o', 'snapkv', 'tova', per-head selection
            (not shared_heads). The heads then hold different lengths: decode_step takes logits
            [n_q_heads, max(lengths)], head h's row read on its KV head's lengths[h // g] slots, and
            attention_logits returns that layout with -inf past each head's length.

An option that the policy does not use raises ValueError (it would be ignored otherwise); None
means "not given". Raises ValueError / TypeError / OverflowError for bad arguments, with the
library's message.)doc";

constexpr const char* kSnapKV =
    R"doc(Cache('snapkv', ...): SnapKV (Li et al. 2024). Prefill keeps the observation window
(the last snap_window = L prompt tokens) plus the top k - L prompt tokens by the window's attention,
pooled over snap_kernel neighbours ('max' or 'avg' snap_pooling); decoding continues by H2O
accumulation (snap_decode='h2o': recent window + heavy hitters, C++ kvevict::SnapKV), evicts the
oldest token (snap_decode='window', kvevict::SnapKVWindow), or continues by Keyformer's Gumbel-logit
accumulation (snap_decode='keyformer', kvevict::SnapKVKeyformer: then horizon is required and tau_init,
tau_end, noise, seed apply, as for 'keyformer'). Defaults: L = min(32, k), kernel 7, 'max'.)doc";

constexpr const char* kAppend =
    R"doc(Appends one token to every KV head: k and v are C-contiguous arrays [n_kv_heads, head_dim]
of the cache's dtype, written into slot lengths[h] of each head with position ID `position`
(int64; apply RoPE before). O(n_kv_heads * head_dim). All-or-nothing: OverflowError if a KV
head is full (capacity reached), ValueError for a wrong array.)doc";

constexpr const char* kExtend =
    R"doc(Appends n tokens to every KV head, as n calls of append: positions int64 [n], k and v C-contiguous
[n, n_kv_heads, head_dim] of the cache's dtype (row i: token i's K and V per head), written into slots
lengths[h] .. lengths[h] + n - 1. One call instead of n (a prompt's K/V). O(n * n_kv_heads * head_dim).
All-or-nothing: OverflowError if a KV head lacks room for n more, ValueError for a wrong array or for k /
v overlapping the cache's own storage (copy those rows first).)doc";

constexpr const char* kPrefill =
    R"doc(Scores the prompt and evicts every KV head to min(k, P) tokens (Keyformer Algorithm 1,
prompt phase). Every KV head must hold the P prompt tokens (positions strictly ascending).
logits: float32 [n_q_heads, P, P], x[h, r, c] = logit of query r against slot c (only c <= r
is read; -inf = masked); for 'tova', whose score reads only the prompt's last row, also that row alone,
float32 [n_q_heads, P] (e.g. kvevict.expected_attention_logits); may be None for 'streaming', 'window' (no score), 'knorm' and 'keydiff' (scored
from the keys); ignored by them when given.
gumbel: optional pre-drawn noise, same shape ('keyformer' with noise=True only).
The GIL is released while it runs. O(n_q_heads * P^2). ValueError (the library's message) on a
second prefill, a budget resolving to 0, w > k, NaN / +inf logits, ...; the cache is then unchanged.)doc";

constexpr const char* kPrefillQK =
    R"doc(The prompt's cut from its queries, without its [n_q_heads, P, P] logits: q float32
[P, n_q_heads, head_dim] (RoPE applied), scale (default 1 / sqrt(head_dim)). The logits
scale * q . K are computed from the cache's keys a few rows at a time (C++ prefill_chunk_qk, Eigen
GEMM tiles; memory O(16 * P) floats, not O(n_q_heads * P^2)) and scored as prefill scores a
materialised array (the library's test: bit for bit with the same products). Then evicts to k as
prefill does. Not for 'snapkv' (its window is the prompt's last rows: use prefill). The GIL is
released. O(n_q_heads * P^2 * head_dim). ValueError (the library's message) as prefill.)doc";

constexpr const char* kPrefillChunk =
    R"doc(Chunked prefill: scores the chunk_len prompt tokens appended last (Keyformer Algorithm 1, prompt
phase, one chunk). Every KV head must hold n = (tokens of earlier chunks) + chunk_len prompt tokens.
logits: float32 [n_q_heads, chunk_len, n], x[h, r, c] = logit of the chunk's query r (prompt token
n - chunk_len + r) against slot c; only c <= n - chunk_len + r is read (-inf = masked); None for the
policies scored without logits. gumbel: optional pre-drawn noise, same shape ('keyformer' with noise=True).
Then more chunks, or finish_prefill(); the chunks give prefill()'s result bit for bit. 'snapkv' raises
ValueError (its observation window is the prompt's last rows: use prefill). The GIL is
released. O(n_q_heads * chunk_len * n). ValueError (the library's message) on a finished prompt,
chunk_len = 0, a head holding another length, NaN / +inf logits; the cache is then unchanged.)doc";

constexpr const char* kFinishPrefill =
    R"doc(Ends a chunked prefill (prefill_chunk): evicts every KV head to min(k, P) tokens as prefill
does. The GIL is released. O(n_kv_heads * P * head_dim). ValueError (the library's message) when no chunk
was passed or the prompt is finished.)doc";

constexpr const char* kPrefillFromAttention =
    R"doc(H2O's prompt cut from the attention the model computed: sums float32 [n_q_heads, P], sums[h, c] =
the attention probability query head h's prompt queries gave slot c, summed over the queries (the column
sums of softmax(x[h]) over the causal prompt). Equals prefill(x) up to the order of the float additions,
without the [n_q_heads, P, P] logits or a second Q K^T. Policy 'h2o' only. Every KV head must hold the P
prompt tokens. The GIL is released. ValueError (the library's message) for another
policy, a value that is not finite and >= 0, a second prefill, ...; the cache is then unchanged.
O(n_q_heads * P + n_kv_heads * P * head_dim) (the sums, then the cut).)doc";

constexpr const char* kDecodeStep =
    R"doc(One decode step after appending the new token (every head holds n = previous length + 1
slots; with head_budgets='adaptive' n = max(lengths), head h's row read on lengths[h // g]):
logits float32 [n_q_heads, n] by slot (as kvevict.attention_logits returns them;
None allowed for 'streaming' / 'window' / 'knorm' / 'keydiff'); gumbel optional, same shape. Scores the step at tau_t
and, if n > k, evicts one slot per KV head by moving slot n - 1 into it (slot order is then
not position order). No allocation in C++; the GIL is released. O(n_q_heads * n).
ValueError (the library's message) if called before prefill, on a wrong n, NaN / +inf logits, ...;
the cache is then unchanged.)doc";

constexpr const char* kPositions =
    "Position IDs of KV head h by slot, int64 [lengths[h]] (a copy). IndexError if h is out of range.";
constexpr const char* kScores =
    "Scores of KV head h by slot, float32 [lengths[h]] (a copy), aligned with positions(h). IndexError if h is out "
    "of range.";
constexpr const char* kRetainedPositions =
    "Retained position IDs of KV head h, ascending, as a list of ints. O(n log n). IndexError if h is out of range.";
constexpr const char* kRestorePositionOrder =
    "Sorts every KV head's slots into ascending position order (K, V, positions and scores together). "
    "O(n log n + n * head_dim) per head.";
constexpr const char* kReset =
    "Starts a new sequence: lengths 0, scores 0, step 0, and re-seeds the noise generator with `seed` (default: the "
    "latest seed). K/V bytes are left as they are.";
constexpr const char* kCopyFrom =
    "Makes this cache a twin of other (a kvevict.Cache of the same policy, options, n_q_heads, n_kv_heads, head_dim "
    "and dtype) over its own storage: other's live K/V rows, positions, lengths, scores, recent window, step, tau, "
    "budget, noise seed and the rest of its eviction state are copied, so that from then on this cache gives what "
    "other would, bit for bit (beam search: a beam takes over another's cache). The capacity may differ if it holds "
    "other's lengths. Both caches' locks are held during the copy. copy_from(self) does nothing. Raises ValueError "
    "naming the first difference (policy, dtype, an option, budget, recent, ..., a length above this capacity), "
    "this cache unchanged. O(n_kv_heads * length * head_dim); allocates nothing.";
constexpr const char* kSetExecutor =
    "Runs this cache's scoring (prefill, prefill_chunk, decode_step; prefill_qk stays serial) on pool's workers, a "
    "kvevict.ThreadPool (the calling thread is one of them), or serially for None (the default). The results are "
    "bit-identical for any pool: each worker takes whole query heads (or chunk-aligned slot ranges of one) and every "
    "sum that crosses workers runs afterwards in one fixed order. The cache keeps pool alive; one pool may serve many "
    "caches and Python threads (one cache's call at a time runs on it). TypeError for anything else, ValueError "
    "for a cache without parallel scoring; the cache is then unchanged. Allocates the per-task row scratch "
    "(O(min(workers, n_q_heads) * capacity)).";
constexpr const char* kExecutor = "The kvevict.ThreadPool set by set_executor, or None.";
constexpr const char* kPromptSums =
    "What prefill_from_attention takes as this cache's prompt score, a dict: {'kind': 'attention'} for h2o (the "
    "attention probabilities summed over the prompt's queries), {'kind': 'gumbel', 'seed', 'tau', 'noise_scale', "
    "'noise'} for keyformer (softmax((x + noise_scale * zeta) / tau) summed over the queries, zeta drawn with the "
    "cache's seed), {'kind': 'none'} for the other policies (prefill_from_attention refuses). "
    "kvevict.causal_attention(..., sums_for=cache) computes them. ValueError for a tau the schedule makes invalid.";
constexpr const char* kCausalAttention =
    "causal_attention(q, k, v, *, scale=None, first=0, sums=False, sums_for=None, pool=None) -> (out, sums): the "
    "prompt's causal "
    "attention softmax(scale * q k^T + causal mask) v per query head (GQA: query head h reads KV head "
    "h // (n_q_heads // n_kv_heads)), and with sums=True each key's probability summed over the queries, H2O's prompt "
    "score (Zhang et al. 2023, section 4), as Cache.prefill_from_attention takes it - in one fused pass "
    "(FlashAttention's online softmax, a block of 32 queries at a time), never materialising the P x P logits. "
    "q [n_q_heads, P, head_dim], k and v [n_kv_heads, P, head_dim]: float32 arrays or CPU tensors, any strides "
    "with the last axis contiguous (transformers' query / key / value of one sequence, no copy). scale: the "
    "logits' factor (default 1 / sqrt(head_dim)); first: tokens before it are left padding (no query attends them, "
    "their output rows are 0, their queries add nothing to the sums); pool: a kvevict.ThreadPool (None: the "
    "calling thread). Returns out [P, n_q_heads, head_dim] (transformers' attention output layout) and sums "
    "[n_q_heads, P] float32 (None unless sums=True or sums_for). sums_for=cache (a kvevict.Cache whose policy takes "
    "prompt sums: Cache.prompt_sums) gives instead the sums that cache's prefill_from_attention takes: h2o's as "
    "sums=True, keyformer's softmax((x + s * zeta) / tau0) with its seed, tau0 and noise (a noise draw and an exp "
    "more per logit); ValueError for another policy or with sums=True as well. Work: n_q_heads * P^2 * head_dim multiply-adds; memory "
    "n_kv_heads * P * head_dim floats, 16 * n_q_heads * P per sums asked for, and 32 * g * (P + 3 * head_dim) per "
    "running task (twice P for keyformer's sums); the result does not depend on the pool's workers. Runs without "
    "the GIL. TypeError / ValueError "
    "naming the argument: arrays of another dtype, rank, shape or stride, head_dim not a multiple of 16, "
    "n_q_heads not a multiple of n_kv_heads, first >= P, a scale not positive and finite.";
constexpr const char* kAttentionMaxes =
    "attention_maxes(q, k, *, query_offset, scale=None, first=0, pool=None) -> maxes: each key's largest attention "
    "probability over the last queries of a causal sequence - KVzip's reconstruction score (Kim et al. 2025, section "
    "3.2: the queries are the context's repeat, query_offset the keys before it). Query row i sits at position "
    "query_offset + i and attends keys [first, query_offset + i] with softmax(scale * q k^T) (GQA: query head h reads "
    "KV head h // (n_q_heads // n_kv_heads)); maxes[h, c] = max over the queries of head h of the probability of key "
    "c (0 for a key no query sees); take the max over a KV head's group for KVzip's per-KV-head score. One fused "
    "pass (causal_attention's tiles, no P x P matrix, no output: only Q K^T and the exps). q [n_q_heads, P - "
    "query_offset, head_dim], k [n_kv_heads, P, head_dim]: float32 arrays or CPU tensors, last axis contiguous. "
    "Returns maxes [n_q_heads, P] float32. Work: n_q_heads * (P - query_offset) * (P + query_offset) / 2 * head_dim "
    "multiply-adds (Q K^T once: each 32-query block keeps its exps until its row sums are known); memory "
    "n_kv_heads * P * head_dim floats for K in panels, 16 * n_q_heads * P of partial maxes and 32 * g * (P + 3 * "
    "head_dim) per running task; the result does not depend on the pool's workers. Runs without the GIL. "
    "TypeError / ValueError naming the argument: another dtype, rank or stride, q's rows not P - query_offset, query_offset >= P, head_dim not a multiple of 16, n_q_heads not a "
    "multiple of n_kv_heads, first >= P, a scale not positive and finite.";
constexpr const char* kThreadPool =
    "ThreadPool(workers): workers - 1 threads plus the calling one, for Cache.set_executor. The threads start now "
    "and stop when the pool is deleted (after the last cache using it). After a call its threads spin for 20000 "
    "pause instructions (about 20 us to 1 ms, by CPU), then sleep: beside another library's busy threads (torch's) "
    "on few cores, measure before sharing them. TypeError for a non-int, ValueError outside [1, 1024], RuntimeError "
    "if the system cannot start a thread (the ones started are stopped first); more workers than CPUs only slows "
    "the calls.";
constexpr const char* kK =
    "Keys, [n_kv_heads, capacity, head_dim] of dtype, no copy (slots [0, lengths[h]) of head h are live). Owned "
    "storage stays alive as long as this array does, even after the cache is deleted.";
constexpr const char* kV = "Values, same layout and lifetime as k.";
constexpr const char* kBudget = "Resolved budget k; 0 until the first prefill resolves it (see budget_resolved).";
constexpr const char* kBudgetResolved =
    "Whether the budget is resolved (after prefill): before, budget reads 0, which does not mean 'keep nothing'.";
constexpr const char* kTemperature =
    "Temperature tau used by the latest prefill or decode step (1 for policies without one).";

constexpr const char* kSelectKeep =
    R"doc(The recent-window + top-k selection rule (Keyformer §3.3, H2O §4): of n candidates in
position order keep min(k, n): the last w (recent window) plus the k - w highest scores among
the others (ties keep the older). scores: a sequence of numbers or a 1-D float32 array
(as float32). Returns the kept indices, ascending.
select_keep([0.40, 0.20, 0.10, 0.05, 0.25], 3, 1) == [0, 1, 4]. Average O(n).
ValueError if k < 1, w > k or a score is NaN.)doc";

constexpr const char* kAttentionLogits =
    R"doc(Decode-step logits over the cache's live slots (kvevict::attention_logits):
x[h, s] = scale * (q[h] . K[h // g, s]) (+ bias[h, s]), by slot, as decode_step expects.
q: float32 [n_q_heads, head_dim] (RoPE applied); scale: default 1 / sqrt(head_dim);
bias: optional float32 [n_q_heads, n]; out: optional writeable float32 [n_q_heads, n] to
fill (else a new array). n = max(lengths); with head_budgets='adaptive' the heads hold different
lengths, and query head h's row past its KV head's lengths[h // g] is -inf (bias not added there). Returns out.
O(n_q_heads * n * head_dim); the GIL is released. ValueError, with out untouched, if the
cache's length changed between the checks of the arguments and the kernel (another thread,
or an argument's __array__, appended or stepped the cache meanwhile).)doc";

constexpr const char* kQueryStatistics =
    R"doc(QueryStatistics(n_q_heads, head_dim): one layer's running mean and covariance of its pre-RoPE
queries, per query head (Expected Attention, Devoto et al. 2025, §3.1; C++ kvevict::QueryStatistics), summed
in float64. kvpress leaves out the prompt's first 4 rows (their hidden states carry the sinks' outliers): add
the rows from position 4 on, then each decode step's query. Memory 8 * n_q_heads * (head_dim^2 + head_dim)
bytes. Calls on one object are serialised by a lock.)doc";

constexpr const char* kQueryStatisticsAdd =
    R"doc(Adds query rows q: float32 [rows, n_q_heads, head_dim], C-contiguous, before RoPE.
O(rows * n_q_heads * head_dim^2); the GIL is released. ValueError (nothing added) for a wrong shape or
dtype, or a non-finite element (named by row, head and index).)doc";

constexpr const char* kExpectedAttentionLogits =
    R"doc(expected_attention_logits(stats, cache, *, next_position, rope_theta=10000.0,
rope_style='half_split', n_future_positions=512, n_sink=4, use_covariance=True, use_vnorm=True, epsilon=0.0)

The logits that make a 'tova' Cache rank its held tokens by Expected Attention (kvpress's
ExpectedAttentionPress): float32 [n_q_heads, n], n = max(cache.lengths), by slot; row h holds
log(score[h // g][s]) for the slots of its KV head and -inf past its length, where score is the attention
the next n_future_positions queries (Gaussian, from stats' mean and covariance, rotated by the average RoPE of
positions next_position ..) are expected to pay each held key, times ||v||; the n_sink held tokens with the
lowest positions of each KV head score the layer's largest score + 1 (always kept). next_position: the
prompt's length at prefill, the new token's position + 1 after a decode step's append. rope_style:
'half_split' (Hugging Face's rotate_half) or 'interleaved' (Meta / llama2.c); rope_theta the model's base.
Use: cache.prefill(x[:, :]) with these rows as the prompt's last row (a 'tova' cache takes [n_q_heads, P]),
then, each step after append and stats.add(q), cache.decode_step(expected_attention_logits(...)).
O(n_q_heads * (n * d^2 + d^3) + d * F); the GIL is released. ValueError for mismatched sizes (stats of
another layer), options out of range, a non-finite key or value, or no query rows in stats.)doc";

constexpr const char* kPagedAttentionLogits =
    R"doc(The same over a PagedCache (kvevict::paged_attention_logits): x[h, s] for the
sequence's logical slots s in [0, length), read through its page table; n = length, and the
same ValueError if it changed during the call.)doc";

constexpr const char* kReplay =
    R"doc(Replays a policy over one layer's attention-logit trace, exactly as kvevict-replay does
(the library itself runs it), and returns its JSON Lines records as dicts:
[{"t": t, "tau": tau, "kept": [[positions of KV head 0, ascending], ...],
  "scores": [[matching scores], ...]}, ...], one after prefill (t = P - 1) and one per decode
position t = P .. N - 1.

logits: float32 [H_q, N, N] (row t = query at position t; only j <= t is read), copied.
policy: as Cache (default 'keyformer'). q_heads_per_kv: g (default 1).
budget / recent: as in Cache (int tokens, float fraction, or '50%'; defaults '50%' and '30%' for
'keyformer', 'h2o', 'snapkv', else 0); kvevict-replay's --budget / --budget-ratio and --recent /
--recent-ratio. sinks: 'streaming' / 'window' sinks (default 4).
'keyformer' only (ValueError for another policy): tau_init (default 1), tau_end (default 2),
gen_steps (horizon T, default N - P), noise ('auto' when None, 'none', 'gumbel' (seeded generator)
or 'trace' (the gumbel array, float32 [H_q, N, N])), gumbel, seed (default 42).
shared_heads: one selection from scores summed over KV heads.
head_budgets: as Cache ('uniform', 'adaptive' or 'adaptive:ALPHA'; kvevict-replay --head-budgets).
The GIL is released. ValueError naming the argument on bad input.)doc";

constexpr const char* kPagePool =
    R"doc(One layer's K and V page pools in NumPy arrays, shared by the sequences (PagedCache) of
the layer, and the pool of page ids (kvevict::PagePool: a fresh pool hands out pages 0, 1, 2, ...;
the most recently freed page is handed out first).

PagePool(k=None, v=None, *, num_pages=None, page_size=None, n_kv_heads=None, head_dim=None,
         dtype=None, layout='NHD')

k, v        caller pools: writeable C-contiguous float32 or float16 arrays of one dtype and shape
            [num_pages, page_size, n_kv_heads, head_dim] (layout 'NHD', vLLM / FlashInfer NHD) or
            [num_pages, n_kv_heads, page_size, head_dim] ('HND'), not overlapping; wrapped without a
            copy, the pool (and so every PagedCache over it) keeps them alive.
num_pages, page_size, n_kv_heads, head_dim, dtype
            without k and v: the pool allocates zeroed pools of that shape (dtype 'float32' or
            'float16', default float32); with k and v: taken from k (do not pass them).
layout      'NHD' (default) or 'HND'.

ValueError naming the argument for a wrong dtype, shape, layout, a read-only or non-contiguous
array, overlapping k and v, or num_pages above 2^31 - 1.)doc";

constexpr const char* kPagedCache =
    R"doc(One sequence of one layer over a PagePool (kvevict::make_paged_cache): the same policies,
options and protocol as Cache, with the sequence's K/V in pages of the pool. All KV heads share one
selection (scores summed over KV heads, as Cache with shared_heads=True, which the token unit equals
bit for bit). Deleting the cache (or reset) returns its pages to the pool.

PagedCache(policy, pool, *, n_q_heads, max_pages=None, budget='50%', recent=None, unit='token',
           start_pages=0, page_score='sum', sinks=None, tau_init=None, tau_end=None, horizon=None,
           noise=None, seed=None, snap_window=None, snap_kernel=None, snap_pooling=None,
           snap_decode=None, mean_attention=None)

pool        the kvevict.PagePool (kept alive by the cache).
max_pages   entries of the sequence's page table (capacity max_pages * page_size slots; default
            the pool's num_pages).
unit        'token': evicts single tokens (an eviction moves the last slot into the hole; a page
            emptied at the end of the table goes back to the pool); 'page': the sequence is cut only
            by whole pages once it exceeds k by a page: the middle page (not one of the first
            start_pages, not holding one of the last max(w, 1) tokens) with the lowest page_score
            ('sum' or 'mean' of its tokens' scores) leaves the table, no K/V bytes move.
start_pages, page_score
            page unit only (ValueError with the token unit unless 0 and 'sum').
Other options as Cache (no shared_heads: always one selection). ValueError / TypeError /
OverflowError as Cache, with the library's message.)doc";

constexpr const char* kPagedAppend =
    R"doc(Appends one token: k and v [n_kv_heads, head_dim] of the pool's dtype are written into
slot length of the sequence (its last page, or a page taken from the pool when that is full), with
position ID `position`. All-or-nothing: OverflowError if the sequence is at capacity or the pool has
no free page, ValueError for a wrong array.)doc";

constexpr const char* kPagedPrefill =
    R"doc(Scores the prompt and evicts (Cache.prefill): the sequence holds the P prompt tokens;
logits float32 [n_q_heads, P, P] (None for 'streaming' / 'window'), gumbel optional. Token unit:
keeps min(k, P) tokens in position order and returns the emptied pages; page unit: evicts
floor((P - k) / page_size) middle pages. The GIL is released; ValueError leaves everything unchanged.)doc";

constexpr const char* kPagedDecodeStep =
    R"doc(One decode step after append (Cache.decode_step): logits float32 [n_q_heads, n] by
logical slot, n = length; gumbel optional. Token unit: if n > k evicts one token; page unit: evicts
a middle page when n - k reaches page_size. No allocation in C++; the GIL is released.)doc";

constexpr const char* kPagedRestorePositionOrder =
    "Token unit: sorts the logical slots into ascending position order (K, V rows, positions and scores "
    "together; pages stay where they are). Page unit: slots are always in position order.";
constexpr const char* kPagedReset =
    "Ends the sequence: returns all its pages to the pool (page table entries -1, length 0), scores 0, step 0, "
    "and re-seeds the noise generator with `seed` (default: the latest seed).";
constexpr const char* kPageTable =
    "The sequence's page table, int32 [max_pages] (a copy): entry i is the pool page holding logical slots "
    "[i * page_size, (i + 1) * page_size); -1 (no page) past pages_in_use.";

}  // namespace kvpy::doc
