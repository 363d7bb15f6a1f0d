"""kvevict_vllm.policy: the settings' checks, and the evicted blocks against two references written apart from it.

1. reference.evicted_pages_sim: kvevict's page-unit rule simulated token by token;
2. kvevict.PagedCache(unit='page') itself (the library's C++ page-unit eviction), fed the same tokens.
"""

import random

import numpy as np
import pytest

from kvevict_vllm.policy import EvictionPolicy, parse
from reference import evicted_pages_sim


@pytest.mark.parametrize("config,message", [
    ("streaming", "additional_config['kvevict'] must be a dict, got str"),
    ({"policy": "h2o", "budget": 256}, "policy='h2o' is not one of full, streaming, window"),
    ({"policy": "streaming"}, "budget=None must be an int"),
    ({"policy": "streaming", "budget": "50%"}, "budget='50%' must be an int"),
    ({"policy": "streaming", "budget": True}, "budget=True must be an int"),
    ({"policy": "streaming", "budget": 255}, "budget=255 is below 256 tokens"),
    ({"policy": "streaming", "budget": 256, "sinks": 129}, "budget=256 is below 384 tokens"),
    ({"policy": "streaming", "budget": 256, "sinks": -1}, "sinks=-1 must be an int >= 0"),
    ({"policy": "window", "budget": 127}, "budget=127 is below 128 tokens"),
    ({"policy": "window", "budget": 256, "sinks": 4}, "policy='window' keeps no sinks"),
    ({"policy": "full", "budget": 256}, "policy='full' keeps every token"),
    ({"policy": "streaming", "budget": 256, "recent": 8}, "unknown key 'recent'"),
])
def test_refusals_name_the_key_and_value(config, message):
    with pytest.raises(ValueError, match="^kvevict: .*" + message.replace("(", r"\(").replace("[", r"\[")):
        parse(config, 128)


def test_parsed_values():
    assert parse(None, 128) == EvictionPolicy("full", 0, 0, 128)
    assert parse({"policy": "streaming", "budget": 256}, 128) == EvictionPolicy("streaming", 256, 4, 128)
    assert parse({"policy": "streaming", "budget": 256, "sinks": 0}, 128).start_blocks == 0
    assert parse({"policy": "window", "budget": 128}, 128) == EvictionPolicy("window", 128, 0, 128)
    p = parse({"policy": "streaming", "budget": 300, "sinks": 4}, 128)
    assert (p.start_blocks, p.max_blocks_held()) == (1, 4)
    # Pinned: 600 tokens, k = 256, bs = 128: (600 - 256) // 128 = 2 blocks, 1 and 2, leave.
    assert list(parse({"policy": "streaming", "budget": 256}, 128).evicted_blocks(600)) == [1, 2]
    assert list(parse({"policy": "window", "budget": 256}, 128).evicted_blocks(600)) == [0, 1]
    assert list(parse({"policy": "window", "budget": 256}, 128).evicted_blocks(383)) == []
    assert list(parse({"policy": "window", "budget": 256}, 128).evicted_blocks(384)) == [0]


def test_evicted_blocks_equal_the_token_by_token_rule():
    rng = random.Random(7)
    for _ in range(300):
        bs = rng.choice([4, 8, 16, 128])
        sinks = rng.choice([0, 1, bs, bs + 1]) if rng.random() < 0.7 else 0
        policy = "streaming" if sinks or rng.random() < 0.5 else "window"
        start = -(-sinks // bs)
        budget = rng.randint((start + 1) * bs, (start + 6) * bs)
        p = EvictionPolicy(policy, budget, sinks, bs)
        for c in sorted(rng.sample(range(0, budget + 12 * bs), 6)):
            assert list(p.evicted_blocks(c)) == evicted_pages_sim(c, budget, bs, start), (p, c)
            held = -(-c // bs) - p.num_evicted(c)
            assert held <= p.max_blocks_held() or c <= budget + bs


def _paged_cache_evicted(policy, budget, sinks, bs, prompt, steps):
    """Logical pages kvevict.PagedCache(unit='page') has evicted after a prompt and decode steps."""
    kvevict = pytest.importorskip("kvevict")
    pool = kvevict.PagePool(num_pages=4096 // bs + 8, page_size=bs, n_kv_heads=1, head_dim=4)
    extra = {"sinks": sinks} if policy == "streaming" else {}
    cache = kvevict.PagedCache(policy, pool, n_q_heads=1, budget=budget, unit="page",
                               start_pages=-(-sinks // bs), **extra)
    row = np.zeros((1, 4), np.float32)
    for pos in range(prompt):
        cache.append(pos, row, row)
    cache.prefill()
    out = {prompt: cache.retained_positions(0)}
    for pos in range(prompt, prompt + steps):
        cache.append(pos, row, row)
        cache.decode_step()
        out[pos + 1] = cache.retained_positions(0)
    return out


@pytest.mark.parametrize("policy,budget,sinks,bs,prompt", [
    ("streaming", 256, 4, 128, 600), ("window", 256, 0, 128, 600), ("streaming", 24, 4, 8, 5),
    ("window", 16, 0, 8, 70), ("streaming", 40, 9, 8, 41), ("streaming", 256, 0, 128, 1000),
])
def test_kept_blocks_equal_kvevicts_paged_cache(policy, budget, sinks, bs, prompt):
    p = EvictionPolicy(policy, budget, sinks, bs)
    for c, kept_positions in _paged_cache_evicted(policy, budget, sinks, bs, prompt, 3 * bs + 5).items():
        kept_blocks = sorted({q // bs for q in kept_positions})
        every = range(-(-c // bs))
        assert [b for b in every if b not in p.evicted_blocks(c)] == kept_blocks, (c, kept_blocks)


def test_random_settings_are_parsed_or_refused_with_valueerror():
    """Any dict of the keys (and a stray one) with values of any type: parse returns a policy whose budget
    leaves room for the sinks' blocks plus one, or raises ValueError naming kvevict; never another error."""
    rng = random.Random(11)
    values = [None, True, 0, -1, 1, 4, 127, 128, 129, 256, 300, 1 << 40, 2.5, "256", "50%", [], {}]
    for _ in range(3000):
        config = {key: rng.choice(values + ["full", "streaming", "window", "h2o"])
                  for key in ("policy", "budget", "sinks", "recent") if rng.random() < 0.6}
        block = rng.choice([32, 128])
        try:
            p = parse(config, block)
        except ValueError as e:
            assert str(e).startswith("kvevict: "), e
            continue
        assert p.policy in ("full", "streaming", "window") and p.block_size == block
        if p.policy != "full":
            assert isinstance(p.budget, int) and p.budget >= (p.start_blocks + 1) * block
            assert list(p.evicted_blocks(p.budget + block)) == [p.start_blocks]
