"""vLLM with and without kvevict's plugin in the same KV memory: requests running at once, tokens/s, answers.

    PY=$(bash scripts/get-vllm-venv.sh); $PY bench/vllm/throughput.py --needles NEEDLES.txt \
        --model "$(bash scripts/get-vllm-model.sh)" [--blocks 56] [--generate 256] [--budgets 0.5,0.2]
        [--policies streaming,knorm] [--out CSV]

NEEDLES.txt: needle prompts as bench/quality/kvpress/needle_prompts.py --family smollm2 writes them (one per
line: index depth code ids...). Every row serves the same requests, all submitted at once, greedy, with
`--generate` new tokens each (ignore_eos), in an engine whose KV pool holds `--blocks` blocks of 128 tokens
(num_gpu_blocks_override: the same KV memory for every row). Rows: vLLM with the plugin's 'full' policy
(vLLM's own management), then each of kvevict's `--policies` ('streaming', 'knorm'; 4 sinks) at each budget,
k = fraction * prompt length ('knorm' with kvevict's KV connector, which it reports its blocks through).
Each row reports: requests running at once (scheduler.running after each step: mean over steps, and max),
total tokens/s (prompt + generated tokens / wall seconds from the first submission to the last answer),
generated tokens/s, and needle accuracy (the first digits of the answer equal the code; also by depth), then each row's
ratios to the full row, measured in this one run. Exit 2 for bad flags (checked before any engine starts).
"""

import argparse
import csv
import os
import re
import sys
import time

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # the scheduler is read after each step


def read_needles(path):
    out = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 4:
                out.append((int(fields[1]), fields[2], [int(t) for t in fields[3:]]))
    return out


