"""Cache.prefill_chunk / finish_prefill (the prompt a chunk at a time, as an engine's chunked prefill computes it) give
prefill()'s kept positions and scores bit for bit, Keyformer's drawn noise included; Cache.prefill_from_attention
(H2O's scores from the column sums of the attention probabilities, computed here in float64 by NumPy) keeps what
prefill keeps from the logits. The refusals, each leaving the cache able to prefill."""
import numpy as np
import pytest

import kvevict

H_Q, N_KV, D, P = 6, 2, 8, 37


def filled(policy, budget=11, **options):
    rng = np.random.default_rng(9)
    cache = kvevict.Cache(policy, n_q_heads=H_Q, n_kv_heads=N_KV, capacity=P + 1, head_dim=D, budget=budget, **options)
    rows = rng.standard_normal((P, 2, N_KV, D)).astype(np.float32)
    return cache, rows


def logits(seed=4):
    x = np.random.default_rng(seed).normal(0.0, 2.0, (H_Q, P, P)).astype(np.float32)
    return np.ascontiguousarray(np.where(np.tril(np.ones((P, P), bool)), x, -np.inf), dtype=np.float32)


@pytest.mark.parametrize("policy, options", [
    ("keyformer", dict(horizon=8, seed=3)), ("h2o", {}), ("h2o", dict(mean_attention=True)), ("tova", {}),
    ("h2o", dict(head_budgets="adaptive", recent=2)), ("knorm", {})])
@pytest.mark.parametrize("chunk", [1, 10, P])
def test_chunks_equal_one_prefill(policy, options, chunk):
    a, rows = filled(policy, **options)
    b, _ = filled(policy, **options)
    x = logits()
    for p in range(P):
        a.append(p, rows[p, 0], rows[p, 1])
    a.prefill(x)
    for c0 in range(0, P, chunk):
        c1 = min(P, c0 + chunk)
        for p in range(c0, c1):
            b.append(p, rows[p, 0], rows[p, 1])
        b.prefill_chunk(c1 - c0, np.ascontiguousarray(x[:, c0:c1, :c1]))
    b.finish_prefill()
    assert a.lengths == b.lengths
    for j in range(N_KV):
        assert a.retained_positions(j) == b.retained_positions(j)
        np.testing.assert_array_equal(a.scores(j), b.scores(j))


@pytest.mark.parametrize("options", [{}, dict(recent=3), dict(head_budgets="adaptive"), dict(shared_heads=True)])
def test_prefill_from_attention_keeps_what_prefill_keeps(options):
    a, rows = filled("h2o", **options)
    b, _ = filled("h2o", **options)
    x = logits(seed=8)
    for p in range(P):
        a.append(p, rows[p, 0], rows[p, 1])
        b.append(p, rows[p, 0], rows[p, 1])
    e = np.exp(x.astype(np.float64) - x.max(axis=-1, keepdims=True))
    sums = (e / e.sum(axis=-1, keepdims=True)).sum(axis=1).astype(np.float32)  # [H_Q, P]
    a.prefill(x)
    b.prefill_from_attention(sums)
    assert a.lengths == b.lengths and b.budget == 11
    for j in range(N_KV):
        assert a.retained_positions(j) == b.retained_positions(j)
        np.testing.assert_allclose(a.scores(j), b.scores(j), rtol=1e-5)


def test_refusals_leave_the_cache_able_to_prefill():
    cache, rows = filled("h2o")
    for p in range(P):
        cache.append(p, rows[p, 0], rows[p, 1])
    with pytest.raises(ValueError, match=r"sums must be .*\[n_q_heads, P\]"):
        cache.prefill_from_attention(np.ones((H_Q, P - 1), np.float32))
    bad = np.ones((H_Q, P), np.float32)
    bad[2, 5] = -1.0
    with pytest.raises(ValueError, match=r"^kvevict::Cache::prefill_from_attention: sums\[2\]\[5\] = -1 \(must be "
                                         r"finite and >= 0: a sum of attention probabilities\)$"):
        cache.prefill_from_attention(bad)
    with pytest.raises(ValueError, match=r"logits must be .*\[n_q_heads, chunk_len, n\]"):
        cache.prefill_chunk(P, np.zeros((H_Q, P, P - 1), np.float32))
    with pytest.raises(ValueError, match="no chunk was passed"):
        cache.finish_prefill()
    assert cache.lengths == [P, P] and not cache.budget_resolved
    cache.prefill_from_attention(np.ones((H_Q, P), np.float32))
    assert cache.lengths == [11, 11]
    with pytest.raises(ValueError, match="already prefilled"):
        cache.prefill_from_attention(np.ones((H_Q, 11), np.float32))
    tova, rows = filled("tova")
    for p in range(P):
        tova.append(p, rows[p, 0], rows[p, 1])
    with pytest.raises(ValueError, match=r"needs H2O's score \(AccumulatedAttentionScore.* or Keyformer's"):
        tova.prefill_from_attention(np.ones((H_Q, P), np.float32))
    snap, rows = filled("snapkv")
    for p in range(P):
        snap.append(p, rows[p, 0], rows[p, 1])
    with pytest.raises(ValueError, match="use prefill"):
        snap.prefill_chunk(P, logits())
