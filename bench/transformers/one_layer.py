#!/usr/bin/env python3
"""The prompt's forward through one transformer layer, where attention is most of the cost: KVEvictCache's
prompt attention (kvevict/_prompt_attention.py: H2O's and Keyformer's through the fused kvevict.causal_attention
with their prompt sums, TOVA's chunked torch attention with each chunk scored by the caches) against
DynamicCache with SDPA's fused kernel, side by side in one run.

SmolLM2-135M-Instruct (saved by costs.py under --work, or converted from the GGUF as costs.py does) cut to its
first layer (config.num_hidden_layers = 1), float32, sdpa; a prompt of --prompt random token ids; one forward of
the prompt per variant and round (logits_to_keep=1), --repeats rounds with the variants interleaved. Prints the
median time of each and its ratio to DynamicCache's.

  PY=$(bash scripts/get-hf-venv.sh); $PY bench/transformers/costs.py --prompts 2048 --batches 1 --variants DynamicCache
  $PY bench/transformers/one_layer.py --prompt 8192 --repeats 5
"""
import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
import transformers
from transformers import AutoModelForCausalLM, DynamicCache

import kvevict
from kvevict.transformers import KVEvictCache

VARIANTS = {  # name: KVEvictCache's arguments (None: DynamicCache)
    "DynamicCache (SDPA)": None,
    "KVEvictCache h2o 20%": dict(policy="h2o", budget=0.2),
    "KVEvictCache keyformer 20%": dict(policy="keyformer", budget=0.2, horizon=16),
    "KVEvictCache tova 20% (chunked)": dict(policy="tova", budget=0.2),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="/tmp/kvevict-costs", help="where costs.py saved the safetensors copy")
    ap.add_argument("--prompt", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="torch threads (N workers = this)")
    args = ap.parse_args()
    if args.prompt < 2 or args.repeats < 1 or args.threads < 1:
        sys.exit("one_layer.py: --prompt >= 2, --repeats >= 1 and --threads >= 1")
    saved = os.path.join(args.work, "smollm2-135m")
    if not os.path.exists(os.path.join(saved, "config.json")):
        sys.exit(f"one_layer.py: no model at {saved}: run costs.py once (it saves it there)")
    torch.set_num_threads(args.threads)
    transformers.utils.logging.set_verbosity_error()
    config = transformers.AutoConfig.from_pretrained(saved)
    config.num_hidden_layers = 1
    model = AutoModelForCausalLM.from_pretrained(saved, config=config, dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    ids = torch.randint(100, config.vocab_size - 100, (1, args.prompt), generator=torch.Generator().manual_seed(1))
    times = {v: [] for v in VARIANTS}
    with torch.no_grad():
        for _ in range(args.repeats):
            for name, kw in VARIANTS.items():
                cache = DynamicCache(config=model.config) if kw is None else KVEvictCache(model, **kw)
                t = time.perf_counter()
                model(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
                times[name].append(time.perf_counter() - t)
    ref = statistics.median(times["DynamicCache (SDPA)"])
    print(f"SmolLM2-135M-Instruct, first layer only, P = {args.prompt}, {args.threads} torch threads, median of "
          f"{args.repeats} interleaved rounds; torch {torch.__version__}, transformers {transformers.__version__}, "
          f"kvevict {kvevict.__version__}\n")
    print("| variant | prompt forward (s) | × DynamicCache |\n|---|---|---|")
    for name in VARIANTS:
        m = statistics.median(times[name])
        print(f"| {name} | {m:.3f} | {m / ref:.2f} |")


if __name__ == "__main__":
    main()
