#!/usr/bin/env bash
# Bounded prefill: Keyformer and H2O at r = 0.5 (prompt 256, k = 128), the prompt prefilled in
# chunks of C = 32 and cut to k after every chunk (at most k + 32 = 160 tokens per layer during the prompt),
# against the same rows with the one-shot prefill, on the same windows. Writes
# bench/quality/results/bounded.md (+ the CSVs of both runs under bench/quality/results/bounded/).
# The committed file: `bash bench/quality/run_bounded.sh --windows 256 --threads 2`.
# Extra arguments (e.g. --windows 256 --threads 2) go to both runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvevict-quality
out=bench/quality/results/bounded
mkdir -p "$out"
start=$(date +%s)
q=./build/bench/quality/kvevict-quality
common=(--policies keyformer,keyformer-nonoise,h2o --ratios 0.5 "$@")
$q "${common[@]}" --out "$out/oneshot" > "$out/oneshot.md"
$q "${common[@]}" --prefill-chunk 32 --bounded-prefill --out "$out/bounded" > "$out/bounded.md"
secs=$(( $(date +%s) - start ))
{
  echo "Bounded prefill vs one-shot prefill: r = 0.5 (k = 128 of a 256-token prompt), chunks of C = 32,"
  echo "cut to k after every chunk. Same windows, seeds and decode for both; only the prefill differs."
  echo "Produced by \`bash bench/quality/run_bounded.sh $*\` (wall time ${secs} s on the shared 2-core machine)."
  echo
  echo "## One-shot prefill"
  cat "$out/oneshot.md"
  echo
  echo "## Bounded prefill, C = 32"
  cat "$out/bounded.md"
  echo
  echo "## What bounded prefill costs: bounded minus one-shot, paired per window"
  echo
  python3 bench/quality/paired_delta.py "$out/oneshot.csv" "$out/bounded.csv"
} > bench/quality/results/bounded.md
rm -f "$out"/*.gp "$out"/*_plot.dat "$out"/*.md  # the tables are in bounded.md; the CSVs stay
cat bench/quality/results/bounded.md
