"""kvevict.attention_maxes: each key's largest attention probability over a causal sequence's last queries (KVzip's
reconstruction score) against a NumPy reference (each row's softmax in float64 over keys [first, offset + i]) on
strided views, GQA, left padding, a pool; KVzip's use (a context's keys, then the repeat's own, causally) against the
materialised torch computation it replaces; every refusal names the argument."""
import numpy as np
import pytest

import kvevict


def reference(q, k, offset, scale, first):
    nq, n, d = q.shape
    P = k.shape[1]
    g = nq // k.shape[0]
    x = np.einsum("hid,hcd->hic", q.astype(np.float64), np.repeat(k, g, axis=0).astype(np.float64)) * scale
    pos = offset + np.arange(n)
    visible = (np.arange(P)[None, :] <= pos[:, None]) & (np.arange(P)[None, :] >= first)
    x = np.where(visible[None], x, -np.inf)
    rows = pos >= first  # a query before first is padding: no row
    x = x[:, rows]
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return p.max(axis=1) if p.shape[1] else np.zeros((nq, P))


@pytest.mark.parametrize("nq, nkv, d, P, offset, first, pool", [
    (1, 1, 16, 1, 0, 0, None), (4, 2, 16, 45, 44, 0, None), (6, 2, 32, 290, 100, 17, 2), (9, 3, 64, 520, 260, 0, 3),
    (2, 2, 48, 70, 10, 40, 2), (3, 1, 16, 64, 0, 5, None)])
def test_equals_the_reference(nq, nkv, d, P, offset, first, pool):
    rng = np.random.default_rng(P)
    q = (rng.standard_normal((P - offset, nq, d)) * 2).astype(np.float32).transpose(1, 0, 2)  # strided [nq, n, d]
    k = rng.standard_normal((nkv, P + 3, d)).astype(np.float32)[:, :P]
    scale = 0.8 / np.sqrt(d)
    got = kvevict.attention_maxes(q, k, query_offset=offset, scale=scale, first=first,
                                  pool=kvevict.ThreadPool(pool) if pool else None)
    assert got.shape == (nq, P) and got.dtype == np.float32
    np.testing.assert_allclose(got, reference(q, k, offset, scale, first), rtol=2e-5, atol=1e-7)
    assert (got[:, :first] == 0).all()


def test_default_scale_and_exact_uniform_values():
    # q = 0: uniform rows. P = 4, offset 2: position 2 sees 3 keys, position 3 sees 4: [1/3, 1/3, 1/3, 1/4].
    got = kvevict.attention_maxes(np.zeros((2, 2, 16), np.float32), np.ones((1, 4, 16), np.float32), query_offset=2)
    np.testing.assert_allclose(got, [[1 / 3, 1 / 3, 1 / 3, 0.25]] * 2, rtol=1e-6)
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 5, 32)).astype(np.float32), rng.standard_normal((2, 9, 32)).astype(np.float32)
    np.testing.assert_array_equal(kvevict.attention_maxes(q, k, query_offset=4),
                                  kvevict.attention_maxes(q, k, query_offset=4, scale=1 / np.sqrt(32)))


def test_kvzips_score_as_the_torch_computation():
    # KVzip's layer score: the repeat's queries over [sinks | chunk | the repeat's own keys, causally], the max over
    # queries and the KV head's group, the chunk's columns.
    torch = pytest.importorskip("torch")
    g, nkv, d, sink, C, L = 3, 2, 64, 4, 300, 310
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(nkv * g, L, d, generator=gen)
    keys = torch.randn(nkv, sink + C + L, d, generator=gen)
    w = torch.matmul(q, keys.repeat_interleave(g, dim=0).transpose(1, 2)) * d ** -0.5
    w[:, :, -L:].masked_fill_(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    want = torch.softmax(w, dim=-1)[:, :, sink:sink + C].amax(dim=1).view(nkv, g, C).amax(dim=1)
    got = torch.from_numpy(kvevict.attention_maxes(q, keys, query_offset=sink + C, scale=d ** -0.5))
    got = got[:, sink:sink + C].view(nkv, g, C).amax(dim=1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-8)


GOOD = dict(q=np.zeros((4, 10, 16), np.float32), k=np.zeros((2, 30, 16), np.float32), query_offset=20)


@pytest.mark.parametrize("change, err, msg", [
    (dict(query_offset=30), ValueError, r"q must be \[n_q_heads, P - query_offset, head_dim\].*query_offset 30"),
    (dict(query_offset=19), ValueError, r"q must be .*q \[4, 10, 16\], k \[2, 30, 16\], query_offset 19"),
    (dict(query_offset=-1), (ValueError, TypeError, OverflowError), "query_offset"),
    (dict(k=np.zeros((2, 30, 16), np.float64)), ValueError, "k must be a float32 array"),
    (dict(q=np.zeros((4, 10, 8), np.float32), k=np.zeros((2, 30, 8), np.float32)), ValueError,
     "^attention_maxes: head_dim must be a positive multiple of 16"),
    (dict(k=np.zeros((3, 30, 16), np.float32)), ValueError, r"^attention_maxes: n_q_heads \(4\) must be a positive multiple"),
    (dict(first=30), ValueError, r"^attention_maxes: first \(30\) must be below P \(k's rows\) \(30\)"),
    (dict(scale=0.0), ValueError, "attention_maxes: scale must be a positive finite float32"),
    (dict(pool=3), TypeError, "attention_maxes: pool must be a kvevict.ThreadPool or None"),
])
def test_refusals_name_the_argument(change, err, msg):
    with pytest.raises(err, match=msg):
        kvevict.attention_maxes(**dict(GOOD, **change))
