"""H2O's prompt scored from the attention the model computes (kvevict/_prompt_attention.py): the chunked prompt
attention gives DynamicCache's outputs (1e-5), its column sums keep the positions that kvevict's own prefill keeps from
the materialised logits (record=True) in every layer and KV head, and generation after it gives the same ids and
logits; left-padded batches; prompts longer than a chunk; the model's config is its own again after the forward
(also after a forward that raised), and other policies and record=True keep the model's attention."""
import pytest
import torch
from transformers import DynamicCache

import kvevict._prompt_attention as pa
from kvevict.transformers import KVEvictCache

from conftest import greedy_loop, tiny_model

T = 6


def prompt(n, seed=5):
    return torch.randint(1, 96, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(params=[("llama", "sdpa"), ("qwen2", "eager"), ("qwen3", "sdpa"), ("mistral", "eager")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def model(request):
    return tiny_model(request.param[0], attn=request.param[1], seed=11)


@pytest.mark.parametrize("P", [37, pa.CHUNK + 45])
def test_prompt_logits_equal_dynamic_cache(model, P):
    ids = prompt(P)
    with torch.no_grad():
        want = model(ids, past_key_values=DynamicCache()).logits
        cache = KVEvictCache(model, policy="h2o", budget=0.5)
        got = model(ids, past_key_values=cache).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert all(lay.prefilled for lay in cache.layers)


@pytest.mark.parametrize("P, options", [(37, dict(budget=0.5)), (pa.CHUNK + 45, dict(budget=0.3, recent=4)),
                                        (48, dict(budget=12, head_budgets="adaptive"))])
def test_kept_and_generated_equal_the_prefill_from_logits(model, P, options):
    ids = prompt(P)
    fast = KVEvictCache(model, policy="h2o", **options)
    ref = KVEvictCache(model, policy="h2o", record=True, **options)  # kvevict's prefill of the [n_q, P, P] logits
    got_ids, got_logits = greedy_loop(model, ids, fast, T)
    want_ids, want_logits = greedy_loop(model, ids, ref, T)
    for layer in range(len(fast.layers)):
        for j in range(fast.n_kv_heads):
            assert fast.retained_positions(layer, j) == ref.retained_positions(layer, j), (layer, j)
    assert got_ids == want_ids
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-5, atol=1e-5)


def test_left_padded_batch_equals_each_sequence_alone(model):
    seqs = [prompt(n, seed=n) for n in (20, 33, 9)]
    P = max(s.shape[1] for s in seqs)
    ids = torch.zeros(len(seqs), P, dtype=torch.long)
    mask = torch.zeros(len(seqs), P, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, P - s.shape[1]:], mask[b, P - s.shape[1]:] = s[0], 1
    batch = KVEvictCache(model, policy="h2o", budget=0.5)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, past_key_values=batch, max_new_tokens=T, do_sample=False,
                             pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    logits = torch.stack(out.logits, dim=1)
    for b, s in enumerate(seqs):
        alone = KVEvictCache(model, policy="h2o", budget=0.5, record=True)
        with torch.no_grad():
            one = model.generate(s, past_key_values=alone, max_new_tokens=T, do_sample=False, pad_token_id=0,
                                 output_logits=True, return_dict_in_generate=True)
        assert out.sequences[b, P:].tolist() == one.sequences[0, s.shape[1]:].tolist(), b
        torch.testing.assert_close(logits[b], torch.stack(one.logits, dim=1)[0], rtol=1e-5, atol=1e-5)
        for layer in range(len(batch.layers)):
            for j in range(batch.n_kv_heads):
                assert batch.retained_positions(layer, j, seq=b) == alone.retained_positions(layer, j), (b, layer, j)


def _calls(monkeypatch):
    """The layers whose prompt attention ran kvevict's (it hands its sums to the layer). Spied on the layer, not
    on transformers' attention registry: kvpress, once imported, wraps the registry's functions."""
    from kvevict._layer import KVEvictLayer
    seen = []
    real = KVEvictLayer.take_attention_sums

    def spy(self, sums):
        seen.append(self.layer_idx)
        return real(self, sums)
    monkeypatch.setattr(KVEvictLayer, "take_attention_sums", spy)
    return seen


@pytest.mark.parametrize("policy, options", [("h2o", dict(record=True)), ("keyformer", dict(horizon=4)),
                                             ("tova", {}), ("h2o", dict(mean_attention=True)), ("full", {})])
def test_only_h2o_without_record_replaces_the_attention(monkeypatch, policy, options):
    model = tiny_model("llama", seed=11)
    seen = _calls(monkeypatch)
    with torch.no_grad():
        model(prompt(30), past_key_values=KVEvictCache(model, policy=policy, budget=0.5, **options))
    assert seen == []
    with torch.no_grad():
        model(prompt(30), past_key_values=KVEvictCache(model, policy="h2o", budget=0.5))
    assert seen == [0, 1]  # the prompt only: the decode steps attend with the model's own implementation
    assert all(type(m.self_attn.config) is not pa._ConfigView for m in model.model.layers)


def test_config_is_the_models_again_after_a_forward_that_raised(monkeypatch):
    from kvevict._layer import KVEvictLayer
    model = tiny_model("llama", seed=11)
    with torch.no_grad():
        want = model(prompt(30), past_key_values=DynamicCache()).logits

    def fail(self, sums):
        raise RuntimeError("inside the prompt's attention")
    monkeypatch.setattr(KVEvictLayer, "take_attention_sums", fail)
    with pytest.raises(RuntimeError, match="inside the prompt's attention"):
        with torch.no_grad():
            model(prompt(30), past_key_values=KVEvictCache(model, policy="h2o", budget=0.5))
    assert all(type(m.self_attn.config) is not pa._ConfigView for m in model.model.layers)
    monkeypatch.undo()
    with torch.no_grad():
        torch.testing.assert_close(model(prompt(30), past_key_values=DynamicCache()).logits, want, rtol=0, atol=0)
        got = model(prompt(30), past_key_values=KVEvictCache(model, policy="h2o", budget=0.5)).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_another_threads_swapped_config_runs_the_models_attention():
    """A forward on another thread through a module that this thread's prompt swapped: the model's attention, and
    the view is left for its own forward's hook."""
    model = tiny_model("llama", seed=11)
    with torch.no_grad():
        want = model(prompt(30), past_key_values=DynamicCache()).logits
    cache = KVEvictCache(model, policy="h2o", budget=0.5)
    attn = model.model.layers[0].self_attn
    foreign = pa._ConfigView(attn.config, cache.layers[0])
    foreign.__dict__["_kvevict_thread"] = -1  # not this thread
    attn.config = foreign
    try:
        with torch.no_grad():
            got = model(prompt(30), past_key_values=DynamicCache()).logits
            assert attn.config is foreign
            kept = model(prompt(30), past_key_values=KVEvictCache(model, policy="h2o", budget=0.5)).logits
        assert attn.config is foreign  # this thread's cache scored layer 0 from Q and K instead
    finally:
        attn.config = foreign.__dict__["_kvevict_config"]
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(kept, want, rtol=1e-5, atol=1e-5)
