"""KVEvictCache in transformers: policy 'full' is DynamicCache; the evicting policies hold k per KV head at
every step, keep exactly what kvevict.replay keeps on the logits the cache was given, keep the original
positions; the unsupported cases raise errors that say what to do."""
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import DynamicCache

import kvevict
from conftest import ROOT, greedy_loop, records_trace, tiny_model
from kvevict.transformers import KVEvictCache, layer_seed

P, T = 24, 16  # prompt tokens, generated tokens


def prompt(seed=1, n=P, vocab=96):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (1, n), generator=g)


def generate(model, ids, cache, steps=T, **kw):
    with torch.no_grad():
        return model.generate(ids, attention_mask=torch.ones_like(ids), past_key_values=cache, max_new_tokens=steps,
                              do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0,
                              **kw)


def loop(model, ids, cache, steps=T, **kw):
    """`greedy_loop` (conftest.py) with this file's default of T generated ids."""
    return greedy_loop(model, ids, cache, steps, **kw)


# -- policy 'full' is DynamicCache ---------------------------------------------------------------------------

def test_full_equals_dynamic_cache_in_generate(arch_model):
    ids = prompt()
    want = generate(arch_model, ids, DynamicCache(config=arch_model.config))
    got = generate(arch_model, ids, KVEvictCache(arch_model, policy="full"))
    assert got.sequences.tolist() == want.sequences.tolist()
    diff = max(float((a - b).abs().max()) for a, b in zip(got.logits, want.logits))
    assert diff <= 1e-6


def test_full_equals_dynamic_cache_in_a_loop(arch_model):
    ids = prompt(2)
    want_ids, want = loop(arch_model, ids, DynamicCache(config=arch_model.config))
    cache = KVEvictCache(arch_model, policy="full")
    got_ids, got = loop(arch_model, ids, cache)
    assert got_ids == want_ids
    assert float((got - want).abs().max()) <= 1e-6
    assert cache.get_seq_length() == P + T - 1 and cache.kept_length(1) == P + T - 1


# -- eviction at every step: k per KV head ----------------------------------------------------------------------

@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_keyformer_half_holds_k_per_kv_head_at_every_step(attn):
    model = tiny_model("llama", attn=attn)
    cache = KVEvictCache(model, policy="keyformer", budget=0.5, horizon=T)
    k = P // 2
    seen = []

    def check(s):
        for layer in range(2):
            lay = cache.layers[layer]
            assert lay.kv.lengths == [k, k] and cache.kept_length(layer) == k
            for h in range(2):
                kept = cache.retained_positions(layer, h)
                assert len(kept) == k and kept[-1] == P + s  # the newest token is in the recent window
        seen.append(s)

    loop(model, prompt(3), cache, after_step=check)
    assert seen == list(range(T - 1))
    assert cache.get_seq_length() == P + T - 1
    assert cache.layers[0].kv.budget == k


