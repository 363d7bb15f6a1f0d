"""kvevict.causal_attention: the prompt's fused causal attention and H2O's column sums against a NumPy reference
(each row's softmax in float64 over its visible keys) on strided views (transformers' [P, n_q, d] queries seen as
[n_q, P, d], K/V views of bigger buffers), left padding, GQA, a pool; its sums give Cache.prefill_from_attention
the kept set Cache.prefill gives on the materialised logits; every refusal names the argument."""
import numpy as np
import pytest

import kvevict


def problem(nq, nkv, d, P, seed=3, spread=1.0):
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((P, nq, d)) * spread).astype(np.float32).transpose(1, 0, 2)  # strided [nq, P, d]
    k = rng.standard_normal((nkv, P + 5, d)).astype(np.float32)[:, :P]
    v = rng.standard_normal((nkv, P + 5, d)).astype(np.float32)[:, :P]
    return q, k, v


def reference(q, k, v, scale, first):
    nq, P, d = q.shape
    g = nq // k.shape[0]
    kk, vv = np.repeat(k, g, axis=0).astype(np.float64), np.repeat(v, g, axis=0).astype(np.float64)
    x = np.einsum("hid,hcd->hic", q.astype(np.float64), kk) * scale
    visible = np.tril(np.ones((P, P), dtype=bool))
    visible[:, :first] = False
    x = np.where(visible, x, -np.inf)[:, first:]
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    out = np.zeros((P, nq, d))
    out[first:] = np.einsum("hic,hcd->ihd", p, vv)
    return out, p.sum(axis=1)


@pytest.mark.parametrize("nq, nkv, d, P, first, pool", [
    (1, 1, 16, 1, 0, None), (4, 2, 16, 45, 0, None), (6, 2, 32, 290, 17, 2), (9, 3, 64, 300, 0, 3),
    (2, 2, 48, 70, 69, 2)])
def test_equals_the_reference(nq, nkv, d, P, first, pool):
    q, k, v = problem(nq, nkv, d, P, spread=2.0)
    scale = 0.7 / np.sqrt(d)
    out, sums = kvevict.causal_attention(q, k, v, scale=scale, first=first, sums=True,
                                         pool=kvevict.ThreadPool(pool) if pool else None)
    want_out, want_sums = reference(q, k, v, scale, first)
    assert out.shape == (P, nq, d) and out.dtype == np.float32 and sums.shape == (nq, P)
    np.testing.assert_allclose(out, want_out, rtol=0, atol=2e-5)
    np.testing.assert_allclose(sums, want_sums, rtol=2e-5, atol=2e-5)
    assert not out[:first].any() and not sums[:, :first].any()
    alone, none = kvevict.causal_attention(q, k, v, scale=scale, first=first)
    assert none is None and np.array_equal(alone, out)


def test_default_scale_is_one_over_sqrt_head_dim():
    q, k, v = problem(2, 1, 64, 20)
    a, _ = kvevict.causal_attention(q, k, v)
    b, _ = kvevict.causal_attention(q, k, v, scale=0.125)
    assert np.array_equal(a, b)


