"""The prompt scored inside the attention the model computes (kvevict/_prompt_attention.py) for Keyformer, H2O and
TOVA: the chunked prompt attention gives DynamicCache's outputs (1e-5), the chunks' logits given to
Cache.prefill_chunk keep the positions that kvevict's own prefill keeps from the materialised logits (record=True) in
every layer and KV head, and generation after it gives the same ids and logits; left-padded batches; prompts longer
than a chunk; any number of scoring threads; the model's config is its own again after the forward (also after a
forward that raised), and other policies and record=True keep the model's attention."""
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
        cache = KVEvictCache(model, policy="keyformer", budget=0.5, horizon=T)
        got = model(ids, past_key_values=cache).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert all(lay.prefilled for lay in cache.layers)


@pytest.mark.parametrize("policy, P, options", [
    ("h2o", 37, dict(budget=0.5)), ("h2o", pa.CHUNK + 45, dict(budget=0.3, recent=4)),
    ("h2o", 48, dict(budget=12, head_budgets="adaptive")), ("h2o", 40, dict(budget=0.4, mean_attention=True)),
    ("keyformer", 37, dict(budget=0.5, horizon=T)), ("keyformer", 2 * pa.CHUNK + 7, dict(budget=0.3, horizon=T)),
    ("keyformer", 45, dict(budget=0.4, horizon=T, tau_init=1.5, seed=9, head_budgets="adaptive")),
    ("keyformer", 44, dict(budget=0.5, horizon=T, mean_attention=True, threads=3)),
    ("tova", pa.CHUNK + 3, dict(budget=0.25)), ("h2o", 50, dict(budget=0.5, threads=1))])
def test_kept_and_generated_equal_the_prefill_from_logits(monkeypatch, model, policy, P, options):
    ids = prompt(P)
    seen = _calls(monkeypatch)
    fast = KVEvictCache(model, policy=policy, **options)
    ref = KVEvictCache(model, policy=policy, record=True, **options)  # kvevict's prefill of the [n_q, P, P] logits
    got_ids, got_logits = greedy_loop(model, ids, fast, T)
    assert seen == list(range(len(fast.layers)))  # every layer's prompt scored inside its attention (not ref's)
    want_ids, want_logits = greedy_loop(model, ids, ref, T)
    for layer in range(len(fast.layers)):
        for j in range(fast.n_kv_heads):
            assert fast.retained_positions(layer, j) == ref.retained_positions(layer, j), (layer, j)
    assert got_ids == want_ids
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("policy, options", [("h2o", {}), ("keyformer", dict(horizon=T)), ("tova", {}),
                                             ("h2o", dict(mean_attention=True))])
def test_left_padded_batch_equals_each_sequence_alone(model, policy, options):
    _padded_batch_equals_alone(model, policy, options)


def _padded_batch_equals_alone(model, policy, options):
    """Three prompts of 20, CHUNK + 9 and 9 tokens, left-padded into one generate: each sequence's ids and logits
    (1e-5) and kept positions equal its own generate with the materialised prefill (record=True)."""
    seqs = [prompt(n, seed=n) for n in (20, pa.CHUNK + 9, 9)]
    P = max(s.shape[1] for s in seqs)
    ids = torch.zeros(len(seqs), P, dtype=torch.long)
    mask = torch.zeros(len(seqs), P, dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, P - s.shape[1]:], mask[b, P - s.shape[1]:] = s[0], 1
    batch = KVEvictCache(model, policy=policy, budget=0.5, **options)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, past_key_values=batch, max_new_tokens=T, min_new_tokens=T,
                             do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    logits = torch.stack(out.logits, dim=1)
    for b, s in enumerate(seqs):
        alone = KVEvictCache(model, policy=policy, budget=0.5, record=True, **options)
        with torch.no_grad():
            one = model.generate(s, past_key_values=alone, max_new_tokens=T, min_new_tokens=T, do_sample=False,
                                 pad_token_id=0, output_logits=True, return_dict_in_generate=True)
        assert out.sequences[b, P:].tolist() == one.sequences[0, s.shape[1]:].tolist(), b
        torch.testing.assert_close(logits[b], torch.stack(one.logits, dim=1)[0], rtol=1e-5, atol=1e-5)
        for layer in range(len(batch.layers)):
            for j in range(batch.n_kv_heads):
                assert batch.retained_positions(layer, j, seq=b) == alone.retained_positions(layer, j), (b, layer, j)


