#!/usr/bin/env python3
"""Tables and plots of bench/ruler/run.py's results.csv: per protocol, the mean RULER score (0..100) of each row at
each compression ratio with the full cache's level, a per-task table, and paired differences between rows.

  python3 bench/ruler/report.py bench/ruler/results/smollm2            # writes summary.md, aware.png, agnostic.png

A sample's score is the mean over its questions (RULER's string_match_all per question). A row's mean at a
ratio is over the (task, seed) samples it answered; the paired difference of two rows is over the samples both
answered, ± its standard error (sd / sqrt(n)). Rows that failed (error column) are counted apart, never as 0.
"""
import csv
import math
import os
import sys
from collections import defaultdict

PROTOCOL_TEXT = {
    "aware": "query-aware (the question is part of the compressed prompt)",
    "agnostic": "query-agnostic (the context is compressed first; the question is appended after)",
}


def load(rows):
    """{(protocol, label, ratio): {(task, seed): score}} and {(protocol, label, ratio): errors}."""
    last = {}  # a row run again (a failure retried, a skipped one with --all-samples): its last line counts
    for r in rows:
        last[(r["protocol"], r["source"], r["row"], r["ratio"], r["task"], r["seed"], r.get("question", "0"))] = r
    per_q = defaultdict(list)
    errors = defaultdict(int)
    for r in last.values():
        label = "full" if r["source"] == "full" else f"{r['source']}:{r['row']}"
        key = (r["protocol"], label, float(r["ratio"]))
        if r["error"].startswith("skipped"):
            continue
        if r["error"]:
            errors[key] += 1
            continue
        per_q[key + ((r["task"], int(r["seed"])),)].append(float(r["score"]))
    scores = defaultdict(dict)
    for (protocol, label, ratio, sample), vals in per_q.items():
        scores[(protocol, label, ratio)][sample] = sum(vals) / len(vals)
    return scores, errors


def mean_se(values):
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")
    m = sum(values) / n
    if n < 2:
        return m, float("nan")
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1))
    return m, sd / math.sqrt(n)


def tables(rows):
    scores, errors = load(rows)
    out = []
    for protocol in ("aware", "agnostic"):
        keys = [k for k in scores if k[0] == protocol]
        if not keys:
            continue
        failed = [k for k in errors if k[0] == protocol and k[1] != "full"]
        ratios = sorted({k[2] for k in keys if k[1] != "full"} | {k[2] for k in failed})
        labels = sorted({k[1] for k in keys if k[1] != "full"} | {k[1] for k in failed})
        full = scores.get((protocol, "full", 0.0), {})
        out.append(f"## {PROTOCOL_TEXT[protocol]}\n")
        fm, fse = mean_se(list(full.values()))
        ran = {s for k in keys if k[1] != "full" for s in scores[k]}
        rm, rse = mean_se([v for s, v in full.items() if s in ran])
        out.append(f"Full cache: {100 * fm:.1f} ± {100 * fse:.1f} over {len(full)} samples; {100 * rm:.1f} ± "
                   f"{100 * rse:.1f} over the {len(ran)} the rows ran (a sample the full cache scores 0 on is "
                   "skipped for the rows, unless run.py --all-samples).\n")
        out.append("| row | " + " | ".join(f"c = {r:g}" for r in ratios) + " |")
        out.append("|---|" + "---|" * len(ratios))
        for label in labels:
            cells = []
            for r in ratios:
                s = scores.get((protocol, label, r), {})
                m, se = mean_se(list(s.values()))
                err = errors.get((protocol, label, r), 0)
                cell = f"{100 * m:.1f} ± {100 * se:.1f} (n={len(s)})" if s else ("— (n=0)" if err else "")
                cells.append(cell + (f", {err} failed" if err else ""))
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("")
        # The best kvevict row at each ratio against each other row, paired per sample.
        out.append("Best kvevict row (the highest mean over the samples every press answered at that ratio, among the "
                   "kvevict rows that answered them all; picked on these same samples: an optimistic pick) minus each "
                   "press, paired over the samples both answered (points, ± SE):\n")
        out.append("| ratio | best kvevict row | " + " | ".join(l for l in labels if not l.startswith("kvevict:")) + " |")
        out.append("|---|---|" + "---|" * sum(1 for l in labels if not l.startswith("kvevict:")))
        for r in ratios:
            ours = [(mean_se(list(scores[(protocol, l, r)].values()))[0], l) for l in labels
                    if l.startswith("kvevict:") and scores.get((protocol, l, r))]
            if not ours:
                continue
            presses = [set(scores[(protocol, l, r)]) for l in labels
                        if not l.startswith("kvevict:") and scores.get((protocol, l, r))]
            complete = set.intersection(*presses) if presses else set()
            covering = [l for _, l in ours if complete and complete <= set(scores[(protocol, l, r)])]
            if covering:  # ranked on the samples every press answered (rows of an earlier, smaller grid aside)
                best = max((sum(scores[(protocol, l, r)][s] for s in complete), l) for l in covering)[1]
            else:  # none: among the rows run on the most samples
                most = max(len(scores[(protocol, l, r)]) for _, l in ours)
                best = max((m, l) for m, l in ours if len(scores[(protocol, l, r)]) == most)[1]
            cells = []
            for other in labels:
                if other.startswith("kvevict:"):
                    continue
                a, b = scores[(protocol, best, r)], scores.get((protocol, other, r), {})
                common = sorted(set(a) & set(b))
                m, se = mean_se([a[s] - b[s] for s in common])
                cells.append(f"{100 * m:+.1f} ± {100 * se:.1f} (n={len(common)})" if common else "")
            out.append(f"| {r:g} | {best} | " + " | ".join(cells) + " |")
        out.append("")
        # Per task: one table per ratio, a row per method (the full cache first), a column per task.
        tasks = sorted({s[0] for k in keys for s in scores[k]})
        out.append(f"Per task ({protocol}), mean score over samples (blank: not run or skipped):\n")
        for r in ratios:
            out.append(f"c = {r:g}:\n")
            out.append("| row | " + " | ".join(tasks) + " |")
            out.append("|---|" + "---|" * len(tasks))
            for label, key in [("full", (protocol, "full", 0.0))] + [(l, (protocol, l, r)) for l in labels]:
                cells = []
                for t in tasks:
                    vals = [v for (task, _), v in scores.get(key, {}).items() if task == t]
                    cells.append(f"{100 * sum(vals) / len(vals):.0f}" if vals else "")
                if label == "full" or any(cells):
                    out.append(f"| {label} | " + " | ".join(cells) + " |")
            out.append("")
    return "\n".join(out)


