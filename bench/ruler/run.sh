#!/usr/bin/env bash
# RULER-style quality on SmolLM2-135M (issue 54; docs/quality-ruler.md): regenerates the prompts (bench/ruler/ruler.py,
# deterministic per seed), runs the full cache and kvevict's rows, then kvpress's presses on the same token ids, under
# both protocols (query-aware: the question compressed with the context; query-agnostic: the context compressed
# first, the question appended), and writes the tables (summary.md) and one plot per protocol (aware.png,
# agnostic.png) in bench/ruler/results/smollm2/.
#
#   bash bench/ruler/run.sh                       # kvevict's rows and the full cache
#   PART=kvpress bash bench/ruler/run.sh          # kvpress's presses on the same ids (KVzip included)
#   SAMPLES=3 RATIOS=0.25,0.5,0.75,0.875 bash bench/ruler/run.sh
#
# Env: SAMPLES (per task, default 1), RATIOS (compression ratios, default 0.5,0.75), LENGTH (default 4096),
# THREADS (default 2), KVEVICT_ROWS / KVPRESS_ROWS (run.py --rows), OUT. Resumable (results.csv). Needs the
# transformers venv with kvevict installed (bash scripts/transformers-test.sh installs this checkout there).
# Cost on the 2-core machine at 4K, per row: the full cache 8-20 s, kvevict SnapKV 25-36 s, kvpress SnapKV 10-14 s,
# KVzip (either library's: the reconstruction is a second prefill) 50-100 s; a sample the full cache scores 0 on
# is skipped for the other rows. The defaults (11 tasks x 1 sample x 2 ratios x 2 protocols) take about 75 minutes
# for kvevict's part and about 60 for kvpress's.
set -euo pipefail
cd "$(dirname "$0")/../.."
py=${PY:-$(bash scripts/get-hf-venv.sh)}
out=${OUT:-bench/ruler/results/smollm2}
part=${PART:-kvevict}
common=(bench/ruler/run.py --samples "${SAMPLES:-1}" --ratios "${RATIOS:-0.5,0.75}" --length "${LENGTH:-4096}"
        --threads "${THREADS:-2}" --out "$out")
case "$part" in
  kvevict) "$py" "${common[@]}" --rows "full,${KVEVICT_ROWS:-kvevict:kvzip@layers=shared@heads=shared,kvevict:snapkv@kernel=15}" ;;
  kvpress) "$py" "${common[@]}" --rows "full,${KVPRESS_ROWS:-kvpress:snapkv,kvpress:kvzip}" ;;
  *) echo "run.sh: PART must be kvevict or kvpress (got '$part')" >&2; exit 2 ;;
esac
"$py" bench/ruler/report.py "$out" >/dev/null
echo "run.sh: $out/summary.md, $out/aware.png, $out/agnostic.png" >&2
