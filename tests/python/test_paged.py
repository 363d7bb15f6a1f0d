"""kvevict.PagePool and kvevict.PagedCache: the token unit equals the contiguous Cache with shared_heads=True
bit for bit (as the C++ tests assert), the page unit on a hand example, bad input, and the lifetime of the
pool arrays."""
import gc
import re
import threading

import numpy as np
import pytest

import kvevict

N_Q, N_KV, D, P, STEPS, K = 4, 2, 8, 12, 8, 6


def raises(error, text):
    return pytest.raises(error, match=re.escape(text))


CASES = {
    "h2o": ("h2o", {}),
    "keyformer-deterministic": ("keyformer", dict(horizon=STEPS, noise=False)),
    "keyformer-seeded-noise": ("keyformer", dict(horizon=STEPS, seed=7)),
    "keyformer-injected-noise": ("keyformer", dict(horizon=STEPS, tau_init=1.5, tau_end=3.0)),
    "tova": ("tova", {}),
    "streaming": ("streaming", dict(sinks=2)),
    "window": ("window", {}),
    "snapkv": ("snapkv", dict(snap_window=3, snap_kernel=3)),
    "snapkv-window-decode": ("snapkv", dict(snap_window=3, snap_pooling="avg", snap_decode="window")),
}


def assert_same_state(c, p):
    assert c.lengths == p.lengths and p.length == c.lengths[0]
    assert (c.budget, c.recent_window, c.step, c.temperature) == (p.budget, p.recent_window, p.step, p.temperature)
    for h in range(N_KV):
        assert np.array_equal(c.positions(h), p.positions(h))
        assert np.array_equal(c.scores(h), p.scores(h))
        assert c.retained_positions(h) == p.retained_positions(h)
        n = c.lengths[h]
        assert np.array_equal(c.k[h, :n], p.k_rows(h)) and np.array_equal(c.v[h, :n], p.v_rows(h))


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", list(CASES))
def test_token_unit_equals_the_contiguous_cache(case, dtype, layout):
    policy, kw = CASES[case]
    rng = np.random.default_rng(3)
    page_size, max_pages = 3, 5  # 15 slots: the 12-token prompt and k + 1 = 7
    c = kvevict.Cache(policy, n_q_heads=N_Q, n_kv_heads=N_KV, capacity=max_pages * page_size, head_dim=D,
                      dtype=dtype, budget=K, shared_heads=True, **kw)
    pool = kvevict.PagePool(num_pages=9, page_size=page_size, n_kv_heads=N_KV, head_dim=D, dtype=dtype,
                            layout=layout)
    p = kvevict.PagedCache(policy, pool, n_q_heads=N_Q, max_pages=max_pages, budget=K, **kw)
    injected = case == "keyformer-injected-noise"

    def append(pos):
        k_new, v_new = rng.standard_normal((2, N_KV, D)).astype(dtype)
        c.append(pos, k_new, v_new)
        p.append(pos, k_new, v_new)

    for t in range(P):
        append(t)
    logits = rng.standard_normal((N_Q, P, P)).astype(np.float32)
    gumbel = rng.gumbel(size=(N_Q, P, P)).astype(np.float32) if injected else None
    c.prefill(logits, gumbel)
    p.prefill(logits, gumbel)
    assert c.lengths[0] == K and p.pages_in_use == 2 and pool.used_pages == 2 and p.pages_freed == 2
    assert_same_state(c, p)
    for t in range(P, P + STEPS):
        append(t)
        q = rng.standard_normal((N_Q, D)).astype(np.float32)
        x = kvevict.attention_logits(c, q)
        np.testing.assert_allclose(kvevict.attention_logits(p, q), x, rtol=1e-5, atol=1e-5)
        g = rng.gumbel(size=x.shape).astype(np.float32) if injected else None
        c.decode_step(x, g)
        p.decode_step(x, g)
        assert_same_state(c, p)
    c.restore_position_order()
    p.restore_position_order()
    assert_same_state(c, p)
    assert p.positions(0).tolist() == sorted(p.positions(0).tolist())
    p.reset()
    assert pool.used_pages == 0 and p.length == 0 and p.page_table.tolist() == [-1] * max_pages


