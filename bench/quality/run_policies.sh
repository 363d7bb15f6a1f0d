#!/usr/bin/env bash
# Policies and ablations: every row at one budget, one invocation of kvevict-quality, so all
# rows share one full-cache reference per window. Rows: window, streaming, tova, h2o, keyformer (recent
# 30% of k, --seeds seeds), keyformer at recent 0.5 / 0.7, keyformer without noise, snapkv, h2o and
# keyformer with PyramidKV per-layer budgets, shared vs per-KV-head selection, positions re-indexed,
# bounded prefill (C = 32), and the oracle bound. Keyformer variant rows run VARIANT_SEEDS seeds (default 3).
# Writes bench/quality/results/policies.md (+ the CSVs under bench/quality/results/policies/) with the
# command and its wall time; with RATIOS other than 0.5 (e.g. RATIOS=0.2) policies_r0.2.md and
# policies_r0.2/ instead, so that the committed r = 0.5 report stays. Extra arguments go to
# kvevict-quality, e.g.:  nohup nice -n 5 bash bench/quality/run_policies.sh --windows 256 --threads 2 &
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j2 --target kvevict-quality >/dev/null
ratios=${RATIOS:-0.5}
vs=${VARIANT_SEEDS:-3}
rows="window,streaming,tova,h2o,keyformer,keyformer@recent=0.5@seeds=$vs,keyformer@recent=0.7@seeds=$vs"
rows+=",keyformer-nonoise,snapkv,h2o+pyramid,keyformer+pyramid@seeds=$vs"
rows+=",h2o+shared,keyformer+shared@seeds=$vs,h2o+reindexed,keyformer+reindexed@seeds=$vs"
rows+=",h2o+bounded32,keyformer+bounded32@seeds=$vs,oracle"
res=bench/quality/results
name=policies
[ "$ratios" = 0.5 ] || name=policies_r${ratios//,/_}
out=$res/$name
mkdir -p "$out"
start=$(date +%s)
./build/bench/quality/kvevict-quality --ratios "$ratios" --policies "$rows" --out "$out/$name" "$@" >"$out/$name.md"
secs=$(( $(date +%s) - start ))
rm -f "$out/$name.gp" "$out/${name}_plot.dat"
{
  echo "# Policies and ablations"
  echo
  echo "Produced by \`RATIOS=$ratios VARIANT_SEEDS=$vs bash bench/quality/run_policies.sh $*\`: wall time ${secs} s"
  echo "($(( secs / 60 )) min) on the shared 2-core machine, one kvevict-quality invocation (every row is compared"
  echo "with the same full-cache run of each window). Row names are the --policies specs: \`keyformer\` is"
  echo "Keyformer at recent 30% of k (the default, i.e. the recent-0.3 row); \`@seeds=$vs\`: Keyformer variant rows"
  echo "average $vs noise seeds, the main \`keyformer\` row the --seeds count in the first line below;"
  echo "\`+pyramid\`: PyramidKV per-layer budgets (same total); \`+shared\`: one selection per layer for all KV"
  echo "heads; \`+reindexed\`: positions re-indexed after every eviction; \`+bounded32\`: bounded prefill in"
  echo "chunks of 32; \`oracle\`: evicts the token the full cache attends least over the rest of the window"
  echo "(a reference bound, not a policy). CSVs: $name/$name.csv (per window), $name/${name}_summary.csv."
  echo
  cat "$out/$name.md"
} >"$res/$name.md"
echo "wrote $res/$name.md (${secs} s)" >&2
