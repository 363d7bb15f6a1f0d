#!/usr/bin/env bash
# Builds and runs kvevict's benchmark suite, then prints the ratio table and draws the plots.
#
#   bash bench/run.sh            quick grid (n in {1024, 4096, 32768}, d = 128, g in {1, 4},
#                                float and half; prefill P in {512, 2048}; parallel steps): ~5 min on
#                                2 free cores, 13 min beside other builds (bench/README.md)
#   bash bench/run.sh --full     the whole grid (n up to 131072, d in {64, 128},
#                                P up to 8192): a few hours on 2 cores, peak memory ~10 GB
#   bash bench/run.sh --benchmark_filter=Keyformer   any Google Benchmark flag is passed through;
#                                plots are drawn for what ran, and a line names each plot skipped
#
# --opt-levels adds the optimisation-level comparison (off by default, 15-25 min on 2 shared
# cores, mostly filling n = 131072): the decode-step family at n in {4096, 32768, 131072}, d = 128, g = 1,
# float (kvevict_bench --steps), with kvevict_bench (-O3) and kvevict_bench_o2 (the same sources at -O2,
# the same -march: like with like), 3 repetitions each (the minimum counts): DIR/steps_O3.json,
# DIR/steps_O2.json and the table in DIR/opt_levels.md. --opt-levels-only runs only that comparison.
#
# Options: --out DIR (default build-bench/bench-results/<quick|full>), --build-dir DIR
# (default build-bench), --no-build, --opt-levels, --opt-levels-only (--no-opt-levels: the default,
# accepted); anything else is passed to kvevict_bench (e.g. --benchmark_filter=Keyformer; kvevict_bench
# --help lists the suite's own flags). Writes DIR/results.json (Google Benchmark JSON), DIR/report.md
# (the tables, also printed), DIR/*.dat, DIR/plots.gp, DIR/plots.txt and DIR/*.png.
set -euo pipefail
cd "$(dirname "$0")/.."

grid=quick build=1 out="" build_dir=build-bench opt_levels=0 suite=1
extra=()
while (($#)); do
  case "$1" in
    --full) grid=full; extra+=(--full) ;;
    --out) out="$2"; shift ;;
    --build-dir) build_dir="$2"; shift ;;
    --no-build) build=0 ;;
    --no-opt-levels) opt_levels=0 ;;
    --opt-levels) opt_levels=1 ;;
    --opt-levels-only) suite=0; opt_levels=1 ;;
    *) extra+=("$1") ;;
  esac
  shift
done
out="${out:-$build_dir/bench-results/$grid}"

if ((opt_levels && !build)) && [[ ! -x $build_dir/bench/kvevict_bench_o2 ]]; then
  echo "run.sh: --opt-levels with --no-build needs $build_dir/bench/kvevict_bench_o2 (built only with" \
       "-DKVEVICT_BENCH_O2=ON: run without --no-build once)" >&2
  exit 2
fi
if ((build)); then
  bash scripts/deps.sh
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DKVEVICT_BENCH_NATIVE="${KVEVICT_BENCH_NATIVE:-ON}" \
        -DKVEVICT_BENCH_O2="$( ((opt_levels)) && echo ON || echo OFF)" >/dev/null
  targets=(kvevict_bench)
  ((opt_levels)) && targets+=(kvevict_bench_o2)
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
fi
mkdir -p "$out"
bench="$build_dir/bench/kvevict_bench"
bench_o2="$build_dir/bench/kvevict_bench_o2"

if ((suite)); then

  echo "== checking that the naive comparator keeps what kvevict keeps"
  "$bench" --verify

  echo "== running the $grid grid (JSON: $out/results.json); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bench" "${extra[@]}" --benchmark_out="$out/results.json" --benchmark_out_format=json \
    --benchmark_counters_tabular=false

  echo
  echo "== report ($out/report.md)"
  rm -f "$out"/*.png  # only the plots of this run are left (report.py lists them in plots.txt)
  python3 bench/report.py "$out/results.json" "$out"
  (cd "$out" && gnuplot plots.gp)
  echo
  if [[ -s "$out/plots.txt" ]]; then
    echo "plots: $(sed "s|^|$out/|" "$out/plots.txt" | tr '\n' ' ')"
  else
    echo "plots: none (no decode step or prefill benchmark ran)"
  fi
fi

if ((opt_levels)); then
  echo
  echo "== optimisation levels: decode steps with kvevict_bench and kvevict_bench_o2; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  for level in O3 O2; do
    bin="$bench"
    [[ $level == O2 ]] && bin="$bench_o2"
    "$bin" --steps --benchmark_repetitions=3 --benchmark_out="$out/steps_$level.json" --benchmark_out_format=json \
      --benchmark_counters_tabular=false >/dev/null
  done
  python3 bench/report.py --opt-levels "$out/steps_O3.json" "$out/steps_O2.json" | tee "$out/opt_levels.md"
fi
