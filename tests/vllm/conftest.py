"""Fixtures of the vLLM plugin's tests: SmolLM2-135M as vLLM loads it, engines run in this process, prompts.

Engines run with VLLM_ENABLE_V1_MULTIPROCESSING=0 and the "uni" executor, so the scheduler (whose block
manager frees blocks) and the worker (whose attention skips them) live in the test's process and can be
read after every step. The model folder is $KVEVICT_VLLM_MODEL (scripts/vllm-test.sh converts the GGUF).
"""

import os

import pytest

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def pytest_configure(config):
    config.addinivalue_line("markers", "extended: a variant left out of .ci/run (scripts/vllm-test.sh -m 'not "
                            "extended'); scripts/ci-extended.sh E7 runs every test")


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.environ.get("KVEVICT_SHARED_DIR", os.path.join(ROOT, "..", "shared"))  # ../shared beside the checkout
STORIES = os.path.join(SHARED, "data", "tinystories-val", "tinystories_val.txt")


@pytest.fixture(scope="session")
def model_dir():
    d = os.environ.get("KVEVICT_VLLM_MODEL")
    if not d or not os.path.isfile(os.path.join(d, "config.json")):
        pytest.fail("KVEVICT_VLLM_MODEL must name the converted SmolLM2 folder (scripts/vllm-test.sh makes it)")
    return d


@pytest.fixture(scope="session")
def stories():
    """TinyStories' validation text as paragraphs (the shared folder's file, read-only)."""
    if not os.path.isfile(STORIES):
        pytest.fail(f"{STORIES} is missing: the tests read ../shared beside the checkout (or $KVEVICT_SHARED_DIR)")
    with open(STORIES, encoding="utf-8") as f:
        return [p.strip() for p in f.read().split("\n\n") if p.strip()]


def make_engine(model_dir, kvevict=None, **overrides):
    """An LLM in this process: float32, eager, no prefix caching, block size 128 (the CPU default); at most half
    the RAM free at start (vLLM's CPU default, 0.92, fails when an earlier engine's memory is not back yet)."""
    from vllm import LLM

    kw = dict(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=2048, seed=0,
              enable_prefix_caching=False, distributed_executor_backend="uni",
              gpu_memory_utilization=0.5)  # on CPU: the share of RAM the engine asks to be free at start
    if kvevict is not None:
        kw["additional_config"] = {"kvevict": kvevict}
    kw.update(overrides)
    return LLM(**kw)


def block_manager(llm):
    """The scheduler's block manager of the full-attention group, and the KV cache manager around it."""
    kvm = llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_manager
    (mgr,) = kvm.coordinator.single_type_managers
    return mgr, kvm


def run_stepwise(llm, prompts, max_tokens):
    """Greedy-decodes `prompts` together, one engine step at a time.

    Returns (ids, trace): ids[i] the generated ids of prompt i; trace a list, per step, of
    ({request index: (tokens cached when the step was scheduled, [block id, or None for vLLM's null block,
    by logical block])}, the pool's free block count), both read from the scheduler after the step.
    """
    from vllm import SamplingParams

    engine = llm.llm_engine
    mgr, kvm = block_manager(llm)
    scheduler = engine.engine_core.engine_core.scheduler
    sp = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    for i, p in enumerate(prompts):
        engine.add_request(f"q{i}", {"prompt_token_ids": p}, sp)
    index = lambda request_id: int(request_id.split("-")[0][1:])  # vLLM appends "-<random>" to the id
    ids = [None] * len(prompts)
    trace = []
    while engine.has_unfinished_requests():
        cached = {rid: r.num_computed_tokens for rid, r in scheduler.requests.items()}
        outs = engine.step()
        step = {index(rid): (cached.get(rid, 0), [None if b.is_null else b.block_id for b in blocks])
                for rid, blocks in mgr.req_to_blocks.items() if blocks}
        trace.append((step, kvm.block_pool.get_num_free_blocks()))
        for o in outs:
            if o.finished:
                ids[index(o.request_id)] = list(o.outputs[0].token_ids)
    return ids, trace


def _tiny_llama(model_dir, out, layers):
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(model_dir)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                         max_position_embeddings=2048, initializer_range=0.2, tie_word_embeddings=True,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(out)
    tok.save_pretrained(out)
    return str(out)


@pytest.fixture(scope="session")
def tiny_llama_dir(model_dir, tmp_path_factory):
    """A random-init Llama of 2 layers whose heads divide by 2 (4 query heads, 2 KV heads of 64), SmolLM2's
    tokenizer and vocabulary, weights drawn with std 0.2 (seed 0) so that greedy logits are far apart."""
    return _tiny_llama(model_dir, tmp_path_factory.mktemp("tiny-llama"), 2)


@pytest.fixture(scope="session")
def one_layer_llama_dir(model_dir, tmp_path_factory):
    """The same with one layer: its 'knorm' scores are one layer's, as a kvevict.PagedCache holds them."""
    return _tiny_llama(model_dir, tmp_path_factory.mktemp("one-layer-llama"), 1)
