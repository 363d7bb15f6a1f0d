"""Cache.prefill_qk: the prompt's cut from its queries (C++ prefill_chunk_qk) keeps what prefill keeps from the
logits scale * Q K^T materialised by NumPy, scores equal to float rounding (the products' summation order differs),
for every policy that scores chunks; SnapKV is refused (its window is the prompt's last rows)."""
import numpy as np
import pytest

import kvevict

H_Q, N_KV, D, P = 6, 2, 16, 40


def filled(policy, **options):
    rng = np.random.default_rng(5)
    cache = kvevict.Cache(policy, n_q_heads=H_Q, n_kv_heads=N_KV, capacity=P + 1, head_dim=D, budget=12, **options)
    for p in range(P):
        cache.append(p, rng.standard_normal((N_KV, D)).astype(np.float32),
                     rng.standard_normal((N_KV, D)).astype(np.float32))
    return cache, rng.standard_normal((P, H_Q, D)).astype(np.float32)


@pytest.mark.parametrize("policy, options", [
    ("keyformer", dict(horizon=8, seed=3)), ("keyformer", dict(horizon=8, noise=False)), ("h2o", {}),
    ("h2o", dict(mean_attention=True)), ("tova", {}), ("streaming", {}), ("h2o", dict(head_budgets="adaptive")),
    ("h2o", dict(shared_heads=True))])
def test_equals_prefill_of_the_materialised_logits(policy, options):
    a, q = filled(policy, **options)
    b, _ = filled(policy, **options)
    scale = 0.3
    keys = np.repeat(a.k[:, :P], H_Q // N_KV, axis=0)  # [H_Q, P, D]
    x = np.einsum("phd,hsd->hps", q, keys).astype(np.float32) * np.float32(scale)
    x = np.ascontiguousarray(np.where(np.tril(np.ones((P, P), bool)), x, -np.inf), dtype=np.float32)
    a.prefill(x)
    b.prefill_qk(q, scale=scale)
    assert a.lengths == b.lengths
    for j in range(N_KV):
        assert a.retained_positions(j) == b.retained_positions(j)
        np.testing.assert_allclose(np.sort(a.scores(j)), np.sort(b.scores(j)), rtol=1e-6, atol=0)


def test_refusals():
    cache, q = filled("snapkv")
    with pytest.raises(ValueError, match="use prefill\\(\\) with the whole prompt"):
        cache.prefill_qk(q)
    cache, q = filled("h2o")
    with pytest.raises(ValueError, match=r"q must be .*\[P, n_q_heads, head_dim\]"):
        cache.prefill_qk(q[:-1])
    with pytest.raises(ValueError, match="scale must be finite"):
        cache.prefill_qk(q, scale=float("nan"))
    empty = kvevict.Cache("h2o", n_q_heads=H_Q, n_kv_heads=N_KV, capacity=4, head_dim=D)
    with pytest.raises(ValueError, match="holds no prompt token"):
        empty.prefill_qk(np.zeros((0, H_Q, D), np.float32))
