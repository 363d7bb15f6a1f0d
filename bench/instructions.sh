#!/usr/bin/env bash
# Instructions per element of each policy's decode step, counted by valgrind's callgrind: the
# noise-free figure (the same binary and input give the same count to the instruction, while wall
# and CPU times on a shared 2-core machine move by up to 2x between runs).
#
#   bash bench/instructions.sh [--n N] [--steps S] [--include DIR] [--out DIR] [--builds LIST] [--prompt P]
#
# Builds bench/step_probe.cpp (8 KV heads, g = 1, d = 128, float; see there) the way a consumer
# compiles the headers, for each build of LIST (default "gcc_O2 gcc_O3_native"; also clang_O2,
# clang_O3_native, gcc_O2_cmake = -O2 with the CMake target's flags), runs STEPS (default 4)
# decode steps at n = N (default 8192) under callgrind for every policy and every dispatched path
# this CPU runs (KVEVICT_ISA), counting only the steps (client requests), and prints a markdown
# table of instructions per (query head × token) = Ir / (STEPS · 8 · N), with the CPU's model
# name. --include DIR measures the headers under DIR instead of include/ (e.g. an older commit:
# `git archive COMMIT include | tar -x -C /tmp/old`, then --include /tmp/old/include; headers
# without the dispatch run once, path "none"). --prompt P adds a second table: the prompt's fused attention
# (bench/prompt_probe.cpp: attention/causal_attention.hpp at SmolLM2-135M's shape, 9 query heads over 3 KV heads,
# d = 64) alone, with H2O's sums, with Keyformer's noisy sums, and KVzip's score (each key's largest probability over
# the context's repeat, no output), in instructions per (query head × causal (query, key) pair) of one call over a
# P-token prompt (KVzip: a P-token context and its P-token repeat). Needs valgrind (Debian: valgrind).
set -euo pipefail
cd "$(dirname "$0")/.."

n=8192 steps=4 inc=include out=build-instructions builds="gcc_O2 gcc_O3_native" prompt=0
while (($#)); do
  case "$1" in
    --n|--steps|--include|--out|--builds|--prompt)
      (($# >= 2)) || { echo "instructions.sh: $1 needs a value" >&2; exit 2; } ;;&
    --n) n="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --include) inc="$2"; shift ;;
    --out) out="$2"; shift ;;
    --builds) builds="$2"; shift ;;
    --prompt) prompt="$2"; shift
      [[ $prompt =~ ^[1-9][0-9]*$ ]] || { echo "instructions.sh: --prompt must be a positive integer (got '$prompt')" >&2; exit 2; } ;;
    *) echo "instructions.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
  shift
done
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind not found (apt-get install valgrind)" >&2; exit 2; }
mkdir -p "$out"

flags_of() {
  case "$1" in
    gcc_O2) echo "g++ -O2" ;;
    gcc_O3_native) echo "g++ -O3 -march=native" ;;
    gcc_O2_cmake) echo "g++ -O2 -ffp-contract=off -fopenmp-simd -DKVEVICT_OMP_SIMD" ;;
    clang_O2) echo "clang++ -O2" ;;
    clang_O3_native) echo "clang++ -O3 -march=native" ;;
    *) echo "instructions.sh: unknown build '$1'" >&2; exit 2 ;;
  esac
}
for b in $builds; do
  $(flags_of "$b") -std=c++17 -DPROBE_EXPECTED_ATTENTION -I"$inc" -isystem /usr/include/eigen3 bench/step_probe.cpp \
    -o "$out/probe_$b"
  if ((prompt)); then
    # headers from before the fused attention (--include DIR) have none to count: the column says "—"; this
    # checkout's headers must compile it
    if ! $(flags_of "$b") -std=c++17 -I"$inc" -isystem /usr/include/eigen3 bench/prompt_probe.cpp \
         -o "$out/prompt_probe_$b" 2>"$out/prompt_probe_$b.log"; then
      [[ $inc != include ]] || { cat "$out/prompt_probe_$b.log" >&2; exit 1; }
      rm -f "$out/prompt_probe_$b"
    fi
  fi
