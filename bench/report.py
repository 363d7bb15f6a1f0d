#!/usr/bin/env python3
"""Turns kvevict_bench's Google Benchmark JSON into the ratio tables, the target
checks and gnuplot data + script (bench/run.sh runs it).

usage: report.py RESULTS.json OUTDIR
       report.py --opt-levels STEPS_O3.json STEPS_O2.json
Writes OUTDIR/report.md (the tables), OUTDIR/*.dat and OUTDIR/plots.gp, and prints report.md.
--opt-levels prints the optimisation-level table of two `kvevict_bench --steps` runs:
ns per (query head × token) of each policy's decode step at -O3 and -O2, their ratio, and the
step's share of the attention step; with repetitions, the fastest repetition counts.
"""
import json
import math
import os
import re
import sys
from collections import defaultdict

POLICIES = ["Keyformer", "H2O", "StreamingLLM", "Window", "TOVA"]
DECODE_RE = re.compile(r"^(\w+)DecodeStep/(\w+)/n:(\d+)/d:(\d+)/g:(\d+)")
PREFILL_RE = re.compile(r"^KeyformerPrefill/(\w+)/P:(\d+)/d:(\d+)/g:(\d+)")
MEM_RE = re.compile(r"^Mem(Read|Copy)/bytes:(\d+)")
PARALLEL_RE = re.compile(r"^ParallelDecodeStep/(\w+)/(\w+)/n:(\d+)/d:(\d+)/g:(\d+)/workers:(\d+)")
TO_US = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}


def us(b):
    return b["real_time"] * TO_US[b.get("time_unit", "ns")]


def load(path):
    with open(path) as f:
        data = json.load(f)
    decode = defaultdict(dict)  # (type, d, g) -> n -> {policy: bench}
    prefill = {}
    mem = defaultdict(dict)  # bytes -> {Read/Copy: GB/s}
    parallel = defaultdict(dict)  # (policy, type, n, d, g) -> W -> bench
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or "error_occurred" in b and b["error_occurred"]:
            continue
        name = b["name"]
        m = DECODE_RE.match(name)
        if m:
            pol, typ, n, d, g = m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5))
            decode[(typ, d, g)].setdefault(n, {})[pol] = b
            continue
        m = PREFILL_RE.match(name)
        if m:
            prefill[(m.group(1), int(m.group(3)), int(m.group(4)), int(m.group(2)))] = b
            continue
        m = MEM_RE.match(name)
        if m:
            mem[int(m.group(2))][m.group(1)] = b["bytes_per_second"] / 1e9
            continue
        m = PARALLEL_RE.match(name)
        if m:
            key = (m.group(1), m.group(2), int(m.group(3)), int(m.group(4)), int(m.group(5)))
            parallel[key][int(m.group(6))] = b
    return data, decode, prefill, mem, parallel


def fmt_us(x):
    if x is None:
        return "–"
    if x >= 1e4:
        return f"{x / 1e3:.1f} ms"
    if x >= 100:
        return f"{x:.0f} µs"
    return f"{x:.1f} µs"


def pct(x):
    return "–" if x is None else f"{100 * x:.1f}%"


def kv_bytes(typ, n, d):
    return 2 * 8 * n * d * (4 if typ == "float" else 2)


def fastest_steps(path):
    """(ctx, {(policy, n, g): [benches]}) of a --steps run: every repetition of each benchmark."""
    with open(path) as f:
        data = json.load(f)
    reps = defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        m = DECODE_RE.match(b["name"])
        if not m or m.group(2) != "float":
            continue
        reps[(m.group(1), int(m.group(3)), int(m.group(5)))].append(b)
    return data.get("context", {}), reps


