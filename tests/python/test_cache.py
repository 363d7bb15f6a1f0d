"""kvevict.Cache: zero-copy storage in both directions, storage lifetime, dtypes, accessors."""
import gc
import re
import threading

import numpy as np
import pytest

import kvevict


def small(policy="h2o", **kw):
    opts = dict(n_q_heads=4, n_kv_heads=2, capacity=8, head_dim=3, budget=4, recent=1)
    opts.update(kw)
    return kvevict.Cache(policy, **opts)


def rows(value, n_kv=2, d=3, dtype=np.float32):
    return np.full((n_kv, d), value, dtype)


def test_owned_storage_is_shared_both_ways():
    c = small()
    k = c.k
    assert k.shape == (2, 8, 3) and k.dtype == np.float32 and k.flags.c_contiguous and k.flags.writeable
    assert c.owns_storage
    c.append(7, np.arange(6, dtype=np.float32).reshape(2, 3), rows(-1))
    # cache -> NumPy: the appended rows are in the array obtained before the append
    np.testing.assert_array_equal(k[:, 0], [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(c.v[:, 0], [[-1] * 3] * 2)
    # NumPy -> cache: a write through the array is what attention_logits reads
    k[1, 0] = [1.0, 2.0, 3.0]
    x = kvevict.attention_logits(c, np.ones((4, 3), np.float32), scale=1.0)
    np.testing.assert_array_equal(x, [[3.0], [3.0], [6.0], [6.0]])
    assert np.shares_memory(c.k, k) and c.k.ctypes.data == k.ctypes.data


def test_eviction_moves_rows_inside_the_shared_storage():
    c = small("window", budget=2, recent=0)
    k = c.k
    for p in range(3):
        c.append(p, rows(p), rows(10 + p))
    c.prefill()
    assert c.lengths == [2, 2] and c.retained_positions(0) == [1, 2]
    np.testing.assert_array_equal(k[0, :2, 0], [1, 2])  # compacted in place
    c.append(3, rows(3), rows(13))
    c.decode_step()
    # the oldest (slot 0, position 1) was evicted: slot 0 now holds the newest token
    assert c.positions(0).tolist() == [3, 2]
    np.testing.assert_array_equal(k[:, :2, 0], [[3, 2], [3, 2]])
    np.testing.assert_array_equal(c.v[:, :2, 0], [[13, 12], [13, 12]])
    c.restore_position_order()
    assert c.positions(1).tolist() == [2, 3]
    np.testing.assert_array_equal(k[:, :2, 0], [[2, 3], [2, 3]])


def test_storage_outlives_the_cache():
    c = small()
    c.append(0, rows(5.0), rows(6.0))
    k, v = c.k, c.v
    del c
    gc.collect()
    others = [small() for _ in range(20)]  # would reuse freed memory
    for o in others:
        o.append(0, rows(-7.0), rows(-7.0))
    np.testing.assert_array_equal(k[:, 0], rows(5.0))
    np.testing.assert_array_equal(v[:, 0], rows(6.0))
    k[:] = 1.0  # still writable memory of its own
    assert float(k.sum()) == 2 * 8 * 3
    view = k[1]  # a view of the view keeps it alive too
    del k
    gc.collect()
    assert float(view.sum()) == 8 * 3


def test_wrapped_caller_arrays_are_not_copied():
    K = np.zeros((2, 8, 3), np.float32)
    V = np.zeros((2, 8, 3), np.float32)
    c = kvevict.H2O(n_q_heads=2, k=K, v=V, budget=3, recent=1)
    assert not c.owns_storage and c.k is K and c.v is V
    assert (c.n_kv_heads, c.capacity, c.head_dim, c.dtype) == (2, 8, 3, np.float32)
    c.append(4, rows(2.0), rows(3.0))  # cache -> caller
    np.testing.assert_array_equal(K[:, 0], rows(2.0))
    np.testing.assert_array_equal(V[:, 0], rows(3.0))
    K[0, 0] = [1.0, 0.0, 0.0]  # caller -> cache
    x = kvevict.attention_logits(c, np.ones((2, 3), np.float32), scale=1.0)
    np.testing.assert_array_equal(x, [[1.0], [6.0]])
    del K, V
    gc.collect()
    c.append(5, rows(1.0), rows(1.0))  # the cache keeps the wrapped arrays alive
    assert c.lengths == [2, 2]


def test_wrapping_names_the_zero_dimension_of_zero_size_arrays():
    # Two halves of one zero-size buffer start at the same address: the zero dimension is the error to name,
    # not "k and v must be different arrays".
    buffer = np.zeros((2, 2, 0, 3), np.float32)
    with pytest.raises(ValueError, match=re.escape("k must have no zero dimension, got shape [2, 0, 3]")):
        kvevict.Cache("h2o", n_q_heads=2, k=buffer[0], v=buffer[1])


def test_float16_storage():
    c = small("tova", dtype="float16", recent=0, budget=2)
    assert c.k.dtype == np.float16 and c.dtype == np.float16
    for p in range(3):
        c.append(p, rows(p + 0.5, dtype=np.float16), rows(p, dtype=np.float16))
    np.testing.assert_array_equal(c.k[0, :3, 0], np.array([0.5, 1.5, 2.5], np.float16))
    x = kvevict.attention_logits(c, np.ones((4, 3), np.float32), scale=1.0)
    np.testing.assert_array_equal(x[0], [1.5, 4.5, 7.5])
    logits = np.zeros((4, 3, 3), np.float32)
    logits[:, 2, :] = [0.0, 5.0, 1.0]  # TOVA keeps the top-2 of the last row: positions 1, 2
    c.prefill(logits)
    assert c.retained_positions(0) == [1, 2] and c.retained_positions(1) == [1, 2]
    K = np.zeros((1, 4, 2), np.float16)
    w = kvevict.Window(n_q_heads=1, k=K, v=np.zeros_like(K), budget=2)
    assert w.dtype == np.float16 and w.k is K


def test_torch_from_numpy_shares_the_storage():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed (Debian python3-torch)")
    c = small()
    t = torch.from_numpy(c.k)
    c.append(0, rows(9.0), rows(0.0))
    assert float(t[1, 0, 2]) == 9.0
    t[0, 0, 0] = -2.0
    assert c.k[0, 0, 0] == -2.0
    # a torch tensor's memory wrapped by a cache (through .numpy(), no copy)
    K, V = torch.zeros(2, 8, 3), torch.zeros(2, 8, 3)
    w = kvevict.Cache("window", n_q_heads=2, k=K.numpy(), v=V.numpy(), budget=4)
    w.append(0, rows(4.0), rows(5.0))
    assert float(K[0, 0, 0]) == 4.0 and float(V[1, 0, 2]) == 5.0


def test_keyformer_properties_reset_and_seeds():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((4, 6, 6)).astype(np.float32)

    def run(cache):
        for p in range(6):
            cache.append(p, rows(0.0), rows(0.0))
        cache.prefill(logits)
        cache.append(6, rows(0.0), rows(0.0))
        cache.decode_step(rng_step)
        return [cache.retained_positions(h) for h in range(2)], [cache.scores(h) for h in range(2)]

    rng_step = rng.standard_normal((4, 4)).astype(np.float32)  # n = k + 1 slots
    c = kvevict.Keyformer(n_q_heads=4, n_kv_heads=2, capacity=8, head_dim=3, budget="50%", recent="34%",
                          horizon=4, tau_init=1.0, tau_end=3.0, seed=11)
    assert (c.budget, c.recent_window, c.step) == (0, 0, 0)
    kept, scores = run(c)
    assert (c.budget, c.recent_window, c.step, c.policy) == (3, 1, 1, "keyformer")
    assert c.temperature == pytest.approx(1.5)  # tau_1 = 1 + 1 * (3 - 1) / 4
    assert all(len(k) == 3 for k in kept) and c.lengths == [3, 3]
    c.reset()  # same seed: the same noise, the same result
    assert c.lengths == [0, 0] and c.step == 0
    kept2, scores2 = run(c)
    assert kept2 == kept and all(np.array_equal(a, b) for a, b in zip(scores, scores2))
    c.reset(12)
    _, scores3 = run(c)
    assert not np.array_equal(scores3[0], scores[0])
    d = kvevict.Keyformer(n_q_heads=4, n_kv_heads=2, capacity=8, head_dim=3, budget=3, recent=1, horizon=4,
                          tau_init=1.0, tau_end=3.0, seed=11)
    assert run(d)[0] == kept  # '50%' of 6 is 3 tokens, '34%' of 3 is 1


def test_injected_gumbel_equals_shifted_logits():
    # noise injected as gumbel= is added to the logits: the same as noise=False on x + zeta
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 6, 6)).astype(np.float32)
    z = rng.standard_normal((4, 6, 6)).astype(np.float32)
    a = kvevict.Keyformer(n_q_heads=4, n_kv_heads=2, capacity=8, head_dim=3, budget=3, recent=1, horizon=2)
    b = kvevict.Keyformer(n_q_heads=4, n_kv_heads=2, capacity=8, head_dim=3, budget=3, recent=1, horizon=2,
                          noise=False)
    for cache in (a, b):
        for p in range(6):
            cache.append(p, rows(0.0), rows(0.0))
    a.prefill(x, gumbel=z)
    b.prefill(x + z)
    for h in range(2):
        assert a.retained_positions(h) == b.retained_positions(h)
        np.testing.assert_allclose(a.scores(h), b.scores(h), rtol=1e-6)


