#!/usr/bin/env python3
"""NLL increase over the full cache per policy and ratio, from bench/llama/quality.sh's CSV.

Only windows whose full-cache run is present count; a (policy, ratio) cell reports its mean increase
± the standard error over its windows and how many windows that is. Prints a Markdown table."""
import csv
import math
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
full = {r["window"]: float(r["nll"]) for r in rows if r["policy"] == "full"}
cells = defaultdict(list)
for r in rows:
    if r["policy"] != "full" and r["window"] in full:
        cells[(r["policy"], r["ratio"])].append(float(r["nll"]) - full[r["window"]])
ratios = ["0.1", "0.2", "0.5"]
mean_full = sum(full.values()) / len(full) if full else float("nan")
print(f"full cache: {mean_full:.3f} nats/token over {len(full)} window(s)\n")
print("| row | " + " | ".join(f"r = {r}" for r in ratios) + " |")
print("|---|" + "---|" * len(ratios))
for p in ["window", "streaming", "h2o", "keyformer", "tova"]:
    out = []
    for r in ratios:
        d = cells.get((p, r), [])
        if not d:
            out.append("—")
            continue
        m = sum(d) / len(d)
        se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d)) if len(d) > 1 else float("nan")
        out.append(f"{m:+.3f} ± {se:.3f} (n={len(d)})" if len(d) > 1 else f"{m:+.3f} (n=1)")
    print(f"| {p} | " + " | ".join(out) + " |")
