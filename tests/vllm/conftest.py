"""Fixtures of the vLLM plugin's tests: SmolLM2-135M as vLLM loads it, engines run in this process, prompts.

Engines run with VLLM_ENABLE_V1_MULTIPROCESSING=0 and the "uni" executor, so the scheduler (whose block
manager frees blocks) and the worker (whose attention skips them) live in the test's process and can be
read after every step. The model folder is $KVEVICT_VLLM_MODEL (scripts/vllm-test.sh converts the GGUF).
"""

import os

import pytest

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = os.path.join(ROOT, "..", "shared", "data", "tinystories-val", "tinystories_val.txt")


@pytest.fixture(scope="session")
def model_dir():
    d = os.environ.get("KVEVICT_VLLM_MODEL")
    if not d or not os.path.isfile(os.path.join(d, "config.json")):
        pytest.fail("KVEVICT_VLLM_MODEL must name the converted SmolLM2 folder (scripts/vllm-test.sh makes it)")
    return d


@pytest.fixture(scope="session")
def stories():
    """TinyStories' validation text as paragraphs (the shared folder's file, read-only)."""
    with open(STORIES, encoding="utf-8") as f:
        return [p.strip() for p in f.read().split("\n\n") if p.strip()]


def make_engine(model_dir, kvevict=None, **overrides):
    """An LLM in this process: float32, eager, no prefix caching, block size 128 (the CPU default)."""
    from vllm import LLM

    kw = dict(model=model_dir, dtype="float32", enforce_eager=True, max_model_len=2048, seed=0,
              enable_prefix_caching=False, distributed_executor_backend="uni")
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
