"""KVEvictCache on Gemma 3 (sliding-window and full-attention layers): policy 'full' is transformers' own cache;
an evicting policy holds k in every full-attention layer at every step while the sliding-window layers stay
transformers' DynamicSlidingWindowLayer (before the first full-attention layer, bit for bit DynamicCache's); the
logits the cache scores are the model's own attention; the kept sets are kvevict.replay's on them. A tiny random
Gemma 3 here; Gemma 3 270M in test_gemma3_270m.py."""
import pytest
import torch
import transformers
from transformers import DynamicCache
from transformers.cache_utils import DynamicSlidingWindowLayer

import kvevict
from conftest import greedy_loop, records_trace
from kvevict.transformers import KVEvictCache, layer_seed

P, T, W = 24, 12, 8  # prompt tokens, generated tokens, sliding window
KINDS = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
GLOBAL = [1, 3]


def tiny_gemma3(attn="sdpa", seed=0, **extra):
    torch.manual_seed(seed)
    cfg = transformers.Gemma3TextConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=512, sliding_window=W, layer_types=list(KINDS),
        query_pre_attn_scalar=16, **extra)
    return transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn).eval()


@pytest.fixture(scope="module")
def gemma3():
    return tiny_gemma3()


def prompt(seed=1, n=P):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 96, (1, n), generator=g)


def test_the_layers_are_transformers_sliding_ones_and_kvevicts_global_ones(gemma3):
    cache = KVEvictCache(gemma3, policy="h2o", budget=0.5)
    assert cache.global_layers == GLOBAL
    assert [cache.is_global(i) for i in range(4)] == [False, True, False, True]
    assert cache.layout.kinds == ["sliding", "global", "sliding", "global"]  # the library's kvevict.LayerLayout
    assert cache.layout.window == gemma3.config.sliding_window
    assert [type(lay).__name__ for lay in cache.layers] == [
        "DynamicSlidingWindowLayer", "KVEvictLayer", "DynamicSlidingWindowLayer", "KVEvictLayer"]
    assert cache.is_sliding == [True, False, True, False]
    assert len(cache._handles) == 3 * 2  # only the full-attention layers are hooked (before, after, config back)
    with pytest.raises(ValueError, match=r"^KVEvictCache: layer 0 is a sliding-window layer \(transformers' "
                                         r"DynamicSlidingWindowLayer holds its window\); kvevict evicts in the "
                                         r"full-attention layers \[1, 3\]$"):
        cache.retained_positions(0, 0)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_full_equals_transformers_own_cache(attn):
    model = tiny_gemma3(attn=attn, seed=1)
    ids = prompt(2)
    want_ids, want = greedy_loop(model, ids, DynamicCache(config=model.config), T)
    cache = KVEvictCache(model, policy="full")
    got_ids, got = greedy_loop(model, ids, cache, T)
    assert got_ids == want_ids
    assert float((got - want).abs().max()) <= 1e-5
    with torch.no_grad():  # and generate, whose default cache for Gemma 3 is the same hybrid DynamicCache
        kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=T, do_sample=False, pad_token_id=0,
                  output_logits=True, return_dict_in_generate=True)
        a = model.generate(ids, **kw)
        b = model.generate(ids, past_key_values=KVEvictCache(model, policy="full"), **kw)
    assert b.sequences.tolist() == a.sequences.tolist()
    assert max(float((x - y).abs().max()) for x, y in zip(a.logits, b.logits)) <= 1e-5


