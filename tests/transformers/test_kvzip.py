"""KVEvictCache(policy='kvzip'): KVzip's context-reconstruction scores against kvpress 0.5.5's KVzipPress (the
reference implementation, run on the same model and ids), the kept tokens against a plain top-k of those scores,
and the repeat passes leaving nothing behind (positions, logits)."""
import pytest
import torch
from transformers import DynamicCache

from kvevict.transformers import KVEvictCache

kvpress = pytest.importorskip("kvpress")


class Tok:
    """A stand-in tokenizer for the tiny models (vocabulary 96): bytes to ids, as KVzipPress and kvevict call it."""
    chat_template = None

    def encode(self, text, add_special_tokens=False, return_tensors=None):
        ids = [3 + (b * 7) % 90 for b in text.encode()][:9]
        return torch.tensor([ids]) if return_tensors == "pt" else ids


def prompt(seed, n):
    return torch.randint(0, 96, (1, n), generator=torch.Generator().manual_seed(seed))


def kvpress_scores(model, ids, chunk):
    """KVzipPress's score_val [layers, n_kv, P] before its compression (layerwise, ratio 0.5), sinks not yet set."""
    from kvpress.presses import kvzip_press

    class Tokenizers:
        @staticmethod
        def from_pretrained(*a, **k):
            return Tok()
    saved = kvzip_press.AutoTokenizer
    kvzip_press.AutoTokenizer = Tokenizers
    press = kvpress.KVzipPress(compression_ratio=0.5, layerwise=True, chunk_size=chunk)
    got = []
    press.compress_post = lambda model: got.append(press.score_val[:, 0].clone())
    try:
        with torch.no_grad(), press(model):
            model(ids, past_key_values=DynamicCache(config=model.config))
    finally:
        kvzip_press.AutoTokenizer = saved
    return got[0]


@pytest.mark.parametrize("chunk,P", [(2048, 40), (16, 40), (16, 37)])
def test_scores_equal_kvpress_and_kept_are_the_top_k(arch_model, chunk, P):
    ids = prompt(P, P)
    want = kvpress_scores(arch_model, ids, chunk)
    cache = KVEvictCache(arch_model, policy="kvzip", budget=0.5, tokenizer=Tok(), chunk=chunk)
    with torch.no_grad():
        arch_model(ids, past_key_values=cache)
    k = P // 2
    top = float(want.max()) + 1.0
    for layer in range(arch_model.config.num_hidden_layers):
        got = cache.layers[layer].recon
        assert torch.allclose(got[:, 4:], want[layer, :, 4:], rtol=1e-4, atol=1e-6)
        assert torch.allclose(got[:, :4], torch.full_like(got[:, :4], top), rtol=1e-5)
        ref = want[layer].clone()
        ref[:, :4] = top
        for h in range(ref.shape[0]):
            assert list(cache.retained_positions(layer, h)) == sorted(torch.topk(ref[h], k).indices.tolist())
    assert cache.get_seq_length() == P and cache.kept_length() == k


def test_fused_scores_equal_the_torch_path(arch_model, monkeypatch):
    # head_dim 16, float32: every layer's score goes through kvevict.attention_maxes; forced off, the materialised
    # torch computation gives the same scores to float rounding.
    import kvevict
    from kvevict import _reconstruct
    calls = []
    fused = kvevict.attention_maxes
    monkeypatch.setattr(kvevict, "attention_maxes", lambda *a, **k: calls.append(1) or fused(*a, **k))
    ids = prompt(7, 45)

    def scores():
        cache = KVEvictCache(arch_model, policy="kvzip", budget=0.5, tokenizer=Tok(), chunk=16)
        with torch.no_grad():
            arch_model(ids, past_key_values=cache)
        return [cache.layers[i].recon.clone() for i in range(arch_model.config.num_hidden_layers)]
    got = scores()
    assert len(calls) == arch_model.config.num_hidden_layers * 3  # 3 chunks of at most 16 context tokens
    monkeypatch.setattr(_reconstruct, "fused_applies", lambda q, k: False)
    want = scores()
    assert len(calls) == arch_model.config.num_hidden_layers * 3
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-8)


