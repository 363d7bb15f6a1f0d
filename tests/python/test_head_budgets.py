"""Head-adaptive budgets (AdaKV) from Python: kvevict.Cache(head_budgets='adaptive') against kvevict-replay
--head-budgets adaptive (the C++ harness) and against a NumPy reference of AdaKV's H2O written here, apart from
the library (Feng et al. 2024, Algorithm 1 with its safeguard): on the same random logits, the same kept sets at
every step, and per-head lengths that differ while their sum stays k * n_kv_heads."""
import json
import subprocess

import numpy as np
import pytest

import kvevict

H_Q, G, P, N = 6, 3, 28, 40  # query heads, GQA group, prompt, tokens in all
N_KV = H_Q // G
K, W = 10, 2


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    rng = np.random.default_rng(55)
    # Heads differ in how peaked their attention is, so that AdaKV moves budget between them.
    logits = (rng.standard_normal((H_Q, N, N)) * np.repeat([0.3, 3.0], G)[:, None, None]).astype(np.float32)
    path = tmp_path_factory.mktemp("adakv") / "logits.npy"
    np.save(path, logits)
    return logits, str(path)


def cli_records(replay_bin, path, split):
    args = [replay_bin, "--logits", path, "--prompt-len", str(P), "--q-heads-per-kv", str(G), "--policy", "h2o",
            "--budget", str(K), "--recent", str(W), "--head-budgets", split]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return [json.loads(line)["kept"] for line in out.splitlines()]


def softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()


def reference_h2o_adaptive(logits, alpha):
    """AdaKV over H2O, from the paper's description: prompt scores = attention summed over the prompt's rows and
    the group's query heads; each KV head keeps its last W prompt tokens, at least floor(alpha * (K - W)) of its
    best older ones, and the layer's remaining N_KV * (K - W) key slots go to the best older tokens of any head
    (score descending; ties: lower head, then older). Decode: each head accumulates the step's attention over what
    it holds and drops one token once it holds its own share + 1 (recent W kept, lowest score among the others,
    ties evict the newer)."""
    score = [dict() for _ in range(N_KV)]
    for j in range(N_KV):
        for h in range(j * G, (j + 1) * G):
            for r in range(P):
                a = softmax(logits[h, r, :r + 1].astype(np.float64))
                for c in range(r + 1):
                    score[j][c] = score[j].get(c, 0.0) + a[c]
    per_head, floor = K - W, int(np.floor(np.float32(alpha) * (K - W)))
    cands = sorted(((-score[j][c], j, c) for j in range(N_KV) for c in range(P - W)))
    counts, left = [0] * N_KV, N_KV * (per_head - floor)
    chosen = [set(range(P - W, P)) for _ in range(N_KV)]
    for _, j, c in cands:
        if counts[j] < floor or left > 0:
            if counts[j] >= floor:
                left -= 1
            counts[j] += 1
            chosen[j].add(c)
    share = [counts[j] + W for j in range(N_KV)]
    kept = [sorted(chosen[j]) for j in range(N_KV)]
    score = [{c: score[j][c] for c in kept[j]} for j in range(N_KV)]
    records = [[list(k) for k in kept]]
    for t in range(P, N):
        for j in range(N_KV):
            held = kept[j] + [t]
            score[j][t] = 0.0
            for h in range(j * G, (j + 1) * G):
                a = softmax(logits[h, t, held].astype(np.float64))
                for c, x in zip(held, a):
                    score[j][c] += x
            if len(held) > share[j]:
                older = held[:-W]
                drop = min(older, key=lambda c: (score[j][c], -c))
                held.remove(drop)
                del score[j][drop]
            kept[j] = held
        records.append([list(k) for k in kept])
    return records, share


