#!/usr/bin/env python3
"""One Markdown table of side_by_side.py's results across budgets: a line per (protocol, row), a column per ratio.

Reads DIR/r<ratio>/results.csv for each --ratios value (side_by_side.py --out DIR/r<ratio>, as run_gemma3.sh
writes them) and prints, per cell, the mean ΔNLL over the full cache ± its standard error over the windows that
every row of that ratio has (so that the rows of a column are paired on the same windows), and the window count
in the header. A row that failed everywhere prints its error. Sorted by the last column's mean.

  python3 bench/quality/kvpress/ratio_table.py bench/quality/results/gemma3 --ratios 0.1,0.2,0.5
"""
import argparse
import csv
import math
import os
import statistics
import sys


def cells(path):
    """{(protocol, source, row): {window: delta}} and {(protocol, source, row): error} of one results.csv."""
    good, failed = {}, {}
    with open(path) as f:
        for r in csv.DictReader(f):
            key = (r["protocol"], r["source"], r["row"])
            if r["error"]:
                failed[key] = r["error"]
            else:
                good.setdefault(key, {})[r["window"]] = float(r["delta_nll"])
    return good, failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", help="the folder holding r<ratio>/results.csv")
    ap.add_argument("--ratios", default="0.1,0.2,0.5")
    args = ap.parse_args()
    ratios = args.ratios.split(",")
    tables, keys, counts = [], [], []
    for r in ratios:
        path = os.path.join(args.dir, f"r{r}", "results.csv")
        if not os.path.isfile(path):
            sys.exit(f"ratio_table.py: {path} does not exist (run side_by_side.py --ratio {r} --out {args.dir}/r{r})")
        good, failed = cells(path)
        common = set.intersection(*(set(v) for v in good.values())) if good else set()
        tables.append((good, failed, common))
        counts.append(len(common))
        for key in list(good) + list(failed):
            if key not in keys:
                keys.append(key)

    def stat(i, key):
        good, failed, common = tables[i]
        if key not in good:
            return None, (f"fails: {failed[key][:80]}" if key in failed else "—")
        d = [good[key][w] for w in sorted(common)]
        if not d:
            return None, "—"
        se = statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else float("nan")
        return statistics.mean(d), f"{statistics.mean(d):+.3f}" + ("" if math.isnan(se) else f" ± {se:.3f}")

    print("| row | protocol | " + " | ".join(f"r = {r} ({n} windows)" for r, n in zip(ratios, counts)) + " |")
    print("|---|---|" + "---|" * len(ratios))
    order = sorted(keys, key=lambda k: (k[0] != "prefill", stat(len(ratios) - 1, k)[0] is None,
                                        stat(len(ratios) - 1, k)[0] or 0.0))
    for key in order:
        protocol, source, row = key
        print(f"| {source} {row} | {protocol} | " + " | ".join(stat(i, key)[1] for i in range(len(ratios))) + " |")


if __name__ == "__main__":
    main()
