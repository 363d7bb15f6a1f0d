#!/usr/bin/env python3
"""bench/hot_step.py: the table of bench/hot_step.sh from Google Benchmark's JSON.

    python3 bench/hot_step.py bench/results/issue36/hot_step.json [MORE.json ...]

One row per policy and n: the eviction's thread CPU ns per (query head x token) and its share of the
attention step of the same iterations, for the whole-layer step (`decode_step` after the attention) and
the per-head step (each KV head scored while its logits are hot), medians over the repetitions, and
the per-head / whole ratio of the ns. Standard library only; exits 2 naming a benchmark without its
counters.
"""
import json
import re
import statistics
import sys

NAME = re.compile(r"^(\w+?)DecodeStep(Hot)?/float/n:(\d+)/d:(\d+)/g:(\d+)/")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    benchmarks, data = [], None
    for path in sys.argv[1:]:
        with open(path) as f:
            data = json.load(f)
        benchmarks += data["benchmarks"]
    runs = {}
    for b in benchmarks:
        if b.get("run_type") == "aggregate":
            continue
        m = NAME.match(b["name"])
        if not m:
            continue
        if "evict_cpu_ns_per_elem" not in b or "evict_over_attention_cpu" not in b:
            print(f"hot_step.py: {b['name']} has no evict_cpu_ns_per_elem / evict_over_attention_cpu", file=sys.stderr)
            sys.exit(2)
        key = (m.group(1), int(m.group(3)))
        runs.setdefault(key, {}).setdefault("hot" if m.group(2) else "whole", []).append(
            (b["evict_cpu_ns_per_elem"], b["evict_over_attention_cpu"]))
    ctx = data.get("context", {})
    print(f"CPU: {ctx.get('host_name', '?')}, {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz; "
          f"medians of {max(len(v.get('whole', [])) for v in runs.values())} repetitions, thread CPU time.\n")
    print("| policy | n | whole-layer step: ns / elem (share of attention) | per-head step: ns / elem (share) | per-head / whole |")
    print("|---|---|---|---|---|")
    order = ["Keyformer", "H2O", "TOVA", "StreamingLLM", "Window"]
    for (policy, n) in sorted(runs, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1])):
        r = runs[(policy, n)]
        if "whole" not in r or "hot" not in r:
            continue
        w_ns = statistics.median(x[0] for x in r["whole"])
        w_sh = statistics.median(x[1] for x in r["whole"])
        h_ns = statistics.median(x[0] for x in r["hot"])
        h_sh = statistics.median(x[1] for x in r["hot"])
        print(f"| {policy} | {n} | {w_ns:.2f} ({100 * w_sh:.2f}%) | {h_ns:.2f} ({100 * h_sh:.2f}%) | {h_ns / w_ns:.2f} |")


if __name__ == "__main__":
    main()