def cache_records(logits, **options):
    """The replay driver, against the Python Cache: each query head's row restricted to its KV head's slots,
    laid out with the stride of the longest head."""
    cache = kvevict.Cache("h2o", n_q_heads=H_Q, n_kv_heads=N_KV, capacity=N, head_dim=1, budget=K, recent=W,
                          **options)
    zero = np.zeros((N_KV, 1), np.float32)
    for p in range(P):
        cache.append(p, zero, zero)
    cache.prefill(np.ascontiguousarray(np.tril(logits[:, :P, :P])))
    records, lengths = [[cache.retained_positions(j) for j in range(N_KV)]], [cache.lengths]
    for t in range(P, N):
        cache.append(t, zero, zero)
        n = max(cache.lengths)
        x = np.full((H_Q, n), -np.inf, np.float32)
        for h in range(H_Q):
            pos = cache.positions(h // G)
            x[h, :len(pos)] = logits[h, t, pos]
        cache.decode_step(x)
        records.append([cache.retained_positions(j) for j in range(N_KV)])
        lengths.append(cache.lengths)
    return records, lengths


@pytest.mark.parametrize("alpha", [0.2, 0.5, 0.0, 1.0])
def test_adaptive_matches_replay_and_reference(replay_bin, trace, alpha):
    logits, path = trace
    split = f"adaptive:{alpha}"
    got, lengths = cache_records(logits, head_budgets=split)
    want, share = reference_h2o_adaptive(logits, alpha)
    assert got == cli_records(replay_bin, path, split)
    assert got == want
    # The layer keeps K * N_KV in all, each head its own share, every step.
    assert lengths[0] == share and sum(share) == K * N_KV
    assert all(l == share for l in lengths[1:])
    if alpha == 1.0:
        assert share == [K] * N_KV  # a floor of the whole key budget is uniform
    else:
        assert share[0] != share[1]  # the peaked heads gave budget to the flat ones, or the other way


def test_adaptive_default_floor_is_0_2(trace):
    logits, _ = trace
    assert cache_records(logits, head_budgets="adaptive") == cache_records(logits, head_budgets="adaptive:0.2")


def test_uniform_is_the_default(trace):
    logits, _ = trace
    got, lengths = cache_records(logits, head_budgets="uniform")
    assert (got, lengths) == cache_records(logits)
    assert all(l == [K] * N_KV for l in lengths)


def test_attention_logits_over_uneven_heads():
    """With adaptive budgets the heads hold different lengths: attention_logits lays the rows out with the
    longest head's length and masks each row past its own KV head's length with -inf."""
    rng = np.random.default_rng(7)
    d, n_kv, g, p = 4, 2, 2, 12
    cache = kvevict.Cache("h2o", n_q_heads=n_kv * g, n_kv_heads=n_kv, capacity=p + 1, head_dim=d, budget=6,
                          recent=1, head_budgets="adaptive:0")
    for pos in range(p):
        cache.append(pos, rng.standard_normal((n_kv, d)).astype(np.float32),
                     rng.standard_normal((n_kv, d)).astype(np.float32))
    x = np.zeros((n_kv * g, p, p), np.float32)  # KV head 0: flat attention, spread over every older token
    x[g:, :, 0] = 20.0                           # KV head 1: every query attends to position 0 only
    cache.prefill(np.where(np.tril(np.ones((p, p), bool)), x, -np.inf).astype(np.float32))
    lengths = cache.lengths
    # k * n_kv = 12 slots, 2 of them the recent windows: head 1 keeps its heavy hitter (position 0) and its recent
    # token, head 0 the other 9 key slots and its recent token.
    assert lengths == [10, 2]
    q = rng.standard_normal((n_kv * g, d)).astype(np.float32)
    bias = rng.standard_normal((n_kv * g, max(lengths))).astype(np.float32)
    out = kvevict.attention_logits(cache, q, scale=0.5, bias=bias)
    assert out.shape == (n_kv * g, max(lengths))
    for h in range(n_kv * g):
        j = h // g
        keys = cache.k[j, :lengths[j]]
        np.testing.assert_allclose(out[h, :lengths[j]], 0.5 * keys @ q[h] + bias[h, :lengths[j]], rtol=1e-6)
        assert np.all(np.isneginf(out[h, lengths[j]:]))
    cache.append(p, np.zeros((n_kv, d), np.float32), np.zeros((n_kv, d), np.float32))
    cache.decode_step(kvevict.attention_logits(cache, q))  # the layout decode_step takes
    assert cache.lengths == lengths


@pytest.mark.parametrize("value, message", [
    ("bogus", "head_budgets: unknown split 'bogus' (expected uniform, adaptive or adaptive:ALPHA)"),
    ("adaptive:1.5", "head_budgets: ALPHA in adaptive:ALPHA must be a share of the key budget in [0, 1] (got '1.5')"),
    ("adaptive:", "head_budgets: ALPHA in adaptive:ALPHA must be a share of the key budget in [0, 1] (got '')"),
    ("adaptive:x", "head_budgets: ALPHA in adaptive:ALPHA must be a share of the key budget in [0, 1] (got 'x')"),
])
def test_bad_split_is_named(value, message):
    with pytest.raises(ValueError) as e:
        kvevict.Cache("h2o", n_q_heads=2, n_kv_heads=2, capacity=8, head_dim=1, head_budgets=value)
    assert str(e.value) == message


def test_refusals_name_head_budgets():
    with pytest.raises(TypeError, match="head_budgets must be a str"):
        kvevict.Cache("h2o", n_q_heads=2, n_kv_heads=2, capacity=8, head_dim=1, head_budgets=0.2)
    with pytest.raises(ValueError, match="head_budgets = adaptive shares the layer's budget among"):
        kvevict.Cache("h2o", n_q_heads=2, n_kv_heads=2, capacity=8, head_dim=1, head_budgets="adaptive",
                      shared_heads=True)
    with pytest.raises(ValueError, match="head_budgets = adaptive needs a score from the logits"):
        kvevict.Cache("streaming", n_q_heads=2, n_kv_heads=2, capacity=8, head_dim=1, head_budgets="adaptive")
    with pytest.raises(TypeError):  # a paged cache selects once per layer: no such option
        kvevict.PagedCache("h2o", pool=kvevict.PagePool(n_kv_heads=1, head_dim=1, page_size=4, n_pages=4),
                           n_q_heads=1, head_budgets="adaptive")
