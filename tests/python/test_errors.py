"""Every error path of the bindings: the exception type, a message naming the argument (the C++
message where the library raised it), and an unchanged cache afterwards."""
import re

import numpy as np
import pytest

import kvevict

OWNED = dict(n_q_heads=4, n_kv_heads=2, capacity=6, head_dim=3)


def raises(error, text):
    return pytest.raises(error, match=re.escape(text))


def rows(value=0.0, dtype=np.float32):
    return np.full((2, 3), value, dtype)


def filled(policy="h2o", n=4, **kw):
    opts = dict(OWNED, budget=3, recent=1)
    opts.update(kw)
    c = kvevict.Cache(policy, **opts)
    for p in range(n):
        c.append(p, rows(), rows())
    return c


CONSTRUCTOR_ERRORS = [
    (("bogus",), OWNED, ValueError, "policy: kvevict::parse_policy: unknown policy 'bogus'"),
    # pybind11 itself rejects an unknown keyword: its TypeError lists the call's keywords.
    (("h2o",), dict(OWNED, budgte=3), TypeError, "head_dim=3, budgte=3"),
    (("h2o",), dict(n_kv_heads=2, capacity=6, head_dim=3), ValueError, "n_q_heads is required"),
    (("h2o",), dict(n_q_heads=4, n_kv_heads=2, head_dim=3), ValueError, "capacity is missing"),
    (("h2o",), dict(OWNED, n_q_heads=3), ValueError,
     "kvevict::Cache: n_q_heads (3) must be a positive multiple of the view's n_kv_heads (2)"),
    (("h2o",), dict(OWNED, capacity=0), ValueError, "capacity must be >= 1 (got 0)"),
    (("h2o",), dict(OWNED, head_dim=-1), ValueError, "head_dim must be >= 0 (got -1)"),
    (("h2o",), dict(OWNED, dtype="int32"), ValueError, "dtype must be float32 or float16 (got int32)"),
    (("h2o",), dict(OWNED, budget=0), ValueError, "budget = 0: kvevict::Budget::tokens: k must be >= 1 (got 0)"),
    (("h2o",), dict(OWNED, budget=-0.5), ValueError, "budget: must be above 0 (got -0.5)"),
    (("h2o",), dict(OWNED, budget="half"), ValueError,
     "budget: expected a token count such as 64, a fraction of the prompt such as 0.5 or a percentage such as 50%, "
     "got 'half'"),
    (("h2o",), dict(OWNED, budget="-50%"), ValueError, "budget: expected a token count such as 64, a fraction of the "
     "prompt such as 0.5 or a percentage such as 50% (no sign), got '-50%'"),
    (("h2o",), dict(OWNED, budget=True), TypeError, "budget must be an int (tokens)"),
    (("h2o",), dict(OWNED, recent="150%"), ValueError,
     "recent: a fraction of the budget must be in [0, 1], i.e. [0%, 100%] (got '150%')"),
    (("h2o",), dict(OWNED, recent=1.5), ValueError,
     "recent: a fraction of the budget must be in [0, 1], i.e. [0%, 100%] (got 1.5)"),
    (("h2o",), dict(OWNED, dtype="bfloat16"), ValueError,
     "dtype must be float32 or float16 (got 'bfloat16', which NumPy does not know; bfloat16 K/V is supported in C++ "
     "only)"),
    (("snapkv",), dict(OWNED, budget=4, snap_window=5), ValueError,
     "snap_window = 5: kvevict::Cache: SnapKV observation window L = 5 exceeds budget k = 4; pass snap_window <= k"),
    (("h2o",), dict(OWNED, seed=3), ValueError, "seed is used only by policy 'keyformer' (got policy 'h2o')"),
    (("h2o",), dict(OWNED, sinks=2), ValueError, "sinks is used only by policy 'streaming' (got policy 'h2o')"),
    (("window",), dict(OWNED, tau_end=3.0), ValueError, "tau_end is used only by policy 'keyformer' (got policy 'window')"),
    (("keyformer",), OWNED, ValueError, "horizon (T, the number of tokens to generate) is required for policy 'keyformer'"),
    (("keyformer",), dict(OWNED, horizon=0), ValueError, "kvevict::LinearTemperature: horizon T must be >= 1 (got 0)"),
    (("keyformer",), dict(OWNED, horizon=4, tau_init=0.0), ValueError,
     "kvevict::LinearTemperature: tau_init must be finite and >= 1.17549435e-38 (FLT_MIN, so that 1/tau_init is "
     "finite) (got 0)"),
    (("h2o",), dict(OWNED, budget=6), ValueError,
     "kvevict::Cache: budget k = 6 needs a view of capacity >= k + 1 = 7 (a decode step appends before it evicts), "
     "but the capacity is 6"),
    (("h2o",), dict(OWNED, budget=2, recent=3), ValueError, "w = 3"),
    (("window",), dict(OWNED, budget=3, recent=1), ValueError,
     "kvevict::SinkRecentSelection: recent window w = 1 with budget k = 3: StreamingLLM/window always keep the most "
     "recent k - sinks = 3 tokens; set the recent window to 0"),
    (("keyformer",), dict(OWNED, horizon=4, noise=1), TypeError, "noise must be True or False, got int 1"),
    (("tova",), dict(OWNED, budget=2, recent=3), ValueError, "kvevict::RecentTopKSelection: recent window w = 3 exceeds budget k = 2"),
    (("keyformer",), dict(OWNED, horizon=4, seed=-1), ValueError, "seed must be >= 0 (got -1)"),
    (("keyformer",), dict(OWNED, horizon=4, seed=2**64), OverflowError,
     "seed = 18446744073709551616 does not fit in 64 bits"),
    (("h2o",), dict(OWNED, shared_heads="yes"), TypeError, "shared_heads must be True or False"),
]


