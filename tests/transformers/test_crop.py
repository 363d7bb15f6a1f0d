"""KVEvictCache.crop: the query-agnostic protocol's restore (one compressed context, several questions): after a
crop back to the compressed prompt, a question gets the logits and positions a fresh cache gives it; crops that
cannot be served are refused and change nothing."""
import pytest
import torch

from kvevict.transformers import KVEvictCache


def ids(seed, n, vocab=96):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (1, n), generator=g)


def fresh(model, context, question, **kw):
    cache = KVEvictCache(model, **kw)
    with torch.no_grad():
        model(context, past_key_values=cache)
        return model(question, past_key_values=cache).logits[0], cache


@pytest.mark.parametrize("policy,opts", [("h2o", {}), ("snapkv", {}), ("keyformer", dict(horizon=8)),
                                         ("streaming", dict(sinks=2)), ("tova", {})])
def test_crop_back_to_the_context_equals_a_fresh_cache(arch_model, policy, opts):
    context, q1, q2 = ids(1, 40), ids(2, 7), ids(3, 5)
    kw = dict(policy=policy, budget=0.5, evict="prefill", **opts)
    cache = KVEvictCache(arch_model, **kw)
    with torch.no_grad():
        arch_model(context, past_key_values=cache)
        kept = [cache.layers[i].lens.copy() for i in cache.global_layers]
        assert cache.get_seq_length() == 40 and cache.kept_length() == 20
        arch_model(q1, past_key_values=cache)
        assert cache.get_seq_length() == 47 and cache.kept_length() == 27
        cache.crop(40)
        assert cache.get_seq_length() == 40 and cache.kept_length() == 20
        assert all((cache.layers[i].lens == k).all() for i, k in zip(cache.global_layers, kept))
        got = arch_model(q2, past_key_values=cache).logits[0]
    want, other = fresh(arch_model, context, q2, **kw)
    assert torch.equal(got, want)
    for i in cache.global_layers:  # the same kept slots (K and V) as the fresh cache's
        n = cache.layers[i].length
        assert torch.equal(cache.layers[i].keys[..., :n, :], other.layers[i].keys[..., :n, :])
        assert torch.equal(cache.layers[i].values[..., :n, :], other.layers[i].values[..., :n, :])


def test_negative_crop_and_generate_after_crop(llama):
    context, q = ids(4, 30), ids(5, 6)
    cache = KVEvictCache(llama, policy="h2o", budget=10, evict="prefill")
    with torch.no_grad():
        llama(context, past_key_values=cache)
        first = llama.generate(torch.cat([context, q], 1), past_key_values=cache, max_new_tokens=5, do_sample=False,
                               min_new_tokens=5, pad_token_id=0)
        assert cache.get_seq_length() == 30 + 6 + 4  # the last generated token is not fed back
        cache.crop(-10)
        assert cache.get_seq_length() == 30 and cache.kept_length() == 10
        again = llama.generate(torch.cat([context, q], 1), past_key_values=cache, max_new_tokens=5, do_sample=False,
                               min_new_tokens=5, pad_token_id=0)
    assert torch.equal(first, again)
    cache.crop(100)  # past what was seen: nothing to drop
    assert cache.get_seq_length() == 40


def test_full_crops_anywhere_like_dynamic_cache(llama):
    from transformers import DynamicCache
    context, q = ids(6, 25), ids(7, 4)
    cache, dyn = KVEvictCache(llama, policy="full"), DynamicCache(config=llama.config)
    with torch.no_grad():
        for c in (cache, dyn):
            llama(context, past_key_values=c)
            c.crop(11)
        got, want = (llama(q, past_key_values=c).logits[0] for c in (cache, dyn))
    assert cache.get_seq_length() == dyn.get_seq_length() == 15
    assert torch.allclose(got, want, atol=1e-5)


def test_refused_crops_change_nothing(llama):
    context = ids(8, 30)
    step = KVEvictCache(llama, policy="h2o", budget=10)
    pre = KVEvictCache(llama, policy="h2o", budget=10, evict="prefill")
    with torch.no_grad():
        for c in (step, pre):
            llama(context, past_key_values=c)
        llama(ids(9, 3), past_key_values=pre)
    with pytest.raises(ValueError, match=r"evict='step'\) cannot crop.*use evict='prefill'"):
        step.crop(29)
    with pytest.raises(ValueError, match=r"max_length 29 would cut into the compressed prompt.*at least 30"):
        pre.crop(29)
    with pytest.raises(ValueError, match=r"max_length -34 removes more than the 33 tokens seen"):
        pre.crop(-34)
    with pytest.raises(TypeError, match=r"max_length must be an int \(got 30.0\)"):
        pre.crop(30.0)
    assert pre.get_seq_length() == 33 and pre.kept_length() == 13
    assert step.get_seq_length() == 30 and step.kept_length() == 10


def test_batch_crop_keeps_each_sequence_its_own(llama):
    a, b, qa, qb = ids(10, 20), ids(11, 14), ids(12, 3), ids(13, 3)
    batch = torch.cat([a, torch.cat([torch.zeros(1, 6, dtype=torch.long), b], 1)])
    mask = torch.ones_like(batch)
    mask[1, :6] = 0
    cache = KVEvictCache(llama, policy="h2o", budget=0.5, evict="prefill")
    with torch.no_grad():
        llama(batch, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0), past_key_values=cache)
        pos = torch.tensor([[20, 21, 22], [14, 15, 16]])
        m2 = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1)
        llama(torch.cat([ids(14, 3), ids(15, 3)]), attention_mask=m2, position_ids=pos, past_key_values=cache)
        cache.crop(20)
        got = llama(torch.cat([qa, qb]), attention_mask=m2, position_ids=pos, past_key_values=cache).logits
    for s, (ctx, q) in enumerate(((a, qa), (b, qb))):
        want, _ = fresh(llama, ctx, q, policy="h2o", budget=0.5, evict="prefill")
        assert torch.allclose(got[s], want, atol=1e-5)
