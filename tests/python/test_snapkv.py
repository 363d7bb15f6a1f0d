"""kvevict.SnapKV: the SnapKV preset class, the same as Cache('snapkv', ...), with its window decode variant."""
import re

import numpy as np
import pytest

import kvevict


def hand_logits():
    # The hand example of tests/snapkv_test.cpp: rows 4 and 5 (L = 2) put their attention on slots
    # 0 and 3 + 5 (query head 0) and 2 and 5 (query head 1): window sums [1, 0, 1, 0.5, 0, 1.5].
    x = np.full((2, 6, 6), -np.inf, np.float32)
    for h in range(2):
        for r in range(4):
            x[h, r, r] = 0.0
    x[0, 4, 0] = x[0, 5, 3] = x[0, 5, 5] = 0.0
    x[1, 4, 2] = x[1, 5, 5] = 0.0
    return x


def prefilled(cls, *args, **kw):
    c = cls(*args, n_q_heads=2, n_kv_heads=1, capacity=8, head_dim=2, budget=4, snap_window=2, **kw)
    for p in range(6):
        c.append(p, np.full((1, 2), p, np.float32), np.zeros((1, 2), np.float32))
    c.prefill(hand_logits())
    return c


def test_snapkv_class_is_the_snapkv_policy():
    c = prefilled(kvevict.SnapKV, snap_kernel=1)
    assert isinstance(c, kvevict.Cache) and c.policy == "snapkv"
    assert c.retained_positions(0) == [0, 2, 4, 5] and c.scores(0).tolist() == [1.0, 1.0, 0.0, 1.5]
    np.testing.assert_array_equal(c.k[0, :4, 0], [0, 2, 4, 5])
    assert prefilled(kvevict.SnapKV, snap_kernel=3, snap_pooling="avg").retained_positions(0) == [1, 2, 4, 5]
    ref = prefilled(kvevict.Cache, "snapkv", snap_kernel=3)
    same = prefilled(kvevict.SnapKV, snap_kernel=3)
    assert same.retained_positions(0) == ref.retained_positions(0)
    assert np.array_equal(same.scores(0), ref.scores(0))


@pytest.mark.parametrize("decode, kept", [("h2o", [0, 2, 5, 6]), ("window", [2, 4, 5, 6]), ("keyformer", [0, 2, 5, 6])])
def test_snapkv_decode_rules(decode, kept):
    # Prefill keeps [0, 2, 4, 5] with scores [1, 1, 0, 1.5] (w = 1, kernel 1); token 6 arrives and the
    # step's attention is all on position 0: H2O accumulation (SnapKV) drops position 4, the lowest
    # score outside the recent window; the window rule (SnapKVWindow) drops the oldest token, 0;
    # Keyformer's accumulation (SnapKVKeyformer, noise off) drops position 4 as H2O's does.
    extra = dict(horizon=2, noise=False) if decode == "keyformer" else {}
    c = prefilled(kvevict.SnapKV, snap_kernel=1, recent=1, snap_decode=decode, **extra)
    c.append(6, np.zeros((1, 2), np.float32), np.zeros((1, 2), np.float32))
    x = np.full((2, 5), -np.inf, np.float32)
    x[:, 0] = 0.0  # slot 0 holds position 0
    c.decode_step(x)
    assert c.retained_positions(0) == kept


def test_snapkv_class_rejects_what_the_policy_does_not_take():
    with pytest.raises(TypeError, match=re.escape("policy='snapkv'")):
        kvevict.SnapKV(policy="snapkv", n_q_heads=2, n_kv_heads=1, capacity=8, head_dim=2)
    with pytest.raises(ValueError, match=re.escape("horizon is used only by policy 'keyformer' (or 'snapkv' with "
                                                   "snap_decode='keyformer') (got policy 'snapkv')")):
        kvevict.SnapKV(n_q_heads=2, n_kv_heads=1, capacity=8, head_dim=2, horizon=4)
    with pytest.raises(ValueError, match=re.escape("horizon (T, the number of tokens to generate) is required for "
                                                   "policy 'snapkv' with snap_decode='keyformer'")):
        kvevict.SnapKV(n_q_heads=2, n_kv_heads=1, capacity=8, head_dim=2, budget=4, snap_decode="keyformer")
    with pytest.raises(ValueError, match=re.escape("kvevict::parse_snap_decode: unknown decode rule 'lru'")):
        kvevict.SnapKV(n_q_heads=2, n_kv_heads=1, capacity=8, head_dim=2, budget=4, snap_decode="lru")

