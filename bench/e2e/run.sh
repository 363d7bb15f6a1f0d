#!/usr/bin/env bash
# The end-to-end benchmark (issue 36): SmolLM2-135M (scripts/get-models.sh) decoding after a long prompt (the
# first P tokens of ../shared/data/python-howto/tutorial.rst), the full cache against Keyformer, H2O and
# StreamingLLM at 50% and 20% of the prompt. Each (P, policy) is one process of kvevict-e2e (bench/e2e/e2e_main.cpp:
# prefill, G decode steps, then a batch of the sequences that fit in the KV memory of BATCH_MEMORY full
# sequences, BATCH_STEPS steps of step_batch; for the BATCH_POLICIES rows); the rows go to bench/e2e/results/e2e.csv and
# bench/e2e/report.py writes e2e.md (ratios to the full cache at the same P) and the plots (gnuplot).
#
#   bash bench/e2e/run.sh                      # the grid: P = 2048, 4096, 7680 (7680 + 512 = the model's 8192)
#   PROMPTS=512 GENERATE=64 bash bench/e2e/run.sh  # a quick look
#
# The CSV is kept between runs: a (P, policy) row already there is not run again (delete the file, or
# FRESH=1, to start over), so an interrupted run resumes; delete a row's line to measure it again. Progress: one line per run on stderr.
# kvevict-e2e is built in BUILD_DIR (default build-e2e): Release, the default flags (no -march), what a
# user's build gets. THREADS (default 2) worker threads.
set -euo pipefail
cd "$(dirname "$0")/../.."
prompts=${PROMPTS:-2048,4096,7680}
generate=${GENERATE:-512}
policies=${POLICIES:-"full keyformer:50% h2o:50% streaming:50% keyformer:20% h2o:20% streaming:20%"}
threads=${THREADS:-2}
batch_memory=${BATCH_MEMORY:-2}
# The policies whose rows run the batch phase: H2O and StreamingLLM hold the same KV as Keyformer at the same
# budget (k tokens per head), so the same number of sequences fits, and their step cost is in the decode column.
batch_policies=${BATCH_POLICIES:-"full keyformer"}
batch_steps=${BATCH_STEPS:-32}
build=${BUILD_DIR:-build-e2e}
out=${OUT_DIR:-bench/e2e/results}
csv="$out/e2e.csv"
model=$(bash scripts/get-models.sh)
text=${KVEVICT_SHARED_DIR:-../shared}/data/python-howto/tutorial.rst
if [[ ${NO_BUILD:-0} != 1 ]]; then  # NO_BUILD=1: rerun rows with the binary already in BUILD_DIR
  echo "run.sh: building kvevict-e2e in $build ..." >&2
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVEVICT_BUILD_TESTS=OFF -DKVEVICT_BUILD_EXAMPLES=OFF \
    -DKVEVICT_BUILD_PYTHON=OFF >/dev/null
  cmake --build "$build" -j"$(nproc)" --target kvevict-e2e >/dev/null
fi
e2e="$build/bench/e2e/kvevict-e2e"
mkdir -p "$out"
[[ ${FRESH:-0} == 1 ]] && rm -f "$csv"
IFS=, read -r -a plist <<<"$prompts"
read -r -a rows <<<"$policies"
total=$((${#plist[@]} * ${#rows[@]}))
i=0
start=$(date +%s)
for p in "${plist[@]}"; do
  for row in "${rows[@]}"; do
    i=$((i + 1))
    policy=${row%%:*}
    args=(--policy "$policy")
    [[ $row == *:* ]] && args+=(--budget "${row#*:}")
    memory=0
    [[ " $batch_policies " == *" $policy "* ]] && memory=$batch_memory
    key="$row,$p"
    if [[ -f $csv ]] && grep -q "^$key," "$csv"; then
      echo "run.sh: [$i/$total] P=$p $row: in $csv already" >&2
      continue
    fi
    echo "run.sh: [$i/$total] P=$p $row (elapsed $(($(date +%s) - start)) s) ..." >&2
    header=()
    [[ -f $csv ]] || header=(--header)
    line=$("$e2e" --model "$model" --text "$text" --prompt "$p" --generate "$generate" --threads "$threads" \
      --batch-memory "$memory" --batch-steps "$batch_steps" "${args[@]}" "${header[@]}")
    if [[ ${#header[@]} -gt 0 ]]; then
      printf 'row,prompt_key,%s\n' "$(head -n1 <<<"$line")" >"$csv"
      line=$(tail -n1 <<<"$line")
    fi
    printf '%s,%s\n' "$key" "$line" >>"$csv"
  done
done
echo "run.sh: $total runs in $(($(date +%s) - start)) s; writing $out/e2e.md" >&2
python3 bench/e2e/report.py "$csv" "$out" --machine "$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores" \
  --command "bash bench/e2e/run.sh (PROMPTS=$prompts GENERATE=$generate THREADS=$threads BATCH_MEMORY=$batch_memory BATCH_STEPS=$batch_steps BATCH_POLICIES='$batch_policies')"