def plot(rows, folder):
    """One PNG per protocol: mean score against compression ratio, one line per row run on the same samples, the
    full cache dotted."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    scores, _ = load(rows)
    written = []
    for protocol in ("aware", "agnostic"):
        keys = [k for k in scores if k[0] == protocol and k[1] != "full"]
        if not keys:
            continue
        # Means over the same samples only: the rows run on at least half the most samples, each averaged over
        # the samples all of them answered, and the full cache over those.
        most = max(len(scores[k]) for k in keys)
        labels = [l for l in sorted({k[1] for k in keys}) if all(2 * len(scores[k]) >= most for k in keys if k[1] == l)]
        common = set.intersection(*(set(scores[k]) for k in keys if k[1] in labels))
        fig, ax = plt.subplots(figsize=(9.5, 4.5))
        colors = plt.get_cmap("tab20").colors
        for i, label in enumerate(labels):
            pts = sorted((k[2], 100 * mean_se([v for s, v in scores[k].items() if s in common])[0])
                         for k in keys if k[1] == label)
            ours = label.startswith("kvevict:")
            # Equal scores overlap: kvevict's rows drawn wide underneath, the presses thin on top, both visible.
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if ours else "x", color=colors[i % 20],
                    linestyle="-" if ours else "--", linewidth=4 if ours else 1.5, alpha=0.75 if ours else 1.0,
                    zorder=1 if ours else 2, label=label)
        full = {s: v for s, v in scores.get((protocol, "full", 0.0), {}).items() if s in common}
        if full:
            ax.axhline(100 * mean_se(list(full.values()))[0], color="black", linestyle=":", label="full cache")
        ax.text(0.01, 0.01, f"{len(common)} samples (tasks x seeds) each", transform=ax.transAxes, fontsize=8)
        ax.set_xlabel("compression ratio (fraction of the KV removed)")
        ax.set_ylabel("mean RULER score")
        ax.set_title(f"SmolLM2-135M, RULER-style 4K: {protocol}")
        ax.set_ylim(-3, 103)
        ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
        path = os.path.join(folder, f"{protocol}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: report.py RESULTS_FOLDER (holding run.py's results.csv)")
    folder = sys.argv[1]
    path = os.path.join(folder, "results.csv")
    if not os.path.isfile(path):
        sys.exit(f"report.py: {path} does not exist (run bench/ruler/run.py --out {folder} first)")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    text = tables(rows)
    with open(os.path.join(folder, "summary.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    try:
        written = plot(rows, folder)
    except ImportError:
        sys.exit(f"report.py: {folder}/summary.md written; the plots need matplotlib (pinned in "
                 "scripts/get-hf-venv.sh's venv)")
    for p in written:
        print(f"wrote {p}", file=sys.stderr)


if __name__ == "__main__":
    main()