def test_repeat_passes_leave_the_cache_as_the_prompt(llama):
    ids, nxt = prompt(1, 30), prompt(2, 1)
    cache = KVEvictCache(llama, policy="kvzip", budget=1.0, tokenizer=Tok(), chunk=16)
    dyn = DynamicCache(config=llama.config)
    with torch.no_grad():
        a = llama(ids, past_key_values=cache).logits
        b = llama(ids, past_key_values=dyn).logits
        assert torch.equal(a, b)  # the prompt's own logits: the repeat passes run after them
        assert cache.get_seq_length() == 30 and cache.kept_length() == 30
        c = llama(nxt, past_key_values=cache).logits
        d = llama(nxt, past_key_values=dyn).logits
    assert torch.allclose(c, d, atol=1e-5)  # every token kept, at its position: the full cache's next step


def test_generate_and_crop_query_agnostic(llama):
    ctx, q1, q2 = prompt(3, 40), prompt(4, 5), prompt(5, 5)
    cache = KVEvictCache(llama, policy="kvzip", budget=0.25, evict="prefill", tokenizer=Tok())
    with torch.no_grad():
        llama(ctx, past_key_values=cache)
        assert cache.kept_length() == 10
        a = llama(q1, past_key_values=cache).logits
        cache.crop(40)
        llama(q2, past_key_values=cache)
        cache.crop(40)
        b = llama(q1, past_key_values=cache).logits
        assert torch.equal(a, b)
        cache.crop(40)
        full = torch.cat([ctx, q1], 1)
        out = llama.generate(full, attention_mask=torch.ones_like(full), past_key_values=cache, max_new_tokens=4,
                             min_new_tokens=4, do_sample=False, pad_token_id=0)
    assert out.shape[1] == 49


def test_adaptive_head_budgets_share_the_layer_budget(llama):
    cache = KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok(), head_budgets="adaptive")
    with torch.no_grad():
        llama(prompt(6, 40), past_key_values=cache)
    for layer in range(2):
        lens = [len(cache.retained_positions(layer, h)) for h in range(2)]
        assert sum(lens) == 40


def test_refusals(llama):
    with pytest.raises(ValueError, match="needs tokenizer="):
        KVEvictCache(llama, policy="kvzip", budget=0.5)
    with pytest.raises(ValueError, match=r"chunk an int >= 16 \(got 8\)"):
        KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok(), chunk=8)
    with pytest.raises(ValueError, match="no recent window"):
        KVEvictCache(llama, policy="kvzip", budget=0.5, recent=4, tokenizer=Tok())
    with pytest.raises(TypeError, match="takes tokenizer, chunk, n_sink, layers, heads and head_budgets"):
        KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok(), sinks=4)
    cache = KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok())
    with pytest.raises(ValueError, match="scores one sequence"), torch.no_grad():
        llama(torch.cat([prompt(7, 20), prompt(8, 20)]), past_key_values=cache)
    mask = torch.ones(1, 20, dtype=torch.long)
    mask[0, :3] = 0
    cache = KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok())
    with pytest.raises(ValueError, match="takes an unpadded prompt"), torch.no_grad():
        llama(prompt(9, 20), attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0), past_key_values=cache)


def test_a_refused_prompt_leaves_the_cache_as_new(llama):
    """A budget the prompt cannot hold is refused before the repeat passes; the cache is then empty, and the next
    prompt is scored and cut as on a fresh cache."""
    cache = KVEvictCache(llama, policy="kvzip", budget=25, tokenizer=Tok(), chunk=16)
    with pytest.raises(ValueError, match="budget 25 tokens is larger than the prompt's 20 tokens"), torch.no_grad():
        llama(prompt(10, 20), past_key_values=cache)
    assert cache.get_seq_length() == 0
    fresh = KVEvictCache(llama, policy="kvzip", budget=25, tokenizer=Tok(), chunk=16)
    with torch.no_grad():
        a = llama(prompt(12, 40), past_key_values=cache).logits
        b = llama(prompt(12, 40), past_key_values=fresh).logits
    assert torch.equal(a, b)
    assert [list(cache.retained_positions(0, h)) for h in range(2)] == \
        [list(fresh.retained_positions(0, h)) for h in range(2)]


