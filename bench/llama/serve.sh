#!/usr/bin/env bash
# llama.cpp + kvevict, serving-shaped (issue 52): decode speed of one sequence at a long context, and total
# decode throughput of many sequences in one context, every variant interleaved in one run, as ratios.
#
#   one sequence, P = PROMPT (default 8000) + STEPS (default 64) greedy steps, --threads THREADS (default 1):
#     llama         kvevict-llama --no-kvevict: llama.cpp alone, flash attention off (its faster mode on this CPU:
#                   see docs/llama-cpp.md), the reference
#     streaming50   --policy streaming --budget 50%            (positions only: no scores)
#     h2omean50     --policy h2o --mean-attention --budget 50% --score-rows summed
#     h2omean20     the same at 20%
#   many sequences at P = PROMPT_MULTI (default 4000), --parallel N in one context (kv_unified):
#     llama-xN      --no-kvevict --parallel N2 (default 2) --kv-unified off: the full cache, a stream per
#                   sequence (a token attends its own cells; llama.cpp's faster mode here), the reference
#     h2omean50-xN  --parallel 2·N2 at 50%, a stream each, --bounded-prefill --batch 32: 2·N2 streams of k + 33 cells,
#                   the KV memory of N2 full sequences (within 0.1 %)
#     h2omean20-xN  --parallel 5·N2 at 20%, the same (within 2.5 %)
#     streaming50-xN, streaming20-xN  the same with --policy streaming (positions only: no scores, no callback)
#   and, not in the default list: llama-xN-pool (the full cache in one pool of cells, kv_unified) and
#   h2omean50-xN-pool (2·N2 evicting sequences in one pool): every token attends the whole pool there.
# REPEATS rounds (default 1) over VARIANTS (default: all, in the order above); the median of each. For each ratio
# the bound of a memory-bound step is printed beside it: bytes read per token, weights (the GGUF's size) plus
# the K/V attended (F16, n_layer · n_head_kv · head_dim · 2 · 2 bytes per cell), full over evicted; a batch reads
# the weights once for all its sequences. Text: tutorial.rst of python-howto (63K tokens). Writes
# OUT (default bench/llama/results/serve.md: the table and every raw line). Build: scripts/llama-test.sh's (BUILD_DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-llama}
prompt=${PROMPT:-8000}
pm=${PROMPT_MULTI:-4000}
steps=${STEPS:-64}
threads=${THREADS:-1}
repeats=${REPEATS:-1}
n2=${N2:-2}
model=${KVEVICT_SMOLLM2_GGUF:-$(bash scripts/get-models.sh)}
text=${KVEVICT_SHARED_DIR:-../shared}/data/python-howto/tutorial.rst
kvl="$build/kvevict-llama"
[ -x "$kvl" ] || { echo "serve.sh: $kvl not built (bash scripts/llama-test.sh)" >&2; exit 2; }
[ -n "${OUT:-}" ] && [ -e "$OUT" ] && { echo "serve.sh: OUT=$OUT exists: name a new file" >&2; exit 2; }
mean="--policy h2o --mean-attention --score-rows summed"
declare -A args=(
  [llama]="--no-kvevict --prompt-tokens $prompt"
  [streaming50]="--policy streaming --budget 50% --prompt-tokens $prompt"
  [h2omean50]="$mean --budget 50% --prompt-tokens $prompt"
  [h2omean20]="$mean --budget 20% --prompt-tokens $prompt"
  [llama-xN]="--no-kvevict --parallel $n2 --prompt-tokens $pm --seq-stride $pm --kv-unified off"
  [h2omean50-xN]="$mean --budget 50% --parallel $(( 2 * n2 )) --prompt-tokens $pm --seq-stride $pm --kv-unified off --bounded-prefill --batch 32"
  [h2omean20-xN]="$mean --budget 20% --parallel $(( 5 * n2 )) --prompt-tokens $pm --seq-stride $pm --kv-unified off --bounded-prefill --batch 32"
  [streaming50-xN]="--policy streaming --budget 50% --parallel $(( 2 * n2 )) --prompt-tokens $pm --seq-stride $pm --kv-unified off --bounded-prefill --batch 32"
  [streaming20-xN]="--policy streaming --budget 20% --parallel $(( 5 * n2 )) --prompt-tokens $pm --seq-stride $pm --kv-unified off --bounded-prefill --batch 32"
  [llama-xN-pool]="--no-kvevict --parallel $n2 --prompt-tokens $pm --seq-stride $pm"
  [h2omean50-xN-pool]="$mean --budget 50% --parallel $(( 2 * n2 )) --prompt-tokens $pm --seq-stride $pm"
)
order=(${VARIANTS:-llama streaming50 h2omean50 h2omean20 llama-xN h2omean50-xN h2omean20-xN})
for v in "${order[@]}"; do [ -n "${args[$v]:-}" ] || { echo "serve.sh: unknown variant $v" >&2; exit 2; }; done
mkdir -p bench/llama/results
raw=$(mktemp)  # every raw line, copied into serve.md at the end
trap 'rm -f "$raw"' EXIT
: >"$raw"
declare -A rates cpu_rates
start=$(date +%s)
for r in $(seq 1 "$repeats"); do
  for v in "${order[@]}"; do
    batch=(--batch 256)  # prompt chunks; a variant with its own --batch (bounded prefill) keeps it
    [[ " ${args[$v]} " == *" --batch "* ]] && batch=()
    # shellcheck disable=SC2086
    line=$("$kvl" --model "$model" --prompt-file "$text" --steps "$steps" --ignore-eos --threads "$threads" \
      "${batch[@]}" ${args[$v]} 2>&1 >/dev/null | grep '^kvevict-llama: ') || true
    [[ $line == *"tok/CPU s"* ]] || { echo "serve.sh: $v failed: $line" >&2; exit 1; }
    echo "round $r $v: $line" | tee -a "$raw" >&2
    rates[$v]="${rates[$v]:-} $(echo "$line" | sed -E 's/.* in [0-9.]+ s \(([0-9.]+) tok\/s;.*/\1/')"
    cpu_rates[$v]="${cpu_rates[$v]:-} $(echo "$line" | sed -E 's/.* ([0-9.]+) tok\/CPU s\).*/\1/')"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
