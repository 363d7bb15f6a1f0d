#!/usr/bin/env bash
# Quality on a real model at long context: SmolLM2-135M-Instruct (Q4_1 GGUF, scripts/get-models.sh) on the
# long documents of ../shared/data/python-howto. Three kvevict-quality invocations, each comparing every row
# with one full-cache run per window / prompt (every row of a window runs in one batch with the full cache:
# the prompt once, each token one pass over the weights; the same numbers as one run at a time):
#   1. the needle retrieval task (--retrieval): RETRIEVAL prompts per depth 10/50/90 % of RPROMPT tokens,
#      greedy answer, digits exact; the full cache and every row at r = 0.1 and 0.2;
#   2. teacher-forced document windows: WINDOWS windows (round-robin over the documents, never crossing one)
#      of PROMPT prompt tokens + PREDICT scored predictions, every row and the oracle bound at r = 0.1, 0.2, 0.5,
#      NLL / KL / top-1 and the NLL increase by the target's distance to its previous occurrence;
#   3. the same at LONG_PROMPT prompt tokens on LONG_WINDOWS windows (the subset at P = 4096).
# Writes bench/quality/results/smollm2/ (smollm2.md: the report with its command and wall times; CSVs;
# smollm2.png and smollm2_p4096.png: NLL increase vs budget per row with standard-error bars; gnuplot;
# Keyformer against each row paired per window, bench/quality/paired_diff.py).
# The defaults fit 60 minutes on the shared 2-core machine (see smollm2.md); more windows on a bigger one, e.g.
#   WINDOWS=64 LONG_WINDOWS=16 RETRIEVAL=20 THREADS=16 bash bench/quality/run_smollm2.sh
# kvevict-quality is built in BUILD_DIR (default build-quality) with QUALITY_CXX_FLAGS (default -march=native:
# Eigen's products at the CPU's vector width; the numbers then match other builds to a few ulp, not bit for
# bit). Extra arguments go to every invocation.
set -euo pipefail
cd "$(dirname "$0")/../.."
windows=${WINDOWS:-12}
prompt=${PROMPT:-2048}
predict=${PREDICT:-255}
long_windows=${LONG_WINDOWS:-4}
long_prompt=${LONG_PROMPT:-4096}
retrieval=${RETRIEVAL:-10}
rprompt=${RPROMPT:-2048}
threads=${THREADS:-2}
seeds=${SEEDS:-1}
build=${BUILD_DIR:-build-quality}
cxx_flags=${QUALITY_CXX_FLAGS--march=native}
model=$(bash scripts/get-models.sh)
data=${KVEVICT_SHARED_DIR:-../shared}/data/python-howto
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="$cxx_flags" -DKVEVICT_WERROR=OFF \
  -DKVEVICT_BUILD_TESTS=OFF -DKVEVICT_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target kvevict-quality >/dev/null
q="$build/bench/quality/kvevict-quality"
rows="window,streaming,h2o,keyformer,keyformer@recent=0.5,keyformer-nonoise,tova,snapkv,snapkv+pyramid"
out=bench/quality/results/smollm2
mkdir -p "$out"
# PARTS=retrieval, windows or long runs those parts only (their Markdown stays in $out for the assembly below).
parts=${PARTS:-retrieval,windows,long}
timed() {  # timed NAME CMD...: runs CMD, its stdout into $out/NAME.md, its wall time into $out/NAME.secs
  local name=$1 t0
  shift
  t0=$(date +%s)
  "$@" >"$out/$name.md"
  echo $(($(date +%s) - t0)) >"$out/$name.secs"
}
start=$(date +%s)
[[ $parts == *retrieval* ]] && timed retrieval "$q" --model "$model" --data "$data" --retrieval "$retrieval" \
  --prompt "$rprompt" --window "$((rprompt + 2))" --ratios 0.1,0.2 --policies "$rows" --seeds "$seeds" \
  --threads "$threads" --out "$out/smollm2" "$@"
[[ $parts == *windows* ]] && timed windows "$q" --model "$model" --data "$data" --windows "$windows" \
  --prompt "$prompt" --window "$((prompt + predict + 1))" --ratios 0.1,0.2,0.5 --policies "$rows,oracle" \
  --seeds "$seeds" --threads "$threads" --out "$out/smollm2" "$@"
[[ $parts == *long* ]] && timed long "$q" --model "$model" --data "$data" --windows "$long_windows" \
  --prompt "$long_prompt" --window "$((long_prompt + predict + 1))" --ratios 0.1,0.2,0.5 --policies "$rows,oracle" \
  --seeds "$seeds" --threads "$threads" --out "$out/smollm2_p$long_prompt" "$@"
end=$(date +%s)
gnuplot "$out/smollm2.gp"
[[ -f "$out/smollm2_p$long_prompt.gp" ]] && gnuplot "$out/smollm2_p$long_prompt.gp"
{
  echo "# Quality on a real model at long context: SmolLM2-135M-Instruct on python-howto"
  echo
  echo "Produced by \`WINDOWS=$windows PROMPT=$prompt PREDICT=$predict LONG_WINDOWS=$long_windows"
  echo "LONG_PROMPT=$long_prompt RETRIEVAL=$retrieval RPROMPT=$rprompt THREADS=$threads SEEDS=$seeds"
  echo "bash bench/quality/run_smollm2.sh $*\`: wall time retrieval $(cat "$out/retrieval.secs") s, windows"
  echo "$(cat "$out/windows.secs") s, P = $long_prompt windows $(cat "$out/long.secs") s, on $(nproc) cores"
  echo "($(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), model $(basename "$model"),"
  echo "kvevict-quality built with \`${cxx_flags:-no extra flags}\`."
  echo "Rows: \`keyformer\` = Keyformer (Gumbel noise, tau 1 -> 2, w = 0.3 k, $seeds seed(s));"
  echo "\`@recent=0.5\`: w = 0.5 k;"
  echo "\`snapkv\`: SnapKV prefill (L = min(32, k), K = 7, max pooling), H2O decode; \`+pyramid\`: PyramidKV"
  echo "per-layer budgets (same total); \`oracle\`: evicts what the full cache attends least over the rest of the"
  echo "window (a bound, not a policy). Per-window CSV: smollm2.csv; summary: smollm2_summary.csv; by distance:"
  echo "smollm2_recurrence.csv; windows: smollm2_windows.csv; retrieval answers: smollm2_retrieval.csv; the"
  echo "P = $long_prompt part: smollm2_p$long_prompt*.csv."
  echo
  echo "## Retrieval"
  echo
  cat "$out/retrieval.md"
  echo
  echo "## Teacher-forced windows, P = $prompt"
  echo
  cat "$out/windows.md"
  echo
  echo
  echo "### Keyformer against each row, paired per window (P = $prompt)"
  echo
  python3 bench/quality/paired_diff.py "$out/smollm2.csv" keyformer
  echo
  echo "## Teacher-forced windows, P = $long_prompt"
  echo
  cat "$out/long.md"
  echo
  echo "### Keyformer against each row, paired per window (P = $long_prompt)"
  echo
  python3 bench/quality/paired_diff.py "$out/smollm2_p$long_prompt.csv" keyformer
} >"$out/smollm2.md"
echo "wrote $out/smollm2.md ($((end - start)) s)" >&2