def test_shared_layer_budgets_follow_kvpress_layer_counts(arch_model):
    """layers='shared' against KVzipPress(layerwise=False): layer l keeps floor(kept_l / n_kv) per KV head, kept_l
    the tokens kvpress leaves unmasked in that layer (its model-wide top scores)."""
    from kvpress.presses import kvzip_press

    class Tokenizers:
        @staticmethod
        def from_pretrained(*a, **k):
            return Tok()
    P, n_kv = 40, arch_model.config.num_key_value_heads
    ids = prompt(11, P)
    saved = kvzip_press.AutoTokenizer
    kvzip_press.AutoTokenizer = Tokenizers
    try:
        with torch.no_grad(), kvpress.KVzipPress(compression_ratio=0.75, layerwise=False, chunk_size=16)(arch_model):
            arch_model(ids, past_key_values=DynamicCache(config=arch_model.config))
    finally:
        kvzip_press.AutoTokenizer = saved
    kept = [n_kv * P - layer.self_attn.masked_key_indices[0].numel() for layer in arch_model.model.layers]
    for layer in arch_model.model.layers:
        layer.self_attn.masked_key_indices = None
    cache = KVEvictCache(arch_model, policy="kvzip", budget=0.25, tokenizer=Tok(), chunk=16, layers="shared")
    with torch.no_grad():
        arch_model(ids, past_key_values=cache)
    got = [len(cache.retained_positions(i, 0)) for i in range(arch_model.config.num_hidden_layers)]
    assert got == [max(1, c // n_kv) for c in kept]
    assert sum(kept) == n_kv * P * len(kept) // 4


def test_layers_option_is_checked(llama):
    with pytest.raises(ValueError, match=r"layers='uniform' .* or 'shared' .*got 'global'"):
        KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok(), layers="global")


def kvpress_kept(model, ids, ratio, chunk):
    """{(layer, kv_head): kept positions} of KVzipPress(layerwise=False) at `ratio` (its unmasked keys)."""
    from kvpress.presses import kvzip_press

    class Tokenizers:
        @staticmethod
        def from_pretrained(*a, **k):
            return Tok()
    P, n_kv = ids.shape[1], model.config.num_key_value_heads
    saved = kvzip_press.AutoTokenizer
    kvzip_press.AutoTokenizer = Tokenizers
    try:
        with torch.no_grad(), kvpress.KVzipPress(compression_ratio=ratio, layerwise=False, chunk_size=chunk)(model):
            model(ids, past_key_values=DynamicCache(config=model.config))
    finally:
        kvzip_press.AutoTokenizer = saved
    kept = {}
    for i, layer in enumerate(model.model.layers):
        _, heads, pos = (x.tolist() for x in layer.self_attn.masked_key_indices)
        masked = set(zip(heads, pos))
        layer.self_attn.masked_key_indices = None
        for h in range(n_kv):
            kept[(i, h)] = {t for t in range(P) if (h, t) not in masked}
    return kept


def test_shared_heads_keep_what_kvpress_keeps(arch_model):
    """layers='shared', heads='shared' against KVzipPress(layerwise=False): every layer and KV head keeps a subset
    of kvpress's tokens (the model-wide threshold's), the layer short of kvpress's count by its floor only
    (k_l = floor(c_l / n_kv) per head on average, c_l kvpress's count)."""
    P, n_kv = 40, arch_model.config.num_key_value_heads
    ids = prompt(13, P)
    want = kvpress_kept(arch_model, ids, 0.75, 16)
    cache = KVEvictCache(arch_model, policy="kvzip", budget=0.25, tokenizer=Tok(), chunk=16, layers="shared",
                         heads="shared")
    with torch.no_grad():
        arch_model(ids, past_key_values=cache)
    for layer in range(arch_model.config.num_hidden_layers):
        got = {h: set(cache.retained_positions(layer, h)) for h in range(n_kv)}
        c = sum(len(want[(layer, h)]) for h in range(n_kv))
        assert sum(len(g) for g in got.values()) == n_kv * (c // n_kv)
        for h in range(n_kv):
            assert got[h] <= want[(layer, h)], (layer, h)
            assert set(range(4)) <= got[h]  # the sinks


def test_shared_heads_rank_raw_scores_within_a_layer(arch_model):
    """layers='uniform', heads='shared': each layer keeps its n_kv * k highest raw scores over all its KV heads
    (kvpress's scores, the sinks on top), however they fall among the heads."""
    P, n_kv = 40, arch_model.config.num_key_value_heads
    ids = prompt(14, P)
    want = kvpress_scores(arch_model, ids, 16)
    cache = KVEvictCache(arch_model, policy="kvzip", budget=0.5, tokenizer=Tok(), chunk=16, heads="shared")
    with torch.no_grad():
        arch_model(ids, past_key_values=cache)
    top = float(want.max()) + 1.0
    k = P // 2
    for layer in range(arch_model.config.num_hidden_layers):
        ref = want[layer].clone()
        ref[:, :4] = top
        best = torch.topk(ref.flatten(), n_kv * k).indices.tolist()
        expect = {h: sorted(i % P for i in best if i // P == h) for h in range(n_kv)}
        for h in range(n_kv):
            assert list(cache.retained_positions(layer, h)) == expect[h], (layer, h)


def test_comparable_rows_make_every_head_total_one_constant():
    from kvevict import _reconstruct
    scores = torch.tensor([[9.0, 9.0, 0.5, 0.25, 0.125], [9.0, 9.0, 0.0, 0.75, 3.0]])
    got = _reconstruct.comparable_rows(scores, 2)
    # C = max(0.875, 3.75) + 2 * 9 = 21.75; head 0's sinks (21.75 - 0.875) / 2, head 1's (21.75 - 3.75) / 2
    assert got.tolist() == [[10.4375, 10.4375, 0.5, 0.25, 0.125], [9.0, 9.0, 0.0, 0.75, 3.0]]
    assert torch.equal(got.sum(dim=1), torch.tensor([21.75, 21.75]))
    assert scores[0, 0] == 9.0  # the input is left as it was


def test_heads_option_is_checked(llama):
    with pytest.raises(ValueError, match=r"heads=None .* or 'shared' .*got 'uniform'"):
        KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok(), heads="uniform")
    with pytest.raises(ValueError, match=r"sets the head budgets itself .* drop head_budgets='adaptive'"):
        KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok(), heads="shared", head_budgets="adaptive")
    with pytest.raises(ValueError, match=r"needs n_sink >= 1 .*got n_sink=0"):
        KVEvictCache(llama, policy="kvzip", budget=0.5, tokenizer=Tok(), heads="shared", n_sink=0)


def test_shared_heads_rank_raw_scores_not_each_heads_share():
    """comparable_rows through kvevict's TOVA selection with AdaKV's allocation (no floor), as KVEvictCache runs it,
    on scores where the two rankings disagree: head 0's 0.5s (raw) beat head 1's 0.4, whose share of its head's
    total (0.4 / 1.96) beats theirs (0.5 / 5). A layer budget of 2 x 3: raw keeps head 0's sink and four 0.5s and
    head 1's sink; each head's share would keep head 1's 0.4 instead of a fourth 0.5."""
    import kvevict
    import numpy as np
    from kvevict import _reconstruct
    scores = torch.tensor([[1.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
                           [1.5, 0.4, 0.01, 0.01, 0.01, 0.01, 0.01, 0.01]])

    def kept(rows):
        cache = kvevict.Cache("tova", n_q_heads=2, n_kv_heads=2, capacity=9, head_dim=4, budget=3,
                              head_budgets="adaptive:0")
        cache.extend(np.arange(8), np.ones((8, 2, 4), np.float32), np.ones((8, 2, 4), np.float32))
        cache.prefill(torch.log(rows).numpy())
        return [sorted(int(p) for p in cache.retained_positions(h)) for h in range(2)]
    assert kept(_reconstruct.comparable_rows(scores, 1)) == [[0, 1, 2, 3, 4], [0]]
    assert kept(scores) == [[0, 1, 2, 3], [0, 1]]  # AdaKV on each head's share, what +adakv does


def test_shared_heads_refuse_a_budget_below_the_sinks(llama):
    cache = KVEvictCache(llama, policy="kvzip", budget=3, tokenizer=Tok(), heads="shared")
    with pytest.raises(ValueError, match=r"needs a budget of at least n_sink = 4 .*got k = 3 of a 20-token"), \
            torch.no_grad():
        llama(prompt(15, 20), past_key_values=cache)
    assert cache.get_seq_length() == 0
    cache = KVEvictCache(llama, policy="kvzip", budget=3, tokenizer=Tok(), heads="shared", n_sink=3)
    with torch.no_grad():
        llama(prompt(15, 20), past_key_values=cache)
    assert [list(cache.retained_positions(0, h))[:3] for h in range(2)] == [[0, 1, 2], [0, 1, 2]]
