"""Locking of the bindings: no Python object is created (so no garbage collection, no __del__) while a cache's
or a pool's mutex is held, and a sequence that changes length during attention_logits is refused, not
overrun.

The garbage-collection tests run in a child interpreter under a timeout: a binding that collects a cycle while
it holds the pool's mutex, and frees a PagedCache of that pool there (whose destructor takes the same mutex),
deadlocks, and the timeout turns that into a failure instead of a hung test run.
"""
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kvevict

TIMEOUT_S = 60


def raises(error, text):
    return pytest.raises(error, match=re.escape(text))


def run_child(code):
    """Runs `code` in a fresh interpreter with this one's module path; fails on a timeout or a non-zero exit."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                           timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child interpreter did not finish in {TIMEOUT_S} s (a deadlock)")
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


# Each round makes a garbage cycle that holds the only reference to a second sequence `b` of the pool (4 tokens,
# 2 pages), lowers the collection threshold (1 to 6 objects, so that over the rounds the collection falls on each
# of the first containers allocated from there) and calls one accessor of `a`, its method bound before (a bound
# method is a container too). With the bindings' rule (copy under the lock, build the Python result after it) b's
# destructor returns its pages wherever the collection happens; before it, a collection inside the locked block
# (retained_positions builds a list there) deadlocked on the pool's mutex.
PAGED_GC = """
    import gc
    import numpy as np
    import kvevict

    pool = kvevict.PagePool(num_pages=8, page_size=2, n_kv_heads=2, head_dim=3)
    a = kvevict.PagedCache("h2o", pool, n_q_heads=2, max_pages=2, budget=3, recent=1)
    for t in range(3):
        a.append(t, np.full((2, 3), t, np.float32), np.full((2, 3), -t, np.float32))
    f = {bound}
    plain = lambda x: x.tolist() if isinstance(x, np.ndarray) else x
    want = plain({call})
    for round in range(300):
        b = kvevict.PagedCache("h2o", pool, n_q_heads=2, max_pages=2, budget=3, recent=1)
        for t in range(4):
            b.append(t, np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32))
        assert pool.used_pages == 4, pool.used_pages
        gc.collect()
        cycle = [b]
        cycle.append(cycle)
        del b, cycle
        gc.set_threshold(1 + round % 6)
        got = {call}
        gc.set_threshold(700)
        gc.collect()
        assert pool.used_pages == 2, pool.used_pages  # b's two pages went back
        assert plain(got) == want, (got, want)
    print("ok")
"""

# (the method bound once, the call)
PAGED_ACCESSORS = {
    "retained_positions": ("a.retained_positions", "f(0)"),
    "positions": ("a.positions", "f(1)"),
    "scores": ("a.scores", "f(1)"),
    "k_rows": ("a.k_rows", "f(1)"),
    "v_rows": ("a.v_rows", "f(0)"),
    "page_table": ("None", "a.page_table"),
    "lengths": ("None", "a.lengths"),
    "repr": ("a.__repr__", "f()"),
}


@pytest.mark.parametrize("name", list(PAGED_ACCESSORS))
def test_a_collection_inside_a_paged_accessor_frees_a_sequence_of_the_same_pool(name):
    bound, call = PAGED_ACCESSORS[name]
    assert run_child(PAGED_GC.replace("{bound}", bound).replace("{call}", call)) == "ok\n"


# A __del__ run by a collection inside an accessor of `c` calls `c` again (its lengths): it must find c's mutex
# free, so the accessor may not allocate while it holds the lock (lengths and retained_positions built their
# lists there, and deadlocked).
CACHE_GC = """
    import gc
    import numpy as np
    import kvevict

    c = kvevict.Cache("h2o", n_q_heads=2, n_kv_heads=2, capacity=8, head_dim=3, budget=3, recent=1)
    for t in range(3):
        c.append(t, np.full((2, 3), t, np.float32), np.full((2, 3), -t, np.float32))
    seen = []

    class Finalizer:
        def __del__(self):
            seen.append(c.lengths)

    f = {bound}
    plain = lambda x: x.tolist() if isinstance(x, np.ndarray) else x
    want = plain({call})
    for round in range(300):
        gc.collect()
        cycle = [Finalizer()]
        cycle.append(cycle)
        del cycle
        gc.set_threshold(1 + round % 6)
        got = {call}
        gc.set_threshold(700)
        gc.collect()
        assert seen == [[3, 3]] * (round + 1), seen
        assert plain(got) == want, (got, want)
    print("ok")
