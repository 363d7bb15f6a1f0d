"""kvevict.Cache.copy_from (beam search): a copy follows its source bit for bit for every policy; the refusals
(naming the difference, the destination unchanged); concurrent copies both ways do not deadlock;
QueryStatistics.copy_from."""
import threading

import numpy as np
import pytest

import kvevict

NQ, NKV, D = 4, 2, 8


def make(policy, capacity=32, **kw):
    opts = dict(n_q_heads=NQ, n_kv_heads=NKV, capacity=capacity, head_dim=D, budget=6)
    if policy in ("keyformer",):
        opts.update(horizon=16)
    if policy == "snapkv":
        opts.update(snap_window=3, snap_kernel=3)
    if policy in ("tova", "streaming", "window"):
        opts.update(recent=0)
    opts.update(kw)
    if policy != "keyformer":
        opts.pop("seed", None)  # the noise seed is Keyformer's only
    return kvevict.Cache(policy, **opts)


def kv_rows(p):
    i = np.arange(D, dtype=np.float32)
    h = np.arange(NKV, dtype=np.float32)[:, None]
    k = np.sin(0.37 * p * (i % 5 + 1) + 0.9 * h + 0.1 * i).astype(np.float32)
    return k, (-2 * k + 0.5).astype(np.float32)


def logits_row(c, p):
    """[n_q, n]: each query head's logits over its KV head's slots (rows past a head's length: 0)."""
    n = max(c.lengths)
    x = np.zeros((NQ, n), np.float32)
    g = NQ // NKV
    for q in range(NQ):
        pos = c.positions(q // g)
        x[q, :len(pos)] = 2 * np.sin(0.61 * pos * (q + 1) + 0.23 * p) + np.where(pos % 3 == 0, 1.5, 0.0)
    return x


def prompt(c, P, first=0):
    for t in range(P):
        c.append(first + t, *kv_rows(first + t))
    x = np.zeros((NQ, P, P), np.float32)
    r = np.arange(P)[:, None] + first
    col = np.arange(P)[None, :] + first
    for q in range(NQ):
        x[q] = 2 * np.sin(0.61 * col * (q + 1) + 0.23 * r) + np.where(col % 3 == 0, 1.5, 0.0)
    uses_logits = c.policy not in ("streaming", "window", "knorm", "keydiff")
    c.prefill(x if uses_logits else None)
    return first + P


def step(c, p):
    c.append(p, *kv_rows(p))
    c.decode_step(logits_row(c, p) if c.policy not in ("streaming", "window", "knorm", "keydiff") else None)
    return p + 1


def state(c):
    out = [c.lengths, c.step, c.temperature, c.budget, c.recent_window]
    for j in range(NKV):
        n = c.lengths[j]
        out += [c.positions(j).tolist(), c.scores(j).tobytes(), c.k[j, :n].tobytes(), c.v[j, :n].tobytes()]
    return out


@pytest.mark.parametrize("policy,kw", [("h2o", {}), ("keyformer", {}), ("tova", {}), ("snapkv", {}),
                                       ("streaming", {"sinks": 2}), ("window", {}), ("knorm", {}), ("keydiff", {}),
                                       ("h2o", {"head_budgets": "adaptive"})])
def test_copy_follows_its_source_bit_for_bit(policy, kw):
    a = make(policy, seed=7, **kw)
    b = make(policy, capacity=32 if "head_budgets" in kw else 40, seed=99, **kw)
    p = prompt(a, 12)
    for _ in range(3):
        p = step(a, p)
    q = prompt(b, 10, first=3)
    for _ in range(4):
        q = step(b, q)
    assert state(a) != state(b)
    b.copy_from(a)
    assert state(a) == state(b)
    for _ in range(8):
        step(a, p)
        p = step(b, p)
        assert state(a) == state(b)


def test_refusals_name_the_difference_and_leave_the_destination_unchanged():
    b = make("h2o")
    p = prompt(b, 10)
    step(b, p)
    before = state(b)
    cases = [
        (make("tova"), "Cache.copy_from: other is a 'tova' cache, this cache is 'h2o'"),
        (make("h2o", dtype="float16"), "Cache.copy_from: other has dtype float16, this cache has float32"),
        (make("h2o", budget=7), "kvevict::Cache::copy_state_from: other has budget = 7 tokens, this cache has 6 "
                                "tokens (copy between caches of one configuration)"),
        (make("h2o", n_q_heads=2), "kvevict::Cache::copy_state_from: other has n_q_heads = 2, this cache has 4 (copy "
                                   "between caches of one configuration)"),
        (kvevict.Cache("h2o", n_q_heads=NQ, n_kv_heads=NKV, capacity=32, head_dim=4, budget=6),
         "kvevict::Cache::copy_state_from: other has head_dim = 4, this cache has 8"),
    ]
    for other, message in cases:
        with pytest.raises(ValueError) as e:
            b.copy_from(other)
        assert str(e.value) == message
        assert state(b) == before
    k = make("keyformer", horizon=8)
    with pytest.raises(ValueError, match=r"^Cache.copy_from: other has horizon = 8, this cache has 16$"):
        make("keyformer").copy_from(k)
    small = make("h2o", capacity=8)
    big = make("h2o", budget="50%", capacity=40)
    with pytest.raises(ValueError, match=r"^kvevict::Cache::copy_state_from: other has budget = ratio 0.5"):
        small.copy_from(big)
    raw = make("h2o", capacity=40)
    for t in range(12):
        raw.append(t, *kv_rows(t))
    with pytest.raises(ValueError, match=r"^kvevict::Cache::copy_state_from: other's lengths\[0\] = 12 exceeds this "
                                         r"cache's capacity 8$"):
        small.copy_from(raw)
    b.copy_from(b)  # itself: nothing
    assert state(b) == before


def test_copies_both_ways_in_threads_do_not_deadlock():
    a, b = make("h2o"), make("h2o")
    prompt(a, 10)
    prompt(b, 10, first=1)
    errors = []

    def run(x, y):
        try:
            for _ in range(300):
                x.copy_from(y)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(a, b)), threading.Thread(target=run, args=(b, a))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors
    assert state(a) == state(b)


def test_query_statistics_copy_from():
    s, t = kvevict.QueryStatistics(2, 3), kvevict.QueryStatistics(2, 3)
    s.add(np.arange(12, dtype=np.float32).reshape(2, 2, 3))
    t.copy_from(s)
    assert t.count == 2
    np.testing.assert_array_equal(t.mean(1), s.mean(1))
    np.testing.assert_array_equal(t.covariance(0), s.covariance(0))
    with pytest.raises(ValueError, match=r"^QueryStatistics.copy_from: other has n_q_heads = 1, head_dim = 3; this "
                                         r"has 2, 3$"):
        t.copy_from(kvevict.QueryStatistics(1, 3))
