"""kvevict in vLLM: engines whose requests keep k tokens: 4 attention sinks plus the most recent blocks, or
plus the blocks whose keys have the smallest norms.

    PY=$(bash scripts/get-vllm-venv.sh); $PY -m pip install --no-deps ./integrations/vllm
    $PY integrations/vllm/example.py "$(bash scripts/get-vllm-model.sh)" [BUDGET] [PROMPT_FILE]

Prints the greedy continuation of a long prompt with the full cache and with kvevict's streaming and knorm
policies at BUDGET tokens (default 256), and the KV blocks the request held at its end in each engine (knorm
chooses on vLLM's worker and reports through kvevict's KV connector: kv_transfer_config below). The prompt: the
first 3,000 characters of PROMPT_FILE, by default TinyStories from ../shared beside the checkout, or, where
that folder is not there, a story made up here.
"""

import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV memory
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the engine in this process: its block manager is read below


def generate(model, prompt, kvevict):
    from vllm import LLM, SamplingParams

    import kvevict_vllm

    connector = kvevict_vllm.connector_config() if kvevict["policy"] == "knorm" else None
    llm = LLM(model=model, enable_prefix_caching=False, enforce_eager=True, max_model_len=2048,
              distributed_executor_backend="uni", additional_config={"kvevict": kvevict},
              kv_transfer_config=connector,
              gpu_memory_utilization=0.5)  # on CPU: the share of RAM asked free at start (three engines here)
    engine = llm.llm_engine
    (manager,) = engine.engine_core.engine_core.scheduler.kv_cache_manager.coordinator.single_type_managers
    engine.add_request("r", prompt, SamplingParams(temperature=0, max_tokens=24))
    held = text = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            text = out.outputs[0].text
        blocks = [b for bs in manager.req_to_blocks.values() for b in bs]
        held = (sum(not b.is_null for b in blocks), len(blocks)) if blocks else held
    engine.engine_core.shutdown()
    return text, held


def main():
    if not 2 <= len(sys.argv) <= 4:
        sys.exit(__doc__)
    model = sys.argv[1]
    budget = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[3] if len(sys.argv) > 3 else os.path.join(
        here, "..", "..", "..", "shared", "data", "tinystories-val", "tinystories_val.txt")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            prompt = f.read(3000)
    else:
        names = ["Lily", "Tom", "Mia", "Ben", "Sue", "Max"]
        prompt = " ".join(f"On day {d}, {names[d % 6]} found a {['red', 'blue', 'green'][d % 3]} ball in the park "
                          f"and gave it to {names[(d + 1) % 6]}." for d in range(1, 60))
    for kvevict in ({"policy": "full"}, {"policy": "streaming", "budget": budget}, {"policy": "knorm", "budget": budget}):
        text, (held, listed) = generate(model, prompt, kvevict)
        print(f"{kvevict}: {held} of {listed} blocks held at the end\n  {text!r}")


if __name__ == "__main__":  # vLLM's CPU worker is spawned when multiprocessing is on: keep the guard
    main()
