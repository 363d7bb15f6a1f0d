#!/usr/bin/env bash
# Quality on Gemma 3 270M (issue 55; docs/quality-gemma3.md): kvevict's rows and kvpress's presses on the same
# Gemma 3 token ids (llama.cpp's tokenizer, a BOS per prompt), through transformers (KVEvictCache, kvpress 0.5.5):
#   1. NLL: WINDOWS (default 3) windows of P = PROMPT (default 2048) + BOS of the Python HOWTO documents, PREDICT (default 64) teacher-forced
#      predictions scored against the full cache, at r = 0.1, 0.2, 0.5; the prefill protocol (kvpress's own: the
#      prompt compressed, the cache then grows) for every row, the step protocol (kvevict's: k at every step) for
#      kvevict's rows (STEP=0 skips it); the oracle bound (prefill; ORACLE=0 skips it); RATIOS (default
#      "0.1 0.2 0.5"); bench/quality/kvpress/side_by_side.py --family gemma3;
#      KVEVICT_ROWS / KVPRESS_ROWS replace the row lists; PROMPT other than 2048 writes to results/gemma3/pPROMPT/ and
#      skips the needles;
#   2. needles: NEEDLES (default 3) prompts per depth (10/50/90 %) of kvevict-quality's needle task
#      (needle_prompts.py, 2048 tokens), answered greedily by the full cache and by each row at r = 0.1 and 0.2
#      (retrieval.py --family gemma3; the question is inside the compressed prompt: query-aware).
# Needs the transformers venv (scripts/get-hf-venv.sh) with kvevict installed (scripts/transformers-test.sh
# pip installs this checkout there) and kvevict-llama (scripts/llama-test.sh's build-llama) for the tokenizer. Resumable (results.csv per
# part); writes bench/quality/results/gemma3/{r0.1,r0.2,r0.5,needles}/ and summary_*.md. About 50 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PY:-$(bash scripts/get-hf-venv.sh)}
kvl=${LLAMA_BIN:-$(pwd)/build-llama/kvevict-llama}
prompt=${PROMPT:-2048}
out=bench/quality/results/gemma3
[ "$prompt" = 2048 ] || out=$out/p$prompt
windows=${WINDOWS:-3} predict=${PREDICT:-64} needles=${NEEDLES:-3} threads=${THREADS:-2}
sbs=(bench/quality/kvpress/side_by_side.py --family gemma3 --windows "$windows" --prompt "$prompt" --predict "$predict"
     --threads "$threads" --llama-bin "$kvl")
# kvevict's SnapKV three times: its own settings (L = min(32, k), kernel 7, max pooling, w = 30 % of k), kvpress's
# SnapKVPress settings (a 64-query window kept whole, kernel 5, mean pooling), and those with kvevict's w = 30 % of k.
snap=kvevict:snapkv@window=64@kernel=5@pooling=avg
kvevict_rows=${KVEVICT_ROWS:-kvevict:keyformer,kvevict:h2o,kvevict:h2o+mean,kvevict:tova,kvevict:streaming,kvevict:snapkv,$snap@recent=64t,$snap}
kvpress_rows=${KVPRESS_ROWS:-kvpress:snapkv,kvpress:streaming_llm,kvpress:tova,kvpress:expected_attention,kvpress:keydiff,kvpress:knorm}
oracle=oracle:attention,  # the bound (the prompt positions the full cache's predictions attend most), prefill only
[ "${ORACLE:-1}" = 1 ] || oracle=
for r in ${RATIOS:-0.1 0.2 0.5}; do
  "$py" "${sbs[@]}" --ratio "$r" --protocols prefill --rows "$oracle$kvevict_rows,$kvpress_rows" --out "$out/r$r"
  [ "${STEP:-1}" = 0 ] || "$py" "${sbs[@]}" --ratio "$r" --protocols step --rows "$kvevict_rows" --out "$out/r$r"
  "$py" "${sbs[@]}" --ratio "$r" --summary --out "$out/r$r" >"$out/summary_r$r.md"
done
[ "$prompt" = 2048 ] || exit 0  # the needles are 2048-token prompts
mkdir -p "$out/needles"
[ -s "$out/needles/prompts.txt" ] || "$py" bench/quality/kvpress/needle_prompts.py --family gemma3 --per-depth 10 \
  --llama-bin "$kvl" --out "$out/needles/prompts.txt"
# The first NEEDLES prompts of each depth (the file is depth-major, 10 per depth).
awk -v n="$needles" '($1 % 10) < n' "$out/needles/prompts.txt" >"$out/needles/subset.txt"
needle_run=(bench/quality/kvpress/retrieval.py --family gemma3 --prompts "$out/needles/subset.txt" --threads "$threads"
            --out "$out/needles")
"$py" "${needle_run[@]}" --ratios 0.1 --rows kvevict:full  # the full cache once (its answers do not depend on r)
"$py" "${needle_run[@]}" --ratios 0.1,0.2 \
  --rows kvevict:h2o,kvevict:keyformer,kvevict:streaming,kvevict:snapkv@kernel=15,kvpress:snapkv
"$py" bench/quality/kvpress/retrieval.py --prompts "$out/needles/subset.txt" --summary --out "$out/needles" \
  >"$out/summary_needles.md"