def test_page_unit_evicts_the_lowest_scoring_middle_pages():
    # Pages of 2 slots, k = 6, w = 1, the first page kept: the 10-token prompt loses floor((10 - 6) / 2) = 2
    # of its middle pages (table entries 1, 2, 3; entry 4 holds the newest token). Every query that can see
    # positions 4 and 5 looks only at them, so page 2 (positions 4, 5) scores highest and pages 1 and 3 go.
    pool = kvevict.PagePool(num_pages=6, page_size=2, n_kv_heads=1, head_dim=2)
    c = kvevict.PagedCache("h2o", pool, n_q_heads=1, budget=6, recent=1, unit="page", start_pages=1)
    x = np.full((1, 10, 10), -np.inf, np.float32)
    for r in range(10):
        x[0, r, : r + 1] = 0.0
        if r >= 4:
            x[0, r, :] = -np.inf
            x[0, r, 4:6] = 0.0
    for t in range(10):
        c.append(t, np.full((1, 2), t, np.float32), np.zeros((1, 2), np.float32))
    assert c.page_table.tolist() == [0, 1, 2, 3, 4, -1]
    c.prefill(x)
    assert c.positions(0).tolist() == [0, 1, 4, 5, 8, 9]
    assert c.page_table.tolist() == [0, 2, 4, -1, -1, -1]
    assert (c.length, c.pages_in_use, c.pages_freed, pool.used_pages) == (6, 3, 2, 3)
    assert not pool.in_use(1) and not pool.in_use(3) and pool.in_use(2)
    np.testing.assert_array_equal(c.k_rows(0)[:, 0], [0, 1, 4, 5, 8, 9])  # no K/V bytes moved
    for t in (10, 11):  # uniform attention: page 2 stays the highest of the middle (entries 1 and 2)
        c.append(t, np.full((1, 2), t, np.float32), np.zeros((1, 2), np.float32))
        c.decode_step(np.zeros((1, c.length), np.float32))
    assert c.positions(0).tolist() == [0, 1, 4, 5, 10, 11] and c.evict_unit == "page"
    assert c.pages_freed == 3 and pool.used_pages == 3


def test_sequences_share_the_pool():
    pool = kvevict.PagePool(num_pages=4, page_size=2, n_kv_heads=1, head_dim=1)
    a = kvevict.PagedCache("window", pool, n_q_heads=1, budget=2)
    b = kvevict.PagedCache("window", pool, n_q_heads=1, budget=2)
    one = np.ones((1, 1), np.float32)
    for t in range(6):
        a.append(t, one, one)
    assert pool.free_pages == 1
    a.prefill()  # keeps positions 4, 5 in its first page: two pages go back, the latest freed first
    assert a.positions(0).tolist() == [4, 5] and pool.used_pages == 1
    for t in range(3):
        b.append(t, one, one)
    assert sorted(b.page_table[:2].tolist()) == [1, 2] and pool.used_pages == 3
    del a
    gc.collect()  # a deleted cache returns its pages
    assert pool.used_pages == 2 and not pool.in_use(0)


def test_the_cache_keeps_the_pool_arrays_alive():
    K = np.zeros((4, 2, 1, 3), np.float32)
    V = np.zeros((4, 2, 1, 3), np.float32)
    pool = kvevict.PagePool(K, V)
    assert pool.k is K and pool.v is V and (pool.num_pages, pool.page_size, pool.n_kv_heads) == (4, 2, 1)
    c = kvevict.PagedCache("h2o", pool, n_q_heads=1, budget=2, recent=1)
    K[:] = 9.0  # the pool is the caller's memory: no copy
    del K, V, pool
    gc.collect()
    others = [np.full((4, 2, 1, 3), -1.0, np.float32) for _ in range(50)]  # would reuse freed memory
    for t in range(3):
        c.append(t, np.full((1, 3), t, np.float32), np.full((1, 3), 10 + t, np.float32))
    c.prefill(np.zeros((1, 3, 3), np.float32))
    assert c.length == 2 and c.retained_positions(0) == [0, 2]
    np.testing.assert_array_equal(c.v_rows(0)[:, 0], [10, 12])
    assert c.pool.k[3, 0, 0, 0] == 9.0 and c.pool.k[0, 1, 0, 0] == 2.0 and float(others[0].sum()) == -24.0


