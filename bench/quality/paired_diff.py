#!/usr/bin/env python3
"""kvevict — bench/quality/paired_diff.py: one row of a kvevict-quality report against every other, paired per window.

Reads the per-window CSV of kvevict-quality (`--out PREFIX` writes PREFIX.csv: policy, ratio, k, w, seed, window,
nll, kl, top1) and prints a Markdown table: for each other row and budget ratio, the NLL difference
`ROW - other` averaged over the windows both ran (seeded rows: first averaged over their seeds per window),
its standard error over windows, and in how many windows ROW had the lower NLL. Pairing removes the
windows' own difficulty, which dominates the unpaired standard errors of the report's tables.

Usage: paired_diff.py REPORT.csv [ROW]   (ROW defaults to keyformer)
"""
import collections
import csv
import math
import sys


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    path = argv[1]
    row = argv[2] if len(argv) == 3 else "keyformer"
    # nll[(policy, ratio)][window] = list over seeds
    nll = collections.defaultdict(lambda: collections.defaultdict(list))
    order, ratios = [], []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["policy"] == "full":
                continue
            key = (r["policy"], r["ratio"])
            nll[key][int(r["window"])].append(float(r["nll"]))
            if r["policy"] not in order:
                order.append(r["policy"])
            if r["ratio"] not in ratios:
                ratios.append(r["ratio"])
    if row not in order:
        sys.exit(f"paired_diff.py: {path} has no row '{row}' (rows: {', '.join(order)})")
    print(f"NLL of `{row}` minus each row's, paired per window (nats/token; negative: `{row}` is better), "
          "± standard error over windows, and the windows where it is lower.")
    print()
    print("| row | " + " | ".join(f"r = {x}" for x in ratios) + " |")
    print("|---|" + "---|" * len(ratios))
    for other in order:
        if other == row:
            continue
        cells = []
        for x in ratios:
            a, b = nll[(row, x)], nll[(other, x)]
            windows = sorted(set(a) & set(b))
            if not windows:
                cells.append("-")
                continue
            d = [sum(a[w]) / len(a[w]) - sum(b[w]) / len(b[w]) for w in windows]
            n = len(d)
            mean = sum(d) / n
            se = math.sqrt(sum((v - mean) ** 2 for v in d) / (n - 1) / n) if n > 1 else 0.0
            lower = sum(1 for v in d if v < 0)
            shown = round(mean, 3) + 0.0  # no "-0.000"
            cells.append(f"{shown:+.3f} ± {se:.3f} ({lower}/{n})")
        print(f"| {other} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv)
