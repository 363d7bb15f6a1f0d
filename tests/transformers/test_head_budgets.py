"""KVEvictCache with head-adaptive budgets (AdaKV, head_budgets='adaptive'): the KV heads of a layer hold different
numbers of tokens, attention reads each head over its own slots only, and the kept sets are kvevict-replay's on the
logits the cache was given."""
import numpy as np
import pytest
import torch

import kvevict
from kvevict.transformers import KVEvictCache

from conftest import greedy_loop, records_trace, tiny_model

P, T, K = 24, 6, 8
N_Q, N_KV = 4, 2


def prompt(seed):
    return torch.randint(0, 96, (1, P), generator=torch.Generator().manual_seed(seed))


def peaked_model(attn="sdpa", seed=5):
    """A tiny Llama whose KV head 0's query heads attend sharply (their q_proj rows x 30) and KV head 1's softly, as
    heads of trained models differ: AdaKV then moves budget between them (layer 0 holds 9 + 7 at k = 8)."""
    model = tiny_model("llama", attn=attn, seed=seed)
    d = model.config.hidden_size // N_Q
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight[:2 * d] *= 30.0
    return model


@pytest.mark.parametrize("split", ["adaptive", "adaptive:0.5"])
def test_kept_sets_equal_replay_and_the_layer_holds_k_times_kv_heads(split):
    model = peaked_model()
    cache = KVEvictCache(model, policy="h2o", budget=K, head_budgets=split, record=True)
    greedy_loop(model, prompt(6), cache, steps=T + 1)
    uneven = 0
    for layer in range(2):
        records = cache.layers[layer].records
        assert [r[0] for r in records] == ["prefill"] + ["step"] * T
        want = kvevict.replay(records_trace(records, P, T, N_Q, 2), P, policy="h2o", q_heads_per_kv=2, budget=K,
                              head_budgets=split)
        for rec, w in zip(records, want):
            assert rec[3] == w["kept"], (layer, w["t"])
            assert sum(len(kept) for kept in rec[3]) == K * N_KV  # the layer's total is exact
        lengths = [len(kept) for kept in records[-1][3]]
        uneven += lengths[0] != lengths[1]
        assert cache.kept_length(layer) == max(lengths)
    assert uneven >= 1  # the split moved budget between the heads of some layer


def test_attention_reads_each_head_over_its_own_slots():
    """Eager attention's probabilities at the last step: softmax of the recorded logits over each head's slots, 0
    past its KV head's length; and SDPA (bool mask) gives the same tokens and logits as eager (float mask)."""
    out = {}
    for attn in ("eager", "sdpa"):
        model = peaked_model(attn)
        cache = KVEvictCache(model, policy="h2o", budget=K, head_budgets="adaptive", record=True)
        captured = {}
        hook = model.model.layers[0].self_attn.register_forward_hook(
            lambda m, a, kw, o: captured.__setitem__("w", o[1]), with_kwargs=True)
        out[attn] = greedy_loop(model, prompt(6), cache, steps=4)
        hook.remove()
        if attn == "eager":
            _, logits, before, kept = cache.layers[0].records[-1]
            lengths = [len(b) for b in before]
            assert lengths[0] != lengths[1]
            probs = captured["w"][0, :, -1, :].numpy()  # [n_q, n]
            assert probs.shape == (N_Q, max(lengths))
            for h in range(N_Q):
                n = lengths[h // 2]
                e = np.exp(logits[h, :n] - logits[h, :n].max())
                np.testing.assert_allclose(probs[h, :n], e / e.sum(), rtol=1e-5, atol=1e-6)
                assert np.all(probs[h, n:] == 0.0)
    assert out["eager"][0] == out["sdpa"][0]
    for a, b in zip(out["eager"][1], out["sdpa"][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_uniform_keeps_k_on_every_head_and_refusals_name_head_budgets():
    model = tiny_model("llama", seed=5)
    cache = KVEvictCache(model, policy="h2o", budget=K, head_budgets="uniform")
    greedy_loop(model, prompt(6), cache, steps=3)
    assert all(len(cache.retained_positions(0, h)) == K for h in range(N_KV))
    with pytest.raises(ValueError, match="head_budgets = adaptive needs a score from the logits"):
        KVEvictCache(model, policy="streaming", budget=K, head_budgets="adaptive")
    with pytest.raises(ValueError, match="head_budgets: unknown split 'ada'"):
        KVEvictCache(model, policy="h2o", budget=K, head_budgets="ada")