WRONG_POOLS = [
    (dict(k=np.zeros((4, 2, 1, 3), np.int64), v=np.zeros((4, 2, 1, 3), np.int64)), ValueError,
     "k must be a C-contiguous float32 or float16 array of shape [num_pages, page_size, n_kv_heads, head_dim] "
     "(layout NHD), got int64"),
    (dict(k=np.zeros((4, 2, 3), np.float32), v=np.zeros((4, 2, 3), np.float32)), ValueError,
     "k must be a C-contiguous float32 or float16 array of shape [num_pages, page_size, n_kv_heads, head_dim] "
     "(layout NHD), got shape [4, 2, 3]"),
    (dict(k=np.zeros((4, 2, 1, 3), np.float32), v=np.zeros((4, 2, 1, 2), np.float32)), ValueError,
     "v must be a C-contiguous float32 array of shape [num_pages, page_size, n_kv_heads, head_dim] (layout NHD) "
     "(the shape of k) = [4, 2, 1, 3], got a float32 array of shape [4, 2, 1, 2]"),
    (dict(k=np.zeros((4, 2, 1, 3), np.float32), v=np.zeros((4, 2, 1, 3), np.float16)), ValueError,
     "v must be a C-contiguous float32 array"),
    (dict(k=np.zeros((4, 2, 1, 6), np.float32)[..., ::2], v=np.zeros((4, 2, 1, 3), np.float32)), ValueError,
     "k must be a C-contiguous float32 array of shape [num_pages, page_size, n_kv_heads, head_dim] (layout NHD) = "
     "[4, 2, 1, 3], got a non-contiguous float32 array of shape [4, 2, 1, 3] (use numpy.ascontiguousarray)"),
    (dict(k=np.zeros((4, 2, 1, 3), np.float32)), ValueError,
     "give both k and v to wrap caller page pools (got only k)"),
    (dict(k=np.zeros((4, 2, 1, 3), np.float32), v=np.zeros((4, 2, 1, 3), np.float32), page_size=2), ValueError,
     "page_size is taken from the shape of k when wrapping k and v; do not pass it"),
    (dict(k=np.zeros((4, 2, 1, 3), np.float32), v=np.zeros((4, 2, 1, 3), np.float32), layout="NDH"), ValueError,
     "layout must be 'NHD' or 'HND' (got 'NDH')"),
    (dict(k=np.zeros((4, 2, 1, 3), np.float32), v=np.zeros((4, 2, 1, 3), np.float32), dtype="float16"), ValueError,
     "dtype = float16 but k is float32"),
    (dict(num_pages=4, page_size=2, n_kv_heads=1), ValueError, "head_dim is missing"),
    (dict(num_pages=4, page_size=0, n_kv_heads=1, head_dim=3), ValueError, "page_size must be >= 1 (got 0)"),
    (dict(num_pages=2**31, page_size=1, n_kv_heads=1, head_dim=1), ValueError,
     "kvevict::PagePool: num_pages must be in [1, 2^31 - 1] (got 2147483648)"),
    (dict(num_pages=4, page_size=2, n_kv_heads=1, head_dim=3, dtype="int8"), ValueError,
     "dtype must be float32 or float16 (got int8)"),
    (dict(num_pages=4, page_size=2, n_kv_heads=1, head_dim=3, page_sizes=2), TypeError, "page_sizes=2"),
]


@pytest.mark.parametrize("kw, error, text", WRONG_POOLS)
def test_pool_errors_name_the_argument(kw, error, text):
    with raises(error, text):
        kvevict.PagePool(**kw)


def test_pool_rejects_aliased_and_read_only_arrays():
    K = np.zeros((4, 2, 1, 3), np.float32)
    with raises(ValueError, "k and v must be different arrays"):
        kvevict.PagePool(K, K)
    ro = K.copy()
    ro.flags.writeable = False
    with raises(ValueError, "v must be writeable, got a read-only float32 array of shape [4, 2, 1, 3]"):
        kvevict.PagePool(K, ro)
    with raises(ValueError, "k and v overlap in memory (views of one buffer); give each its own array"):
        buf = np.zeros(4 * 2 * 3 + 3, np.float32)
        kvevict.PagePool(buf[:24].reshape(4, 2, 1, 3), buf[3:27].reshape(4, 2, 1, 3))
    hnd = kvevict.PagePool(np.zeros((4, 1, 2, 3), np.float16), np.zeros((4, 1, 2, 3), np.float16), layout="HND")
    assert (hnd.page_size, hnd.n_kv_heads, hnd.layout, hnd.dtype) == (2, 1, "HND", np.float16)
    with raises(IndexError, "kvevict.PagePool.in_use: page 4 is outside [0, 4)"):
        hnd.in_use(4)