@pytest.mark.parametrize("args, kw, error, text", CONSTRUCTOR_ERRORS)
def test_constructor_errors(args, kw, error, text):
    with raises(error, text):
        kvevict.Cache(*args, **kw)


def test_wrapped_storage_errors():
    K = np.zeros((2, 6, 3), np.float32)
    with raises(ValueError, "give both k and v to wrap caller storage (got only k)"):
        kvevict.Cache("h2o", n_q_heads=2, k=K)
    with raises(ValueError, "n_kv_heads is taken from the shape of k when wrapping k and v; do not pass it"):
        kvevict.Cache("h2o", n_q_heads=2, k=K, v=K.copy(), n_kv_heads=2)
    with raises(ValueError, "k must be a float32 or float16 array of shape [n_kv_heads, capacity, head_dim], got int64"):
        kvevict.Cache("h2o", n_q_heads=2, k=K.astype(np.int64), v=K.copy())
    with raises(ValueError, "k must be a C-contiguous float32 or float16 array of shape [n_kv_heads, capacity, "
                            "head_dim], got shape [6, 3]"):
        kvevict.Cache("h2o", n_q_heads=2, k=K[0], v=K[0].copy())
    with raises(ValueError, "v must be a C-contiguous float32 array of shape [n_kv_heads, capacity, head_dim] "
                            "(the shape of k) = [2, 6, 3], got a float32 array of shape [2, 5, 3]"):
        kvevict.Cache("h2o", n_q_heads=2, k=K, v=np.zeros((2, 5, 3), np.float32))
    with raises(ValueError, "v must be a C-contiguous float16 array"):
        kvevict.Cache("h2o", n_q_heads=2, k=K.astype(np.float16), v=K.copy())
    with raises(ValueError, "got a non-contiguous float32 array of shape [2, 6, 3] (use numpy.ascontiguousarray)"):
        kvevict.Cache("h2o", n_q_heads=2, k=np.zeros((2, 6, 6), np.float32)[:, :, ::2], v=K.copy())
    ro = K.copy()
    ro.flags.writeable = False
    with raises(ValueError, "k must be writeable, got a read-only float32 array of shape [2, 6, 3]"):
        kvevict.Cache("h2o", n_q_heads=2, k=ro, v=K.copy())
    with raises(ValueError, "k and v must be different arrays"):
        kvevict.Cache("h2o", n_q_heads=2, k=K, v=K)
    with raises(ValueError, "dtype = float16 but k is float32"):
        kvevict.Cache("h2o", n_q_heads=2, k=K, v=K.copy(), dtype="float16")
    with raises(ValueError, "k must have no zero dimension, got shape [2, 0, 3]"):
        kvevict.Cache("h2o", n_q_heads=2, k=np.zeros((2, 0, 3), np.float32), v=np.zeros((2, 0, 3), np.float32))


