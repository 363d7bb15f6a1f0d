#!/usr/bin/env bash
# The per-head decode step against the whole-layer one (issue 36), side by side in one run: for every policy
# at n = 4096 and 32768 (and 131072 for Keyformer and H2O; d = 128, g = 1, float, 8 KV heads), `XDecodeStep` (the attention streams the layer's
# K and V, then decode_step reads every logits row back) and `XDecodeStepHot` (each KV head scored right
# after its q·K: begin_decode_step / score_decode_head / end_decode_step), REPS repetitions each, randomly
# interleaved. Both run on the same layer and give the same bits (tests/per_head_step_test.cpp;
# bench/plain_build_check.sh checks the step's bits across builds).
# Builds kvevict_bench in build-bench as bench/run.sh does (-O3 -march=native), writes
# bench/results/issue36/hot_step.json and prints the table of bench/hot_step.py (medians of thread CPU time).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-5}
build_dir=${BUILD_DIR:-build-bench}
out=${OUT:-bench/results/issue36}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DKVEVICT_BENCH_NATIVE="${KVEVICT_BENCH_NATIVE:-ON}" >/dev/null
cmake --build "$build_dir" -j"$(nproc)" --target kvevict_bench >/dev/null
mkdir -p "$out"
"$build_dir/bench/kvevict_bench" --steps \
  --benchmark_filter='^(Keyformer|H2O|TOVA|StreamingLLM|Window)DecodeStep(Hot)?/float/n:(4096|32768)/d:128/g:1/' \
  --benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true \
  --benchmark_out="$out/hot_step.json" --benchmark_out_format=json >/dev/null
# n = 131072 (K and V of the layer: 1 GiB, beyond any L3): Keyformer and H2O, not interleaved (each policy's
# layer is filled once, about a minute, and shared by its two benchmarks).
if [[ ${LARGE:-1} == 1 ]]; then
  "$build_dir/bench/kvevict_bench" --steps \
    --benchmark_filter='^(Keyformer|H2O)DecodeStep(Hot)?/float/n:131072/d:128/g:1/' \
    --benchmark_repetitions="${LARGE_REPS:-3}" \
    --benchmark_out="$out/hot_step_131072.json" --benchmark_out_format=json >/dev/null
fi
python3 bench/hot_step.py "$out"/hot_step*.json | tee "$out/hot_step.md"