def test_keyformer_in_generate_holds_k_and_differs_from_full(arch_model):
    ids = prompt(4)
    cache = KVEvictCache(arch_model, policy="keyformer", budget=0.5, horizon=T)
    out = generate(arch_model, ids, cache)
    assert out.sequences.shape == (1, P + T)
    for layer in range(2):
        assert cache.layers[layer].kv.lengths == [P // 2, P // 2]
    assert cache.get_seq_length() == P + T - 1


# -- the kept sets are kvevict.replay's on the logits the cache was given --------------------------------------

REPLAY_CASES = [
    ("keyformer", 0.5, dict(horizon=T)),
    ("keyformer", 10, dict(horizon=T, recent=3, noise=False, seed=7)),
    ("h2o", 0.5, {}),
    ("tova", 9, {}),
    ("snapkv", 0.5, {}),
    ("streaming", 8, dict(sinks=2)),
    ("window", 8, {}),
]


def replay_kwargs(policy, budget, opts, layer):
    # the cache hands kvevict k = floor(r P) as tokens (SnapKV's window is then min(32, k))
    kw = dict(policy=policy, q_heads_per_kv=2, budget=budget if isinstance(budget, int) else int(budget * P))
    if "recent" in opts:
        kw["recent"] = opts["recent"]
    if policy == "streaming":
        kw["sinks"] = opts.get("sinks", 4)
    if policy == "window":
        kw["sinks"] = 0
    if policy == "keyformer":
        kw.update(gen_steps=opts["horizon"], seed=layer_seed(opts.get("seed", 42), layer),
                  noise="gumbel" if opts.get("noise", True) else "none")
    return kw


@pytest.mark.parametrize("case", REPLAY_CASES, ids=[f"{c[0]}-{c[1]}" for c in REPLAY_CASES])
def test_kept_sets_equal_replay_of_the_given_logits(case):
    policy, budget, opts = case
    model = tiny_model("llama", seed=5)
    cache = KVEvictCache(model, policy=policy, budget=budget, record=True, **opts)
    loop(model, prompt(6), cache, steps=T + 1)  # prompt + T decode forwards
    for layer in range(2):
        records = cache.layers[layer].records
        assert [r[0] for r in records] == ["prefill"] + ["step"] * T
        x = records_trace(records, P, T, 4, 2)
        want = kvevict.replay(x, P, **replay_kwargs(policy, budget, opts, layer))
        assert len(want) == len(records) == T + 1
        for rec, w in zip(records, want):
            assert rec[3] == w["kept"], (layer, w["t"])
    # it evicted: each KV head ends at k
    k = budget if isinstance(budget, int) else int(budget * P)
    assert all(len(kept) == k for kept in want[-1]["kept"])


def test_decode_logits_are_the_layers_attention_logits():
    """The step logits the cache scores with are scale * q . K over its slots (the queries the layer used)."""
    model = tiny_model("qwen3", seed=2)
    cache = KVEvictCache(model, policy="h2o", budget=12, record=True)
    captured = {}
    attn = model.model.layers[1].self_attn

    def grab(module, args, kwargs, output):
        captured["w"] = output[1]  # eager attention returns its probabilities
    model.config._attn_implementation = "eager"
    try:
        h = attn.register_forward_hook(grab, with_kwargs=True)
        loop(model, prompt(7), cache, steps=3)
        h.remove()
    finally:
        model.config._attn_implementation = "sdpa"
    _, logits, before, _ = cache.layers[1].records[-1]
    probs = torch.softmax(torch.from_numpy(logits), dim=-1)  # by slot, as eager's columns
    np.testing.assert_allclose(probs.numpy(), captured["w"][0, :, -1, :].numpy(), rtol=1e-5, atol=1e-6)


# -- positions ----------------------------------------------------------------------------------------------------

def test_positions_are_the_original_ones_without_position_ids():
    model = tiny_model("llama", seed=3)
    ids = prompt(8)
    a_ids, a = loop(model, ids, KVEvictCache(model, policy="h2o", budget=0.5))
    b_ids, b = loop(model, ids, KVEvictCache(model, policy="h2o", budget=0.5),
                    position_ids=lambda p: torch.tensor([[p]]))
    assert a_ids == b_ids and torch.equal(a, b)
    # numbering new tokens from the cache's length (what a cache that reports its kept length causes) is refused:
    # the new key would be rotated to a position the cache does not record
    with pytest.raises(ValueError, match=r"^KVEvictCache: sequence 0 of the batch is at position 24 \(its real tokens "
                                         r"so far\), but the model was given position_ids \[12\]"):
        loop(model, ids, KVEvictCache(model, policy="h2o", budget=0.5),
             position_ids=lambda p: torch.tensor([[P // 2 + p - P]]))


def test_prefill_only_eviction_grows_and_a_multi_token_forward_equals_one_at_a_time():
    model = tiny_model("mistral", seed=4)
    ids = prompt(9, n=P + 10)
    one = KVEvictCache(model, policy="snapkv", budget=0.5, evict="prefill")
    many = KVEvictCache(model, policy="snapkv", budget=0.5, evict="prefill")
    with torch.no_grad():
        model(ids[:, :P], past_key_values=one)
        model(ids[:, :P], past_key_values=many)
        rows = [model(ids[:, t:t + 1], past_key_values=one).logits[0, -1] for t in range(P, P + 10)]
        block = model(ids[:, P:], past_key_values=many).logits[0]
    assert float((torch.stack(rows) - block).abs().max()) <= 1e-5
    assert one.kept_length(0) == many.kept_length(0) == P // 2 + 10
    assert one.get_seq_length() == P + 10


def test_storage_is_shared_with_the_kvevict_cache():
    model = tiny_model("llama")
    cache = KVEvictCache(model, policy="tova", budget=0.5)
    loop(model, prompt(), cache, steps=3)
    lay = cache.layers[0]
    assert np.shares_memory(lay.kv.k, lay.k_buf.numpy()) and np.shares_memory(lay.kv.v, lay.v_buf.numpy())
    keys = lay.keys
    assert keys.shape == (1, 2, P // 2, 16) and keys.data_ptr() == lay.k_buf.data_ptr()


# -- what it refuses ----------------------------------------------------------------------------------------------

def test_refuses_other_models():
    import transformers
    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64)
    with pytest.raises(ValueError, match=r"^KVEvictCache supports the model types llama, mistral, qwen2, qwen3, gemma3_text "
                                         r"\(config.model_type\); got 'gpt2' \(GPT2LMHeadModel\)$"):
        KVEvictCache(transformers.GPT2LMHeadModel(cfg), policy="h2o")


def test_refuses_sliding_window_layers():
    model = tiny_model("mistral")
    model.config.sliding_window = 8
    try:
        with pytest.raises(ValueError, match=r"^KVEvictCache does not support sliding-window attention layers "
                                             r"\(MistralForCausalLM: config.sliding_window=8"):
            KVEvictCache(model, policy="h2o")
    finally:
        model.config.sliding_window = None


def test_refuses_other_attention_implementations(llama):
    msg = (r"^KVEvictCache works with attn_implementation 'sdpa' or 'eager' \(got 'flash_attention_2'\): its scores "
           r"need the layer's queries against the cache's keys; load the model with attn_implementation='sdpa'$")
    llama.config._attn_implementation = "flash_attention_2"
    try:
        with pytest.raises(ValueError, match=msg):
            KVEvictCache(llama, policy="h2o")
    finally:
        llama.config._attn_implementation = "sdpa"
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    AttentionInterface.register("custom_sdpa", sdpa_attention_forward)
    cache = KVEvictCache(llama, policy="h2o")
    llama.config._attn_implementation = "custom_sdpa"  # switched after the cache was made: the forward refuses
    try:
        with pytest.raises(ValueError, match=r"\(got 'custom_sdpa'\)"):
            with torch.no_grad():
                llama(prompt(), past_key_values=cache)
    finally:
        llama.config._attn_implementation = "sdpa"


def test_refuses_a_budget_larger_than_the_prompt(llama):
    cache = KVEvictCache(llama, policy="h2o", budget=30)
    with pytest.raises(ValueError, match=r"^KVEvictCache: budget 30 tokens is larger than the prompt's 24 tokens; "
                                         r"give at most the prompt's length or a fraction such as 0.5$"):
        with torch.no_grad():
            llama(prompt(), past_key_values=cache)


def test_reorder_cache_checks_beam_idx_and_refuses_kvzip(llama):
    """Beam search works (test_beams.py); reorder_cache refuses indices that are not the batch's rows, and KVzip
    (batch 1 only)."""
    cache = KVEvictCache(llama, policy="h2o")
    with torch.no_grad():
        llama(prompt(), past_key_values=cache)
    with pytest.raises(ValueError, match=r"^KVEvictCache.reorder_cache: beam_idx must hold 1 row indices in \[0, 1\) "
                                         r"\(the batch's rows\); got \[1\]$"):
        cache.reorder_cache(torch.tensor([1]))
    cache.reorder_cache(torch.tensor([0]))  # the identity: nothing to do
    KVEvictCache(llama, policy="h2o").reorder_cache(torch.tensor([0]))  # nothing seen yet: nothing to do


def test_refuses_several_tokens_per_forward_after_the_prompt_when_evicting_every_step(llama):
    cache = KVEvictCache(llama, policy="h2o")
    with torch.no_grad():
        llama(prompt(), past_key_values=cache)
        with pytest.raises(ValueError, match=r"^KVEvictCache\(evict='step'\) takes one new token per forward after "
                                             r"the prompt \(got 3\); feed tokens one at a time, or use "
                                             r"evict='prefill' \(eviction of the prompt only\)$"):
            llama(prompt(n=3), past_key_values=cache)


def test_refuses_bad_options(llama):
    with pytest.raises(ValueError, match=r"^KVEvictCache: policy 'keyformer' needs horizon=T, the decode steps over "
                                         r"which its temperature rises from tau_init to tau_end"):
        KVEvictCache(llama, policy="keyformer")
    with pytest.raises(ValueError, match=r"^KVEvictCache: unknown policy 'lru'; expected one of full, keyformer, "
                                         r"h2o, streaming, window, tova, snapkv, knorm, keydiff, expected_attention, kvzip$"):
        KVEvictCache(llama, policy="lru")
    with pytest.raises(ValueError, match="sinks"):  # kvevict's own check: an option the policy does not use
        KVEvictCache(llama, policy="h2o", sinks=2)
    with pytest.raises(TypeError, match=r"^KVEvictCache: unknown option\(s\) window_size"):
        KVEvictCache(llama, policy="h2o", window_size=4)
    with pytest.raises(ValueError, match=r"^KVEvictCache: evict must be 'step' or 'prefill' \(got 'never'\)$"):
        KVEvictCache(llama, policy="h2o", evict="never")


def test_refuses_non_float32():
    model = tiny_model("llama").to(torch.bfloat16)
    with pytest.raises(ValueError, match=r"^KVEvictCache keeps float32 K/V on the CPU; got torch.bfloat16 on cpu"):
        with torch.no_grad():
            model(prompt(), past_key_values=KVEvictCache(model, policy="h2o"))


def test_hooks_go_with_the_cache(llama):
    before = sum(len(layer.self_attn._forward_hooks) for layer in llama.model.layers)
    cache = KVEvictCache(llama, policy="h2o")
    # Two per layer: the step's scoring, and the one that gives the model's config back even after an exception.
    assert sum(len(layer.self_attn._forward_hooks) for layer in llama.model.layers) == before + 2 * len(llama.model.layers)
    cache.close()
    assert sum(len(layer.self_attn._forward_hooks) for layer in llama.model.layers) == before
    cache = KVEvictCache(llama, policy="h2o")
    del cache
    assert sum(len(layer.self_attn._forward_hooks) for layer in llama.model.layers) == before


def test_import_error_says_what_to_install():
    code = "import sys; sys.modules['torch'] = None; import kvevict.transformers"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 1
    assert ('ImportError: kvevict.transformers needs torch (pip install "<kvevict checkout>[transformers]" installs '
            "the tested versions, torch 2.10.0 and transformers 5.2.0; in a checkout, bash scripts/get-hf-venv.sh "
            "makes a venv with them)") in r.stderr


def prefill_only_against_kvpress(press, policy, model_seed, prompt_seed, **options):
    """Prefill-only compression of the same prompt by the kvpress `press` and by KVEvictCache(policy, budget 0.5,
    **options), then 8 decode steps each (kvpress's forwards given the original positions, KVEvictCache's numbering
    them): the largest logit difference."""
    model = tiny_model("llama", seed=model_seed)
    ids = prompt(prompt_seed, n=P + 8)
    theirs = DynamicCache(config=model.config)
    ours = KVEvictCache(model, policy=policy, budget=0.5, evict="prefill", **options)
    with torch.no_grad():
        with press(model):
            model(ids[:, :P], past_key_values=theirs)
        model(ids[:, :P], past_key_values=ours)
        assert theirs.get_seq_length() == ours.kept_length(0) == P // 2
        a = [model(ids[:, t:t + 1], past_key_values=theirs, position_ids=torch.tensor([[t]]),
                   cache_position=torch.tensor([t])).logits[0, -1] for t in range(P, P + 8)]
        b = [model(ids[:, t:t + 1], past_key_values=ours).logits[0, -1] for t in range(P, P + 8)]
    return float((torch.stack(a) - torch.stack(b)).abs().max())


def test_prefill_only_streaming_equals_kvpress_streaming_llm():
    """The same kept set (4 sinks + the most recent) through kvpress's StreamingLLMPress and KVEvictCache."""
    import kvpress
    assert prefill_only_against_kvpress(kvpress.StreamingLLMPress(compression_ratio=0.5, n_sink=4), "streaming",
                                        6, 10, sinks=4) <= 1e-5


def test_prefill_only_knorm_equals_kvpress_knorm():
    """kvevict's key norm with no recent window keeps, per KV head, the k keys of smallest L2 norm: kvpress's
    KnormPress (score -||k||). The same logits afterwards (the kept sets the same in every layer and head)."""
    import kvpress
    assert prefill_only_against_kvpress(kvpress.KnormPress(compression_ratio=0.5), "knorm", 8, 12, recent=0) <= 1e-5


def test_prefill_only_keydiff_equals_kvpress_keydiff():
    """kvevict's KeyDiff with no recent window keeps, per KV head, the k keys least like the mean unit key (highest
    1 - cos): kvpress's KeyDiffPress (score -cos). The same logits afterwards; and at every step the cache computes
    no attention logits for it (a key score)."""
    import kvpress
    assert prefill_only_against_kvpress(kvpress.KeyDiffPress(compression_ratio=0.5), "keydiff", 8, 12,
                                        recent=0) <= 1e-5


def test_prefill_only_tova_shared_equals_kvpress_tova():
    """kvpress's TOVAPress averages the last query's attention over all the layer's query heads, keeps the same
    tokens in every KV head and never evicts the newest: kvevict's TOVA with one selection per layer from the scores
    summed over its KV heads (shared_heads=True) and a recent window of 1 keeps the same sets (the row
    `tova+shared@recent=1t`). The same logits afterwards."""
    import kvpress
    assert prefill_only_against_kvpress(kvpress.TOVAPress(compression_ratio=0.5), "tova", 8, 12, shared_heads=True,
                                        recent=1) <= 1e-5


def test_layer_seeds_are_the_engines():
    # tools/llama2/eviction.cpp: seed + layer * 0x9E3779B97F4A7C15, wrapping at 2^64
    assert [layer_seed(42, layer) for layer in range(3)] == [42, 11400714819323198527, 4354685564936845396]
    assert layer_seed(1, 29) == (1 + 29 * 0x9E3779B97F4A7C15) % 2**64


@pytest.mark.parametrize("policy, opts", [("h2o", {}), ("keyformer", dict(horizon=T)), ("tova", {}),
                                          ("h2o", dict(head_budgets="adaptive"))])
def test_prompt_scored_from_queries_keeps_what_the_materialised_logits_keep(monkeypatch, policy, opts):
    """When the prompt's attention does not score it (another thread's forward holds the module, say) it is scored
    from its queries (Cache.prefill_qk, no [n_q, P, P] array); with record=True from the materialised logits: the
    same kept positions in every layer and head, the same ids and logits."""
    from kvevict._layer import KVEvictLayer
    monkeypatch.setattr(KVEvictLayer, "scores_in_attention", lambda self: False)
    monkeypatch.setattr(KVEvictLayer, "sums_in_attention", lambda self: False)
    calls = []
    real = kvevict.Cache.prefill_qk

    def spy(self, *args, **kwargs):
        calls.append(1)
        return real(self, *args, **kwargs)
    monkeypatch.setattr(kvevict.Cache, "prefill_qk", spy)
    model = tiny_model("llama", seed=5)
    ids = prompt(6)
    lean = KVEvictCache(model, policy=policy, budget=0.5, **opts)
    full = KVEvictCache(model, policy=policy, budget=0.5, record=True, **opts)
    a_ids, a = loop(model, ids, lean)
    assert len(calls) == 2  # both layers' prompts through prefill_qk
    b_ids, b = loop(model, ids, full)
    assert a_ids == b_ids
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for layer in range(2):
        for h in range(2):
            assert lean.retained_positions(layer, h) == full.retained_positions(layer, h)
