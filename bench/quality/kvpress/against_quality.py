#!/usr/bin/env python3
"""against_quality.py — kvpress's presses (side_by_side.py's results.csv) paired per window against kvevict-quality rows.

side_by_side.py runs kvpress on the same token ids as kvevict-quality, and its step protocol (the cache held at k
at every step) is kvevict-quality's own (KVEvictCache's step rows equal kvevict-quality's within 2e-5, tested and
recorded in results/kvpress/README.md). So a kvevict-quality row need not be rerun through transformers to be
compared: this pairs each press's ΔNLL with a kvevict-quality row's ΔNLL (its nll minus the full cache's nll on the
same window) window by window, and prints Markdown: press, windows, press ΔNLL, and for each kvevict row the mean ±
standard error of (press − kvevict) with the windows where kvevict is lower. Standard library only.

  against_quality.py --kvpress results/kvpress_r0.2/results.csv --protocol step --ratio 0.2 \
      --quality results/field/mean.csv:h2o+mean --quality results/field/adakv.csv:snapkv+adakv@kernel=15
"""
import argparse
import csv
import math
import sys


def quality_deltas(path, row, ratio):
    """{window: ΔNLL} of kvevict-quality row `row` at `ratio` in `path` (seed 0 or the only seed)."""
    full, nll = {}, {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            w = int(r["window"])
            if r["policy"] == "full":
                full[w] = float(r["nll"])
            elif r["policy"] == row and math.isclose(float(r["ratio"]), ratio):
                nll.setdefault(w, []).append(float(r["nll"]))
    if not nll:
        sys.exit(f"against_quality: no row '{row}' at ratio {ratio} in {path}")
    return {w: sum(v) / len(v) - full[w] for w, v in nll.items() if w in full}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvpress", required=True, help="side_by_side.py's results.csv")
    ap.add_argument("--protocol", default="step", choices=["step", "prefill"])
    ap.add_argument("--ratio", type=float, required=True, help="the kvevict-quality ratio the kvpress file ran at")
    ap.add_argument("--quality", action="append", required=True, metavar="CSV:ROW",
                    help="a kvevict-quality CSV and one of its rows (repeatable)")
    a = ap.parse_args()
    presses = {}
    with open(a.kvpress, newline="") as f:
        for r in csv.DictReader(f):
            if r["protocol"] == a.protocol and r["source"] == "kvpress" and not r["error"] and r["delta_nll"]:
                presses.setdefault(r["row"], {})[int(r["window"])] = float(r["delta_nll"])
    if not presses:
        sys.exit(f"against_quality: no kvpress rows under protocol '{a.protocol}' in {a.kvpress}")
    kv = []
    for spec in a.quality:
        path, sep, row = spec.rpartition(":")
        if not sep or not path or not row:
            sys.exit(f"against_quality: --quality '{spec}' is not CSV:ROW")
        kv.append((row, quality_deltas(path, row, a.ratio)))

    def stat(xs):
        m = sum(xs) / len(xs)
        se = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)) if len(xs) > 1 else float("nan")
        return m, se

    print(f"kvpress ({a.protocol} protocol, r = {a.ratio}) paired per window with kvevict-quality rows: press − kvevict, "
          "mean ± standard error (windows where kvevict is lower / windows)\n")
    print("| press | windows | press ΔNLL | " + " | ".join(f"kvevict `{row}` ΔNLL | press − `{row}`" for row, _ in kv) + " |")
    print("|---|---|---|" + "---|---|" * len(kv))
    for name in sorted(presses, key=lambda p: stat(list(presses[p].values()))[0]):
        d = presses[name]
        m, se = stat(list(d.values()))
        cells = [name, str(len(d)), f"{m:+.3f} ± {se:.3f}"]
        for _, q in kv:
            ws = sorted(set(d) & set(q))
            if not ws:
                cells += ["—", "—"]
                continue
            km, kse = stat([q[w] for w in ws])
            dm, dse = stat([d[w] - q[w] for w in ws])
            wins = sum(q[w] < d[w] for w in ws)
            cells += [f"{km:+.3f} ± {kse:.3f}", f"{dm:+.3f} ± {dse:.3f} ({wins}/{len(ws)})"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