def _calls(monkeypatch):
    """The layers whose prompt attention ran kvevict's (it tells the layer that every chunk was scored). Spied on
    the layer, not on transformers' attention registry: kvpress, once imported, wraps the registry's functions."""
    from kvevict._layer import KVEvictLayer
    seen = []
    for name in ("prompt_scored", "take_attention_sums"):  # Keyformer / TOVA, H2O
        def spy(self, *args, real=getattr(KVEvictLayer, name)):
            seen.append(self.layer_idx)
            return real(self, *args)
        monkeypatch.setattr(KVEvictLayer, name, spy)
    return seen


@pytest.mark.parametrize("policy, options", [("h2o", dict(record=True)), ("keyformer", dict(horizon=4, record=True)),
                                             ("snapkv", {}), ("knorm", {}), ("streaming", {}), ("full", {}),
                                             ("expected_attention", {})])
def test_only_chunked_scores_without_record_replace_the_attention(monkeypatch, policy, options):
    model = tiny_model("llama", seed=11)
    seen = _calls(monkeypatch)
    with torch.no_grad():
        model(prompt(30), past_key_values=KVEvictCache(model, policy=policy, budget=0.5, **options))
    assert seen == []
    with torch.no_grad():
        model(prompt(30), past_key_values=KVEvictCache(model, policy="h2o", budget=0.5))
    assert seen == [0, 1]  # the prompt only: the decode steps attend with the model's own implementation
    with torch.no_grad():
        model(prompt(30), past_key_values=KVEvictCache(model, policy="keyformer", budget=0.5, horizon=4))
    assert seen == [0, 1, 0, 1]
    assert all(type(m.self_attn.config) is not pa._ConfigView for m in model.model.layers)


@pytest.mark.parametrize("policy, inside", [("h2o", "take_attention_sums"), ("keyformer", "open_for_sums"),
                                            ("keyformer-mean", "score_chunk")])
def test_config_is_the_models_again_after_a_forward_that_raised(monkeypatch, policy, inside):
    from kvevict._layer import KVEvictLayer
    options = dict(horizon=4) if policy.startswith("keyformer") else {}
    if policy == "keyformer-mean":  # its chunks are scored by the caches (no fused sums)
        policy, options = "keyformer", dict(horizon=4, mean_attention=True)
    model = tiny_model("llama", seed=11)
    with torch.no_grad():
        want = model(prompt(30), past_key_values=DynamicCache()).logits

    def fail(self, *args):
        raise RuntimeError("inside the prompt's attention")
    monkeypatch.setattr(KVEvictLayer, inside, fail)
    cache = KVEvictCache(model, policy=policy, budget=0.5, **options)
    with pytest.raises(RuntimeError, match="inside the prompt's attention"):
        with torch.no_grad():
            model(prompt(30), past_key_values=cache)
    assert all(type(m.self_attn.config) is not pa._ConfigView for m in model.model.layers)
    monkeypatch.undo()
    with torch.no_grad():
        torch.testing.assert_close(model(prompt(30), past_key_values=DynamicCache()).logits, want, rtol=0, atol=0)
        got = model(prompt(30), past_key_values=KVEvictCache(model, policy=policy, budget=0.5, **options)).logits
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


