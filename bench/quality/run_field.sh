#!/usr/bin/env bash
# Issue 35's rows on SmolLM2-135M-Instruct (Q4_1 GGUF, scripts/get-models.sh), beside the SmolLM2 report's
# (bench/quality/run_smollm2.sh, whose rows this does not rerun): SnapKV's pooling kernel, SnapKV's prefill
# composed with Keyformer's decode (kvevict::SnapKVKeyformer), Keyformer's noise scale and temperature as
# ablation rows, the needle retrieval on two prompt sets, and a second corpus of another genre (Python
# source code: bench/quality/get_code_corpus.sh). Each part is one kvevict-quality invocation comparing its
# rows with the same full-cache run as the report's (same windows, same ids: deterministic rows reproduce
# the report's to the last digit). Writes bench/quality/results/field/ (one CSV + Markdown per part, their
# wall times, and the Keyformer noise analysis of bench/quality/keyformer_noise.py) and prints nothing else.
#   PARTS=windows,ablation,retrieval,sweep,code,mean,knorm,keydiff,adakv,adaret,expatt,expret,noise (default all)   THREADS=2   BUILD_DIR=build-quality
#   (mean: 957 s + 1633 s + 1266 s on a shared machine; it writes the retrieval prompts' ids to $PROMPTS_OUT)
# About 60 minutes on 2 cores (windows 511 s, ablation 676 s, retrieval 2 x ~260 s, sweep 4 x ~190 s, code 745 s,
# noise ~300 s).
# The noise analysis needs NumPy: PYTHON (default: the venv of scripts/get-hf-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${THREADS:-2}
build=${BUILD_DIR:-build-quality}
parts=${PARTS:-windows,ablation,retrieval,sweep,code,mean,knorm,keydiff,adakv,adaret,expatt,expret,noise}
model=$(bash scripts/get-models.sh)
data=${KVEVICT_SHARED_DIR:-../shared}/data/python-howto
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="${QUALITY_CXX_FLAGS--march=native}" \
  -DKVEVICT_WERROR=OFF -DKVEVICT_BUILD_TESTS=OFF -DKVEVICT_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target kvevict-quality kvevict-generate >/dev/null
q="$build/bench/quality/kvevict-quality"
out=bench/quality/results/field
mkdir -p "$out"
timed() {  # timed NAME CMD...: stdout into $out/NAME.md, wall seconds into $out/NAME.secs
  local name=$1 t0
  shift
  t0=$(date +%s)
  "$@" >"$out/$name.md"
  echo $(($(date +%s) - t0)) >"$out/$name.secs"
}
windows=(--windows 12 --prompt 2048 --window 2304 --ratios 0.1,0.2,0.5 --seeds 1 --threads "$threads")
snap_rows="snapkv@kernel=11,snapkv@kernel=15,snapkv@decode=keyformer,snapkv@kernel=15@decode=keyformer"
if [[ $parts == *windows* ]]; then
  timed windows "$q" --model "$model" --data "$data" "${windows[@]}" --policies "h2o,snapkv,$snap_rows" \
    --out "$out/windows"
fi
if [[ $parts == *ablation* ]]; then  # Keyformer's noise scale; then tau held at 1 (noise on and off)
  timed ablation_noise "$q" --model "$model" --data "$data" "${windows[@]}" \
    --policies keyformer@noise=0.5,keyformer@noise=0.25,keyformer@noise=0.1 --out "$out/ablation_noise"
  timed ablation_tau "$q" --model "$model" --data "$data" "${windows[@]}" --policies keyformer,keyformer-nonoise \
    --tau-init 1 --tau-end 1 --out "$out/ablation_tau"
fi
if [[ $parts == *retrieval* ]]; then  # the report's 30 prompts (seed 1) and 30 others (seed 2)
  for seed in 1 2; do
    timed "retrieval_seed$seed" "$q" --model "$model" --data "$data" --retrieval 10 --retrieval-seed "$seed" \
      --prompt 2048 --window 2050 --ratios 0.1,0.2 --seeds 1 --threads "$threads" \
      --policies "h2o,keyformer,snapkv,snapkv@kernel=11,snapkv@kernel=15,snapkv@kernel=15@decode=keyformer" \
      --out "$out/retrieval_seed$seed"
  done
fi
if [[ $parts == *sweep* ]]; then  # how the kernel was found: set 1 only, SnapKV's kernel and recent window
  timed retrieval_recent "$q" --model "$model" --data "$data" --retrieval 10 --prompt 2048 --window 2050 \
    --ratios 0.1,0.2 --seeds 1 --threads "$threads" --policies snapkv,snapkv@recent=0.1,snapkv@recent=0.03 \
    --out "$out/retrieval_recent"
  for kernel in 11 15 21; do
    timed "retrieval_kernel$kernel" "$q" --model "$model" --data "$data" --retrieval 10 --prompt 2048 \
      --window 2050 --ratios 0.1,0.2 --seeds 1 --threads "$threads" --policies snapkv --snap-kernel "$kernel" \
      --out "$out/retrieval_kernel$kernel"
  done
