#!/usr/bin/env bash
# Builds and runs kvevict's benchmark suite, then prints the ratio table and draws the plots.
#
#   bash bench/run.sh            quick grid (n in {1024, 4096, 32768}, d = 128, g in {1, 4},
#                                float and half; prefill P in {512, 2048}): ~10 min on 2 cores
#   bash bench/run.sh --full     the whole grid (n up to 131072, d in {64, 128},
#                                P up to 8192): a few hours on 2 cores, peak memory ~10 GB
#
# Options: --out DIR (default build-bench/bench-results/<quick|full>), --build-dir DIR
# (default build-bench), --no-build; anything else is passed to kvevict_bench (e.g.
# --benchmark_filter=Keyformer). Writes DIR/results.json (Google Benchmark JSON),
# DIR/report.md (the tables, also printed), DIR/*.dat, DIR/plots.gp and DIR/*.png.
set -euo pipefail
cd "$(dirname "$0")/.."

grid=quick build=1 out="" build_dir=build-bench
extra=()
while (($#)); do
  case "$1" in
    --full) grid=full; extra+=(--full) ;;
    --out) out="$2"; shift ;;
    --build-dir) build_dir="$2"; shift ;;
    --no-build) build=0 ;;
    *) extra+=("$1") ;;
  esac
  shift
done
out="${out:-$build_dir/bench-results/$grid}"

if ((build)); then
  bash scripts/deps.sh
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DKVEVICT_BENCH_NATIVE="${KVEVICT_BENCH_NATIVE:-ON}" >/dev/null
  cmake --build "$build_dir" -j"$(nproc)" --target kvevict_bench
fi
mkdir -p "$out"
bench="$build_dir/bench/kvevict_bench"

echo "== checking that the naive comparator keeps what kvevict keeps"
"$bench" --verify

echo "== running the $grid grid (JSON: $out/results.json); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$bench" "${extra[@]}" --benchmark_out="$out/results.json" --benchmark_out_format=json \
  --benchmark_counters_tabular=false

echo
echo "== report ($out/report.md)"
python3 bench/report.py "$out/results.json" "$out"
(cd "$out" && gnuplot plots.gp)
echo
echo "plots: $(ls "$out"/*.png | tr '\n' ' ')"
