"""kvevict.ThreadPool and Cache.set_executor: a cache scoring on a pool gives what the serial cache gives, bit for
bit (prefill, chunked prefill, decode steps; Keyformer's drawn noise included), one pool serves several caches and
Python threads, and wrong arguments are refused with the cache unchanged."""
import sys
import threading
import weakref

import numpy as np
import pytest

import kvevict

H, J, D = 6, 2, 8
P = 70  # a test may set another (1100: decode rows of 3 chunks of 512, split across workers when workers > J)


def _cache(policy, pool=None, **kw):
    opts = dict(horizon=8) if policy == "keyformer" else {}
    budget = 24 if P < 100 else P - 30
    c = kvevict.Cache(policy, n_q_heads=H, n_kv_heads=J, capacity=P + 8, head_dim=D, budget=budget, **opts, **kw)
    if pool is not None:
        c.set_executor(pool)
    return c


def _run(cache, rng_seed, chunk=None):
    """A prompt of P tokens (prefill, or chunks of `chunk` rows), then 5 decode steps; the scores and kept
    positions after each."""
    rng = np.random.default_rng(rng_seed)
    k = rng.standard_normal((P, J, D), dtype=np.float32)
    v = rng.standard_normal((P, J, D), dtype=np.float32)
    cache.extend(np.arange(P), k, v)
    x = rng.standard_normal((H, P, P), dtype=np.float32)
    if chunk is None:
        cache.prefill(x)
    else:  # the same logits a chunk at a time (slots [0, c1) of rows [c0, c1))
        cache.reset()
        for c0 in range(0, P, chunk):
            c1 = min(P, c0 + chunk)
            cache.extend(np.arange(c0, c1), k[c0:c1], v[c0:c1])
            cache.prefill_chunk(c1 - c0, np.ascontiguousarray(x[:, c0:c1, :c1]))
        cache.finish_prefill()
    out = [[cache.scores(j).copy() for j in range(J)]]
    for step in range(5):
        n = max(cache.lengths) + 1
        cache.append(P + step, rng.standard_normal((J, D), dtype=np.float32),
                     rng.standard_normal((J, D), dtype=np.float32))
        cache.decode_step(rng.standard_normal((H, n), dtype=np.float32))
        out.append([cache.retained_positions(j) for j in range(J)] + [cache.scores(j).copy() for j in range(J)])
    return out


def _equal(a, b):
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for x, y in zip(ra, rb):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.mark.parametrize("policy", ["keyformer", "h2o", "tova"])
@pytest.mark.parametrize("workers", [2, 3, 7])
@pytest.mark.parametrize("chunk", [None, 16])
def test_pool_gives_the_serial_bits(policy, workers, chunk):
    want = _run(_cache(policy), 3, chunk)
    pool = kvevict.ThreadPool(workers)
    assert pool.workers == workers
    cache = _cache(policy, pool)
    assert cache.executor is pool
    _equal(_run(cache, 3, chunk), want)


@pytest.mark.parametrize("policy", ["keyformer", "h2o"])
def test_long_rows_split_across_workers(monkeypatch, policy):
    """Decode rows of 1,100+ slots (three 512-float chunks) on 3 workers for 2 KV heads: each head's row split into
    chunk ranges (the per-chunk max and sum in parallel, the combine on the caller): the serial bits."""
    monkeypatch.setattr(sys.modules[__name__], "P", 1100)
    want = _run(_cache(policy), 8, 256)
    _equal(_run(_cache(policy, kvevict.ThreadPool(3)), 8, 256), want)


def test_one_pool_many_caches_and_threads():
    pool = kvevict.ThreadPool(2)
    want = _run(_cache("keyformer"), 5)
    results = [None] * 4

    def work(i):
        results[i] = _run(_cache("keyformer", pool), 5)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        _equal(r, want)


def test_the_cache_keeps_its_pool_alive():
    pool = kvevict.ThreadPool(2)
    alive = weakref.ref(pool)
    cache = _cache("h2o", pool)
    del pool  # the cache's reference only
    assert alive() is not None
    _equal(_run(cache, 4), _run(_cache("h2o"), 4))
    cache.set_executor(None)
    assert cache.executor is None and alive() is None


def test_pool_takes_any_int():
    assert kvevict.ThreadPool(np.int64(3)).workers == 3 and kvevict.ThreadPool(1).workers == 1


@pytest.mark.parametrize("workers, err, msg", [
    (0, ValueError, r"ThreadPool: workers must be in \[1, 1024\] \(got 0\)"),
    (-2, ValueError, r"ThreadPool: workers must be in \[1, 1024\] \(got -2\)"),
    (1025, ValueError, r"ThreadPool: workers must be in \[1, 1024\] \(got 1025\)"),
    (2 ** 70, ValueError, r"ThreadPool: workers must be in \[1, 1024\] \(got 1180591620717411303424\)"),
    (1.5, TypeError, r"ThreadPool: workers must be an int \(got 1.5\)"),
    (True, TypeError, r"ThreadPool: workers must be an int \(got True\)"),
    ("2", TypeError, r"ThreadPool: workers must be an int \(got '2'\)")])
def test_pool_refusals(workers, err, msg):
    with pytest.raises(err, match=msg):
        kvevict.ThreadPool(workers)


@pytest.mark.parametrize("pool", [2, "pool", object()])
def test_set_executor_refuses_anything_but_a_pool(pool):
    cache = _cache("h2o")
    with pytest.raises(TypeError, match=r"Cache.set_executor: pool must be a kvevict.ThreadPool or None \(got .+, a "):
        cache.set_executor(pool)
    assert cache.executor is None
    _equal(_run(cache, 6), _run(_cache("h2o"), 6))
