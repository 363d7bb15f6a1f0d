"""fuzz/seeds/cache_ops.py — the seeds of fuzz_cache_ops: `CacheOps` encodes cache_ops.cpp's draws in its call
order (the layer, the configuration, the policy, the calls); the regression seeds, issue 37's and issue 51's."""
from .encoder import HUGE_SIZES, SIZE_MAX, Encoder, write


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
