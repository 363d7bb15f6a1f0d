"""kvevict_vllm.policy and the worker's 'knorm' selection (scores.py): the settings' checks, and the evicted blocks
against references written apart from them.

1. reference.evicted_pages_sim: kvevict's page-unit rule simulated token by token (position-only policies);
2. kvevict.PagedCache(unit='page') itself (the library's C++ page-unit eviction), fed the same tokens: the
   position-only policies, and 'knorm' on random keys (kvevict computes the key scores itself).
"""

import random

import numpy as np
import pytest

from kvevict_vllm.policy import EvictionPolicy, parse
from kvevict_vllm.scores import Selection, WorkerScores
from reference import evicted_pages_sim


@pytest.mark.parametrize("config,message", [
    ("streaming", "additional_config['kvevict'] must be a dict, got str"),
    ({"policy": "h2o", "budget": 256}, "policy='h2o' is not one of full, streaming, window, knorm"),
    ({"policy": "streaming"}, "budget=None must be an int"),
    ({"policy": "streaming", "budget": "50%"}, "budget='50%' must be an int"),
    ({"policy": "streaming", "budget": True}, "budget=True must be an int"),
    ({"policy": "streaming", "budget": 255}, "budget=255 is below 256 tokens"),
    ({"policy": "streaming", "budget": 256, "sinks": 129}, "budget=256 is below 384 tokens"),
    ({"policy": "streaming", "budget": 256, "sinks": -1}, "sinks=-1 must be an int >= 0"),
    ({"policy": "window", "budget": 127}, "budget=127 is below 128 tokens"),
    ({"policy": "window", "budget": 256, "sinks": 4}, "policy='window' keeps no sinks"),
    ({"policy": "full", "budget": 256}, "policy='full' keeps every token"),
    ({"policy": "streaming", "budget": 256, "recent": 8}, "recent is taken by policy='knorm' only, not 'streaming'"),
    ({"policy": "streaming", "budget": 256, "window": 8}, "unknown key 'window'"),
    ({"policy": "full", "recent": 8}, "policy='full' keeps every token"),
    ({"policy": "knorm", "budget": 256, "sinks": 0}, "sinks=0 with policy='knorm': it needs sinks >= 1"),
    ({"policy": "knorm", "budget": 256, "recent": -1}, "recent=-1 must be an int >= 0"),
    ({"policy": "knorm", "budget": 256, "recent": 2.0}, "recent=2.0 must be an int >= 0"),
    ({"policy": "knorm", "budget": 383, "recent": 256}, "budget=383 is below 384 tokens"),
    ({"policy": "knorm", "budget": 255}, "budget=255 is below 256 tokens"),
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
    k = parse({"policy": "knorm", "budget": 300, "recent": 64}, 128)
    assert k == EvictionPolicy("knorm", 300, 4, 128, 64) and k.scored and (k.start_blocks, k.max_blocks_held()) == (1, 4)
    with pytest.raises(ValueError, match="chooses its blocks from the keys, on the worker"):
        k.evicted_blocks(600)


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
        config = {key: rng.choice(values + ["full", "streaming", "window", "knorm", "h2o"])
                  for key in ("policy", "budget", "sinks", "recent", "stray") if rng.random() < 0.6}
        block = rng.choice([32, 128])
        try:
            p = parse(config, block)
        except ValueError as e:
            assert str(e).startswith("kvevict: "), e
            continue
        assert p.policy in ("full", "streaming", "window", "knorm") and p.block_size == block
        if p.policy != "full":
            assert isinstance(p.budget, int) and p.budget >= (p.start_blocks + 1) * block
            assert p.budget >= p.start_blocks * block + max(p.recent, 1)
        if p.policy in ("streaming", "window"):
            assert list(p.evicted_blocks(p.budget + block)) == [p.start_blocks]
        if p.policy == "knorm" and p.budget < 1 << 16:  # the middle is never empty when a block must leave
            assert p.start_blocks >= 1
            sel = Selection()
            sel.add_scores([0.0] * (p.budget + block), block)
            assert sel.advance(p.budget + block, p) == [p.start_blocks]


def _knorm_paged_cache(keys, budget, sinks, recent, bs, prompt):
    """{tokens cached: logical pages evicted} of kvevict.PagedCache('knorm', unit='page') fed `keys`
    [tokens, KV heads, head_dim]: the prompt, then one decode step per token (kvevict scores the keys)."""
    import kvevict

    t, h, d = keys.shape
    pool = kvevict.PagePool(num_pages=t // bs + 8, page_size=bs, n_kv_heads=h, head_dim=d)
    cache = kvevict.PagedCache("knorm", pool, n_q_heads=h, budget=budget, recent=recent, unit="page",
                               start_pages=-(-sinks // bs))
    for pos in range(prompt):
        cache.append(pos, keys[pos], keys[pos])
    cache.prefill()
    out = {}
    for c in range(prompt, t + 1):
        if c > prompt:
            cache.append(c - 1, keys[c - 1], keys[c - 1])
            cache.decode_step()
        kept = {q // bs for q in cache.retained_positions(0)}
        out[c] = [b for b in range(-(-c // bs)) if b not in kept]
    return out


def test_knorm_selection_equals_kvevicts_paged_cache_on_random_keys():
    """The worker's selection (Selection.advance over 1 / (1 + ||k||) summed over KV heads, the scores the
    worker folds) evicts the blocks kvevict's PagedCache evicts on the same keys, at every step, over random
    keys, budgets, sinks, recent windows, block sizes and prompt lengths; pinned sizes where the floors bind."""
    rng = np.random.default_rng(5)
    settings = [(16, 4, 0, 8, 40), (16, 4, 0, 8, 23), (32, 9, 16, 8, 24), (16, 1, 0, 8, 64), (12, 1, 4, 4, 12)]
    for _ in range(60):
        bs = int(rng.choice([4, 8, 16]))
        sinks = int(rng.integers(1, 2 * bs + 1))
        start = -(-sinks // bs)
        recent = int(rng.choice([0, 1, bs - 1, bs, 2 * bs + 3]))
        budget = int(rng.integers(max((start + 1) * bs, start * bs + max(recent, 1)), (start + 6) * bs))
        settings.append((budget, sinks, recent, bs, int(rng.integers(1, budget + 8 * bs))))
    scorer = WorkerScores()
    out_of_order = 0
    for budget, sinks, recent, bs, prompt in settings:
        t = prompt + 5 * bs
        keys = (rng.standard_normal((t, 2, 8)) * rng.uniform(0.2, 3.0, (t, 1, 1)) * rng.uniform(0.5, 2.0, (1, 2, 1)))
        keys = keys.astype(np.float32)
        want = _knorm_paged_cache(keys, budget, sinks, recent, bs, prompt)
        p = EvictionPolicy("knorm", budget, sinks, bs, recent)
        scores = (1.0 / (1.0 + np.linalg.norm(keys, axis=-1))).sum(axis=-1).tolist()
        scorer.requests.clear()
        scorer.select(7, 0, True, p)  # a new request (no token cached yet)
        scorer.requests[7].add_scores(scores[:prompt], bs)
        for c in range(prompt, len(keys) + 1):
            scorer.requests[7].add_scores(scores[scorer.requests[7].num_scored:c], bs)
            got = scorer.select(7, c, False, p)
            assert got == want[c], (budget, sinks, recent, bs, prompt, c)
            new = sorted(set(want[c]) - set(want.get(c - 1, [])))  # what kvevict evicted at this step
            assert scorer.take_reports() == ([(7, new)] if new else []), (budget, bs, prompt, c)
            held = -(-c // bs) - len(got)
            assert held <= p.max_blocks_held(), (budget, bs, c, held)
        assert sorted(scorer.requests[7].evicted) == want[len(keys)]
        held = -(-len(keys) // bs) - len(want[len(keys)])  # only the held blocks keep a score
        assert len(scorer.requests[7].block_scores) == held
        oldest_first = list(range(-(-sinks // bs), -(-sinks // bs) + len(want[len(keys)])))
        out_of_order += want[len(keys)] != oldest_first
    assert out_of_order >= 30  # the keys chose: not StreamingLLM's oldest-first order
    # pinned: 40 + 5 * 8 tokens, k = 16, bs = 8, sinks 4 -> at the prompt's end 3 middle pages of 4 leave
    assert _knorm_paged_cache(np.ones((80, 1, 2), np.float32), 16, 4, 0, 8, 40)[40] == [1, 2, 3]


def test_worker_scores_fold_rows_and_drop_an_incomplete_step():
    """WorkerScores: a build's rows (a prefill chunk, a decode row, a row of an unknown request) take their
    tokens' key scores in batch order, summed over the KV heads and the layers that added keys; a step whose
    forward did not reach every layer adds nothing; a request with no token cached starts afresh."""
    import torch

    w = WorkerScores()
    p = EvictionPolicy("knorm", 8, 1, 4)
    assert w.select(10, 0, True, p) == [] and w.select(20, 0, True, p) == []  # two new requests
    w.requests[20].add_scores([1.0] * 5, 4)  # request 20 has 5 tokens scored already
    # request 10: a 3-token prefill chunk; request 20: one decode token; request 30: never started here
    w.begin([(10, 0, 3), (20, 5, 1), (30, 7, 1)], 5, ["l0", "l1"], 4)
    key = torch.zeros(6, 2, 3)  # [tokens (one of padding), KV heads, head_dim]
    key[:, 0, 0] = torch.tensor([0.0, 1.0, 3.0, 4.0, 9.0, 100.0])  # norms on head 0; head 1 is all zeros
    w.add_keys("l0", key)
    w.add_keys("l0", key)  # a second call for the same layer is ignored
    w.add_keys("other", key)  # a layer of another group is ignored
    w.add_keys("l1", 2 * key)
    w.fold()
    one = lambda n: 1.0 / (1.0 + n)
    want = [one(x) + 1.0 + one(2 * x) + 1.0 for x in (0.0, 1.0, 3.0, 4.0, 9.0)]
    assert w.requests[10].num_scored == 3 and 30 not in w.requests
    assert w.requests[10].block_scores == pytest.approx({0: sum(want[:3])})
    assert w.requests[20].num_scored == 6 and w.requests[20].block_scores[1] == pytest.approx(1.0 + want[3])
    w.begin([(10, 3, 1)], 1, ["l0", "l1"], 4)
    w.add_keys("l0", key)  # l1 never adds: the step is dropped
    w.fold()
    assert w.requests[10].num_scored == 3
    assert w.select(10, 0, True, p) == [] and w.requests[10].num_scored == 0  # the same first block, a new request