def test_subclasses_and_factory():
    for cls, name in [(kvevict.H2O, "h2o"), (kvevict.StreamingLLM, "streaming"), (kvevict.Window, "window"),
                      (kvevict.TOVA, "tova"), (kvevict.KeyNorm, "knorm"), (kvevict.KeyDiff, "keydiff")]:
        extra = dict(sinks=1) if cls is kvevict.StreamingLLM else {}
        c = cls(n_q_heads=2, n_kv_heads=1, capacity=4, head_dim=2, budget=2, **extra)
        assert isinstance(c, kvevict.Cache) and c.policy == name
    assert kvevict.make_cache("streamingllm", n_q_heads=1, n_kv_heads=1, capacity=4, head_dim=2).policy == "streaming"
    assert "policy='h2o'" in repr(small())


def test_attention_logits_out_bias_and_default_scale():
    c = small()
    c.append(0, rows(1.0), rows(0.0))
    c.append(1, rows(2.0), rows(0.0))
    q = np.ones((4, 3), np.float32)
    out = np.full((4, 2), 99.0, np.float32)
    bias = np.array([[0.0, -np.inf]] * 4, np.float32)
    r = kvevict.attention_logits(c, q, bias=bias, out=out)
    assert r is out
    scale = np.float32(1.0) / np.sqrt(np.float32(3.0))
    np.testing.assert_array_equal(out[:, 0], np.float32(3.0) * scale)
    assert np.all(np.isneginf(out[:, 1]))


