#!/usr/bin/env python3
"""bench/e2e/report.py: the end-to-end benchmark's report from bench/e2e/run.sh's CSV.

    python3 bench/e2e/report.py bench/e2e/results/e2e.csv bench/e2e/results [--machine TEXT] [--command TEXT]

Writes OUT/e2e.md (one table per prompt length P: every policy's prefill, decode tokens/s, KV held, peak RSS,
and the batch at a fixed KV memory, each as a ratio to the full cache at the same P) and, when gnuplot is
installed, OUT/e2e.png (decode and batch throughput against the full cache, by P) from OUT/e2e.dat and
OUT/e2e.gp. Standard library only. Exits 2 naming the file for a missing column or a P without a full row.
"""
import argparse
import csv
import os
import shutil
import subprocess
import sys

MIB = 1024.0 * 1024.0
COLUMNS = ("row", "policy", "label", "prompt", "generate", "prefill_s", "decode_tok_s", "kv_held_decode_bytes",
           "kv_full_bytes", "peak_rss_bytes", "batch_memory_seqs", "batch_seqs", "batch_tok_s")


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"report.py: {path}: no rows")
    missing = [c for c in COLUMNS if c not in rows[0]]
    if missing:
        print(f"report.py: {path}: missing column(s) {', '.join(missing)}", file=sys.stderr)
        sys.exit(2)
    return rows


ORDER = ("full", "keyformer", "h2o", "streaming", "window", "tova", "snapkv")


def row_key(r):
    """Full cache first, then larger budgets first, then the policies in ORDER (a resumed run appends rows)."""
    p = r["policy"]
    return (p != "full", -int(r["k"]), ORDER.index(p) if p in ORDER else len(ORDER), p)


def by_prompt(rows):
    groups = {}
    for r in rows:
        groups.setdefault(int(r["prompt"]), []).append(r)
    return {p: sorted(g, key=row_key) for p, g in sorted(groups.items())}


def markdown(rows, machine, command):
    out = ["# End-to-end decode: full cache against eviction", ""]
    if machine:
        out.append(f"Machine: {machine}.")
    if command:
        out.append(f"Command: `{command}`.")
    out += ["", "Ratios are to the full cache at the same prompt length P (higher is better for tokens/s, lower for "
            "time and bytes). KV held: the most KV bytes the sequence held during decode. Batch: the sequences whose "
            "decode-time KV fits in the memory of F full-cache sequences at their last position, decoding together "
            "(step_batch), aggregate tokens/s.", ""]
    for p, group in by_prompt(rows).items():
        full = [r for r in group if r["policy"] == "full"]
        if not full:
            print(f"report.py: P = {p} has no full-cache row", file=sys.stderr)
            sys.exit(2)
        f = full[0]
        gen = int(f["generate"])
        fb = float(f["batch_tok_s"])
        out += [f"## P = {p} prompt tokens, {gen} generated", "",
                "| policy | prefill s (ratio) | decode tok/s (ratio) | KV held MiB (of full) | sequences per GiB of KV | "
                f"peak RSS MiB | batch in {f['batch_memory_seqs']} full seqs' KV: seqs, tok/s (ratio) |",
                "|---|---|---|---|---|---|---|"]
        for r in group:
            pre = float(r["prefill_s"])
            dec = float(r["decode_tok_s"])
            held = float(r["kv_held_decode_bytes"])
            bt = float(r["batch_tok_s"])
            batch = f"{r['batch_seqs']}, {bt:.1f} ({bt / fb:.2f}x)" if fb > 0 and bt > 0 else "not run"
            out.append(f"| {r['label']} | {pre:.1f} ({pre / float(f['prefill_s']):.2f}x) | "
                       f"{dec:.1f} ({dec / float(f['decode_tok_s']):.2f}x) | "
                       f"{held / MIB:.1f} ({100.0 * held / float(f['kv_held_decode_bytes']):.0f}%) | "
                       f"{1024.0 * MIB / held:.1f} | "
                       f"{float(r['peak_rss_bytes']) / MIB:.0f} | {batch} |")
        out.append("")
    return "\n".join(out) + "\n"


def plot(rows, outdir):
    """e2e.dat: one block per row spec (policy:budget), lines P, decode ratio, batch ratio; e2e.gp plots both."""
    groups = by_prompt(rows)
    specs = []
    for group in groups.values():
        for r in group:
            if r["policy"] != "full" and r["row"] not in specs:
                specs.append(r["row"])
    dat = os.path.join(outdir, "e2e.dat")
    with open(dat, "w") as f:
        for spec in specs:
            f.write(f"# {spec}\n")
            for p, group in groups.items():
                full = [r for r in group if r["policy"] == "full"][0]
                for r in group:
                    if r["row"] == spec:
                        fb = float(full["batch_tok_s"])
                        batch = f"{float(r['batch_tok_s']) / fb:.4f}" if fb > 0 and float(r["batch_tok_s"]) > 0 else "NaN"
                        f.write(f"{p} {float(r['decode_tok_s']) / float(full['decode_tok_s']):.4f} {batch}\n")
            f.write("\n\n")
    gp = os.path.join(outdir, "e2e.gp")
    with open(gp, "w") as f:
        f.write('set terminal pngcairo size 1100,420\nset output "e2e.png"\nset multiplot layout 1,2\n'
                'set logscale x 2\nset xlabel "prompt tokens P"\nset grid\nset key top left\n')
        for col, title in ((2, "decode tok/s, one sequence / full cache"),
                           (3, "batch tok/s at a fixed KV memory / full cache")):
            f.write(f'set title "{title}"\nplot ')
            f.write(", ".join(f'"e2e.dat" index {i} using 1:{col} with linespoints title "{s}"'
                              for i, s in enumerate(specs)))
            f.write(", 1 with lines dashtype 2 lc rgb 'black' title 'full'\n")
        f.write("unset multiplot\n")
    if shutil.which("gnuplot"):
        subprocess.run(["gnuplot", "e2e.gp"], cwd=outdir, check=True)
        return os.path.join(outdir, "e2e.png")
    print("report.py: gnuplot not installed; e2e.dat and e2e.gp written, no plot", file=sys.stderr)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("outdir")
    ap.add_argument("--machine", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--no-plot", action="store_true", help="write e2e.md only")
    a = ap.parse_args()
    rows = load(a.csv)
    os.makedirs(a.outdir, exist_ok=True)
    text = markdown(rows, a.machine, a.command)
    with open(os.path.join(a.outdir, "e2e.md"), "w") as f:
        f.write(text)
    if not a.no_plot:
        plot(rows, a.outdir)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