def test_append_errors_leave_the_cache_unchanged():
    c = kvevict.Cache("h2o", **OWNED)
    with raises(ValueError, "k must be a C-contiguous float32 array of shape [n_kv_heads, head_dim] = [2, 3], "
                            "got a float32 array of shape [3, 2]"):
        c.append(0, np.zeros((3, 2), np.float32), rows())
    with raises(ValueError, "v must be a C-contiguous float32 array of shape [n_kv_heads, head_dim] = [2, 3], "
                            "got a float64 array of shape [2, 3]"):
        c.append(0, rows(), np.zeros((2, 3)))
    with raises(ValueError, "k must be a C-contiguous float32 array of shape [n_kv_heads, head_dim] = [2, 3], "
                            "got a non-contiguous float32 array"):
        c.append(0, np.zeros((3, 2), np.float32).T, rows())
    with raises(TypeError, "k must be a C-contiguous float32 array of shape [n_kv_heads, head_dim] = [2, 3], got NoneType"):
        c.append(0, None, rows())
    with raises(OverflowError, "position = 9223372036854775808 does not fit in int64"):
        c.append(2**63, rows(), rows())
    with raises(TypeError, "position must be an int, got float 1.0"):
        c.append(1.0, rows(), rows())
    assert c.lengths == [0, 0]
    for p in range(6):
        c.append(p, rows(p), rows(p))
    with raises(OverflowError, "kvevict::KVView::append: KV head 0 is full (capacity 6)"):
        c.append(6, rows(9.0), rows(9.0))
    assert c.lengths == [6, 6] and c.positions(0).tolist() == list(range(6))
    h = kvevict.Cache("h2o", **OWNED, dtype="float16")
    with raises(ValueError, "k must be a C-contiguous float16 array of shape [n_kv_heads, head_dim] = [2, 3], "
                            "got a float32 array"):
        h.append(0, rows(), rows())


def test_prefill_errors_leave_the_cache_unchanged():
    c = filled()
    x = np.zeros((4, 4, 4), np.float32)
    with raises(ValueError, "logits must be a C-contiguous float32 array of shape [n_q_heads, P, P] = [4, 4, 4], "
                            "got a float32 array of shape [4, 3, 3]"):
        c.prefill(np.zeros((4, 3, 3), np.float32))
    with raises(ValueError, "got a float64 array of shape [4, 4, 4]"):
        c.prefill(np.zeros((4, 4, 4)))
    with raises(ValueError, "got a non-contiguous float32 array of shape [4, 4, 4]"):
        c.prefill(np.zeros((4, 4, 8), np.float32)[:, :, ::2])
    bad = x.copy()
    bad[1, 2, 0] = np.nan
    with raises(ValueError, "kvevict::Cache::prefill: logits row 2 of q_head 1 contains NaN or +inf"):
        c.prefill(bad)
    with raises(ValueError, "kvevict::Cache::prefill: logits must be non-null"):
        c.prefill()
    with raises(ValueError, "gumbel: injected noise is used only by policy 'keyformer' with noise=True (got policy 'h2o')"):
        c.prefill(x, gumbel=x)
    assert c.lengths == [4, 4] and c.budget == 0  # nothing happened
    c.prefill(x)
    assert c.lengths == [3, 3]
    with raises(ValueError, "kvevict::Cache::prefill: already prefilled; call reset() for a new sequence"):
        c.prefill(np.zeros((4, 3, 3), np.float32))
    k = filled("keyformer", horizon=2, noise=False)
    with raises(ValueError, "(got policy 'keyformer' with noise=False)"):
        k.prefill(x, gumbel=x)
    kg = filled("keyformer", horizon=2)
    with raises(ValueError, "gumbel must be a C-contiguous float32 array of shape [n_q_heads, P, P] = [4, 4, 4]"):
        kg.prefill(x, gumbel=np.zeros((4, 4), np.float32))
    r = filled(budget=0.5, recent=3)  # a ratio budget is resolved (and w checked) at prefill: k = 2 < w
    with raises(ValueError, "w = 3"):
        r.prefill(x)
    assert r.lengths == [4, 4] and r.budget == 0