fi
if [[ $parts == *code* ]]; then
  code=$(bash bench/quality/get_code_corpus.sh)
  timed code "$q" --model "$model" --data "$code" "${windows[@]}" \
    --policies "window,streaming,h2o,keyformer,keyformer-nonoise,tova,snapkv,snapkv@kernel=11,snapkv@kernel=15,snapkv@kernel=15@decode=keyformer" \
    --out "$out/code"
fi
if [[ $parts == *knorm* ]]; then  # the key norm (KeyNorm, a score from the keys alone), w = 0.3 k and w = 0 (kvpress's)
  timed knorm "$q" --model "$model" --data "$data" "${windows[@]}" --policies h2o,knorm,knorm@recent=0 \
    --out "$out/knorm"
fi
if [[ $parts == *keydiff* ]]; then  # KeyDiff (every held key against their mean unit key), w = 0.3 k and w = 0 (kvpress's)
  timed keydiff "$q" --model "$model" --data "$data" "${windows[@]}" --policies h2o,keydiff,keydiff@recent=0 \
    --out "$out/keydiff"
fi
if [[ $parts == *adakv* ]]; then  # AdaKV head-adaptive budgets (kvevict::HeadBudgets::adaptive) over H2O, H2OMean, SnapKV, Keyformer
  timed adakv "$q" --model "$model" --data "$data" "${windows[@]}" \
    --policies h2o,h2o+adakv,h2o+adakv@alpha=0.5,h2o+mean+adakv,snapkv+adakv@kernel=15,keyformer+adakv --out "$out/adakv"
fi
if [[ $parts == *adaret* ]]; then  # AdaKV on retrieval set 1 (the report's 30 prompts), SnapKV K = 15 beside it
  timed retrieval_adakv "$q" --model "$model" --data "$data" --retrieval 10 --retrieval-seed 1 --prompt 2048 \
    --window 2050 --ratios 0.1,0.2 --seeds 1 --threads "$threads" \
    --policies snapkv@kernel=15,snapkv+adakv@kernel=15,h2o+mean+adakv --out "$out/retrieval_adakv"
fi
if [[ $parts == *expatt* ]]; then  # Expected Attention (kvpress's defaults) alone and with AdaKV's budgets
  timed expected_attention "$q" --model "$model" --data "$data" "${windows[@]}" \
    --policies h2o,expected-attention,expected-attention+adakv --out "$out/expected_attention"
fi
if [[ $parts == *expret* ]]; then  # Expected Attention on retrieval set 1 (the report's 30 prompts)
  timed retrieval_expected_attention "$q" --model "$model" --data "$data" --retrieval 10 --retrieval-seed 1 \
    --prompt 2048 --window 2050 --ratios 0.1,0.2 --seeds 1 --threads "$threads" \
    --policies expected-attention,expected-attention+adakv --out "$out/retrieval_expected_attention"
fi
if [[ $parts == *mean* ]]; then  # mean attention (H2OMean, KeyformerMean): windows, code, retrieval set 1 (+ its ids)
  timed mean "$q" --model "$model" --data "$data" "${windows[@]}" \
    --policies h2o,h2o+mean,h2o+mean@recent=0,keyformer+mean,keyformer-nonoise+mean --out "$out/mean"
  timed code_mean "$q" --model "$model" --data "$(bash bench/quality/get_code_corpus.sh)" "${windows[@]}" \
    --policies h2o,h2o+mean,keyformer+mean --out "$out/code_mean"
  timed retrieval_mean_seed1 "$q" --model "$model" --data "$data" --retrieval 10 --retrieval-seed 1 --prompt 2048 \
    --window 2050 --ratios 0.1,0.2 --seeds 1 --threads "$threads" \
    --policies h2o+mean,keyformer-nonoise+mean,h2o,snapkv@kernel=15 --prompts-out "${PROMPTS_OUT:-/tmp/retrieval_prompts_seed1.txt}" \
    --out "$out/retrieval_mean_seed1"
fi
if [[ $parts == *noise* ]]; then  # one block's logits at a time over a 1179-token prompt (howto-argparse)
  py=${PYTHON:-$(bash scripts/get-hf-venv.sh)}
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  args=()
  for layer in 0 7 15 22 29; do
    "$build/tools/llama2/kvevict-generate" --model "$model" --prompt "$(head -c 4200 "$data/howto-argparse.rst")" \
      --steps 1 --policy full --dump-logits "$tmp/l$layer.npy" --dump-layer "$layer" --threads "$threads" >/dev/null
    args+=("$layer=$tmp/l$layer.npy")
  done
  timed noise "$py" bench/quality/keyformer_noise.py --group 3 --seeds 3 "${args[@]}"
fi