"""

CACHE_ACCESSORS = {
    "retained_positions": ("c.retained_positions", "f(0)"),
    "positions": ("c.positions", "f(1)"),
    "scores": ("c.scores", "f(1)"),
    "lengths": ("None", "c.lengths"),
    "repr": ("c.__repr__", "f()"),
}


@pytest.mark.parametrize("name", list(CACHE_ACCESSORS))
def test_a_finalizer_run_inside_a_cache_accessor_can_call_the_cache(name):
    bound, call = CACHE_ACCESSORS[name]
    assert run_child(CACHE_GC.replace("{bound}", bound).replace("{call}", call)) == "ok\n"


# Threads step their own sequences of one pool (prefill and decode_step hold the pool's mutex without the GIL)
# while the main thread makes and drops sequences of that pool (the destructor takes the mutex) and reads the
# pool's counters: the waits for the mutex are the GIL-free ones of locking.hpp, and everything finishes
# with every page back in the pool.
CONTENDED = """
    import threading
    import numpy as np
    import kvevict

    pool = kvevict.PagePool(num_pages=64, page_size=2, n_kv_heads=2, head_dim=8)
    rng = np.random.default_rng(0)
    rows = rng.standard_normal((40, 2, 2, 8)).astype(np.float32)
    logits = rng.standard_normal((4, 24, 24)).astype(np.float32)
    q = rng.standard_normal((4, 8)).astype(np.float32)
    kept = []

    def run():
        for _ in range(60):
            seq = kvevict.PagedCache("h2o", pool, n_q_heads=4, max_pages=12, budget=8, recent=2)
            for t in range(24):
                seq.append(t, rows[t, 0], rows[t, 1])
            seq.prefill(logits)
            for t in range(24, 40):
                seq.append(t, rows[t, 0], rows[t, 1])
                seq.decode_step(kvevict.attention_logits(seq, q))
            kept.append(seq.retained_positions(0))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        extra = kvevict.PagedCache("h2o", pool, n_q_heads=4, max_pages=1, budget=1)
        extra.append(0, rows[0, 0], rows[0, 1])
        assert 1 <= pool.used_pages <= 64
        del extra
    for t in threads:
        t.join()
    assert len(kept) == 180 and all(k == kept[0] for k in kept) and len(kept[0]) == 8, kept
    assert pool.used_pages == 0, pool.used_pages
    print("ok")
"""


def test_sequences_made_and_dropped_while_others_of_the_pool_step_in_threads():
    assert run_child(CONTENDED) == "ok\n"


class GrowsOnConversion:
    """An array-like q whose conversion (numpy.asarray calls __array__) appends a token to `cache`: it runs after
    attention_logits has read the length and sized `out`, before the kernel."""

    def __init__(self, cache, q):
        self.cache, self.q = cache, q

    def __array__(self, dtype=None, copy=None):
        self.cache.append(self.cache_length(), np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
        return self.q

    def cache_length(self):
        c = self.cache
        return c.length if isinstance(c, kvevict.PagedCache) else c.lengths[0]


def growing_caches():
    pool = kvevict.PagePool(num_pages=4, page_size=2, n_kv_heads=2, head_dim=3)
    return [kvevict.Cache("h2o", n_q_heads=2, n_kv_heads=2, capacity=8, head_dim=3, budget=3, recent=1),
            kvevict.PagedCache("h2o", pool, n_q_heads=2, max_pages=4, budget=3, recent=1)]


@pytest.mark.parametrize("kind", ["Cache", "PagedCache"])
def test_attention_logits_refuses_a_sequence_that_grew_during_the_call(kind):
    cache = growing_caches()[kind == "PagedCache"]
    for t in range(3):
        cache.append(t, np.full((2, 3), 1.0, np.float32), np.zeros((2, 3), np.float32))
    q = np.ones((2, 3), np.float32)
    # out is the first 2 rows of a 3-row buffer: a kernel writing 2 x 4 logits into 2 x 3 would reach row 2.
    buffer = np.full((3, 3), 7.0, np.float32)
    out = buffer[:2]
    with raises(ValueError, "kvevict.attention_logits: the sequence changed length during the call (n = 3 when q, "
                            "bias and out were checked, 4 now); nothing was written to out; call it again with "
                            "arguments of the new length"):
        kvevict.attention_logits(cache, GrowsOnConversion(cache, q), out=out)
    assert np.array_equal(buffer, np.full((3, 3), 7.0, np.float32))
    # The call again, over the 4 tokens now there (all K rows ones): q . k = 3 for every slot, times 1 / sqrt(3).
    r = kvevict.attention_logits(cache, q)
    scale = np.float32(1.0) / np.sqrt(np.float32(3.0))
    np.testing.assert_array_equal(r, np.full((2, 4), np.float32(3.0) * scale, np.float32))
