#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ (run from anywhere; idempotent).

The named regression seeds encode the exact scenarios of faults found earlier in the byte layout the harnesses
read with FuzzedDataProvider: integers are taken from the END of the input, most significant byte
first, as many bytes as the range needs (ConsumeIntegralInRange), so an `Encoder` below writes the
harness's choices in call order and reverses them. Keep it in step with the harnesses' call order.
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE_MAX = 2**64 - 1
# kvfuzz::kHugeSizes and kHugeStrides (fuzz_util.hpp), the sizes no array can have (issue 51).
HUGE_SIZES = [2**62, 2**62 + 1, 2**63, 2**63 + 1, SIZE_MAX // 3, SIZE_MAX // 2, SIZE_MAX - 1, SIZE_MAX]
HUGE_STRIDES = [2**63, 2**63 + 1, 2**63 + 2**62, SIZE_MAX - 1, SIZE_MAX]


class Encoder:
    """Records the integer choices a harness makes, in call order."""

    def __init__(self):
        self.tail = []  # consumption order

    def int_in(self, v, lo, hi):
        r, val = hi - lo, v - lo
        assert 0 <= val <= r, (v, lo, hi)
        n = 0
        while n < 8 and (r >> (8 * n)) > 0:
            n += 1
        for i in reversed(range(n)):
            self.tail.append((val >> (8 * i)) & 0xFF)
        return self

    def boolean(self, b):
        return self.int_in(1 if b else 0, 0, 255)

    def u8(self, v):
        return self.int_in(v, 0, 255)

    def u64(self, v):
        return self.int_in(v, 0, 2**64 - 1)

    def pick(self, index, size):
        return self.int_in(index, 0, size - 1)

    def bytes(self, front=b""):
        return front + bytes(reversed(self.tail))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- cache_ops (see cache_ops.cpp)
TAUS = [1.0, 2.0, 0.5, 0.0, -1.0, "nan", "inf", "-inf", 1e-40, 1e-38, "min", 1e-30, 1e30, "max", 1e-45, 1e-20]


class CacheOps(Encoder):
    def layer(self, elem=0, nkv=1, cap=9, hd=2, slot_major=False, pad=0, twin=False, hostile=None):
        """`hostile`: (field, value), a cache over the view with that field (0 n_kv_heads, 1 capacity, 2 head_dim,
        3 head_stride, 4 slot_stride) set to a value of HUGE_SIZES, which must be refused (the input ends there)."""
        self.cap = cap
        self.int_in(elem, 0, 2).int_in(nkv, 1, 4)
        if cap > 512:
            self.int_in(0, 0, 31).int_in(cap, 513, 540)
        else:
            self.int_in(1, 0, 31).int_in(cap, 1, 40)
        self.int_in(hd, 1, 8).boolean(slot_major).int_in(pad, 0, 2)
        self.int_in(0 if twin else 1, 0, 3)  # 0: a twin on real threads
        if hostile is not None:
            return self.int_in(63, 0, 63).int_in(hostile[0], 0, 4).pick(HUGE_SIZES.index(hostile[1]), 8)
        return self.int_in(1, 0, 63)  # 1: no append before construction

    def count(self, v):  # pick_count
        special = {SIZE_MAX: 0, 2**53: 1, 2**53 + 1: 2, 2**63: 3, SIZE_MAX - 1: 4}
        if v in special:
            return self.int_in(special[v], 0, 9)
        if v <= self.cap + 3:
            return self.int_in(6, 0, 9).int_in(v, 0, self.cap + 3)
        return self.int_in(5, 0, 9).int_in(v, 0, 255)

    def config(self, g=1, k=None, k_ratio=None, w=None, w_ratio=None, shared=False, seed=0, bounded=False,
               max_chunk=0, huge_q=None):
        self.int_in(g, 1, 3)
        if huge_q is None:
            self.int_in(1, 0, 31)  # 1: no n_q override
        else:
            self.int_in(0, 0, 31).boolean(False).pick(huge_q, 3)
        self.bounded, self.max_chunk = bounded, max_chunk
        if k is not None:
            self.boolean(True).count(k)
        else:
            self.boolean(False).int_in(8, 0, 11).int_in(int(k_ratio * 64), 0, 160)
        if w is not None:
            self.boolean(True).count(w)
        elif w_ratio == 1.0:
            self.boolean(False).int_in(7, 0, 11)
        else:
            self.boolean(False).int_in(8, 0, 11).int_in(int(w_ratio * 64), 0, 160)
        self.boolean(shared).u64(seed).int_in(0 if bounded else 1, 0, 3)
        if max_chunk == 0:
            return self.boolean(True)
        return self.boolean(False).int_in(max_chunk, 0, self.cap + 2)

    def executor(self, workers_index=0, backwards=False):  # workers {1, 2, 3, 7, 16, SIZE_MAX}
        return self.pick(workers_index, 6).boolean(backwards)

    def keyformer_linear(self, tau_init_index, tau_end_index, horizon, noise=False, workers=0):
        return self.int_in(0, 0, 7).boolean(noise).pick(tau_init_index, 16).pick(tau_end_index, 16) \
            .boolean(True).int_in(horizon, 0, 5).executor(workers)

    def h2o(self, workers=0):
        return self.int_in(3, 0, 7).boolean(False).executor(workers)

    def key_score(self, workers=0):  # H2O's choice with noise byte 0xFE: FirstElementKeyScore (issue 37)
        return self.int_in(3, 0, 7).u8(0xFE).executor(workers)

    def hostile_selection(self, workers=0):  # TOVA's choice with noise byte 0xFF: HostileSelectionScore
        return self.int_in(4, 0, 7).u8(0xFF).executor(workers)

    def streaming(self, sinks, workers=0):
        return self.int_in(5, 0, 7).boolean(False).boolean(True).int_in(sinks, 0, 6).executor(workers)

    def append_next(self, times=1):
        for _ in range(times):
            self.int_in(0, 0, 15).int_in(1, 0, 31).int_in(6, 0, 15)
        return self

    def append_run(self, count):  # `count` tokens at the next positions, one op
        return self.int_in(0, 0, 15).int_in(0, 0, 31).int_in(count, 1, self.cap)

    def logits(self, values):
        """Clean-mode floats: None = -inf, else (b - 100) / 8."""
        if all(v == 0 for v in values):
            return self.int_in(3, 0, 3)
        self.int_in(0, 0, 3)
        for v in values:
            self.u8(255 if v is None else int(v * 8 + 100))
        return self

    def prefill(self, values, null=False, huge_p=None):
        """`huge_p`: prompt_len from HUGE_SIZES (over 16 floats of logits), which must be refused."""
        if huge_p is not None:
            self.int_in(4, 0, 15).int_in(8, 0, 15).pick(HUGE_SIZES.index(huge_p), 8).logits(values)
        else:
            self.int_in(4, 0, 15).int_in(1, 0, 15).logits(values)
        return self.int_in(0 if null else 2, 0, 7)

    def decode(self, values, null=False, huge_n=None):
        if huge_n is not None:
            self.int_in(6, 0, 15).int_in(8, 0, 15).pick(HUGE_SIZES.index(huge_n), 8).logits(values)
        else:
            self.int_in(6, 0, 15).int_in(1, 0, 15).logits(values)
        return self.int_in(0 if null else 2, 0, 7)

    def restore(self):
        return self.int_in(9, 0, 15)

    def chunk(self, values):
        """prefill_chunk of every slot appended since the last chunk, logits `values`, no noise."""
        self.int_in(11, 0, 15).int_in(1, 0, 11).int_in(1, 0, 15).logits(values)
        return self.int_in(2, 0, 7)

    def chunk_qk(self, q_values, nq_mode=3, huge_nq=None):
        """prefill_chunk_qk of every slot appended since; nq_mode 0: twice the cache's n_q_heads; `huge_nq`: an
        n_q_heads from HUGE_SIZES (q of 16 values), which must be refused."""
        self.int_in(13, 0, 15).int_in(1, 0, 11)
        if huge_nq is not None:
            self.int_in(8, 0, 15).pick(HUGE_SIZES.index(huge_nq), 8)
        else:
            self.int_in(nq_mode, 0, 15)
        for v in q_values:
            self.int_in(v, -16, 16)
        return self.int_in(1, 0, 15).boolean(True)

    def finish(self):
        return self.int_in(14, 0, 15)


def cache_ops_seeds():
    # Regression: StreamingLLM, 1 KV head, capacity 9, head_dim 2, k = 4, w = 50, 2 sinks;
    # positions 0..7, prefill(nullptr, 8), five decode steps, restore_position_order().
    e = CacheOps().layer(cap=9, hd=2).config(k=4, w=50).streaming(2)
    e.append_next(8).prefill([0] * 64, null=True)
    for _ in range(5):
        e.append_next().decode([0] * 9, null=True)
    write("cache_ops", "regression-streamingllm-w-gt-k", e.restore().bytes())

    # Regression: Keyformer, LinearTemperature(1e-40, 2, T), k = 2, P = 3, all logits 0.
    e = CacheOps().layer(cap=6, hd=1).config(k=2, w=0).keyformer_linear(8, 1, 5)
    e.append_next(3).prefill([0] * 9)
    write("cache_ops", "regression-tiny-tau-prefill", e.bytes())

    # Regression: Budget::tokens(SIZE_MAX), RecentWindow::ratio(1.0), H2O, P = 1.
    e = CacheOps().layer(cap=4, hd=1).config(k=SIZE_MAX, w_ratio=1.0).h2o()
    e.append_next(1).prefill([0])
    write("cache_ops", "regression-huge-token-budget", e.bytes())

    # Regression: H2O, k = 3, w = 2, P = 3, rows {0,-inf,-inf}, {0,0,-inf}, {0,0,-inf};
    # append(3), restore_position_order(), decode_step({0, 0, -inf, 0}, 4): position 2 must stay.
    inf = None
    e = CacheOps().layer(cap=6, hd=1).config(k=3, w=2).h2o()
    e.append_next(3).prefill([0, inf, inf, 0, 0, inf, 0, 0, inf])
    e.append_next().restore().decode([0, 0, inf, 0])
    write("cache_ops", "regression-restore-between-append-and-decode", e.bytes())

    # Plain runs: H2O and StreamingLLM over GQA, half and bf16, slot-major, decode past the budget.
    for elem in range(3):
        e = CacheOps().layer(elem=elem, nkv=2, cap=12, hd=3, slot_major=elem == 1, pad=elem).config(g=2, k=4, w=1).h2o()
        e.append_next(6).prefill([0] * (4 * 36))
        for _ in range(4):
            e.append_next().decode([0.5] * (4 * 5))
        write("cache_ops", "h2o-gqa-elem%d" % elem, e.restore().bytes())
    e = CacheOps().layer(nkv=3, cap=10, hd=4).config(k=5, w=0, shared=True).streaming(1)
    e.append_next(5).prefill([0] * 75, null=True)
    for _ in range(6):
        e.append_next().decode([0] * 18, null=True)
    write("cache_ops", "streaming-shared", e.bytes())
    e = CacheOps().layer(cap=10, hd=2).config(k_ratio=0.5, w=1).keyformer_linear(0, 1, 3, noise=True)
    e.append_next(6).prefill([0.25] * 36)
    for _ in range(3):
        e.append_next().decode([0.125] * 4)
    write("cache_ops", "keyformer-noise-ratio", e.bytes())

    # Chunked prefill (3 + 4 + 2 rows) then finish: equals a one-shot prefill bit for bit (H2O, GQA).
    e = CacheOps().layer(nkv=2, cap=12, hd=2).config(g=2, k=5, w=1).h2o()
    held = 0
    for C in (3, 4, 2):
        e.append_next(C).chunk([((i * 7) % 13 - 6) / 4 for i in range(4 * C * (held + C))])
        held += C
    write("cache_ops", "chunked-h2o-equals-one-shot", e.finish().decode([0.5] * 40).bytes())
    # Bounded chunked prefill, Keyformer with noise: chunks of 4 over k = 5, max_prefill_chunk 4.
    e = CacheOps().layer(cap=12, hd=1).config(k=5, w=1, bounded=True, max_chunk=4).keyformer_linear(0, 1, 3, True)
    n = 0
    for _ in range(3):
        e.append_next(4).chunk([0.25] * (4 * (n + 4)))
        n = min(n + 4, 5)
    write("cache_ops", "bounded-keyformer-chunks", e.finish().bytes())
    # Regression: prefill_chunk_qk with twice the cache's n_q_heads read q with the wrong stride.
    e = CacheOps().layer(nkv=1, cap=8, hd=2).config(g=2, k=3, w=1).h2o()
    write("cache_ops", "regression-qk-wider-n-q-heads", e.append_next(4).chunk_qk([1] * (4 * 4 * 2), 0).bytes())
    # Regression: 2 KV heads, rows of 514 slots, an executor claiming SIZE_MAX workers, a twin on real
    # threads: (W + n_kv - 1) / n_kv wrapped to 0 and no slot of the step was scored.
    e = CacheOps().layer(nkv=2, cap=520, hd=1, twin=True).config(g=1, k=515, w=1).h2o(workers=5)
    e.append_run(513).prefill([0] * (2 * 513 * 513))
    write("cache_ops", "regression-size-max-workers-long-rows",
          e.append_next().decode([(i % 5) / 4 for i in range(2 * 514)]).bytes())
    # Regression: n_q_heads = 2^40 + 1 threw std::bad_alloc before the check that names it.
    e = CacheOps().layer(cap=8, hd=1).config(k=3, w=1, huge_q=0).h2o()
    write("cache_ops", "regression-n-q-heads-2pow40", e.bytes())


def cache_ops_issue51_seeds():
    """Issue 51: size arguments from HUGE_SIZES, each refused before anything is sized or addressed."""
    # A view with 2 KV heads whose head_stride is 2^63: K's extent overflows std::size_t (it was accepted).
    e = CacheOps().layer(nkv=2, cap=8, hd=2, hostile=(3, 2**63)).config(k=3, w=1).h2o()
    write("cache_ops", "issue51-view-head-stride-2pow63", e.bytes())
    # A view of capacity 2^62: n_kv_heads * capacity position IDs overflow.
    e = CacheOps().layer(cap=8, hd=2, hostile=(1, 2**62)).config(k=3, w=1).h2o()
    write("cache_ops", "issue51-view-capacity-2pow62", e.bytes())
    # head_dim (and slot_stride) SIZE_MAX / 3 over one slot: K's bytes exceed PTRDIFF_MAX.
    e = CacheOps().layer(cap=1, hd=2, hostile=(2, SIZE_MAX // 3)).config(k=3, w=1).h2o()
    write("cache_ops", "issue51-view-head-dim-size-max-div-3", e.bytes())
    # H2O, k = 3: a prefill with prompt_len 2^63, a decode step with n = SIZE_MAX, a prefill_chunk_qk with
    # n_q_heads 2^62; then the real prompt and a step.
    e = CacheOps().layer(cap=8, hd=2).config(k=3, w=1).h2o()
    e.append_next(4).prefill([0] * 16, huge_p=2**63).decode([0] * 16, huge_n=SIZE_MAX)
    e.chunk_qk([1] * 16, huge_nq=2**62)
    e.prefill([0] * 16).append_next().decode([0] * 5)
    write("cache_ops", "issue51-huge-prompt-step-and-qk-heads", e.bytes())


# ---------------------------------------------------------------- paged_ops (see paged_ops.cpp)
def paged_ops_issue51_seeds():
    """Issue 51: a page-unit window cache (one float sequence of 10 pages of 2 slots, 1 KV head, head_dim 2, the
    pool's own free list, k = 8, w = 0) whose start_pages is huge: start_pages * page_size wrapped, so the rule
    k >= start_pages * page_size + max(w, 1) held and the cache was built; and one whose view is given
    max_pages = 2^62 (its position IDs overflow), refused before any allocation."""
    for name, start_pages, hostile, ratio in (("issue51-page-unit-start-pages-2pow63", 2**63, None, False),
                                              ("issue51-page-unit-start-pages-size-max", SIZE_MAX, None, False),
                                              ("issue51-view-max-pages-2pow62", 1, (4, 2**62), False)):
        e = Encoder().int_in(1, 0, 3)  # float
        e.int_in(16, 1, 24).int_in(1, 0, 15).int_in(2, 1, 6).int_in(1, 1, 3).int_in(2, 1, 4).boolean(False)
        e.int_in(1, 0, 2).int_in(1, 1, 3).int_in(10, 1, 10)  # own free list; one sequence of 10 pages
        e.int_in(1, 1, 3)  # n_q_heads = 1
        if hostile is None:
            e.int_in(1, 0, 31)
        else:
            e.int_in(0, 0, 31).int_in(8 + hostile[0], 0, 15).pick(HUGE_SIZES.index(hostile[1]), 8)
        e.int_in(0 if ratio else 1, 0, 3).boolean(True)  # a ratio (0.5) or token budget; a token window
        e.int_in(2, 0, 15).int_in(8, 0, 22).int_in(2, 0, 15).int_in(0, 0, 22)  # k = 8, w = 0
        e.int_in(32, 0, 80).int_in(0, 0, 70).int_in(1, 0, 31).u64(0)  # (ratios unused), shared heads, seed
        e.boolean(True)  # the page unit
        if start_pages in HUGE_SIZES:
            e.int_in(0, 0, 3).int_in(3, 0, 7).pick(HUGE_SIZES.index(start_pages), 8)
        else:
            e.int_in(0, 0, 3).int_in(start_pages, 0, 7)
        e.int_in(1, 0, 3).pick(0, 6).pick(0, 6).int_in(0, 0, 6).boolean(False).int_in(0, 0, 5)
        e.pick(3, 8).int_in(1, 0, 3).pick(0, 5)  # Policy::window, no mean attention, 1 worker
        write("paged_ops", name, e.bytes())


# ---------------------------------------------------------------- select_keep
def cache_ops_issue37_seeds():
    # Issue 37: a key score of -0.0 (keys in (-1e30, 0)) must be stored as +0.0; k = 3, w = 0, P = 6 and
    # decode steps past the budget, per KV head and shared.
    for shared in (False, True):
        e = CacheOps().layer(nkv=2, cap=12, hd=1).config(k=3, w=0, shared=shared).key_score()
        e.append_next(6).prefill([0] * 36, null=True)
        for _ in range(5):
            e.append_next().decode([0] * 8, null=True)
        write("cache_ops", "regression-key-score-negative-zero" + ("-shared" if shared else ""), e.bytes())
    # Issue 37: a selection score of NaN (slot 0's H2O score 2.45 > 1.5 over 6 rows of zeros) must throw, not
    # keep k + 1 tokens; then a prompt of 2 rows (scores <= 1.5, the small ones -0.0) is cut to k = 1.
    e = CacheOps().layer(cap=10, hd=2).config(k=4, w=1).hostile_selection()
    e.append_next(6).prefill([0] * 36)
    for _ in range(3):
        e.append_next().decode([0] * 7)
    write("cache_ops", "regression-selection-score-nan", e.bytes())
    e = CacheOps().layer(cap=6, hd=1).config(k=1, w=0).hostile_selection()
    e.append_next(2).prefill([0, None, 0, 0])
    write("cache_ops", "regression-selection-score-negative-zero", e.append_next().decode([0, 0, 0]).bytes())


def select_keep_seeds():
    import random
    rng = random.Random(8)
    for i, n in enumerate([0, 1, 5, 40, 200]):
        write("select_keep", "random-%d" % i, bytes(rng.randrange(256) for _ in range(n + 8)))
    # Quickstart example: scores [0.40, 0.20, 0.10, 0.05, 0.25] ~ bytes 240.. are specials; plain
    # bytes b give (b % 16) / 8. k = 3, w = 1, n = 5, then the scores (front bytes are unused).
    e = Encoder().int_in(3, 0, 70).int_in(1, 0, 70).int_in(1, 0, 15).int_in(1, 0, 15).int_in(5, 0, 300)
    for b in [3, 2, 1, 0, 2]:
        e.u8(b)
    write("select_keep", "quickstart-k3-w1", e.int_in(0, 0, 4).bytes())


# ---------------------------------------------------------------- trace_json / replay_run
def trace(H=1, N=3, P=2, g=None, gumbel=False, meta=False):
    logits = [[[(0.25 * (t + j + h)) if j <= t else None for j in range(N)] for t in range(N)] for h in range(H)]
    d = {"prompt_len": P, "logits": logits}
    if g is not None:
        d["q_heads_per_kv"] = g
    if gumbel:
        d["gumbel"] = [[[(0.5 - 0.125 * j) if j <= t else None for j in range(N)] for t in range(N)] for h in range(H)]
    if meta:
        d["meta"] = {"model": "synthetic", "layer": 0, "tokens": list(range(N))}
    return json.dumps(d).encode()


def trace_json_seeds():
    write("trace_json", "valid-1x3", trace())
    write("trace_json", "valid-gqa-gumbel-meta", trace(H=4, N=4, P=2, g=2, gumbel=True, meta=True))
    # Regression: a number beyond float range, and a small file claiming H = N = 1000.
    write("trace_json", "regression-1e400", b'{"logits":[[[1e400]]],"prompt_len":1}')
    write("trace_json", "regression-1e39", b'{"logits":[[[0, null], [1e39, 0]]],"prompt_len":1}')
    claim = b'{"prompt_len": 1, "logits": [[' + b",".join([b"[]"] * 1000) + b"]" + b",0" * 999 + b"]}"
    write("trace_json", "regression-claims-H-N-1000", claim)
    write("trace_json", "ragged", b'{"prompt_len": 1, "logits": [[[0, null], [1]]]}')


def replay_tail(policy=0, budget=None, recent_ratio=None, sinks=2, tau=(0, 1), noise=0, shared=False):
    """Options of replay_run.cpp, in its call order; P and g from the trace."""
    e = Encoder().pick(policy, 8)

    def count(v):
        if v == SIZE_MAX:
            e.int_in(0, 0, 7)
        else:
            e.int_in(3, 0, 7).int_in(v, 0, 12)

    if budget is None:
        e.int_in(0, 0, 3)
    else:
        e.int_in(1, 0, 3)
        count(budget)
    if recent_ratio is None:
        e.int_in(0, 0, 3)
    else:
        e.int_in(2, 0, 3).boolean(True).pick(6, 8)  # odd[6] = 1.0
    count(sinks)
    e.pick(tau[0], 13).pick(tau[1], 13).boolean(False).pick(noise, 4).u64(0).boolean(shared)
    e.int_in(1, 0, 3)
    count(0)
    e.int_in(1, 0, 3)
    count(0)
    return e


def replay_seeds():
    t = trace(H=2, N=5, P=3)
    for policy in range(5):
        write("replay_run", "policy%d" % policy, replay_tail(policy=policy, budget=2).bytes(t))
    write("replay_run", "keyformer-trace-noise", replay_tail(policy=0, budget=3, noise=3).bytes(trace(H=2, N=4, P=2, gumbel=True)))
    # The SIZE_MAX budget regression through the replay: --policy h2o --budget 18446744073709551615 --recent-ratio 1.
    write("replay_run", "regression-h2o-huge-budget-recent-ratio-1",
          replay_tail(policy=1, budget=SIZE_MAX, recent_ratio=1.0).bytes(trace(H=1, N=2, P=1)))


# ---------------------------------------------------------------- npy_reader
def npy(shape, values, descr="<f4", fortran=False, version=1):
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False", ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else ""))
    pre = 6 + 2 + (2 if version == 1 else 4)
    d += " " * ((64 - (pre + len(d) + 1) % 64) % 64) + "\n"
    ln = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + ln + d.encode() + struct.pack("<%df" % len(values), *values)


def npy_seeds():
    cube = npy((1, 3, 3), [0.5 * i for i in range(9)])
    write("npy_reader", "valid-1x3x3", b"\x01" + cube)
    write("npy_reader", "valid-v2", b"\x00" + npy((2, 2), [1, 2, 3, 4], version=2))
    write("npy_reader", "two-files", b"\x02" + bytes([len(cube) + 1]) + cube[1:] + cube)
    write("npy_reader", "truncated", b"\x01" + cube[:-3])
    write("npy_reader", "huge-shape", b"\x00" + npy((2**40, 2**40, 2**40), []))
    write("npy_reader", "fortran", b"\x00" + npy((2, 2), [1, 2, 3, 4], fortran=True))


# ---------------------------------------------------------------- llama2_load
def llama2_settings(e, raw, tok_mode, policy=1, prompt=(1, 2, 3)):
    e.int_in(0 if raw else 1, 0, 3).int_in(tok_mode, 0, 3).pick(policy, 6)
    e.boolean(True).int_in(2, 1, 6)  # budget: 2 tokens
    if policy != 5:
        e.boolean(True).int_in(1, 0, 2)  # recent: 1 token
    e.int_in(1, 0, 2).u8(0).int_in(len(prompt), 1, 14)
    for t in prompt:
        e.int_in(t, -1, 44)
    return e


def llama2_seeds():
    # Structured: dim 4, hidden 6, 2 layers, 2 heads, 1 KV head, vocab 12, seq_len 8; body of the exact size.
    header = [4, 6, 2, 2, 1, 12, 8]
    lo_hi = [(1, 16), (1, 16), (1, 3), (1, 4), (1, 4), (-40, 40), (1, 12)]
    for policy in range(6):
        e = llama2_settings(Encoder(), False, 0, policy=policy)
        for i, (v, (lo, hi)) in enumerate(zip(header, lo_hi)):
            if i == 5:
                e.int_in(1, 0, 3)  # not one of the real tokenizers' sizes
            e.int_in(1, 0, 15).int_in(v, lo, hi)
        e.int_in(9, 0, 9).int_in(1, 0, 7)  # exact size, clean weights
        d, hid, L, nh, nkv, V, S = header
        hd = d // nh
        floats = V * d + L * d * 2 + L * d * d * 2 + L * hd * nkv * d * 2 + L * hid * d * 3 + d + S * hd
        for i in range(floats):
            e.u8((i * 37) % 251)
        write("llama2_load", "structured-policy%d" % policy, e.bytes())
    # Raw files: the issue's header claiming 2^31 - 1 layers, a truncated header, the newer format.
    for name, body in [("regression-2pow31-layers", struct.pack("<7i", 8, 8, 2**31 - 1, 2, 2, 16, 8) + b"\0" * 64),
                       ("truncated-header", struct.pack("<5i", 8, 8, 1, 2, 2)),
                       ("ak42", b"ak42" + struct.pack("<6i", 1, 8, 8, 1, 2, 2) + b"\0" * 32)]:
        e = llama2_settings(Encoder(), True, 0)
        e.int_in(len(body), 0, len(body) + len(e.tail) - 0 if False else len(body))  # placeholder, fixed below
        write("llama2_load", name, body)  # raw mode needs the exact remaining-bytes range: see raw_seed()
    for name, body in [("regression-2pow31-layers", struct.pack("<7i", 8, 8, 2**31 - 1, 2, 2, 16, 8) + b"\0" * 64),
                       ("truncated-header", struct.pack("<5i", 8, 8, 1, 2, 2)),
                       ("ak42", b"ak42" + struct.pack("<6i", 1, 8, 8, 1, 2, 2) + b"\0" * 32)]:
        write("llama2_load", name, raw_seed(body))


def sp_model(pieces):
    """A minimal SentencePiece ModelProto: pieces (text, type), UNIGRAM trainer spec."""
    def field(tag, payload):
        n, out = len(payload), b""
        while True:
            out += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if n == 0:
                break
        return bytes([tag]) + out + payload
    body = b""
    for text, kind in pieces:
        piece = field(0x0A, text.encode()) + b"\x15" + struct.pack("<f", -1.0) + bytes([0x18, kind])
        body += field(0x0A, piece)
    return body + field(0x12, bytes([0x18, 1]))


def tokenizer_seeds():
    """Structured checkpoint with vocab 7 + a fuzzed (here: hand-made) 7-piece tokenizer + text."""
    tok = sp_model([("<unk>", 2), ("<s>", 3), ("</s>", 3), ("\u2581", 1), ("a", 1), ("b", 1), ("\u2581a", 1)])
    header = [4, 4, 1, 2, 2, 7, 6]
    lo_hi = [(1, 16), (1, 16), (1, 3), (1, 4), (1, 4), (-40, 40), (1, 12)]
    for name, vocab, text in [("tokenizer-handmade-vocab7", 7, b"a ab b"), ("tokenizer-vocab-mismatch", 9, b"ba")]:
        header[5] = vocab
        e = llama2_settings(Encoder(), False, 1, policy=2)
        for i, (v, (lo, hi)) in enumerate(zip(header, lo_hi)):
            if i == 5:
                e.int_in(1, 0, 3)
            e.int_in(1, 0, 15).int_in(v, lo, hi)
        e.int_in(9, 0, 9).int_in(1, 0, 7)
        d, hid, L, nh, nkv, V, S = header
        hd = d // nh
        floats = V * d + L * d * 2 + L * d * d * 2 + L * hd * nkv * d * 2 + L * hid * d * 3 + d + S * hd
        for i in range(floats):
            e.u8((i * 53) % 247)
        front = tok + text
        for n in (1, 2):
            f = Encoder()
            f.tail = list(e.tail)
            f.int_in(len(tok), 0, len(front) + n)
            if len(f.tail) - len(e.tail) == n:
                write("llama2_load", name, f.bytes(front))
                break
        else:
            raise AssertionError("no consistent length encoding")


def raw_seed(body):
    """Raw mode: the model bytes are the front `len(body)` bytes; their length is an integer drawn
    in [0, remaining], where remaining counts the bytes not consumed yet at that point."""
    settings = llama2_settings(Encoder(), True, 0)
    # remaining at the length draw = len(body) + bytes of the length draw itself (1 or 2).
    for n in (1, 2, 3):
        remaining = len(body) + n
        e = Encoder()
        e.tail = list(settings.tail)
        e.int_in(len(body), 0, remaining)
        if len(e.tail) - len(settings.tail) == n:
            return e.bytes(body)
    raise AssertionError("no consistent length encoding")

# ---------------------------------------------------------------- helpers (see helpers.cpp)
HUGE_K = [SIZE_MAX, 2**53, 2**53 + 1, 2**63 + 3, 2**26, 2**40]
HOSTILE = [0.0, -1.0, 1e-300, 1e300, -1e300, 1e-320, "inf", "-inf", "nan", 1e150, 0.5, 1e6]


class Helpers(Encoder):
    def usual(self, x):  # pick_double's usual branch: usual * x / 8
        return self.int_in(1, 0, 3).int_in(x, -40, 40)

    def hostile(self, value):
        return self.int_in(0, 0, 3).pick(HOSTILE.index(value), len(HOSTILE))

    def view(self, nkv, cap, hd, n, values=0):
        """DrawnView: head-major, no padding, strides as drawn, every head holding n, no null."""
        self.int_in(nkv, 0, 4).int_in(cap, 0, 8).int_in(hd, 0, 5).boolean(False).int_in(0, 0, 2)
        self.int_in(1, 0, 7).int_in(1, 0, 7).int_in(n, 0, cap + 4)
        for _ in range(max(nkv, 1)):
            self.int_in(1, 0, 7)
        need = (nkv - 1) * cap * hd + (cap - 1) * hd + hd if nkv and cap and hd else 1
        for i in range(need):
            self.int_in((i % 9) - 4, -8, 8)
        return self.int_in(0, 0, 15)

    def budgets(self, n_layers, k_huge=None, k=None):
        self.int_in(2, 0, 7).int_in(n_layers, 0, 40)
        if k_huge is not None:
            return self.int_in(0, 0, 3).pick(HUGE_K.index(k_huge), len(HUGE_K))
        return self.int_in(1, 0, 3).int_in(k, 0, 300)


def helpers_seeds():
    # layer_budgets: PyramidKV with k = SIZE_MAX (UBSan, a spin in round_to_total), beta 20, reserved 0.
    e = Helpers().budgets(4, k_huge=SIZE_MAX).int_in(1, 0, 2).usual(8).int_in(0, 0, 40)
    write("helpers", "regression-pyramid-k-size-max", e.boolean(True).boolean(True).bytes())
    # weights 1,1 with k = 2^63 + 3: n_layers * k wrapped and returned 3 3.
    e = Helpers().budgets(2, k_huge=2**63 + 3).int_in(2, 0, 2).boolean(True)
    for _ in range(2):
        e.int_in(1, 0, 9).int_in(1, 0, 4)
    write("helpers", "regression-weights-k-2pow63", e.boolean(True).boolean(True).bytes())
    # weights 1,0,0,0 with floor k / 2 at k = 2^26: O(floor * n) floor pass.
    e = Helpers().budgets(4, k_huge=2**26).int_in(2, 0, 2).boolean(True)
    for w in (1, 0, 0, 0):
        e.int_in(1, 0, 9).int_in(w, 0, 4)
    write("helpers", "regression-floor-half-k-2pow26", e.boolean(False).boolean(True).boolean(True).bytes())
    # ties of the floor pass: weights 1,1,0 over 3 layers, k = 2 -> 3 2 1.
    e = Helpers().budgets(3, k=2).int_in(2, 0, 2).boolean(True)
    for w in (1, 1, 0):
        e.int_in(1, 0, 9).int_in(w, 0, 4)
    write("helpers", "regression-floor-ties-110", e.boolean(True).boolean(True).bytes())
    # attention_logits on a view with n_kv_heads = 0 (SIGFPE inside its own check), n_q_heads 1.
    e = Helpers().int_in(0, 0, 7).view(0, 8, 2, 0).int_in(1, 0, 9)
    for _ in range(2 + 4):
        e.int_in(4, -8, 8)
    write("helpers", "regression-attention-zero-kv-heads", e.int_in(0, 0, 5).int_in(2, -4, 4).bytes())
    # attention_logits on lengths 12 > capacity 8 (read past K).
    e = Helpers().int_in(0, 0, 7).view(1, 8, 2, 12).int_in(1, 0, 9)
    for _ in range(2 + 4):
        e.int_in(4, -8, 8)
    write("helpers", "regression-attention-length-above-capacity", e.int_in(0, 0, 5).int_in(2, -4, 4).bytes())
    # attention_logits with bias == out (the logits doubled): 1 KV head, 4 slots, 3 live, head_dim 1.
    e = Helpers().int_in(0, 0, 7).view(1, 4, 1, 3).int_in(1, 0, 9)
    for _ in range(3 + 3 + 1 + 4):
        e.int_in(8, -8, 8)
    write("helpers", "regression-attention-bias-is-out", e.int_in(2, 0, 5).int_in(2, -4, 4).bytes())
    # rope_rotate_keys on lengths 12 > capacity 8 (heap overflow at rope.hpp:73), theta 10000, delta 7.
    e = Helpers().int_in(1, 0, 7).view(1, 8, 4, 12).boolean(True).usual(8).usual(8).int_in(0, 0, 2)
    write("helpers", "regression-rope-length-above-capacity", e.int_in(0, 0, 4).int_in(0, 0, 9).bytes())
    # rope_rotate_keys with theta = 1e-300, delta = 1e300: the angle overflowed, NaN written into K.
    e = Helpers().int_in(1, 0, 7).view(1, 2, 4, 1).boolean(True).hostile(1e-300).hostile(1e300).int_in(0, 0, 2)
    write("helpers", "regression-rope-infinite-angle", e.int_in(0, 0, 4).int_in(0, 0, 9).bytes())
    # Expected Attention that succeeds: 1 KV head, 4 slots, 3 live, head_dim 2; 2 query heads, 2 rows; F = 8, one
    # sink, covariance and ||v|| on, ε 0; interleaved, θ = 10000; next position 5; row stride 4; the scores.
    e = Helpers().int_in(3, 0, 7).view(1, 4, 2, 3).int_in(2, 0, 15).boolean(True).int_in(2, 0, 7)
    for i in range(2 * 2 * 2):
        e.int_in(1, 0, 5).int_in((i % 5) - 2, -8, 8)
    e.int_in(8, 0, 600).int_in(1, 0, 6).boolean(True).boolean(True).boolean(True).int_in(0, 0, 2)
    e.int_in(1, 0, 3).int_in(8, -40, 40).int_in(1, 0, 3).int_in(5, 0, 40).int_in(1, 0, 3)
    write("helpers", "expected-attention-scores", e.int_in(4, 0, 31).int_in(1, 0, 15).boolean(False).bytes())
    helpers_issue51_seeds()


def ea_options(e):
    """The options, RoPE and next position of the expected-attention-scores seed; no hostile element."""
    e.int_in(8, 0, 600).int_in(1, 0, 6).boolean(True).boolean(True).boolean(True).int_in(0, 0, 2)
    return e.int_in(1, 0, 3).int_in(8, -40, 40).int_in(1, 0, 3).int_in(5, 0, 40).int_in(1, 0, 3)


def helpers_issue51_seeds():
    # Item 5: QueryStatistics(2^62, 4) (head_dim from a view of head_dim 4): n_q_heads * head_dim wrapped to 0 and
    # add() wrote through empty buffers.
    e = Helpers().int_in(3, 0, 7).view(1, 2, 4, 1).int_in(10, 0, 15).boolean(True).pick(HUGE_SIZES.index(2**62), 8)
    write("helpers", "issue51-item5-query-statistics-2pow62-by-4", e.bytes())
    # QueryStatistics::add with 2^63 rows of 2 query heads of head_dim 2: the rows' element count wrapped.
    e = Helpers().int_in(3, 0, 7).view(1, 4, 2, 3).int_in(2, 0, 15).boolean(True)
    e.int_in(5, 0, 7).pick(HUGE_SIZES.index(2**63), 8).int_in(1, 0, 5).int_in(1, -8, 8)
    write("helpers", "issue51-query-statistics-add-2pow63-rows", ea_options(e).int_in(4, 0, 31).int_in(1, 0, 15)
          .boolean(False).bytes())
    # Item 6: 2 KV heads (2 query heads), row_stride 2^63: n_kv_heads * row_stride wrapped, the scratch was 1 float
    # and head 1 was written at 2^63 + s. The logits and the scores.
    for logits in (True, False):
        e = Helpers().int_in(3, 0, 7).view(2, 4, 2, 3).int_in(2, 0, 15).boolean(True).int_in(2, 0, 7)
        for i in range(2 * 2 * 2):
            e.int_in(1, 0, 5).int_in((i % 5) - 2, -8, 8)
        ea_options(e).int_in(15, 0, 31).pick(HUGE_STRIDES.index(2**63), 5).int_in(1, 0, 15).boolean(logits)
        write("helpers", "issue51-item6-%s-two-kv-heads-row-stride-2pow63" % ("logits" if logits else "scores"),
              e.bytes())
    # The sizes mode: KVBuffer(2^62, 2, 2); a view of capacity 2^62 and a cache on it; attention_logits with
    # n_q_heads 2^62; softmax_scratch_size(SIZE_MAX); a paged view of 2^62 pages in its table; every CUDA size at
    # 2^32 − 1.
    def size(e, v):
        return e.int_in(v, 0, 7) if v < 5 else e.int_in(5, 0, 7).pick(HUGE_SIZES.index(v), 8)
    e = Helpers().int_in(4, 0, 7).int_in(0, 0, 7)
    for v in (2**62, 2, 2):
        size(e, v)
    write("helpers", "issue51-sizes-kv-buffer-2pow62", e.bytes())
    e = Helpers().int_in(4, 0, 7).int_in(1, 0, 7).boolean(False)
    for v in (1, 2**62, 2, 0, 2):
        size(e, v)
    write("helpers", "issue51-sizes-view-capacity-2pow62", e.bytes())
    e = Helpers().int_in(4, 0, 7).int_in(3, 0, 7)
    write("helpers", "issue51-sizes-attention-logits-2pow62-q-heads", size(e, 2**62).bytes())
    e = Helpers().int_in(4, 0, 7).int_in(4, 0, 7).boolean(True).u64(SIZE_MAX)
    write("helpers", "issue51-sizes-softmax-scratch-size-max", e.bytes())
    e = Helpers().int_in(4, 0, 7).int_in(5, 0, 7)
    for v in (1, 4, 1, 2, 2**62):
        size(e, v)
    write("helpers", "issue51-sizes-paged-view-max-pages-2pow62", e.boolean(False).boolean(False).bytes())
    e = Helpers().int_in(4, 0, 7).int_in(7, 0, 7)
    for _ in range(4):
        e.int_in(0, 0, 3)
    write("helpers", "issue51-sizes-cuda-all-2pow32-minus-1", e.bytes())


def trace_json_duplicate_seeds():
    write("trace_json", "regression-duplicate-key", b'{"prompt_len": 1, "logits": [[[0]]], "prompt_len": 2}')
    write("trace_json", "regression-duplicate-meta-key",
          b'{"prompt_len": 1, "meta": {"a": 1, "a": 2}, "logits": [[[0]]]}')


if __name__ == "__main__":
    cache_ops_seeds()
    cache_ops_issue37_seeds()
    cache_ops_issue51_seeds()
    paged_ops_issue51_seeds()
    select_keep_seeds()
    trace_json_seeds()
    replay_seeds()
    npy_seeds()
    llama2_seeds()
    tokenizer_seeds()
    helpers_seeds()
    trace_json_duplicate_seeds()