def opt_levels(path_o3, path_o2):
    ctx3, o3 = fastest_steps(path_o3)
    ctx2, o2 = fastest_steps(path_o2)

    def wall(bs, elems):  # fastest repetition, ns per (query head × token)
        return min(us(b) for b in bs) * 1e3 / elems if bs else None

    def cpu(bs):  # least thread CPU time over the repetitions, ns per (query head × token)
        vals = [b["evict_cpu_ns_per_elem"] for b in bs if "evict_cpu_ns_per_elem" in b]
        return min(vals) if vals else None

    def f3(x):
        return "–" if x is None else f"{x:.3f}"

    out = []
    out.append("### Decode step at -O3 and -O2: ns per (query head × token), d = 128, g = 1, float, single thread")
    out.append("")
    out.append(f"O3 binary: {ctx3.get('kvevict_opt', '?')}, march {ctx3.get('kvevict_march', '?')}; "
               f"O2 binary: {ctx2.get('kvevict_opt', '?')}, march {ctx2.get('kvevict_march', '?')}; "
               f"load average at start {', '.join(f'{x:.2f}' for x in ctx3.get('load_avg', []))} / "
               f"{', '.join(f'{x:.2f}' for x in ctx2.get('load_avg', []))}. Wall: fastest repetition; "
               "CPU: the thread's CPU time (least over the repetitions), which a loaded machine inflates "
               "much less; share = eviction / attention of the same iterations (O3 run, CPU time).")
    out.append("")
    out.append("| policy | n | O3 wall | O2 wall | O3 CPU | O2 CPU | O2 / O3 (CPU) | O2 / O3 (wall) | share of attention |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    worst = {}
    per_n = defaultdict(dict)
    for p in POLICIES:
        for (pol, n, g) in sorted(k for k in o3 if k[0] == p):
            elems = 8 * g * n
            b3, b2 = o3[(pol, n, g)], o2.get((pol, n, g), [])
            w3, w2, c3, c2 = wall(b3, elems), wall(b2, elems), cpu(b3), cpu(b2)
            rc = c2 / c3 if c2 and c3 else None
            rw = w2 / w3 if w2 and w3 else None
            r = rc if rc is not None else rw
            if r is not None:
                worst[p] = max(worst.get(p, 0.0), r)
            per_n[p][n] = c3 if c3 is not None else w3
            share = [b.get("evict_over_attention_cpu", b.get("evict_over_attention")) for b in b3]
            share = [x for x in share if x is not None]
            out.append(f"| {p} | {n} | {f3(w3)} | {f3(w2)} | {f3(c3)} | {f3(c2)} | "
                       f"{'–' if rc is None else f'{rc:.2f}'} | {'–' if rw is None else f'{rw:.2f}'} | "
                       f"{pct(min(share)) if share else '–'} |")
    out.append("")
    out.append("Worst O2 / O3 per policy (target <= 1.2): " +
               ", ".join(f"{p} {r:.2f}{'' if r <= 1.2 else ' (NOT met)'}" for p, r in worst.items()))
    for p, t in per_n.items():
        if 4096 in t and max(t) > 4096 and t[4096]:
            out.append(f"- {p}: per-element cost at n = {max(t)} / at n = 4096 (O3): {t[max(t)] / t[4096]:.2f} "
                       "(target <= 1.3)")
    print("\n".join(out))


def main():
    if sys.argv[1] == "--opt-levels":
        opt_levels(sys.argv[2], sys.argv[3])
        return
    path, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    data, decode, prefill, mem, parallel = load(path)
    ctx = data.get("context", {})
    lines = []
    out = lines.append
    out(f"Machine: {ctx.get('num_cpus', '?')} CPUs @ {ctx.get('mhz_per_cpu', '?')} MHz, "
        f"caches {', '.join(str(c['size'] // 1024) + ' KiB L' + str(c['level']) + c['type'][0] for c in ctx.get('caches', []))}; "
        f"load average at start {', '.join(f'{x:.2f}' for x in ctx.get('load_avg', []))}; "
        f"grid {ctx.get('kvevict_grid', '?')}; {ctx.get('date', '')}")
    out("")

    # ---- decode table -------------------------------------------------------------------------
    out("### Decode step: eviction time and eviction / attention (same iterations, same layer)")
    out("")
    out("8 KV heads; attention = the engine's q·Kᵀ/√d, softmax, ·V with Eigen (single thread); "
        "each policy's time is its `decode_step` right after that attention step.")
    out("")
    out("| KV | d | g | n | attention | " + " | ".join(POLICIES) + " | naive | naive / ours |")
    out("|---|---|---|---|---|" + "---|" * len(POLICIES) + "---|---|")
    checks = []
    for (typ, d, g) in sorted(decode, key=lambda k: (k[0] != "float", k[1], k[2])):
        for n in sorted(decode[(typ, d, g)]):
            row = decode[(typ, d, g)][n]
            attn = us(row["Attention"]) if "Attention" in row else None
            cells = []
            for p in POLICIES:
                if p in row:
                    b = row[p]
                    r = b.get("evict_over_attention")
                    cells.append(f"{fmt_us(us(b))} ({pct(r)})")
                    if typ == "float" and d == 128 and n >= 4096 and r is not None:
                        lim = {"Keyformer": 0.05 if g == 1 else 0.15, "H2O": 0.03, "StreamingLLM": 0.03,
                               "Window": 0.03}.get(p)
                        if lim is not None:
                            checks.append((f"{p} / attention, float, d=128, g={g}, n={n}", r, f"<= {100 * lim:.0f}%",
                                           r <= lim, pct(r)))
                else:
                    cells.append("–")
            naive = row.get("Naive")
            nv = fmt_us(us(naive)) if naive else "–"
            no = f"{naive['naive_over_ours']:.0f}×" if naive else "–"
            if naive and n == 32768:
                checks.append((f"naive / ours, {typ}, d={d}, g={g}, n=32768", naive["naive_over_ours"], ">= 20×",
                               naive["naive_over_ours"] >= 20, f"{naive['naive_over_ours']:.0f}×"))
            out(f"| {typ} | {d} | {g} | {n} | {fmt_us(attn)} | " + " | ".join(cells) + f" | {nv} | {no} |")
    out("")

    # ---- scaling ------------------------------------------------------------------------------
    out("### Scaling: t(8n) / t(n) (direct pairs) and the log-log slope over all n")
    out("")
    out("| KV | d | g | policy | pairs t(8n)/t(n) | slope |")
    out("|---|---|---|---|---|---|")
    for (typ, d, g) in sorted(decode, key=lambda k: (k[0] != "float", k[1], k[2])):
        ns = sorted(decode[(typ, d, g)])
        for p in ["Attention"] + POLICIES + ["Naive"]:
            pts = [(n, us(decode[(typ, d, g)][n][p])) for n in ns if p in decode[(typ, d, g)][n]]
            if len(pts) < 2:
                continue
            t = dict(pts)
            pairs = [(n, t[8 * n] / t[n]) for n in sorted(t) if 8 * n in t]
            xs = [math.log(n) for n, _ in pts]
            ys = [math.log(v) for _, v in pts]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
            ptxt = ", ".join(f"{n}→{8 * n}: {r:.1f}" for n, r in pairs) or "–"
            out(f"| {typ} | {d} | {g} | {p} | {ptxt} | {slope:.2f} |")
            if p in POLICIES:
                for n, r in pairs:
                    checks.append((f"t(8n)/t(n) {p}, {typ}, d={d}, g={g}, n={n}", r, "<= 10", r <= 10, f"{r:.1f}"))
    out("")

    # ---- prefill ------------------------------------------------------------------------------
    if prefill:
        out("### Prefill: Keyformer scoring of the causal P × P logits + cut to k = P/2, vs attention prefill")
        out("")
        out("| KV | d | g | P | attention prefill | Keyformer prefill | prefill / attention |")
        out("|---|---|---|---|---|---|---|")
        for key in sorted(prefill, key=lambda k: (k[0] != "float", k[1], k[2], k[3])):
            typ, d, g, P = key
            b = prefill[key]
            r = b["prefill_over_attention"]
            out(f"| {typ} | {d} | {g} | {P} | {b['attention_ms']:.1f} ms | {b['prefill_ms']:.1f} ms | {r:.2f} |")
            checks.append((f"prefill / attention, {typ}, d={d}, g={g}, P={P}", r, "<= 1.5", r <= 1.5, f"{r:.2f}"))
        out("")

    # ---- bandwidth ----------------------------------------------------------------------------
    if mem:
        out("### Memory bandwidth probe vs the attention step (bytes = K and V of 8 heads at n)")
        out("")
        out("| bytes | read GB/s | copy GB/s | attention steps of that size: effective GB/s (K+V bytes / time) |")
        out("|---|---|---|---|")
        for nbytes in sorted(mem):
            eff = []
            for (typ, d, g), rows in sorted(decode.items()):
                for n, row in rows.items():
                    if "Attention" in row and kv_bytes(typ, n, d) == nbytes:
                        eff.append(f"{typ} d={d} g={g} n={n}: {nbytes / (us(row['Attention']) * 1e3):.1f}")
            out(f"| {nbytes / 2**20:.1f} MiB | {mem[nbytes].get('Read', float('nan')):.1f} | "
                f"{mem[nbytes].get('Copy', float('nan')):.1f} | {'; '.join(eff) or '–'} |")
        out("")

    # ---- targets ------------------------------------------------------------------------------
    out("### Targets")
    out("")
    groups = defaultdict(list)
    for what, val, lim, ok, txt in checks:
        groups[re.sub(r", n=\d+| n=\d+|, P=\d+", "", what) + " " + lim].append((ok, txt, what))
    out("| target | measured | met |")
    out("|---|---|---|")
    for key, items in groups.items():
        ok = all(i[0] for i in items)
        out(f"| {key} | {', '.join(i[1] for i in items)} | {'yes' if ok else 'NO'} |")
    out("")

    # ---- parallel decode steps ------------------------------------------------------
    if parallel:
        ws = sorted({w for rows in parallel.values() for w in rows})
        out("## Parallel decode step (ParallelDecodeStep): ns per (query head × token), speedup over W = 1")
        out("")
        out("| policy | n | g | " + " | ".join(f"W = {w}" for w in ws) + " |")
        out("|---|---|---|" + "---|" * len(ws))
        for (pol, typ, n, d, g), rows in sorted(parallel.items()):
            cells = []
            for w in ws:
                b = rows.get(w)
                if b is None:
                    cells.append("–")
                elif w == 1:
                    cells.append(f"{b['ns_per_elem']:.2f} ns")
                else:
                    cells.append(f"{b['ns_per_elem']:.2f} ns ({b['speedup_vs_1']:.2f}×)")
            out(f"| {pol} | {n} | {g} | " + " | ".join(cells) + " |")
        out("")

    # ---- plot data ----------------------------------------------------------------------------
    gp = ["set terminal pngcairo size 900,600 noenhanced font \",10\"",
          "set grid", "set key left top"]
    plots, skipped = [], []  # the PNGs plots.gp draws; the ones it does not, and why
    for (typ, d, g), rows in sorted(decode.items()):
        tag = f"{typ}_d{d}_g{g}"
        ns = sorted(rows)
        with open(os.path.join(outdir, f"decode_{tag}.dat"), "w") as f:
            cols = ["Attention"] + POLICIES + ["Naive"]
            f.write("# n " + " ".join(cols) + " (µs; ? = missing)\n")
            for n in ns:
                f.write(f"{n} " + " ".join(f"{us(rows[n][c]):.4f}" if c in rows[n] else "?" for c in cols) + "\n")
        with open(os.path.join(outdir, f"ratio_{tag}.dat"), "w") as f:
            f.write("# n " + " ".join(POLICIES) + " naive_over_ours\n")
            for n in ns:
                vals = [f"{rows[n][p]['evict_over_attention']:.6f}" if p in rows[n] else "?" for p in POLICIES]
                vals.append(f"{rows[n]['Naive']['naive_over_ours']:.3f}" if "Naive" in rows[n] else "?")
                f.write(f"{n} " + " ".join(vals) + "\n")
        # Only what ran is drawn: a series without a value (filtered out) is left out of its plot, and a
        # plot without any series is not written (gnuplot stops on an empty one and leaves a 0-byte PNG).
        def present(col):
            return any(col in rows[n] for n in ns)

        time_cols = [(i, c) for i, c in enumerate(["Attention"] + POLICIES + ["Naive"]) if present(c)]
        ratio_cols = [(i, p) for i, p in enumerate(POLICIES) if present(p)]
        gp += ["set datafile missing '?'"]
        if time_cols:
            gp += ["set logscale xy", "set xlabel 'retained tokens n'",
                   "set ylabel 'time per decode step (µs)'", f"set output 'decode_time_{tag}.png'",
                   f"set title 'Decode step time, {typ} KV, d={d}, g={g}, 8 KV heads (log-log)'",
                   "plot " + ", ".join(f"'decode_{tag}.dat' using 1:{i + 2} with linespoints title '{c}'"
                                       for i, c in time_cols)]
            plots.append(f"decode_time_{tag}.png")
        else:
            skipped.append(f"decode_time_{tag}.png (no decode step of this shape ran)")
        if ratio_cols:
            gp += ["set logscale x", "unset logscale y", "set logscale y", "set ylabel 'eviction / attention'",
                   f"set output 'ratio_evict_over_attention_{tag}.png'",
                   f"set title 'Eviction / attention, {typ} KV, d={d}, g={g}'",
                   "plot " + ", ".join(f"'ratio_{tag}.dat' using 1:{i + 2} with linespoints title '{p}'"
                                       for i, p in ratio_cols)]
            plots.append(f"ratio_evict_over_attention_{tag}.png")
        else:
            skipped.append(f"ratio_evict_over_attention_{tag}.png (no policy's decode step ran)")
        if present("Naive"):
            gp += ["set logscale xy", "set ylabel 'naive / kvevict (Keyformer)'",
                   f"set output 'ratio_naive_over_ours_{tag}.png'",
                   f"set title 'Naive step / kvevict Keyformer step, {typ} KV, d={d}, g={g}'",
                   f"plot 'ratio_{tag}.dat' using 1:{len(POLICIES) + 2} with linespoints title 'naive / ours'"]
            plots.append(f"ratio_naive_over_ours_{tag}.png")
        else:
            skipped.append(f"ratio_naive_over_ours_{tag}.png (NaiveDecodeStep did not run)")
    if prefill:
        with open(os.path.join(outdir, "prefill.dat"), "w") as f:
            f.write("# P attention_ms prefill_ms ratio  (blocks: type d g)\n")
            for key in sorted(prefill):
                b = prefill[key]
                f.write(f"{key[3]} {b['attention_ms']:.4f} {b['prefill_ms']:.4f} {b['prefill_over_attention']:.5f} "
                        f"# {key[0]} d={key[1]} g={key[2]}\n")
        series = sorted({k[:3] for k in prefill})
        gp += ["set logscale xy", "set xlabel 'prompt length P'", "set ylabel 'Keyformer prefill / attention prefill'",
               "set output 'ratio_prefill.png'", "set title 'Prefill scoring + cut / attention prefill'",
               "plot " + ", ".join(
                   f"'< grep \"# {t} d={d} g={g}$\" prefill.dat' using 1:4 with linespoints title '{t} d={d} g={g}'"
                   for t, d, g in series)]
        plots.append("ratio_prefill.png")
    else:
        skipped.append("ratio_prefill.png (KeyformerPrefill did not run)")
    with open(os.path.join(outdir, "plots.gp"), "w") as f:
        f.write("\n".join(gp) + "\n")
    with open(os.path.join(outdir, "plots.txt"), "w") as f:  # what bench/run.sh reports after gnuplot
        f.write("".join(f"{p}\n" for p in plots))

    text = "\n".join(lines)
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write(text + "\n")
    print(text)
    for why in skipped:
        print(f"plot skipped: {why}")


if __name__ == "__main__":
    main()