def test_concurrent_decode_steps_on_separate_caches():
    # prefill / decode_step release the GIL; caches used from several threads stay independent
    results = {}

    def work(i):
        c = small("h2o", budget=3, recent=1)
        for p in range(4):
            c.append(p, rows(0.0), rows(0.0))
        c.prefill(np.full((4, 4, 4), float(i), np.float32))
        for t in range(4, 8):
            c.append(t, rows(0.0), rows(0.0))
            c.decode_step(np.zeros((4, c.lengths[0]), np.float32))
        results[i] = c.retained_positions(0)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(map(tuple, results.values()))) == 1 and len(results) == 4


def test_snapkv_keeps_the_window_and_the_pooled_top_scores():
    # The hand example of tests/snapkv_test.cpp: rows 4 and 5 (L = 2) put their attention on slots
    # 0 and 3 + 5 (query head 0) and 2 and 5 (query head 1): window sums [1, 0, 1, 0.5, 0, 1.5].
    x = np.full((2, 6, 6), -np.inf, np.float32)
    for h in range(2):
        for r in range(4):
            x[h, r, r] = 0.0  # rows outside the observation window are not scored
    x[0, 4, 0] = x[0, 5, 3] = x[0, 5, 5] = 0.0
    x[1, 4, 2] = x[1, 5, 5] = 0.0

    def run(**kw):
        c = kvevict.Cache("snapkv", n_q_heads=2, n_kv_heads=1, capacity=8, head_dim=2, budget=4, **kw)
        for p in range(6):
            c.append(p, np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32))
        c.prefill(x)
        return c

    c = run(snap_window=2, snap_kernel=1)
    assert c.retained_positions(0) == [0, 2, 4, 5]
    assert c.scores(0).tolist() == [1.0, 1.0, 0.0, 1.5]
    assert run(snap_window=2, snap_kernel=3, snap_pooling="avg").retained_positions(0) == [1, 2, 4, 5]
    assert run(snap_window=2, snap_kernel=3, snap_decode="window").retained_positions(0) == [0, 1, 4, 5]
    with pytest.raises(ValueError, match="snap_kernel \\(SnapKV pooling kernel K\\) must be odd and >= 1 \\(got 4\\)"):
        run(snap_window=2, snap_kernel=4)
    with pytest.raises(ValueError, match="SnapKV observation window L = 5 exceeds budget k = 4"):
        run(snap_window=5)
    with pytest.raises(ValueError, match="unknown pooling 'mean'"):
        run(snap_pooling="mean")
    with pytest.raises(ValueError, match="snap_window is used only by policy 'snapkv'"):
        small("h2o", snap_window=2)


