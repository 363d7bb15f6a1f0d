#!/usr/bin/env bash
# llama.cpp + kvevict decode speed at a 4K context (issue 33), every variant in one run, as ratios:
#   llama      llama.cpp alone (kvevict-llama --no-kvevict): the reference
#   callback   --policy full: the eval callback on (graph split at every layer's softmax, the mask read,
#              cells tracked), nothing scored or dropped
#   scoring    --policy keyformer with k >= the context: the callback copies log p, kvevict scores every
#              step (model-wide Keyformer), nothing is dropped
#   keyformer  --policy keyformer --budget 50%: scores and evicts (the sequence holds k + 1 = P/2 + 1 cells)
# SmolLM2-135M (scripts/get-models.sh, or KVEVICT_SMOLLM2_GGUF), PROMPT tokens (default 4032) of a Python
# HOWTO, STEPS decode steps (default 64: the context ends at 4,096), --threads THREADS (default 1: llama.cpp's
# spinning workers on 2 busy cores are slower than one), REPEATS rounds (default 3) interleaving the variants;
# the median decode tok/s of each. The integration is built with scripts/llama-test.sh's build folder
# (BUILD_DIR, default build-llama). Prints a Markdown table; writes bench/llama/results/decode_4k.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-llama}
prompt=${PROMPT:-4032}
steps=${STEPS:-64}
threads=${THREADS:-1}
repeats=${REPEATS:-3}
model=${KVEVICT_SMOLLM2_GGUF:-$(bash scripts/get-models.sh)}
text=${KVEVICT_SHARED_DIR:-../shared}/data/python-howto/howto-descriptor.rst
kvl="$build/kvevict-llama"
[ -x "$kvl" ] || { echo "run.sh: $kvl not built (bash scripts/llama-test.sh)" >&2; exit 2; }
ctx=$(( prompt + steps + 64 ))
common=(--model "$model" --prompt-file "$text" --prompt-tokens "$prompt" --steps "$steps" --ignore-eos
        --threads "$threads" --ctx-size "$ctx")
declare -A args=(
  [llama]="--no-kvevict"
  [callback]="--policy full"
  [scoring]="--policy keyformer --budget $(( prompt + steps ))"
  [keyformer]="--policy keyformer --budget 50%"
)
order=(llama callback scoring keyformer)
declare -A rates cpu_rates
start=$(date +%s)
for r in $(seq 1 "$repeats"); do
  for v in "${order[@]}"; do
    # shellcheck disable=SC2086
    line=$("$kvl" "${common[@]}" ${args[$v]} 2>&1 >/dev/null | grep '^kvevict-llama: ') || true
    [[ $line == *"decode steps in"* ]] || { echo "run.sh: $v failed: $line" >&2; exit 1; }
    rate=$(echo "$line" | sed -E 's/.*decode steps in [0-9.]+ s \(([0-9.]+) tok\/s;.*/\1/')
    cpu_rate=$(echo "$line" | sed -E 's/.* ([0-9.]+) tok\/CPU s\).*/\1/')
    echo "round $r $v: $line" >&2
    rates[$v]="${rates[$v]:-} $rate"
    cpu_rates[$v]="${cpu_rates[$v]:-} $cpu_rate"
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
ref=$(echo "${rates[llama]}" | median)
cpu_ref=$(echo "${cpu_rates[llama]}" | median)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }
mkdir -p bench/llama/results
{
  echo "| variant | decode tok/s, wall (median of $repeats) | ratio | decode tok/s per CPU second (median) | ratio | wall tok/s of each round |"
  echo "|---|---|---|---|---|---|"
  for v in "${order[@]}"; do
    m=$(echo "${rates[$v]}" | median)
    c=$(echo "${cpu_rates[$v]}" | median)
    printf '| %s (`%s`) | %s | %s | %s | %s | %s |\n' "$v" "${args[$v]}" "$m" "$(ratio "$m" "$ref")" "$c" \
      "$(ratio "$c" "$cpu_ref")" "${rates[$v]# }"
  done
  echo
  echo "SmolLM2-135M Q4_1, prompt $prompt tokens + $steps decode steps (context $(( prompt + steps ))), --threads $threads, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at the end $(cut -d' ' -f1-3 /proc/loadavg), $(( $(date +%s) - start )) s in all; \`bash bench/llama/run.sh\`."
} | tee bench/llama/results/decode_4k.md
