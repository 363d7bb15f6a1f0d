#!/usr/bin/env python3
"""report.py draws only what ran: the stored quick-grid results filtered as --benchmark_filter=Keyformer
would filter them give the Keyformer plots, a "plot skipped" line for each naive-ratio plot, and a plots.gp
that gnuplot runs without error and without an empty PNG (when gnuplot is installed).

Usage: test_report.py (run by ctest as bench_report_plots_what_ran). Exit 0 on success, 1 with a message."""
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

BENCH = pathlib.Path(__file__).resolve().parent


def fail(message):
    print(f"test_report.py: {message}")
    sys.exit(1)


def main():
    results = json.loads((BENCH / "results/quick/results.json").read_text())
    results["benchmarks"] = [b for b in results["benchmarks"] if "Keyformer" in b["name"]]
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp)
        (out / "results.json").write_text(json.dumps(results))
        run = subprocess.run([sys.executable, str(BENCH / "report.py"), str(out / "results.json"), str(out)],
                             capture_output=True, text=True)
        if run.returncode != 0:
            fail(f"report.py exited {run.returncode}: {run.stderr}")
        tags = [f"{t}_d128_g{g}" for t in ("float", "half") for g in (1, 4)]
        want = [p for tag in tags for p in (f"decode_time_{tag}.png", f"ratio_evict_over_attention_{tag}.png")]
        want.append("ratio_prefill.png")
        got = (out / "plots.txt").read_text().split()
        if got != want:
            fail(f"plots.txt lists {got}, expected {want}")
        skipped = [line for line in run.stdout.splitlines() if line.startswith("plot skipped: ")]
        want_skipped = [f"plot skipped: ratio_naive_over_ours_{tag}.png (NaiveDecodeStep did not run)" for tag in tags]
        if skipped != want_skipped:
            fail(f"skipped lines {skipped}, expected {want_skipped}")
        gp = (out / "plots.gp").read_text()
        if "Naive" in gp or "naive_over_ours" in gp:
            fail("plots.gp still draws the naive comparison")
        if shutil.which("gnuplot"):
            g = subprocess.run(["gnuplot", "plots.gp"], cwd=out, capture_output=True, text=True)
            if g.returncode != 0:
                fail(f"gnuplot failed: {g.stderr}")
            pngs = sorted(p.name for p in out.glob("*.png"))
            if pngs != sorted(want) or any((out / p).stat().st_size == 0 for p in pngs):
                fail(f"gnuplot wrote {pngs}")
    print("test_report.py: the plots of a filtered run are the ones that ran")


if __name__ == "__main__":
    main()
