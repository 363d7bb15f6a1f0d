#!/usr/bin/env bash
# llama.cpp + kvevict quality on the SmolLM2 report's P = 2048 windows (issue 33; docs/quality-smollm2.md):
# the python-howto documents (sorted by name, *.rst and *.txt), windows of PROMPT + PREDICT + 1 tokens taken
# round-robin over the documents at offsets 0, W, 2W, ... (never crossing one; kvevict-quality's
# document_windows), but tokenized by llama.cpp. Per window: the full cache, then keyformer, h2o, streaming,
# window and tova at r = 0.1, 0.2, 0.5 (k = floor(r * PROMPT), the tools' default recent window, 4 sinks),
# each `kvevict-llama --teacher-force PREDICT` (model-wide selection, eviction at every step).
# Resumable: one CSV line per run in bench/llama/results/quality_p2048.csv; a run already there is skipped.
# WINDOWS (default 12), THREADS (default 1), JOBS (runs at once, default 1), BUILD_DIR (default build-llama),
# EXTRA (more rows after those, e.g. "knorm h2o+mean h2o+summed": the key norm, h2o with --mean-attention, h2o with
# --score-rows summed, and +bounded: --bounded-prefill --batch 32, the prompt cut to k after every 32-token chunk, as
# the many-sequence runs of serve.sh prefill; the suffixes combine in this order: "h2o+mean+summed+bounded"),
# RATIOS (default "0.1 0.2 0.5"), POLICIES (default "keyformer h2o streaming window tova": the rows before EXTRA).
# A run killed midway leaves its lock folder in $out.locks: remove that folder before resuming. At the end, prints the NLL
# increase over the full cache per row, mean ± standard error over the windows run so far, beside kvevict's own
# engine (per-KV-head selection) on the same windows from the committed report (summary.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD_DIR:-build-llama}
windows=${WINDOWS:-12}
prompt=${PROMPT:-2048}
predict=${PREDICT:-255}
threads=${THREADS:-1}
model=${KVEVICT_SMOLLM2_GGUF:-$(bash scripts/get-models.sh)}
data=${KVEVICT_SHARED_DIR:-../shared}/data/python-howto
kvl="$build/kvevict-llama"
[ -x "$kvl" ] || { echo "quality.sh: $kvl not built (bash scripts/llama-test.sh)" >&2; exit 2; }
out=bench/llama/results/quality_p2048.csv
mkdir -p "$(dirname "$out")"
[ -f "$out" ] || echo "window,doc,offset,policy,ratio,k,nll" >"$out"
len=$(( prompt + predict + 1 ))
# The documents and their lengths in tokens, then the windows round-robin.
mapfile -t docs < <(find "$data" -maxdepth 1 -type f \( -name '*.rst' -o -name '*.txt' \) -printf '%f\n' | LC_ALL=C sort)
lengths=()
for d in "${docs[@]}"; do lengths+=("$("$kvl" --model "$model" --prompt-file "$data/$d" --count-tokens)"); done
wins=()
most=0
for n in "${lengths[@]}"; do (( n / len > most )) && most=$(( n / len )); done
for (( i = 0; i < most; ++i )); do
  for j in "${!docs[@]}"; do
    (( i < lengths[j] / len )) && wins+=("$j:$(( i * len ))")
  done
done
(( windows > ${#wins[@]} )) && windows=${#wins[@]}
locks="$out.locks"  # one folder per run in progress: several instances share the work (JOBS=2 runs two)
mkdir -p "$locks"
run() {  # window doc offset policy ratio
  local key="$1,${docs[$2]},$3,$4,$5,"
  grep -qF "$key" "$out" && return 0
  mkdir "$locks/${key//\//_}" 2>/dev/null || return 0
  local unbounded=${4%+bounded}
  local base=${unbounded%+summed}
  local args=(--policy "${base%+mean}")
  [ "$base" != "${base%+mean}" ] && args+=(--mean-attention)
  [ "$unbounded" != "$base" ] && args+=(--score-rows summed)
  [ "$4" != "$unbounded" ] && args+=(--bounded-prefill --batch 32)
  [ "$4" != full ] && args+=(--budget "$5")
  local json
  json=$("$kvl" --model "$model" --prompt-file "$data/${docs[$2]}" --skip-tokens "$3" --prompt-tokens "$prompt" \
    --teacher-force "$predict" --threads "$threads" "${args[@]}" 2>/dev/null)
  local k nll
  k=$(echo "$json" | sed -E 's/.*"k":([0-9]+).*/\1/')
  nll=$(echo "$json" | sed -E 's/.*"nll":([0-9.]+).*/\1/')
  echo "$key$k,$nll" >>"$out"
  rmdir "$locks/${key//\//_}"
  echo "window $1 ${docs[$2]}@$3 $4 r=$5: k=$k nll=$nll" >&2
}
sweep() {
  for (( w = 0; w < windows; ++w )); do
    doc=${wins[$w]%%:*}
    off=${wins[$w]##*:}
    run "$w" "$doc" "$off" full 1
    for r in ${RATIOS:-0.1 0.2 0.5}; do
      for p in ${POLICIES-keyformer h2o streaming window tova} ${EXTRA:-}; do run "$w" "$doc" "$off" "$p" "$r"; done
    done
  done
}
for (( j = 1; j < ${JOBS:-1}; ++j )); do sweep & done
sweep
wait
python3 bench/llama/summary.py "$out" bench/quality/results/smollm2