def test_half_holds_k_in_every_global_layer_and_leaves_the_sliding_layers_alone(gemma3):
    """Teacher-forced, so both runs see the same tokens: layer 0 (sliding, before any full-attention layer) sees the
    same inputs with and without eviction, so its K/V must equal DynamicCache's bit for bit at every step; every
    sliding layer holds transformers' window (W - 1 positions once full); every global layer holds k."""
    ids = prompt(3, P + T)
    k = P // 2
    cache = KVEvictCache(gemma3, policy="h2o", budget=0.5)
    ref = DynamicCache(config=gemma3.config)
    with torch.no_grad():
        gemma3(ids[:, :P], past_key_values=cache)
        gemma3(ids[:, :P], past_key_values=ref)
        for t in range(P, P + T):
            for layer in GLOBAL:
                assert cache.kept_length(layer) == k
                for h in range(2):
                    kept = cache.retained_positions(layer, h)
                    assert len(kept) == k and kept[-1] == t - 1
            for layer in (0, 2):
                lay, want = cache.layers[layer], ref.layers[layer]
                assert isinstance(lay, DynamicSlidingWindowLayer)
                assert cache.kept_length(layer) == want.keys.shape[-2] == min(t, W - 1)
            assert torch.equal(cache.layers[0].keys, ref.layers[0].keys)
            assert torch.equal(cache.layers[0].values, ref.layers[0].values)
            gemma3(ids[:, t:t + 1], past_key_values=cache)
            gemma3(ids[:, t:t + 1], past_key_values=ref)
    assert cache.layers[1].seen == P + T and cache.layers[3].kv.lengths == [k, k]


def test_prompt_logits_are_the_models_own_attention():
    """The prompt logits a global layer hands kvevict (recomputed queries: q_norm, the global layers' RoPE, the
    scaling query_pre_attn_scalar^-1/2) against the attention weights of an eager forward: softmax of the causal
    logits equals them within 1e-5."""
    model = tiny_gemma3(attn="eager", seed=2)
    ids = prompt(4)
    with torch.no_grad():
        attn = model(ids, output_attentions=True).attentions  # [1, n_q, P, P] per layer
        cache = KVEvictCache(model, policy="h2o", budget=0.5, record=True)
        model(ids, past_key_values=cache)
    mask = torch.triu(torch.ones(P, P, dtype=torch.bool), 1)
    for layer in GLOBAL:
        x = torch.from_numpy(cache.layers[layer].records[0][1]).masked_fill(mask, float("-inf"))
        assert float((torch.softmax(x, -1) - attn[layer][0]).abs().max()) <= 1e-5


@pytest.mark.parametrize("policy,budget,opts", [("keyformer", 0.5, dict(horizon=T)), ("h2o", 10, {}),
                                                ("tova", 9, {}), ("streaming", 8, dict(sinks=2))])
def test_kept_sets_equal_replay_of_the_given_logits(gemma3, policy, budget, opts):
    cache = KVEvictCache(gemma3, policy=policy, budget=budget, record=True, **opts)
    greedy_loop(gemma3, prompt(6), cache, T + 1)
    k = budget if isinstance(budget, int) else int(budget * P)
    for layer in GLOBAL:
        records = cache.layers[layer].records
        assert [r[0] for r in records] == ["prefill"] + ["step"] * T
        x = records_trace(records, P, T, 4, 2)
        kw = dict(policy=policy, q_heads_per_kv=2, budget=k)
        if policy == "streaming":
            kw["sinks"] = 2
        if policy == "keyformer":
            kw.update(gen_steps=T, seed=layer_seed(42, layer))
        want = kvevict.replay(x, P, **kw)
        assert [r[3] for r in records] == [w["kept"] for w in want]
        assert all(len(kept) == k for kept in want[-1]["kept"])


def test_refusals():
    with pytest.raises(ValueError, match=r"^KVEvictCache on gemma3_text needs config.layer_types of 'full_attention' "
                                         r"and 'sliding_attention' with at least one full-attention layer "
                                         r"\(got \['sliding_attention'\]\)$"):
        KVEvictCache(_all_sliding(), policy="h2o")
    model = tiny_gemma3(attn_logit_softcapping=50.0)
    with pytest.raises(ValueError, match=r"^KVEvictCache does not support attention logit soft-capping "
                                         r"\(config.attn_logit_softcapping=50.0\)"):
        KVEvictCache(model, policy="h2o")


def _all_sliding():
    model = tiny_gemma3()
    model.config.layer_types = ["sliding_attention"] * 4
    return model
