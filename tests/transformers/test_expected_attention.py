"""KVEvictCache(policy='expected_attention'): Expected Attention (Devoto et al. 2025) from the layer's pre-RoPE query
statistics, against kvpress's ExpectedAttentionPress at the prompt's cut and against kvevict.replay's TOVA on the
recorded rows at every decode step."""
import numpy as np
import pytest
import torch
from transformers import DynamicCache

import kvevict
from kvevict.transformers import KVEvictCache

from conftest import greedy_loop, tiny_model

P, T = 32, 6


def prompt(seed, n=P):
    return torch.randint(0, 96, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("options", [{}, dict(use_covariance=False, n_sink=2), dict(use_vnorm=False, epsilon=0.01)])
def test_prefill_cut_equals_kvpress_expected_attention(options):
    """The same prompt cut to half by kvpress's ExpectedAttentionPress and by KVEvictCache(evict='prefill'): the same
    kept tokens in every layer and head, so the same logits in the 8 decode steps after it."""
    import kvpress
    model = tiny_model("llama", seed=4)
    ids = prompt(9, P + 8)
    theirs = DynamicCache(config=model.config)
    ours = KVEvictCache(model, policy="expected_attention", budget=0.5, evict="prefill", **options)
    with torch.no_grad():
        with kvpress.ExpectedAttentionPress(compression_ratio=0.5, **options)(model):
            model(ids[:, :P], past_key_values=theirs)
        model(ids[:, :P], past_key_values=ours)
        assert theirs.get_seq_length() == ours.kept_length(0) == P // 2
        for layer in range(2):  # kvpress's cache holds the kept keys in position order, ours by slot
            mine = ours.layers[layer].keys[0]
            for h in range(2):
                got = {tuple(np.round(k, 5)) for k in mine[h].numpy()}
                want = {tuple(np.round(k, 5)) for k in theirs.layers[layer].keys[0, h].numpy()}
                assert got == want, (layer, h)
        a = [model(ids[:, t:t + 1], past_key_values=theirs, position_ids=torch.tensor([[t]]),
                   cache_position=torch.tensor([t])).logits[0, -1] for t in range(P, P + 8)]
        b = [model(ids[:, t:t + 1], past_key_values=ours).logits[0, -1] for t in range(P, P + 8)]
    assert float((torch.stack(a) - torch.stack(b)).abs().max()) <= 1e-5


def test_every_step_keeps_the_top_k_of_the_expected_rows():
    """evict='step': the rows each step was given (recorded) replayed by kvevict.replay('tova') give the kept sets;
    the cache holds k at every step and its n_sink = 4 first positions stay."""
    model = tiny_model("qwen2", seed=3)
    cache = KVEvictCache(model, policy="expected_attention", budget=12, record=True)
    greedy_loop(model, prompt(2), cache, steps=T + 1)
    for layer in range(2):
        records = cache.layers[layer].records
        N = P + T
        x = np.zeros((4, N, N), np.float32)
        x[:, P - 1, :P] = records[0][1]  # the prefill's [n_q, P]: TOVA reads the prompt's last row
        for t, (_, logits, before, _) in enumerate(records[1:], start=P):
            for h in range(4):
                x[h, t, before[h // 2]] = logits[h]
        want = kvevict.replay(x, P, policy="tova", q_heads_per_kv=2, budget=12)
        assert [r[3] for r in records] == [w["kept"] for w in want]
        assert all(kept[:4] == [0, 1, 2, 3] and len(kept) == 12 for kept in records[-1][3])


def test_refusals_say_why():
    model = tiny_model("llama", seed=4)
    with pytest.raises(TypeError, match="policy 'expected_attention' takes n_future_positions"):
        KVEvictCache(model, policy="expected_attention", horizon=8)
    with pytest.raises(ValueError, match="has no recent window"):
        KVEvictCache(model, policy="expected_attention", recent=2)
    with pytest.raises(ValueError, match="epsilon"):
        KVEvictCache(model, policy="expected_attention", epsilon=-1.0)
    scaled = tiny_model("llama", seed=4, rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="needs the default RoPE"):
        KVEvictCache(scaled, policy="expected_attention")