def test_threads_change_nothing(monkeypatch):
    """The prompt's rows scored on 1, 2 or 3 workers (the caches on the KVEvictCache's pool while the prompt is
    scored, serial after the cut): the same kept positions and logits, bit for bit. (Keyformer with
    mean_attention: its chunks go to the caches; plain Keyformer's prompt takes the fused kernel's sums.)"""
    from kvevict._layer import KVEvictLayer
    model = tiny_model("llama", seed=11)
    ids = prompt(pa.CHUNK + 20)
    executors = []
    real = KVEvictLayer.score_chunk

    def spy(self, s, *args):
        executors.append(self.kvs[s].executor)
        return real(self, s, *args)
    monkeypatch.setattr(KVEvictLayer, "score_chunk", spy)
    runs = []
    for threads in (1, 2, 3):
        executors.clear()
        cache = KVEvictCache(model, policy="keyformer", budget=0.4, horizon=T, threads=threads, mean_attention=True)
        runs.append((greedy_loop(model, ids, cache, T), [cache.retained_positions(lay, j) for lay in range(2)
                                                          for j in range(cache.n_kv_heads)]))
        pool = cache.scoring_pool()
        assert (pool is None) if threads == 1 else (pool.workers == threads)
        assert executors and all(e is pool for e in executors)  # every chunk scored on the pool
        assert all(kv.executor is None for lay in cache.layers for kv in lay.kvs)  # decode steps: serial
    for (got_ids, got_logits), kept in runs[1:]:
        assert got_ids == runs[0][0][0] and kept == runs[0][1]
        torch.testing.assert_close(got_logits, runs[0][0][1], rtol=0, atol=0)


@pytest.mark.parametrize("threads, err, msg", [(0, ValueError, r"threads must be in \[1, 1024\] \(got 0\)"),
                                               (-1, ValueError, r"threads must be in \[1, 1024\] \(got -1\)"),
                                               (1025, ValueError, r"threads must be in \[1, 1024\] \(got 1025\)"),
                                               (1.5, TypeError, r"threads must be an int or None \(got 1.5\)"),
                                               ("2", TypeError, r"threads must be an int or None \(got '2'\)"),
                                               (True, TypeError, r"threads must be an int or None \(got True\)")])
def test_threads_refused(threads, err, msg):
    model = tiny_model("llama", seed=11)
    with pytest.raises(err, match="KVEvictCache: " + msg):
        KVEvictCache(model, policy="h2o", budget=0.5, threads=threads)


@pytest.mark.parametrize("extra", [dict(num_key_value_heads=1), dict(hidden_size=96)],
                         ids=["one-kv-head", "head-dim-24"])
@pytest.mark.parametrize("policy, options", [("keyformer", dict(horizon=T)), ("h2o", {})])
def test_one_kv_head_and_a_scale_not_a_power_of_two(monkeypatch, extra, policy, options):
    """Multi-query attention (the chunk's K/V rows of a single KV head are copied, never the cache's own rows) and
    head_dim 24 (scale 24^-1/2: (q * scale) K^T and (q K^T) * scale round differently): the prompt's logits equal
    DynamicCache's, and the kept positions and generated ids equal kvevict's prefill of the materialised logits,
    for one sequence and a left-padded batch."""
    model = tiny_model("llama", seed=13, **extra)
    seen = _calls(monkeypatch)
    ids = prompt(pa.CHUNK + 11)
    with torch.no_grad():
        want = model(ids, past_key_values=DynamicCache()).logits
        got = model(ids, past_key_values=KVEvictCache(model, policy=policy, budget=0.5, **options)).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert seen == [0, 1]
    fast = KVEvictCache(model, policy=policy, budget=0.4, **options)
    ref = KVEvictCache(model, policy=policy, budget=0.4, record=True, **options)
    got_ids, got_logits = greedy_loop(model, ids, fast, T)
    want_ids, want_logits = greedy_loop(model, ids, ref, T)
    assert got_ids == want_ids
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-5, atol=1e-5)
    for layer in range(2):
        for j in range(fast.n_kv_heads):
            assert fast.retained_positions(layer, j) == ref.retained_positions(layer, j), (layer, j)
    _padded_batch_equals_alone(model, policy, options)


def _kernel_calls(monkeypatch):
    """The `first` of every kvevict.causal_attention call (H2O's fused prompt attention)."""
    import kvevict
    calls, real = [], kvevict.causal_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("first", 0))
        return real(*args, **kwargs)
    monkeypatch.setattr(kvevict, "causal_attention", spy)
    return calls


