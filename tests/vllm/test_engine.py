"""kvevict's plugin in a running vLLM (CPU backend, SmolLM2-135M, float32, greedy).

- 'full' gives vLLM's own ids (vLLM without the plugin, in another process) and transformers' ids;
- with 'streaming' and 'window', three requests of different lengths decode together; each one's ids equal
  transformers' with the evicted positions masked (reference.py), and after every step the scheduler's
  block list of each request holds vLLM's null block exactly at the evicted blocks (the token-by-token
  rule of reference.py), at most ceil(k / bs) + 1 blocks once the prompt is processed, and the pool's free
  count is what the requests do not hold;
- with 'knorm' (the worker chooses from the keys and reports through kvevict's KV connector) the same, against
  transformers' masked run whose own keys choose the blocks (reference.KnormRule), with chunked prefill too;
  the keys chose blocks StreamingLLM would have kept;
- settings the plugin cannot serve are refused when the engine starts, with the reason.
"""

import gc
import json
import os
import subprocess
import sys

import pytest
import torch

import reference
from conftest import block_manager, make_engine, run_stepwise

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_TOKENS = 20
BS = 128


@pytest.fixture(scope="module")
def hf(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    return tok, model.eval()


@pytest.fixture(scope="module")
def prompts(hf, stories):
    """Three prompts of 600, 300 and 630 tokens (5, 3 and 5 blocks) from TinyStories paragraphs: with k = 256
    the first evicts 2 blocks after its prompt, the second never reaches k + 128, the third evicts 2 blocks
    after its prompt and a third one at its 10th decode step (640 tokens cached)."""
    tok, _ = hf
    return [tok(" ".join(stories[a:b]))["input_ids"][:n] for a, b, n in ((0, 40, 600), (40, 70, 300), (70, 120, 630))]


def _free_engine(llm):
    llm.llm_engine.engine_core.shutdown()
    del llm
    gc.collect()


def test_full_gives_vllms_own_ids(model_dir, prompts, hf, tmp_path):
    llm = make_engine(model_dir, {"policy": "full"})
    mgr, _ = block_manager(llm)
    assert type(mgr).__name__ == "KVEvictManager"
    ids, trace = run_stepwise(llm, prompts, MAX_TOKENS)
    _free_engine(llm)
    assert all(None not in blocks for step, _ in trace for _, blocks in step.values())

    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(prompts))
    env = dict(os.environ, VLLM_PLUGINS="lora_filesystem_resolver")
    run = subprocess.run([sys.executable, os.path.join(HERE, "engine_run.py"), model_dir, str(path),
                          str(MAX_TOKENS)], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    own = json.loads(next(line for line in run.stdout.splitlines() if line.startswith('{"ids"')))
    assert own["backend"] == "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"
    assert own["ids"] == ids

    _, model = hf
    assert ids[0] == reference.masked_greedy(model, prompts[0], MAX_TOKENS)


def _check_trace(trace, prompts, budget, evicted_at, free_at_start):
    """At every step: null blocks exactly at evicted_at(i, cached) once request i's prompt is processed (none
    before), at most ceil(k / bs) + 1 live blocks then, and the pool's free count is what no request holds.
    Returns the requests that evicted."""
    seen_eviction = set()
    for step, free in trace:
        held = 0
        for i, (cached, blocks) in step.items():
            nulls = [j for j, b in enumerate(blocks) if b is None]
            assert nulls == (evicted_at(i, cached) if cached >= len(prompts[i]) else []), (i, cached, blocks)
            live = len(blocks) - len(nulls)
            if cached >= len(prompts[i]):
                assert live <= -(-budget // BS) + 1, (i, cached, blocks)
            held += live
            seen_eviction.update([i] if nulls else [])
        assert free == free_at_start - held
    assert trace[-1] == ({}, free_at_start)
    return seen_eviction


@pytest.mark.parametrize("config,overrides", [
    ({"policy": "streaming", "budget": 256}, {}),
    # In scripts/ci-extended.sh (E7) only: window's cut is streaming's with no sinks' block (test_policy checks both
    # rules against kvevict's PagedCache), and the knorm test below runs chunked prefill through the same cut.
    pytest.param({"policy": "window", "budget": 256}, {}, marks=pytest.mark.extended),
    # prompts prefilled in chunks of 256 tokens: nothing leaves before a prompt is all in, so the same ids
    pytest.param({"policy": "streaming", "budget": 256}, {"max_num_batched_tokens": 256}, marks=pytest.mark.extended),
], ids=["streaming", "window", "streaming-chunked-prefill"])
def test_eviction_matches_masked_reference_and_frees_blocks(model_dir, prompts, hf, config, overrides):
    llm = make_engine(model_dir, config, **overrides)
    mgr, kvm = block_manager(llm)
    free_at_start = kvm.block_pool.get_num_free_blocks()
    ids, trace = run_stepwise(llm, prompts, MAX_TOKENS)
    freed = mgr.blocks_freed
    _free_engine(llm)

    start = 1 if config["policy"] == "streaming" else 0
    evicted_at = lambda c: reference.evicted_pages_sim(c, config["budget"], BS, start)
    assert _check_trace(trace, prompts, config["budget"], lambda i, c: evicted_at(c), free_at_start) == {0, 2}
    assert freed == 2 + 3

    _, model = hf
    for p, got in zip(prompts, ids):
        assert got == reference.masked_greedy(model, p, MAX_TOKENS, (evicted_at, BS))
    # and eviction changed what the long requests attended to: their ids differ from the full cache's
    assert ids[0] != reference.masked_greedy(model, prompts[0], MAX_TOKENS)


@pytest.mark.parametrize("overrides", [{}, {"max_num_batched_tokens": 256}], ids=["knorm", "knorm-chunked-prefill"])
def test_knorm_matches_masked_reference_and_frees_blocks(model_dir, prompts, hf, stories, overrides):
    """The three requests, and a fourth of 1,000 tokens that the 16-block pool admits only once blocks have
    come back (whole, once the others finish; in chunks of 256, earlier): it runs in blocks they held, and
    evicts 5 of its 8 blocks at its prompt's end. (A new request that starts in a finished one's first block
    resets the worker's state of that block: test_policy's fold test.)"""
    from kvevict_vllm import connector_config

    tok, model = hf
    late = tok(" ".join(stories[120:200]))["input_ids"][:1000]
    requests = prompts + [late]
    config = {"policy": "knorm", "budget": 256}
    llm = make_engine(model_dir, config, kv_transfer_config=connector_config(), num_gpu_blocks_override=16,
                      max_model_len=1536, **overrides)  # 12 blocks: a request of 2,048 would not fit the pool
    mgr, kvm = block_manager(llm)
    free_at_start = kvm.block_pool.get_num_free_blocks()
    ids, trace = run_stepwise(llm, requests, MAX_TOKENS)
    freed = mgr.blocks_freed
    _free_engine(llm)

    rules = [reference.KnormRule(len(p), 256, BS) for p in requests]
    for p, rule, got in zip(requests, rules, ids):
        assert got == reference.masked_greedy(model, p, MAX_TOKENS, (rule, BS))
    # the rules have seen every key now: replay them at the counts the trace shows
    assert _check_trace(trace, requests, 256, lambda i, c: rules[i](c), free_at_start) == {0, 2, 3}
    assert freed == 2 + 3 + 5
    # the late request started after the others' blocks went back to the pool, and runs in some of them
    held = lambda i: {b for step, _ in trace if i in step for b in step[i][1] if b is not None}
    assert held(3) & (held(0) | held(1) | held(2))
    # the keys chose: request 0 drops blocks 1 and 3 of its 5 (StreamingLLM drops 1 and 2)
    assert rules[0](len(prompts[0])) == [1, 3] and reference.evicted_pages_sim(len(prompts[0]), 256, BS, 1) == [1, 2]


@pytest.mark.parametrize("config,overrides,message", [
    ({"policy": "streaming", "budget": 256}, {"enable_prefix_caching": True}, "prefix caching shares blocks"),
    ({"policy": "keyformer", "budget": 256}, {}, "policy='keyformer' is not one of full, streaming, window, knorm"),
    ({"policy": "window", "budget": 100}, {}, "budget=100 is below 128 tokens"),
    ({"policy": "window", "budget": 2048}, {}, "budget=2048 is not below max_model_len=2048"),
    ({"policy": "knorm", "budget": 256}, {}, "start vLLM with kv_transfer_config=kvevict_vllm.connector_config()"),
])
def test_unserved_settings_are_refused_at_start(model_dir, config, overrides, message):
    with pytest.raises(Exception) as info:
        make_engine(model_dir, config, **overrides)
    text = str(info.value) + "".join(str(a) for a in getattr(info.value, "args", ()))
    chain = info.value
    while chain is not None and message not in text:
        chain = chain.__cause__ or chain.__context__
        text += str(chain)
    assert message in text


def test_knorm_on_one_layer_equals_kvevicts_paged_cache(one_layer_llama_dir, stories):
    """On a one-layer model the worker's scores are one layer's keys, as one kvevict.PagedCache('knorm',
    unit='page') holds them: fed transformers' keys of the masked run, kvevict itself chooses the blocks, and
    vLLM's null blocks and greedy ids equal that run's at every step."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kvevict_vllm import connector_config

    tok = AutoTokenizer.from_pretrained(one_layer_llama_dir)
    prompts = [tok(" ".join(stories[a:b]))["input_ids"][:n] for a, b, n in ((0, 40, 700), (40, 70, 300),
                                                                          (70, 120, 630))]
    config = {"policy": "knorm", "budget": 384, "recent": 100}
    llm = make_engine(one_layer_llama_dir, config, kv_transfer_config=connector_config())
    _, kvm = block_manager(llm)
    free_at_start = kvm.block_pool.get_num_free_blocks()
    ids, trace = run_stepwise(llm, prompts, MAX_TOKENS)
    _free_engine(llm)

    model = AutoModelForCausalLM.from_pretrained(one_layer_llama_dir, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    rules = [reference.KnormRule(len(p), 384, BS, recent=100, paged=True) for p in prompts]
    for p, rule, got in zip(prompts, rules, ids):
        assert got == reference.masked_greedy(model, p, MAX_TOKENS, (rule, BS))
    # kvevict's cache only moves forward: its choice at each count as the masked run went
    assert _check_trace(trace, prompts, 384, lambda i, c: rules[i].history[c], free_at_start) == {0, 2}
    # the keys chose: request 2 drops block 3 at its prompt's end, then 2 (StreamingLLM: 1, then 2)
    assert (rules[2].history[630], rules[2].history[640]) == ([3], [2, 3])
