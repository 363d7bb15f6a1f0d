"""vLLM's own greedy ids, with kvevict's plugin not loaded: the reference of test_engine's 'full' case.

    python own_engine.py MODEL_DIR PROMPTS.json MAX_TOKENS   (prints one JSON line: {"ids": [[...], ...],
                                                              "backend": the CPU attention class vLLM ran})
Run in its own process with VLLM_PLUGINS naming only vLLM's built-in plugins, so that vLLM's entry-point
loader skips kvevict's (the plugin, once registered, cannot be taken out of a process).
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    from conftest import make_engine, run_stepwise

    model, prompts, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(prompts) as f:
        prompts = json.load(f)
    llm = make_engine(model)
    ids, _ = run_stepwise(llm, prompts, max_tokens)
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    print(json.dumps({"ids": ids, "backend": AttentionBackendEnum.CPU_ATTN.get_path()}))


if __name__ == "__main__":
    main()