def test_decode_step_errors_leave_the_cache_unchanged():
    c = filled()
    with raises(ValueError, "kvevict::Cache::decode_step: call prefill() first"):
        c.decode_step(np.zeros((4, 4), np.float32))
    c.prefill(np.zeros((4, 4, 4), np.float32))
    with raises(ValueError, "kvevict::Cache::decode_step: n = 3 but the cache holds 3 tokens per KV head "
                            "(append exactly one token, then pass n = 4)"):
        c.decode_step(np.zeros((4, 3), np.float32))  # forgot to append
    c.append(4, rows(), rows())
    with raises(ValueError, "logits must be a C-contiguous float32 array of shape [n_q_heads, n] = [4, 4], "
                            "got a float32 array of shape [4, 3]"):
        c.decode_step(np.zeros((4, 3), np.float32))
    bad = np.zeros((4, 4), np.float32)
    bad[3, 1] = np.inf
    before = [c.scores(h).copy() for h in range(2)]
    with raises(ValueError, "kvevict::Cache::decode_step: logits of q_head 3 contain NaN or +inf"):
        c.decode_step(bad)
    assert c.lengths == [4, 4] and c.step == 0
    assert all(np.array_equal(b, c.scores(h)) for h, b in enumerate(before))
    with raises(ValueError, "gumbel: injected noise is used only by policy 'keyformer'"):
        c.decode_step(np.zeros((4, 4), np.float32), gumbel=np.zeros((4, 4), np.float32))
    c.decode_step(np.zeros((4, 4), np.float32))
    assert c.lengths == [3, 3] and c.step == 1
    t = filled("window", recent=0)
    t.prefill()  # window and streaming need no logits
    t.append(9, rows(), rows())
    t.decode_step()
    t.append(2, rows(), rows())
    with raises(ValueError, "kvevict::Cache::decode_step: new token's position 2 must be larger than the last one, 9"):
        t.decode_step()
    assert t.step == 1 and t.lengths == [4, 4]


def test_accessor_errors():
    c = filled()
    for name in ["positions", "scores", "retained_positions"]:
        with raises(IndexError, f"kvevict::Cache::{name}: KV head 2 out of range (n_kv_heads = 2)"):
            getattr(c, name)(2)
        with raises(IndexError, f"kvevict.Cache.{name}: KV head -1 out of range (n_kv_heads = 2)"):
            getattr(c, name)(-1)
        with raises(TypeError, "h must be an int, got str '0'"):
            getattr(c, name)("0")
    with raises(ValueError, "seed must be >= 0 (got -3)"):
        c.reset(-3)
    assert c.lengths == [4, 4]


def test_attention_logits_errors():
    c = filled()
    q = np.ones((4, 3), np.float32)
    with raises(ValueError, "q must be a C-contiguous float32 array of shape [n_q_heads, head_dim] = [4, 3], "
                            "got a float32 array of shape [2, 3]"):
        kvevict.attention_logits(c, np.ones((2, 3), np.float32))
    ro = np.zeros((4, 4), np.float32)
    ro.flags.writeable = False
    with raises(ValueError, "out must be writeable, got a read-only float32 array of shape [4, 4]"):
        kvevict.attention_logits(c, q, out=ro)
    with raises(ValueError, "out must be a C-contiguous float32 array of shape [n_q_heads, n] = [4, 4]"):
        kvevict.attention_logits(c, q, out=np.zeros((4, 5), np.float32))
    with raises(ValueError, "bias must be a C-contiguous float32 array of shape [n_q_heads, n] = [4, 4], got a float64"):
        kvevict.attention_logits(c, q, bias=np.zeros((4, 4)))
    with raises(ValueError, "scale must be finite (got nan)"):
        kvevict.attention_logits(c, q, scale=float("nan"))
    with raises(TypeError, "incompatible function arguments"):
        kvevict.attention_logits("not a cache", q)


