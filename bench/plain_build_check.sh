#!/usr/bin/env bash
# The consumer's build check: bench/step_probe.cpp (a program that only includes
# <kvevict/kvevict.hpp>) compiled the way users compile a header-only library, without the
# CMake target's flags (-ffp-contract=off, -fopenmp-simd) and without -march, next to the best
# build (-O3 -march=native). Every build, on every dispatched path this CPU runs (KVEVICT_ISA),
# must give the same checksum (positions and score bits after the steps) for every policy; the
# script fails (exit 1) otherwise. With --time it also prints each build's ns per (query head ×
# token), median of 5 interleaved runs, and its ratio to the best build (thread CPU time: noisy on a
# shared machine even as CPU time; bench/instructions.sh is the noise-free figure).
#
#   bash bench/plain_build_check.sh [--quick] [--time] [--no-build] [--n N] [--steps S] [--out DIR]
#
# --quick: only g++ -O2 and g++ -O3 -march=native (the ctest `plain_build_bits`); default: also
# clang++ -O2 and clang++ -O3 -march=native when clang++ is installed. Builds go to DIR
# (default build-plain-check/); --no-build reuses them. Environment: CXX_GNU (g++), CXX_CLANG (clang++).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0 timed=0 build=1 n=2048 steps=40 out=build-plain-check
while (($#)); do
  case "$1" in
    --quick) quick=1 ;;
    --time) timed=1 ;;
    --no-build) build=0 ;;
    --n) n="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "plain_build_check.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
gxx="${CXX_GNU:-g++}" clangxx="${CXX_CLANG:-clang++}"
mkdir -p "$out"

builds=("gcc_O2|$gxx -O2" "gcc_O3_native|$gxx -O3 -march=native")
if ((!quick)) && command -v "$clangxx" >/dev/null; then
  builds+=("clang_O2|$clangxx -O2" "clang_O3_native|$clangxx -O3 -march=native")
fi
for b in "${builds[@]}"; do
  ((build)) || break
  name="${b%%|*}" cmd="${b#*|}"
  # -isystem: Eigen's own headers warn under -march=native; ours must not (-Werror).
  $cmd -std=c++17 -Wall -Wextra -Wpedantic -Werror -Iinclude -isystem /usr/include/eigen3 \
    bench/step_probe.cpp -o "$out/probe_$name"
done

isas=(baseline)
"$out/probe_gcc_O2" h2o 64 1 >/dev/null  # fails loudly if the probe itself is broken
for isa in avx2 avx512; do
  if KVEVICT_ISA=$isa "$out/probe_gcc_O2" window 64 1 >/dev/null 2>&1; then isas+=("$isa"); fi
done
echo "paths this CPU runs: ${isas[*]}"

fail=0
# knorm, keydiff: the key scores (their norms and dot products in one fixed order, detail/fixed_order_dot.hpp).
for policy in keyformer h2o streamingllm window tova knorm keydiff; do
  ref=""
  for b in "${builds[@]}"; do
    name="${b%%|*}"
    for isa in "${isas[@]}"; do
      line=$(KVEVICT_ISA=$isa "$out/probe_$name" "$policy" "$n" "$steps")
      sum="${line##*checksum=}"
      if [[ -z "$ref" ]]; then ref="$sum"; fi
      if [[ "$sum" != "$ref" ]]; then
        echo "MISMATCH $policy $name $isa: checksum $sum, first build $ref"
        fail=1
      fi
    done
  done
  echo "$policy: every build and path gives checksum $ref"
done

if ((timed)); then
  echo
  echo "ns per (query head × token), n = $n, $steps steps, best path: median of 5 runs per build, the builds"
  echo "interleaved (thread CPU time of the steps); ratio to gcc_O3_native:"
  for policy in keyformer h2o streamingllm window tova; do
    declare -A times=()
    for rep in 1 2 3 4 5; do
      for b in "${builds[@]}"; do
        name="${b%%|*}"
        t=$("$out/probe_$name" "$policy" "$n" "$steps" | sed 's/.*ns_per_elem=\([0-9.]*\).*/\1/')
        times[$name]+="$t "
      done
    done
    median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | sed -n 3p; }
    best=$(median "${times[gcc_O3_native]}")
    row="$policy: gcc_O3_native $best"
    for b in "${builds[@]}"; do
      name="${b%%|*}"
      [[ $name == gcc_O3_native ]] && continue
      t=$(median "${times[$name]}")
      row+=" | $name $t ($(awk -v a="$t" -v b="$best" 'BEGIN{printf "%.2fx", a/b}'))"
    done
    echo "$row"
    unset times
  done
fi
exit $fail