def test_sums_cut_the_prompt_as_prefill_of_the_logits():
    nq, nkv, d, P = 6, 2, 16, 60
    q, k, v = problem(nq, nkv, d, P, seed=8, spread=3.0)
    scale = 0.25
    _, sums = kvevict.causal_attention(q, k, v, scale=scale, sums=True)
    caches = [kvevict.Cache("h2o", n_q_heads=nq, n_kv_heads=nkv, capacity=P + 1, head_dim=d, budget=20, recent=4)
              for _ in range(2)]
    for c in caches:
        for p in range(P):
            c.append(p, np.ascontiguousarray(k[:, p]), np.ascontiguousarray(v[:, p]))
    x = np.einsum("hid,hcd->hic", q, np.repeat(k, nq // nkv, axis=0)).astype(np.float32) * np.float32(scale)
    caches[0].prefill_from_attention(sums)
    caches[1].prefill(np.ascontiguousarray(np.where(np.tril(np.ones((P, P), bool)), x, -np.inf), dtype=np.float32))
    for j in range(nkv):
        assert caches[0].retained_positions(j) == caches[1].retained_positions(j)
        np.testing.assert_allclose(np.sort(caches[0].scores(j)), np.sort(caches[1].scores(j)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("options", [dict(), dict(tau_init=1.5, seed=11), dict(noise=False),
                                     dict(tau_init=2.0, noise=False, seed=3)])
def test_sums_for_a_keyformer_cache_cut_as_its_prefill(options):
    """sums_for=cache: Keyformer's softmax((x + s * zeta) / tau0) with the cache's seed, tau0 and noise switch, summed
    over the queries; prefill_from_attention of those cuts as prefill of the materialised logits."""
    nq, nkv, d, P = 6, 2, 32, 70
    q, k, v = problem(nq, nkv, d, P, seed=4, spread=3.0)
    scale = d ** -0.5
    caches = [kvevict.Cache("keyformer", n_q_heads=nq, n_kv_heads=nkv, capacity=P + 1, head_dim=d, budget=20,
                            recent=4, horizon=8, **options) for _ in range(2)]
    for c in caches:
        for p in range(P):
            c.append(p, np.ascontiguousarray(k[:, p]), np.ascontiguousarray(v[:, p]))
    spec = caches[0].prompt_sums
    assert spec == dict(kind="gumbel", seed=options.get("seed", 42), tau=options.get("tau_init", 1.0),
                        noise_scale=options.get("noise_scale", 1.0), noise=options.get("noise", True))
    out, sums = kvevict.causal_attention(q, k, v, scale=scale, sums_for=caches[0], pool=kvevict.ThreadPool(2))
    plain, _ = kvevict.causal_attention(q, k, v, scale=scale)
    assert np.array_equal(out, plain)  # the output does not depend on the sums asked for
    x = np.einsum("hid,hcd->hic", q.astype(np.float64), np.repeat(k, nq // nkv, axis=0)) * scale
    x = np.where(np.tril(np.ones((P, P), bool)), x, -np.inf).astype(np.float32)
    caches[0].prefill_from_attention(sums)
    caches[1].prefill(np.ascontiguousarray(x))
    for j in range(nkv):
        assert caches[0].retained_positions(j) == caches[1].retained_positions(j)
        np.testing.assert_allclose(np.sort(caches[0].scores(j)), np.sort(caches[1].scores(j)), rtol=1e-4, atol=1e-5)
    assert caches[0].temperature == caches[1].temperature


def test_prompt_sums_of_each_policy():
    def cache(policy, **kw):
        return kvevict.Cache(policy, n_q_heads=2, n_kv_heads=1, capacity=8, head_dim=16, **kw)
    assert cache("h2o").prompt_sums == dict(kind="attention")
    assert cache("tova").prompt_sums == dict(kind="none")
    assert cache("keyformer", horizon=4, mean_attention=True).prompt_sums == dict(kind="none")
    q, k, v = problem(2, 1, 16, 5)
    with pytest.raises(ValueError, match=r"causal_attention: sums_for: a 'tova' cache takes no prompt sums"):
        kvevict.causal_attention(q, k, v, sums_for=cache("tova"))
    with pytest.raises(ValueError, match=r"give sums=True or sums_for, not both"):
        kvevict.causal_attention(q, k, v, sums=True, sums_for=cache("h2o"))
    with pytest.raises(TypeError, match=r"sums_for must be a kvevict.Cache or None \(got int\)"):
        kvevict.causal_attention(q, k, v, sums_for=1)
    a, sa = kvevict.causal_attention(q, k, v, sums_for=cache("h2o"))
    b, sb = kvevict.causal_attention(q, k, v, sums=True)
    assert np.array_equal(a, b) and np.array_equal(sa, sb)


@pytest.mark.parametrize("change, err, msg", [
    (dict(q=np.zeros((2, 5, 16), dtype=np.float64)), ValueError, r"q must be a float32 array of shape \[n_q_heads"),
    (dict(k=np.zeros((1, 5), dtype=np.float32)), ValueError, r"k must be a float32 array of shape \[n_kv_heads"),
    (dict(v=np.zeros((1, 6, 16), dtype=np.float32)), ValueError, r"k and v must be \[n_kv_heads, P, head_dim\]"),
    (dict(q=np.zeros((16, 5, 2), dtype=np.float32).transpose(2, 1, 0)), ValueError, r"q must be .*byte strides"),
    (dict(q=np.zeros((3, 5, 16), dtype=np.float32), k=np.zeros((2, 5, 16), dtype=np.float32),
          v=np.zeros((2, 5, 16), dtype=np.float32)), ValueError,
     r"causal_attention: n_q_heads \(3\) must be a positive multiple of n_kv_heads \(2\)"),
    (dict(q=np.zeros((2, 5, 8), dtype=np.float32), k=np.zeros((1, 5, 8), dtype=np.float32),
          v=np.zeros((1, 5, 8), dtype=np.float32)), ValueError, r"head_dim must be a positive multiple of 16 \(got 8\)"),
    (dict(first=5), ValueError, r"first \(5\) must be below prompt_len \(5\)"),
    (dict(first=-1), ValueError, r"first"),
    (dict(scale=0.0), ValueError, r"scale must be"),
    (dict(scale=float("nan")), ValueError, r"scale must be"),
    (dict(scale=1e-300), ValueError, r"scale must be a positive finite float32"),
    (dict(scale="1"), TypeError, r"scale"),
    (dict(sums=1), TypeError, r"sums"),
    (dict(pool=2), TypeError, r"pool must be a kvevict.ThreadPool or None \(got int\)"),
    (dict(q=None), TypeError, r"q must be"),
])
def test_refusals_name_the_argument(change, err, msg):
    args = dict(q=np.zeros((2, 5, 16), dtype=np.float32), k=np.zeros((1, 5, 16), dtype=np.float32),
                v=np.zeros((1, 5, 16), dtype=np.float32))
    kw = {}
    for key, val in change.items():
        (args if key in args else kw)[key] = val
    with pytest.raises(err, match=msg):
        kvevict.causal_attention(args["q"], args["k"], args["v"], **kw)
