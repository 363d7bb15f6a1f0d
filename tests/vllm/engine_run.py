"""One vLLM engine in its own process, for the tests that need one: vLLM without kvevict's plugin (run with
VLLM_PLUGINS naming only vLLM's built-in plugins: a registered plugin cannot be taken out of a process), and
tensor parallelism (workers spawned, one per rank).

    python engine_run.py MODEL_DIR PROMPTS.json MAX_TOKENS [--kvevict JSON] [--tp N]
Prints one JSON line among vLLM's own output: {"ids": [[...], ...] greedy ids by prompt, "backend": the CPU
attention class vLLM ran}.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    from conftest import make_engine, run_stepwise

    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompts")
    ap.add_argument("max_tokens", type=int)
    ap.add_argument("--kvevict", type=json.loads)
    ap.add_argument("--tp", type=int, default=1)
    args = ap.parse_args()
    with open(args.prompts) as f:
        prompts = json.load(f)
    extra = {"tensor_parallel_size": args.tp, "distributed_executor_backend": "mp"} if args.tp > 1 else {}
    if (args.kvevict or {}).get("policy") == "knorm":  # a scored policy reports through kvevict's connector
        from kvevict_vllm import connector_config

        extra["kv_transfer_config"] = connector_config()
    llm = make_engine(args.model, args.kvevict, **extra)
    ids, _ = run_stepwise(llm, prompts, args.max_tokens)
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    print(json.dumps({"ids": ids, "backend": AttentionBackendEnum.CPU_ATTN.get_path()}))
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main()
