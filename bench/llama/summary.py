#!/usr/bin/env python3
"""NLL increase over the full cache per policy and ratio, from bench/llama/quality.sh's CSV.

Usage: summary.py QUALITY_CSV [REPORT_DIR [MORE ...]]
Only complete windows count (the full cache and every row at every ratio), so that all cells are over the same
windows; a cell gives its mean increase ± the standard error over them and how many. With REPORT_DIR (kvevict-quality's SmolLM2 report, bench/quality/results/smollm2),
a second table puts kvevict's own engine (per-KV-head selection) on the same windows (matched by document
and offset), and a third the model-wide minus per-head increase, paired by window. MORE: other kvevict-quality runs
on the same windows (a path without .csv, e.g. bench/quality/results/field/knorm), whose EXTRA rows join the second
and third tables. Prints Markdown."""
import csv
import math
import sys
from collections import defaultdict

POLICIES = ["window", "streaming", "h2o", "keyformer", "tova"]
# quality.sh's EXTRA rows: shown over the windows they were run on (their n). A "+summed" row (--score-rows summed)
# is compared with its policy's per-head row of kvevict's engine.
# A "+bounded" row (--bounded-prefill --batch 32: the prompt cut to k after every chunk) is compared with the same
# per-head row of kvevict's engine, which cuts once after the whole prompt.
EXTRA = ["knorm", "h2o+mean", "h2o+summed", "keyformer+summed", "tova+summed", "h2o+mean+summed",
         "streaming+bounded", "h2o+mean+summed+bounded"]
RATIOS = ["0.1", "0.2", "0.5"]


def stats(d):
    if not d:
        return "—"
    m = sum(d) / len(d)
    if len(d) == 1:
        return f"{m:+.3f} (n=1)"
    se = math.sqrt(sum((x - m) ** 2 for x in d) / (len(d) - 1) / len(d))
    return f"{m:+.3f} ± {se:.3f} (n={len(d)})"


def increases(rows, key):
    """{(policy, ratio): {window key: increase}} and {window key: full NLL}."""
    full = {key(r): float(r["nll"]) for r in rows if r["policy"] == "full"}
    out = defaultdict(dict)
    for r in rows:
        if r["policy"] in POLICIES + EXTRA and key(r) in full:
            out[(r["policy"], f"{float(r['ratio']):g}")][key(r)] = float(r["nll"]) - full[key(r)]
    return out, full


def per_head(cell):
    """The per-head row of kvevict's engine that a model-wide row is compared with: the same policy and ratio."""
    return (cell[0].replace("+bounded", "").replace("+summed", ""), cell[1])


def table(title, cells):
    print(title + "\n")
    print("| row | " + " | ".join(f"r = {r}" for r in RATIOS) + " |")
    print("|---|" + "---|" * len(RATIOS))
    for p in POLICIES + [e for e in EXTRA if any(cells.get((e, r)) for r in RATIOS)]:
        print(f"| {p} | " + " | ".join(stats(list(cells.get((p, r), {}).values())) for r in RATIOS) + " |")
    print()


ours, full = increases(list(csv.DictReader(open(sys.argv[1]))), lambda r: (r["doc"], r["offset"]))
# Only complete windows (the full cache and all 15 rows) count, so that every cell is over the same windows (the
# EXTRA rows: those of the complete windows they were run on).
complete = {w for w in full if all(w in ours.get((p, r), {}) for p in POLICIES for r in RATIOS)}
full = {w: v for w, v in full.items() if w in complete}
ours = {c: {w: v for w, v in m.items() if w in complete} for c, m in ours.items()}
print(f"llama.cpp full cache: {sum(full.values()) / max(len(full), 1):.3f} nats/token over {len(full)} complete "
      f"window(s): {', '.join(f'{d}@{o}' for d, o in sorted(full))}\n")
table("llama.cpp + kvevict, one model-wide selection: NLL increase over llama.cpp's full cache", ours)
if len(sys.argv) > 2:
    d = sys.argv[2]
    wins = {r["window"]: (r["document"], r["offset"]) for r in csv.DictReader(open(f"{d}/smollm2_windows.csv"))}
    theirs, tfull = increases(list(csv.DictReader(open(f"{d}/smollm2.csv"))), lambda r: wins[r["window"]])
    for more in sys.argv[3:]:
        mwins = {r["window"]: (r["document"], r["offset"]) for r in csv.DictReader(open(f"{more}_windows.csv"))}
        extra, _ = increases(list(csv.DictReader(open(f"{more}.csv"))), lambda r: mwins[r["window"]])
        for cell, by_window in extra.items():
            if cell[0] in EXTRA:
                theirs.setdefault(cell, {}).update(by_window)
    same = set(full) & set(tfull)
    print(f"kvevict's engine, full cache on the same {len(same)} window(s): "
          f"{sum(tfull[w] for w in same) / max(len(same), 1):.3f} nats/token (llama.cpp: "
          f"{sum(full[w] for w in same) / max(len(same), 1):.3f})\n")
    table("kvevict's engine (per-KV-head selection, the report's rows) on the same windows",
          {c: {w: v for w, v in m.items() if w in same} for c, m in theirs.items()})
    table("model-wide minus per-head NLL increase, paired by window (> 0: the model-wide selection costs more)",
          {c: {w: ours[c][w] - theirs[per_head(c)][w] for w in ours.get(c, {}) if w in theirs.get(per_head(c), {})}
           for c in ours})