def test_pool_names_the_zero_dimension_of_zero_size_arrays():
    # Two halves of one zero-size buffer start at the same address: the zero dimension is the error to name,
    # not "k and v must be different arrays".
    buffer = np.zeros((8, 2, 0, 3), np.float32)
    with raises(ValueError, "k must have no zero dimension, got shape [4, 2, 0, 3]"):
        kvevict.PagePool(buffer[:4], buffer[4:])


def test_a_pool_keeps_writing_its_arrays_after_the_caller_marks_them_read_only():
    # The pool takes the arrays' data pointers once, when it checks them (as Cache does); flags changed later
    # do not reach the sequences, which would otherwise fail inside a call with numpy's unnamed message.
    K, V = np.zeros((4, 2, 2, 3), np.float32), np.zeros((4, 2, 2, 3), np.float32)
    pool = kvevict.PagePool(K, V)
    seq = kvevict.PagedCache("h2o", pool, n_q_heads=2, max_pages=2, budget=3, recent=1)
    K.flags.writeable = False
    V.flags.writeable = False
    seq.append(0, np.full((2, 3), 5.0, np.float32), np.full((2, 3), 6.0, np.float32))
    page = int(seq.page_table[0])
    assert np.array_equal(K[page, 0], np.full((2, 3), 5.0, np.float32))
    assert np.array_equal(V[page, 0], np.full((2, 3), 6.0, np.float32))
    x = kvevict.attention_logits(seq, np.ones((2, 3), np.float32))
    np.testing.assert_allclose(x, np.float32(15.0) / np.sqrt(np.float32(3.0)), rtol=1e-6)


def small_pool(**kw):
    opts = dict(num_pages=4, page_size=2, n_kv_heads=2, head_dim=3)
    opts.update(kw)
    return kvevict.PagePool(**opts)


CACHE_ERRORS = [
    (dict(shared_heads=True), TypeError, "shared_heads=True"),
    (dict(budgte=3), TypeError, "budgte=3"),
    (dict(unit="pages"), ValueError, "unit: kvevict::parse_evict_unit: unknown evict unit 'pages' (expected token "
     "or page)"),
    (dict(unit=1), TypeError, "unit must be a str (got int)"),
    (dict(page_score="max", unit="page"), ValueError, "page_score must be 'sum' or 'mean' (got 'max')"),
    (dict(start_pages=1), ValueError, "kvevict::PagedCache: start_pages = 1 is only meaningful with the page unit"),
    (dict(max_pages=0), ValueError, "max_pages must be >= 1 (got 0)"),
    (dict(max_pages=-1), ValueError, "max_pages must be >= 0 (got -1)"),
    (dict(sinks=2), ValueError, "sinks is used only by policy 'streaming' (got policy 'h2o')"),
    (dict(budget=8), ValueError, "budget k = 8 needs"),
    (dict(n_q_heads=None), ValueError, "n_q_heads is required"),
    (dict(n_q_heads=3), ValueError, "n_q_heads (3) must be a positive multiple"),
]


@pytest.mark.parametrize("kw, error, text", CACHE_ERRORS)
def test_paged_cache_errors_name_the_argument(kw, error, text):
    opts = dict(n_q_heads=2, budget=3, recent=1)
    opts.update(kw)
    with raises(error, text):
        kvevict.PagedCache("h2o", small_pool(), **opts)