def test_mean_attention_ranks_the_mean_and_stores_the_sum():
    # The hand example of tests/mean_attention_test.cpp: rows 0, 1 attend to position 0, row 2 to 2, row 3
    # to 3: sums [2, 0, 1, 1], queries [4, 3, 2, 1], means [0.5, 0, 0.5, 1].
    x = np.full((1, 4, 4), -np.inf, np.float32)
    x[0, 0, 0] = x[0, 1, 0] = x[0, 2, 2] = x[0, 3, 3] = 0.0

    def run(policy, **kw):
        c = kvevict.Cache(policy, n_q_heads=1, n_kv_heads=1, capacity=8, head_dim=2, budget=2, recent=0, **kw)
        for p in range(4):
            c.append(p, np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32))
        c.prefill(x)
        return c

    assert run("h2o").retained_positions(0) == [0, 2]
    c = run("h2o", mean_attention=True)
    assert c.retained_positions(0) == [0, 3]
    assert c.scores(0).tolist() == [2.0, 1.0]
    assert run("keyformer", mean_attention=True, noise=False, tau_end=1.0, horizon=4).retained_positions(0) == [0, 3]
    with pytest.raises(ValueError, match="mean_attention is used only by policy 'h2o' or 'keyformer'"):
        small("tova", recent=0, mean_attention=True)


def test_knorm_keeps_the_smallest_key_norms_without_logits():
    # tests/key_norm_test.cpp's hand example: token p's key is (norm[p], 0); k = 4, w = 1.
    norm = [1, 5, 2, 6, 3, 7, 0.5, 8]
    c = kvevict.Cache("knorm", n_q_heads=1, n_kv_heads=1, capacity=9, head_dim=2, budget=4, recent=1)
    assert c.policy == "knorm"
    for p in range(6):
        c.append(p, np.array([[norm[p], 0.0]], np.float32), np.zeros((1, 2), np.float32))
    c.prefill()  # no logits
    assert c.retained_positions(0) == [0, 2, 4, 5]
    for p in (6, 7):
        c.append(p, np.array([[norm[p], 0.0]], np.float32), np.zeros((1, 2), np.float32))
        c.decode_step()
    assert c.retained_positions(0) == [0, 2, 6, 7]
    assert sorted(c.scores(0).tolist()) == sorted(np.float32([0.5, 1 / 3, 1 / 1.5, 1 / 9]).tolist())
    # The tools' default window, 30 % of k with H2O's floor of 1 when k >= 2 (kvevict-generate: w = 1 at k = 3).
    for policy in ("knorm", "h2o"):
        c = kvevict.Cache(policy, n_q_heads=1, n_kv_heads=1, capacity=8, head_dim=1, budget=3)
        for p in range(6):
            c.append(p, np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32))
        c.prefill(None if policy == "knorm" else np.zeros((1, 6, 6), np.float32))
        assert c.recent_window == 1, policy


