#!/usr/bin/env python3
"""Paired NLL difference between two kvevict-quality runs on the same windows (standard library only).

usage: paired_delta.py BASE.csv OTHER.csv
Prints a Markdown table: per policy row, mean over windows of (OTHER's NLL - BASE's NLL), each run's NLL
first averaged over its seeds, ± the standard error of that paired difference."""
import collections
import csv
import math
import sys


def load(path):
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if r["policy"] != "full":
                rows[r["policy"]][int(r["window"])].append(float(r["nll"]))
    return rows


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: paired_delta.py BASE.csv OTHER.csv")
    base, other = load(sys.argv[1]), load(sys.argv[2])
    print("| policy | windows | NLL(other) - NLL(base), paired (nats/token) |")
    print("|---|---|---|")
    for policy in base:
        if policy not in other or set(base[policy]) != set(other[policy]):
            sys.exit(f"paired_delta.py: row '{policy}' does not cover the same windows in both files")
        d = [sum(other[policy][w]) / len(other[policy][w]) - sum(base[policy][w]) / len(base[policy][w])
             for w in sorted(base[policy])]
        n = len(d)
        m = sum(d) / n
        se = math.sqrt(sum((x - m) ** 2 for x in d) / (n - 1) / n) if n > 1 else float("nan")
        print(f"| {policy} | {n} | {m:+.4f} ± {se:.4f} |")


if __name__ == "__main__":
    main()
