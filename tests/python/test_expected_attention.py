"""Expected Attention from Python: kvevict.QueryStatistics and kvevict.expected_attention_logits against a NumPy
reference written here from the paper's formula (Devoto et al. 2025, §3: the Gaussian's moment-generating function
with the average RoPE rotation of the next F positions) and kvpress's protocol (sinks, ε, ||v||), and a 'tova'
cache driven by those logits keeping the top-k of the reference's scores at the prefill and at every step."""
import numpy as np
import pytest

import kvevict

H_Q, N_KV, D = 4, 2, 8
G = H_Q // N_KV
THETA = 10000.0
FLT_MIN = np.float32(np.finfo(np.float32).tiny)


def rope(x, pos, style):
    """x [..., D] rotated to position pos (half_split: pairs (i, i + D/2); interleaved: (2i, 2i + 1))."""
    freq = THETA ** (-np.arange(D // 2) * 2.0 / D)
    c, s = np.cos(pos * freq), np.sin(pos * freq)
    a, b = (np.arange(D // 2), np.arange(D // 2) + D // 2) if style == "half_split" else \
        (np.arange(0, D, 2), np.arange(1, D, 2))
    out = np.array(x, np.float64)
    out[..., a] = x[..., a] * c - x[..., b] * s
    out[..., b] = x[..., a] * s + x[..., b] * c
    return out


def reference_scores(q_rows, keys, values, positions, next_position, F, style, n_sink=4, eps=0.0):
    """score[j][s] for the held slots: mean over the group of softmax over the non-sinks of
    mu'.k / sqrt(D) + k^T Sigma' k / (2 D), (+ eps) * ||v||; sinks = the layer's max + 1."""
    # R-bar: the mean of the rotation matrices of positions next .. next + F - 1.
    rbar = np.mean([rope(np.eye(D), t, style).T for t in range(next_position, next_position + F)], axis=0)
    scores = []
    for j in range(N_KV):
        k, v, pos = keys[j], values[j], positions[j]
        order = np.argsort(pos, kind="stable")
        sink = np.zeros(len(pos), bool)
        sink[order[:n_sink]] = True
        att = np.zeros(len(pos))
        for h in range(j * G, (j + 1) * G):
            q = q_rows[:, h, :].astype(np.float64)
            mu, sigma = q.mean(0), np.cov(q.T, bias=True)
            mu2, sigma2 = rbar @ mu, rbar @ sigma @ rbar.T
            x = k @ mu2 / np.sqrt(D) + 0.5 * np.einsum("sa,ab,sb->s", k, sigma2, k) / D
            e = np.exp(x[~sink] - x[~sink].max())
            att[~sink] += e / e.sum()
        sc = (att / G + eps) * np.linalg.norm(v, axis=1)
        scores.append((sc, sink))
    top = max(sc[~sink].max() for sc, sink in scores)
    return [np.where(sink, top + 1.0, sc) for sc, sink in scores]


def held(cache):
    return ([cache.k[j, :cache.lengths[j]].astype(np.float64) for j in range(N_KV)],
            [cache.v[j, :cache.lengths[j]].astype(np.float64) for j in range(N_KV)],
            [cache.positions(j) for j in range(N_KV)])


@pytest.mark.parametrize("style", ["half_split", "interleaved"])
def test_logits_match_the_reference_and_tova_keeps_its_top_k(style):
    rng = np.random.default_rng(11)
    P, T, K, F = 24, 6, 10, 64
    cache = kvevict.Cache("tova", n_q_heads=H_Q, n_kv_heads=N_KV, capacity=P + 1, head_dim=D, budget=K)
    stats = kvevict.QueryStatistics(H_Q, D)
    q_all = rng.standard_normal((P + T, H_Q, D)).astype(np.float32)
    for p in range(P):
        cache.append(p, rng.standard_normal((N_KV, D)).astype(np.float32),
                     rng.standard_normal((N_KV, D)).astype(np.float32))
    stats.add(q_all[4:P])
    assert stats.count == P - 4
    np.testing.assert_allclose(stats.mean(1), q_all[4:P, 1].astype(np.float64).mean(0), rtol=1e-12)
    np.testing.assert_allclose(stats.covariance(1), np.cov(q_all[4:P, 1].astype(np.float64).T, bias=True),
                               rtol=1e-9, atol=1e-12)

    def check_and_step(next_position, step):
        k, v, pos = held(cache)
        want = reference_scores(q_all[4:next_position if step else P], k, v, pos, next_position, F, style)
        x = kvevict.expected_attention_logits(stats, cache, next_position=next_position, rope_style=style,
                                              n_future_positions=F)
        assert x.shape == (H_Q, max(cache.lengths)) and x.dtype == np.float32
        for h in range(H_Q):
            np.testing.assert_allclose(x[h], np.log(np.maximum(want[h // G], FLT_MIN)), rtol=2e-5, atol=2e-5)
        # TOVA keeps the top-k of the scores (the sinks, at the max + 1, among them).
        expect = [sorted(np.asarray(pos[j])[np.argsort(-want[j], kind="stable")[:K]].tolist()) for j in range(N_KV)]
        if step:
            cache.decode_step(x)
        else:
            cache.prefill(x)  # [n_q_heads, P]: the prompt's last row, what a 'tova' cache reads
        assert [cache.retained_positions(j) for j in range(N_KV)] == expect

    check_and_step(P, step=False)
    for t in range(P, P + T):
        cache.append(t, rng.standard_normal((N_KV, D)).astype(np.float32),
                     rng.standard_normal((N_KV, D)).astype(np.float32))
        stats.add(q_all[t:t + 1])
        check_and_step(t + 1, step=True)
    assert cache.lengths == [K, K]


def test_options_reach_the_score():
    rng = np.random.default_rng(3)
    cache = kvevict.Cache("tova", n_q_heads=H_Q, n_kv_heads=N_KV, capacity=16, head_dim=D, budget=8)
    for p in range(12):
        cache.append(p, rng.standard_normal((N_KV, D)).astype(np.float32),
                     rng.standard_normal((N_KV, D)).astype(np.float32))
    stats = kvevict.QueryStatistics(H_Q, D)
    q = rng.standard_normal((8, H_Q, D)).astype(np.float32)
    stats.add(q)
    k, v, pos = held(cache)
    x = kvevict.expected_attention_logits(stats, cache, next_position=12, n_future_positions=16, n_sink=2,
                                          epsilon=0.01)
    want = reference_scores(q, k, v, pos, 12, 16, "half_split", n_sink=2, eps=0.01)
    np.testing.assert_allclose(x[0], np.log(want[0]), rtol=2e-5, atol=2e-5)
    base = kvevict.expected_attention_logits(stats, cache, next_position=12)
    for option in (dict(use_covariance=False), dict(use_vnorm=False), dict(rope_theta=500.0)):
        assert not np.allclose(kvevict.expected_attention_logits(stats, cache, next_position=12, **option), base)


def test_errors_name_the_argument():
    cache = kvevict.Cache("tova", n_q_heads=H_Q, n_kv_heads=N_KV, capacity=8, head_dim=D, budget=4)
    cache.append(0, np.ones((N_KV, D), np.float32), np.ones((N_KV, D), np.float32))
    stats = kvevict.QueryStatistics(H_Q, D)
    with pytest.raises(ValueError, match=r"stats holds no query rows \(add the prompt.s queries first\)"):
        kvevict.expected_attention_logits(stats, cache, next_position=1)
    stats.add(np.ones((1, H_Q, D), np.float32))
    with pytest.raises(ValueError, match="rope_style: unknown pairing 'neox'"):
        kvevict.expected_attention_logits(stats, cache, next_position=1, rope_style="neox")
    with pytest.raises(ValueError, match="one QueryStatistics per layer"):
        kvevict.expected_attention_logits(kvevict.QueryStatistics(2, D), cache, next_position=1)
    with pytest.raises(ValueError, match="n_q_heads must be >= 1"):
        kvevict.QueryStatistics(0, D)
    with pytest.raises(ValueError, match=r"q must be .*\[rows, n_q_heads, head_dim\]"):
        stats.add(np.ones((1, H_Q, D + 1), np.float32))
    bad = np.ones((1, H_Q, D), np.float32)
    bad[0, 2, 3] = np.nan
    with pytest.raises(ValueError, match=r"q\[0\]\[2\]\[3\] is nan"):
        stats.add(bad)
    assert stats.count == 1  # nothing added by the refused calls
    with pytest.raises(ValueError, match=r"\[n_q_heads, P\] \(the prompt's last row\)"):
        cache.prefill(np.zeros((H_Q, 2), np.float32))