def serve(model, prompts, blocks, generate, kvevict):
    """One row: an engine, every request submitted, stepped to the end. Returns (stats, answers)."""
    import gc

    from vllm import LLM, SamplingParams

    extra = {}
    if kvevict["policy"] == "knorm":
        from kvevict_vllm import connector_config

        extra["kv_transfer_config"] = connector_config()
    llm = LLM(model=model, dtype="float32", enforce_eager=True, max_model_len=4096, seed=0,
              enable_prefix_caching=False, distributed_executor_backend="uni", num_gpu_blocks_override=blocks,
              max_num_batched_tokens=4096, additional_config={"kvevict": kvevict},
              gpu_memory_utilization=0.5, **extra)  # on CPU: the share of free RAM the engine may take at start
    engine = llm.llm_engine
    scheduler = engine.engine_core.engine_core.scheduler
    sp = SamplingParams(temperature=0, max_tokens=generate, ignore_eos=True)
    running, answers, generated = [], {}, 0
    start = time.perf_counter()
    for i, ids in enumerate(prompts):
        engine.add_request(f"r{i}", {"prompt_token_ids": ids}, sp)
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                answers[int(out.request_id.split("-")[0][1:])] = out.outputs[0].token_ids
                generated += len(out.outputs[0].token_ids)
        running.append(len(scheduler.running))
    seconds = time.perf_counter() - start
    tokenizer = llm.get_tokenizer()
    texts = [tokenizer.decode(answers[i][:16]) for i in range(len(prompts))]
    engine.engine_core.shutdown()
    del llm
    gc.collect()
    total = sum(len(p) for p in prompts) + generated
    return {"seconds": seconds, "running_mean": sum(running) / len(running), "running_max": max(running),
            "tokens_per_s": total / seconds, "generated_per_s": generated / seconds}, texts


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--needles", required=True)
    ap.add_argument("--model", required=True, help="the HF folder (scripts/get-vllm-model.sh)")
    ap.add_argument("--blocks", type=int, default=56, help="KV blocks of 128 tokens in the pool")
    ap.add_argument("--generate", type=int, default=256)
    ap.add_argument("--budgets", default="0.5,0.2", help="fractions of the prompt length, comma-separated")
    ap.add_argument("--policies", default="streaming,knorm", help="kvevict's policies, comma-separated: "
                    "streaming, knorm")
    ap.add_argument("--requests", type=int, default=0, help="the first N needle prompts (0: all)")
    ap.add_argument("--out", help="CSV to write (must not exist)")
    args = ap.parse_args()
    if not os.path.isfile(args.needles):
        ap.error(f"--needles: '{args.needles}' is not a file")
    if not os.path.isfile(os.path.join(args.model, "config.json")):
        ap.error(f"--model: '{args.model}' has no config.json")
    if args.out and os.path.exists(args.out):
        ap.error(f"--out: '{args.out}' exists; it is never overwritten")
    if args.blocks < 1 or args.generate < 1 or args.requests < 0:
        ap.error("--blocks and --generate must be >= 1, --requests >= 0")
    try:
        budgets = [float(b) for b in args.budgets.split(",")]
    except ValueError:
        ap.error(f"--budgets: '{args.budgets}' is not a comma-separated list of fractions")
    if any(not 0 < b < 1 for b in budgets):
        ap.error(f"--budgets: every fraction must be in (0, 1), got {args.budgets}")
    policies = args.policies.split(",")
    if not policies or any(p not in ("streaming", "knorm") for p in policies) or len(set(policies)) != len(policies):
        ap.error(f"--policies: '{args.policies}' must list streaming and/or knorm, each once")
    needles = read_needles(args.needles)
    if args.requests:
        needles = needles[:args.requests]
    if not needles or len({len(ids) for _, _, ids in needles}) != 1:
        ap.error(f"--needles: '{args.needles}' must hold prompts of one length")
    length = len(needles[0][2])
    blocks_needed = -(-(length + args.generate) // 128)
    if args.blocks < blocks_needed:
        ap.error(f"--blocks: {args.blocks} cannot hold one request ({blocks_needed} blocks of 128 tokens)")
    rows = [("full", {"policy": "full"})]
    for b in budgets:
        k = int(b * length)
        if k < 256:
            ap.error(f"--budgets: {b} of {length} tokens is {k}, below the floor of 256 (sinks' block + one)")
        for policy in policies:
            rows.append((f"{policy} k={k} ({b:g})", {"policy": policy, "budget": k}))

    prompts = [ids for _, _, ids in needles]
    results = []
    for name, config in rows:
        stats, texts = serve(args.model, prompts, args.blocks, args.generate, config)
        found = [(re.search(r"[0-9]+", t) or [""])[0] == code for t, (_, code, _) in zip(texts, needles)]
        by_depth = {}
        for ok, (depth, _, _) in zip(found, needles):
            by_depth[depth] = by_depth.get(depth, 0) + ok
        depths = " ".join(f"{d}%:{c}" for d, c in sorted(by_depth.items()))
        results.append((name, stats, sum(found), depths))
        print(f"{name}: {stats} needles {sum(found)}/{len(needles)} ({depths})", file=sys.stderr, flush=True)

    base = results[0][1]
    header = ["row", "requests_running_mean", "requests_running_max", "tokens_per_s", "generated_per_s",
              "seconds", "needles_correct", "needles_by_depth", "running_ratio", "tokens_per_s_ratio"]
    table = [[name, f"{s['running_mean']:.2f}", s["running_max"], f"{s['tokens_per_s']:.1f}",
              f"{s['generated_per_s']:.1f}", f"{s['seconds']:.1f}", f"{c}/{len(needles)}", depths,
              f"{s['running_mean'] / base['running_mean']:.2f}", f"{s['tokens_per_s'] / base['tokens_per_s']:.2f}"]
             for name, s, c, depths in results]
    print(f"{len(needles)} requests of {length} + {args.generate} tokens, {args.blocks} KV blocks of 128 tokens")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in table:
        print("| " + " | ".join(map(str, r)) + " |")
    if args.out:
        with open(args.out, "x", newline="") as f:
            csv.writer(f).writerows([header] + table)


if __name__ == "__main__":
    main()