def test_replay_errors():
    x = np.zeros((2, 6, 6), np.float32)
    with raises(ValueError, "prompt_len: P = 7 exceeds the trace's N = 6 tokens"):
        kvevict.replay(x, 7)
    with raises(ValueError, "logits must be a C-contiguous float32 array of shape [H_q, N, N] = [2, 6, 6], "
                            "got a float32 array of shape [2, 6, 5]"):
        kvevict.replay(np.zeros((2, 6, 5), np.float32), 3)
    with raises(ValueError, "logits must be a C-contiguous float32 array of shape [H_q, N, N] = [0, 0, 0]"):
        kvevict.replay(np.zeros((6, 6), np.float32), 3)
    with raises(ValueError, "got a float64 array of shape [2, 6, 6]"):
        kvevict.replay(np.zeros((2, 6, 6)), 3)
    with raises(ValueError, "policy: unknown policy 'lru'"):
        kvevict.replay(x, 3, policy="lru")
    with raises(ValueError, "recent: streaming and window keep the most recent k - sinks tokens; their recent "
                            "window is not set separately (it must be 0)"):
        kvevict.replay(x, 4, policy="window", budget=2, recent=1)
    with raises(ValueError, "recent: w = 3 exceeds the budget k = 2"):
        kvevict.replay(x, 4, budget=2, recent=3)
    with raises(ValueError, "recent: w = 3 exceeds the budget k = 2"):
        kvevict.replay(x, 4, policy="tova", budget=2, recent=3)
    with raises(ValueError, "noise: 'trace' needs a gumbel array"):
        kvevict.replay(x, 3, noise="trace")
    with raises(ValueError, "noise: unknown value 'loud'"):
        kvevict.replay(x, 3, noise="loud")
    with raises(ValueError, "q_heads_per_kv"):
        kvevict.replay(x, 3, q_heads_per_kv=3)
    with raises(ValueError, "gumbel must be a C-contiguous float32 array of shape [H_q, N, N] (the shape of logits)"):
        kvevict.replay(x, 3, gumbel=np.zeros((2, 5, 5), np.float32))
    with raises(TypeError, "kwargs: budget_ratio=0.5"):
        kvevict.replay(x, 3, budget_ratio=0.5)
    with raises(ValueError, "prompt_len must be >= 0 (got -1)"):
        kvevict.replay(x, -1)


def test_overlapping_wrapped_k_and_v_are_rejected():
    # v = k shifted by one row: every V write would clobber K.
    buf = np.zeros(2 * 6 * 3 + 3, np.float32)
    K, V = buf[:36].reshape(2, 6, 3), buf[3:39].reshape(2, 6, 3)
    with raises(ValueError, "k and v overlap in memory (views of one buffer); give each its own array"):
        kvevict.Cache("h2o", n_q_heads=2, k=K, v=V)
    c = kvevict.Cache("h2o", n_q_heads=2, k=buf[:36].reshape(2, 6, 3), v=np.zeros((2, 6, 3), np.float32))
    assert c.n_q_heads == 2


def test_big_endian_arrays_are_named_as_such():
    K = np.zeros((2, 6, 3), np.float32)
    swapped = "float32 (non-native byte order '>f4'; convert with a.astype(a.dtype.newbyteorder('=')))"
    with raises(ValueError, "k must be a float32 or float16 array of shape [n_kv_heads, capacity, head_dim], got "
                            + swapped):
        kvevict.Cache("h2o", n_q_heads=2, k=K.astype(">f4"), v=K.copy())
    c = filled()
    with raises(ValueError, "k must be a C-contiguous float32 array of shape [n_kv_heads, head_dim] = [2, 3], got a "
                            + swapped + " array of shape [2, 3]"):
        c.append(4, rows().astype(">f4"), rows())
    assert c.lengths == [4, 4]
    with raises(ValueError, "dtype must be a native-endian float32 or float16 (got '>f4', a non-native byte order)"):
        kvevict.Cache("h2o", **dict(OWNED, dtype=">f4"))


def test_huge_sizes_name_the_argument():
    with raises(ValueError, "n_kv_heads * capacity * head_dim = 2 * 4611686018427387904 * 3 overflows"):
        kvevict.Cache("h2o", **dict(OWNED, capacity=2**62))
    with raises(ValueError, "capacity = 4611686018427387904 is too large: n_kv_heads * capacity * head_dim = "
                            "4611686018427387904 elements exceed the largest array (2305843009213693951)"):
        kvevict.Cache("h2o", n_q_heads=1, n_kv_heads=1, capacity=2**62, head_dim=1)
    with raises(ValueError, "kvevict::Cache: n_q_heads (4611686018427387904) exceeds 2^16 = 65536"):
        kvevict.Cache("h2o", **dict(OWNED, n_q_heads=2**62))


def test_attention_logits_rejects_bias_aliasing_out():
    c = filled()
    q = np.ones((4, 3), np.float32)
    out = np.ones((4, 4), np.float32)
    with raises(ValueError, "kvevict::attention_logits: out overlaps bias (bias == out is not an in-place add: give "
                            "out its own array, or add the bias after the call)"):
        kvevict.attention_logits(c, q, out=out, bias=out)
    assert (out == 1).all()