@pytest.mark.parametrize("policy, options", [("h2o", {}), ("keyformer", dict(horizon=T)),
                                             ("keyformer", dict(horizon=T, mean_attention=True))],
                         ids=["h2o", "keyformer", "keyformer-mean"])
@pytest.mark.parametrize("hidden", [64, 96], ids=["head-dim-16", "head-dim-24"])
def test_prompt_runs_the_fused_kernel_where_it_applies(monkeypatch, hidden, policy, options):
    """H2O's and Keyformer's prompt attention is kvevict.causal_attention (the output and the prompt's score summed
    over the queries in one pass; Keyformer's from its caches' prompt_sums) when head_dim is a multiple of 16, once
    per layer and sequence with the sequence's left padding as `first`; otherwise, and with mean_attention, the
    chunked torch path. The outputs and kept sets are the same either way (the tests above)."""
    fused = hidden == 64 and not options.get("mean_attention")
    model = tiny_model("llama", seed=13, hidden_size=hidden)
    calls = _kernel_calls(monkeypatch)
    with torch.no_grad():
        model(prompt(40), past_key_values=KVEvictCache(model, policy=policy, budget=0.5, **options))
    assert calls == ([0, 0] if fused else [])
    calls.clear()
    ids = torch.cat([torch.zeros(1, 7, dtype=torch.long), prompt(33)], dim=1).repeat(2, 1)
    ids[1, 7:] = prompt(33, seed=9)
    mask = torch.ones_like(ids)
    mask[0, :7] = 0
    with torch.no_grad():
        model(ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
              past_key_values=KVEvictCache(model, policy=policy, budget=0.5, **options))
    assert calls == ([7, 0, 7, 0] if fused else [])
    calls.clear()  # the same shape, other padding, under inference_mode: each forward's own mask is read
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.inference_mode():
        model(ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp(min=0),
              past_key_values=KVEvictCache(model, policy=policy, budget=0.5, **options))
    assert calls == ([0, 3, 0, 3] if fused else [])


def pads_t(*pads):
    return torch.tensor(pads).view(len(pads), 1, 1)


def test_left_padding_reads_only_causal_left_padded_masks():
    """_left_padding: None is causal without padding; transformers' left-padded causal mask (bool, or additive
    float) gives each sequence's padding; any other mask (a hole, a query seeing a later token, padding that is
    not on the left, another shape) gives None, and the chunked path runs it as given."""
    P = 6
    causal = torch.ones(P, P, dtype=torch.bool).tril()
    pads = torch.tensor([0, 2])
    cols = torch.arange(P)
    mask = (causal & (cols >= pads.view(2, 1, 1))).unsqueeze(1)  # [2, 1, P, P]
    assert pa._left_padding(None, 2, P) == [0, 0]
    assert pa._left_padding(mask, 2, P) == [0, 2]
    additive = torch.zeros(2, 1, P, P).masked_fill_(~mask, torch.finfo(torch.float32).min)
    assert pa._left_padding(additive, 2, P) == [0, 2]
    for edit in (lambda m: m[0, 0, 4].__setitem__(2, False),   # a hole in a real row
                 lambda m: m[1, 0, 3].__setitem__(5, True),    # a query sees a later token
                 lambda m: m[1, 0, :, 4].fill_(False)):        # padding inside the prompt
        m = mask.clone()
        edit(m)
        assert pa._left_padding(m, 2, P) is None
    assert pa._left_padding(mask[:, :, :, :P - 1], 2, P) is None
    for pads in ([1, 3], [3, 0], [0, 0]):  # new masks of the same shape (maybe at a freed one's address)
        fresh = (causal & (cols >= torch.tensor(pads).view(2, 1, 1))).unsqueeze(1)
        assert pa._left_padding(fresh, 2, P) == pads
        del fresh
    with torch.inference_mode():  # inference tensors have no version counter: not read
        assert pa._left_padding((causal & (cols >= pads_t(2, 1))).unsqueeze(1), 2, P) == [2, 1]
    assert pa._left_padding(torch.zeros(2, 1, P, P, dtype=torch.bool), 2, P) is None  # no real token