done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa_flags=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'avx2|fma|f16c|avx512f|avx512bw|avx512dq|avx512vl' | tr '\n' ' ')
cpu="$cpu ($(nproc) cores; ${isa_flags% })"
echo "CPU: $cpu; n = $n, d = 128, g = 1, float, $steps steps; headers: $inc"
echo "instructions per (query head × token) of decode_step (callgrind Ir / (steps · 8 · n))"
echo
header="| policy |" sep="|---|"
declare -a cols=() skipped=()
for b in $builds; do
  probe="$out/probe_$b"
  if "$probe" window 64 1 | grep -q 'isa=none'; then
    cols+=("$b|none")
  else
    for isa in baseline avx2 avx512; do
      KVEVICT_ISA=$isa "$probe" window 64 1 >/dev/null 2>&1 || continue
      # valgrind itself must run the path (it cannot execute AVX-512): else the column is left out, said below.
      if KVEVICT_ISA=$isa valgrind --tool=none -q "$probe" window 64 1 >/dev/null 2>&1; then
        cols+=("$b|$isa")
      else
        skipped+=("$b $isa")
      fi
    done
  fi
done
for c in "${cols[@]}"; do header+=" ${c%%|*} ${c#*|} |"; sep+="---|"; done
echo "$header"
echo "$sep"
# h2o-mean, keyformer-mean: PolicyParams::mean_attention (kvevict::H2OMean, KeyformerMean); h2o-adakv: H2O with
# HeadBudgets::adaptive (per element of the layer's 8 k tokens); "—" with headers from before them (the probe
# refuses them).
# knorm, keydiff: the key scores (no logits; KeyDiff rescores every held key each step); expected-attention: the
# TOVA cache with Expected Attention's rows computed before each step (those rows counted).
for policy in keyformer h2o streamingllm window tova h2o-mean keyformer-mean h2o-adakv knorm keydiff \
  expected-attention; do
  row="| $policy |"
  for c in "${cols[@]}"; do
    b="${c%%|*}" isa="${c#*|}"
    cg="$out/cg.$b.$isa.$policy"
    env_isa=()
    [[ $isa != none ]] && env_isa=(env KVEVICT_ISA="$isa")
    if ! "${env_isa[@]}" "$out/probe_$b" "$policy" 64 1 >/dev/null 2>&1; then
      row+=" — |"
      continue
    fi
    "${env_isa[@]}" valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no --callgrind-out-file="$cg" \
      "$out/probe_$b" "$policy" "$n" "$steps" >/dev/null 2>"$cg.log"
    ir=$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\).*/\1/p' "$cg.log")
    row+=" $(awk -v ir="$ir" -v s="$steps" -v n="$n" 'BEGIN{printf "%.3f", ir / (s * 8 * n)}') |"
  done
  echo "$row"
done
if ((${#skipped[@]})); then
  echo
  echo "Left out (valgrind cannot execute the path on this CPU): ${skipped[*]}."
fi
if ((prompt)); then
  echo
  echo "instructions per (query head × causal (query, key) pair) of one causal_attention call (callgrind Ir / pairs);"
  echo "P = $prompt (kvzip: a $prompt-token context and its repeat), 9 query heads over 3 KV heads, d = 64, float"
  echo
  echo "${header/policy/kernel}"
  echo "$sep"
  for kernel in attention h2o keyformer kvzip; do
    row="| $kernel |"
    for c in "${cols[@]}"; do
      b="${c%%|*}" isa="${c#*|}"
      cg="$out/cg.prompt.$b.$isa.$kernel"
      env_isa=()
      [[ $isa != none ]] && env_isa=(env KVEVICT_ISA="$isa")
      if [[ ! -x $out/prompt_probe_$b ]] || ! "${env_isa[@]}" "$out/prompt_probe_$b" "$kernel" 32 >/dev/null 2>&1; then
        row+=" — |"
        continue
      fi
      if ! "${env_isa[@]}" valgrind --tool=callgrind --instr-atstart=no --collect-atstart=no \
           --callgrind-out-file="$cg" "$out/prompt_probe_$b" "$kernel" "$prompt" >"$cg.out" 2>"$cg.log"; then
        echo "instructions.sh: the prompt probe failed under callgrind ($kernel, $b, $isa): $cg.log" >&2
        exit 1
      fi
      ir=$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\).*/\1/p' "$cg.log")
      pairs=$(sed -n 's/.* pairs=\([0-9]*\) .*/\1/p' "$cg.out")
      [[ -n $ir && -n $pairs ]] || { echo "instructions.sh: no count in $cg.log / $cg.out" >&2; exit 1; }
      row+=" $(awk -v ir="$ir" -v p="$pairs" 'BEGIN{printf "%.3f", ir / p}') |"
    done
    echo "$row"
  done
fi