def test_paged_call_errors_leave_the_sequence_unchanged():
    pool = small_pool()
    c = kvevict.PagedCache("h2o", pool, n_q_heads=2, budget=3, recent=1, max_pages=6)  # more than the pool
    row = np.zeros((2, 3), np.float32)
    with raises(TypeError, "incompatible constructor arguments"):
        kvevict.PagedCache("h2o", "not a pool", n_q_heads=2)
    with raises(ValueError, "k must be a C-contiguous float32 array of shape [n_kv_heads, head_dim] = [2, 3], "
                            "got a float32 array of shape [3, 2]"):
        c.append(0, np.zeros((3, 2), np.float32), row)
    with raises(ValueError, "v must be a C-contiguous float32 array of shape [n_kv_heads, head_dim] = [2, 3], "
                            "got a float64 array of shape [2, 3]"):
        c.append(0, row, np.zeros((2, 3)))
    with raises(ValueError, "v must be a C-contiguous float32 array of shape [n_kv_heads, head_dim] = [2, 3], "
                            "got a non-contiguous float32 array"):
        c.append(0, row, np.zeros((3, 2), np.float32).T)
    assert c.length == 0 and pool.used_pages == 0
    for t in range(8):
        c.append(t, row, row)
    with raises(OverflowError, "kvevict::PagePool::allocate: all 4 pages are in use"):
        c.append(8, row, row)
    assert c.length == 8
    with raises(ValueError, "logits must be a C-contiguous float32 array of shape [n_q_heads, P, P] = [2, 8, 8], "
                            "got a float32 array of shape [2, 7, 7]"):
        c.prefill(np.zeros((2, 7, 7), np.float32))
    with raises(ValueError, "gumbel: injected noise is used only by policy 'keyformer' with noise=True"):
        c.prefill(np.zeros((2, 8, 8), np.float32), np.zeros((2, 8, 8), np.float32))
    with raises(IndexError, "kvevict.PagedCache.k_rows: KV head 2 out of range (n_kv_heads = 2)"):
        c.k_rows(2)
    with raises(IndexError, "KV head -1 out of range"):
        c.positions(-1)
    assert c.length == 8 and not c.budget_resolved
    c.prefill(np.zeros((2, 8, 8), np.float32))
    assert c.length == 3 and pool.used_pages == 2
    with raises(ValueError, "kvevict::PagedCache::decode_step: n = 3 but the cache holds 3 tokens"):
        c.decode_step(np.zeros((2, 3), np.float32))
    full = kvevict.PagedCache("window", small_pool(), n_q_heads=2, budget=1, max_pages=1)
    full.append(0, row, row)
    full.append(1, row, row)
    with raises(OverflowError, "kvevict::PagePool::append: the sequence is full (capacity 2 slots"):
        full.append(2, row, row)


def test_signatures_show_in_help():
    for f in (kvevict.Cache.__init__, kvevict.SnapKV.__init__, kvevict.PagedCache.__init__, kvevict.replay):
        assert "*, " in f.__doc__  # keyword-only options
    assert "budget: object = '50%'" in kvevict.SnapKV.__init__.__doc__
    assert "pool: kvevict.PagePool, *, n_q_heads: object = None, max_pages: object = None" in \
        kvevict.PagedCache.__init__.__doc__
    assert "layout: object = 'NHD'" in kvevict.PagePool.__init__.__doc__


def test_sequences_of_one_pool_step_in_parallel_threads():
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((16, 2, N_KV, D)).astype(np.float32)
    logits = rng.standard_normal((N_Q, 10, 10)).astype(np.float32)
    qs = rng.standard_normal((6, N_Q, D)).astype(np.float32)

    def run(seq, out, key):
        for t in range(10):
            seq.append(t, rows[t, 0], rows[t, 1])
        seq.prefill(logits)
        for i, t in enumerate(range(10, 16)):
            seq.append(t, rows[t, 0], rows[t, 1])
            seq.decode_step(kvevict.attention_logits(seq, qs[i]))
        out[key] = (seq.retained_positions(0), seq.scores(1).tolist(), seq.k_rows(1).tolist())

    pool = kvevict.PagePool(num_pages=40, page_size=2, n_kv_heads=N_KV, head_dim=D)
    seqs = [kvevict.PagedCache("h2o", pool, n_q_heads=N_Q, max_pages=8, budget=5, recent=1) for _ in range(5)]
    want = {}
    run(seqs[0], want, 0)
    got = {}
    threads = [threading.Thread(target=run, args=(s, got, i)) for i, s in enumerate(seqs[1:])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(g == want[0] for g in got.values())
    assert pool.used_pages == 5 * 3  # 5 tokens in 3 pages per sequence
