"""fuzz/seeds/helpers.py — the seeds of fuzz_helpers (helpers.cpp's draws in its call order): layer_budgets,
attention_logits, RoPE and Expected Attention regressions, and issue 51's sizes."""
from .encoder import HUGE_SIZES, HUGE_STRIDES, SIZE_MAX, Encoder, write


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