weights=$(stat -c %s "$model")
cell=23040  # SmolLM2-135M: 30 layers · 3 KV heads · 64 · (K + V) · 2 bytes
# bound FULL_CELLS KEPT_CELLS SEQS_FULL SEQS_KEPT: tokens per byte read, evicted over full (weights once per step).
bound() { awk -v w="$weights" -v c="$cell" -v f="$1" -v k="$2" -v nf="$3" -v nk="$4" \
  'BEGIN { printf "%.2f", (nk / (w + nk * k * c)) / (nf / (w + nf * f * c)) }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == "" || b == 0) print "—"; else printf "%.3f", a / b }'; }
n=$(( prompt + steps / 2 ))  # cells a full sequence attends, on average over the steps
nm=$(( pm + steps / 2 ))
{
  echo "| variant | args | decode tok/s, wall | ratio | decode tok/s per CPU second | ratio | memory-bound bound |"
  echo "|---|---|---|---|---|---|---|"
  for v in "${order[@]}"; do
    m=$(echo "${rates[$v]}" | median)
    c=$(echo "${cpu_rates[$v]}" | median)
    case $v in
      llama|streaming50|h2omean50|h2omean20) ref=llama ;;
      *) ref=llama-xN ;;
    esac
    mr=$(echo "${rates[$ref]:-}" | median)
    cr=$(echo "${cpu_rates[$ref]:-}" | median)
    case $v in
      streaming50|h2omean50) b=$(bound "$n" $(( prompt / 2 + 1 )) 1 1) ;;
      h2omean20) b=$(bound "$n" $(( prompt / 5 + 1 )) 1 1) ;;
      h2omean50-xN|streaming50-xN) b=$(bound "$nm" $(( pm / 2 + 1 )) "$n2" $(( 2 * n2 ))) ;;
      h2omean20-xN|streaming20-xN) b=$(bound "$nm" $(( pm / 5 + 1 )) "$n2" $(( 5 * n2 ))) ;;
      *) b=1 ;;
    esac
    printf '| %s | `%s` | %s | %s | %s | %s | %s |\n' "$v" "${args[$v]}" "$m" "$(ratio "$m" "$mr")" "$c" \
      "$(ratio "$c" "$cr")" "$b"
  done
  echo
  echo "SmolLM2-135M Q4_1 ($weights bytes), $steps greedy steps, --threads $threads, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at the end $(cut -d' ' -f1-3 /proc/loadavg), $repeats round(s), $(( $(date +%s) - start )) s in all; \`bash bench/llama/serve.sh\`. The bound uses the cells attended, on average over the decode steps: P + steps/2 for a full sequence, k + 1 for an evicting one (cut at the end of its prompt)."
  echo
  echo '```'
  cat "$raw"
  echo '```'
} | tee "${OUT:-bench/llama/results/serve.md}"
