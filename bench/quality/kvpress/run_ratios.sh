#!/usr/bin/env bash
# kvpress beside kvevict at every budget of issue 35 (r = 0.1, 0.2, 0.5), the prefill protocol (kvpress's own:
# prefill-only compression, the cache grows by the scored tokens), all 12 windows: every kvpress press and
# kvevict's H2O, H2OMean (+mean, with and without the recent window) and SnapKV K = 15 through KVEvictCache.
# r = 0.1 resumes bench/quality/results/kvpress (the report's file: only the rows missing there run);
# r = 0.2 and 0.5 write bench/quality/results/kvpress_r0.2 and kvpress_r0.5 (results.csv + summary.md).
# Resumable (side_by_side.py skips the lines already in results.csv). About 20 minutes per ratio on 2 cores.
#   RATIOS=0.1,0.2,0.5 (default)   THREADS=2   ROWS (side_by_side.py --rows; default the list above)
#   PY (default: the venv of scripts/get-hf-venv.sh). Two ratios may run at once (RATIOS=0.2 & RATIOS=0.5).
# Needs kvevict installed in that venv: bash scripts/transformers-test.sh pip installs this checkout there.
set -euo pipefail
cd "$(dirname "$0")/../../.."
py=${PY:-$(bash scripts/get-hf-venv.sh)}
threads=${THREADS:-2}
rows="kvpress:snapkv,kvpress:streaming_llm,kvpress:tova,kvpress:observed_attention,kvpress:keydiff"
rows+=",kvpress:expected_attention,kvpress:adakv_expected_attention,kvpress:pyramidkv,kvpress:knorm"
rows+=",kvevict:h2o,kvevict:h2o+mean,kvevict:h2o+mean@recent=0,kvevict:snapkv@kernel=15"
rows=${ROWS:-$rows}
IFS=, read -r -a ratios <<<"${RATIOS:-0.1,0.2,0.5}"
for r in "${ratios[@]}"; do
  out=bench/quality/results/kvpress
  [[ $r == 0.1 ]] || out=bench/quality/results/kvpress_r$r
  mkdir -p "$out"
  "$py" bench/quality/kvpress/side_by_side.py \
    --windows 12 --ratio "$r" --protocols prefill --threads "$threads" --rows "$rows" --out "$out" >/dev/null
  "$py" bench/quality/kvpress/side_by_side.py \
    --ratio "$r" --out "$out" --summary >"$out/summary.md"
done