def test_keydiff_keeps_the_keys_least_like_the_rest_without_logits():
    # tests/key_diff_test.cpp's hand example: k = 3, w = 1; kept {1, 3, 4}, then {3, 4, 5}, {3, 4, 6}, {4, 6, 7}.
    keys = [(1, 0), (0, 1), (1, 0.1), (-1, 0), (2, 0.5), (0, 1), (1, 2), (-1, -1)]
    c = kvevict.Cache("keydiff", n_q_heads=1, n_kv_heads=1, capacity=9, head_dim=2, budget=3, recent=1)
    assert c.policy == "keydiff"
    for p in range(5):
        c.append(p, np.array([keys[p]], np.float32), np.zeros((1, 2), np.float32))
    c.prefill()  # no logits
    assert c.retained_positions(0) == [1, 3, 4]
    for p, kept in ((5, [3, 4, 5]), (6, [3, 4, 6]), (7, [4, 6, 7])):
        c.append(p, np.array([keys[p]], np.float32), np.zeros((1, 2), np.float32))
        c.decode_step()
        assert c.retained_positions(0) == kept
    # The last step's scores against the anchor of 3, 4, 6, 7 (double precision, within float rounding).
    held = np.array([keys[p] for p in (3, 4, 6, 7)], np.float64)
    unit = held / np.linalg.norm(held, axis=1, keepdims=True)
    anchor = unit.mean(axis=0) / np.linalg.norm(unit.mean(axis=0))
    want = dict(zip((3, 4, 6, 7), 1 - unit @ anchor))
    got = dict(zip(c.positions(0).tolist(), c.scores(0)[:3].tolist()))
    for p in (4, 6, 7):
        assert abs(got[p] - want[p]) < 1e-5, (p, got[p], want[p])


def test_budget_resolved_and_repr_before_prefill():
    c = kvevict.Cache("h2o", n_q_heads=4, n_kv_heads=2, capacity=8, head_dim=3, budget="50%", recent=1)
    assert c.budget == 0 and not c.budget_resolved  # 0 means "not resolved yet", not "keep nothing"
    assert "budget=unresolved (50% of the prompt)" in repr(c)
    t = kvevict.Cache("h2o", n_q_heads=4, n_kv_heads=2, capacity=8, head_dim=3, budget=3, recent=1)
    assert "budget=unresolved (3 tokens at prefill)" in repr(t)
    for p in range(6):
        c.append(p, rows(float(p)), rows(0.0))
    c.prefill(np.zeros((4, 6, 6), np.float32))
    assert c.budget == 3 and c.budget_resolved and "budget=3," in repr(c)
    c.reset()
    assert c.budget == 0 and not c.budget_resolved


def run_keyformer(**kw):
    """Kept positions of a Keyformer cache after prefill and 3 steps on fixed logits."""
    c = kvevict.Cache("keyformer", n_q_heads=2, n_kv_heads=1, capacity=16, head_dim=1, horizon=3, **kw)
    x = np.arange(100, dtype=np.float32).reshape(10, 10) % 7 * 0.3
    for p in range(10):
        c.append(p, np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32))
    c.prefill(np.stack([np.tril(x), np.tril(x.T)]).astype(np.float32))
    for p in range(10, 13):
        c.append(p, np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32))
        c.decode_step(np.full((2, c.lengths[0]), 0.5, np.float32))
    return c.retained_positions(0), c.recent_window


def test_defaults_are_the_tools_defaults():
    # budget 50%, recent 30% (w = floor(0.3 * 5) = 1), seed 42: the same as passing them.
    assert run_keyformer() == run_keyformer(budget="50%", recent="30%", seed=42)
    assert run_keyformer() == run_keyformer(budget=0.5, recent=0.3, seed=42)
    assert run_keyformer()[1] == 1
    # snap_window defaults to min(32, k) for an int budget: k = 4 works without it (it raised "L = 32 exceeds
    # budget k = 4" before), and keeps the last L = 4 prompt tokens.
    s = kvevict.Cache("snapkv", n_q_heads=2, n_kv_heads=1, capacity=8, head_dim=1, budget=4)
    for p in range(6):
        s.append(p, np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32))
    s.prefill(np.zeros((2, 6, 6), np.float32))
    assert s.retained_positions(0) == [2, 3, 4, 5] and s.recent_window == 1
