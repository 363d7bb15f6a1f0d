#!/usr/bin/env bash
# Paged rows of the quality report: token- vs page-granular eviction at page sizes 8 and 16,
# r = 0.2 and 0.5, on the same 32 windows, seeds and settings as quality.md (so quality.md's numbers
# stay as committed). Five runs of kvevict-quality: --shared-heads on the contiguous layout (what the
# paged token unit must equal), then --kv-layout paged --page-size {8,16} --evict-unit {token,page}.
# Writes bench/quality/results/paged/<run>.{md,csv,_summary.csv} and the combined table
# bench/quality/results/paged.md, which also quotes the per-KV-head rows of quality_summary.csv.
# Extra arguments go to every kvevict-quality run (e.g. --threads 2).
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target kvevict-quality
res=bench/quality/results
out=$res/paged
mkdir -p "$out"
runs=("shared-heads|--shared-heads"
      "paged-ps8-token|--kv-layout paged --page-size 8 --evict-unit token"
      "paged-ps8-page|--kv-layout paged --page-size 8 --evict-unit page"
      "paged-ps16-token|--kv-layout paged --page-size 16 --evict-unit token"
      "paged-ps16-page|--kv-layout paged --page-size 16 --evict-unit page")
start=$SECONDS
for r in "${runs[@]}"; do
  name=${r%%|*}
  flags=${r#*|}
  t0=$SECONDS
  # shellcheck disable=SC2086  # $flags is a list of flags
  ./build/bench/quality/kvevict-quality --ratios 0.2,0.5 --out "$out/$name" $flags "$@" >"$out/$name.md"
  rm -f "$out/$name.gp" "$out/$name"_plot.dat
  echo "$name: $((SECONDS - t0)) s" >&2
done
wall=$((SECONDS - start))

# Combined table: one row per policy and KV layout; ΔNLL (paired, nats/token), KL(full || policy) (nats)
# and top-1 agreement at r = 0.2 and 0.5, each ± its standard error over the 32 windows.
{
  head -n 1 "$out/shared-heads.md"
  echo "Token- vs page-granular eviction: r = 0.2 (k = 51) and r = 0.5 (k = 128); per KV head = the"
  echo "contiguous rows of quality_summary.csv (same windows and seeds); every other row selects once per layer."
  echo "Produced by \`bench/quality/run_paged.sh --threads 2\` (wall time ${wall} s on the shared 2-core machine)."
  echo
  echo "| policy | KV layout | ΔNLL r = 0.2 | ΔNLL r = 0.5 | KL r = 0.2 | KL r = 0.5 | top-1 r = 0.2 | top-1 r = 0.5 |"
  echo "|---|---|---|---|---|---|---|---|"
  awk -F, -v runs="per KV head=$res/quality_summary.csv;shared heads=$out/shared-heads_summary.csv;paged token, page 8=$out/paged-ps8-token_summary.csv;paged page, page 8=$out/paged-ps8-page_summary.csv;paged token, page 16=$out/paged-ps16-token_summary.csv;paged page, page 16=$out/paged-ps16-page_summary.csv" '
    BEGIN {
      n = split(runs, list, ";")
      for (i = 1; i <= n; ++i) {
        split(list[i], kv, "="); label[i] = kv[1]; file = kv[2]
        while ((getline line < file) > 0) {
          split(line, f, ",")
          if (f[1] == "policy" || (f[2] != "0.2" && f[2] != "0.5")) continue
          if (!(f[1] in seen)) { seen[f[1]] = 1; policies[++np] = f[1] }
          key = i SUBSEP f[1] SUBSEP f[2]
          dnll[key] = sprintf("%+.4f ± %.4f", f[6], f[7]); kl[key] = sprintf("%.4f ± %.4f", f[8], f[9])
          top[key] = sprintf("%.3f ± %.3f", f[10], f[11])
        }
        close(file)
      }
      for (p = 1; p <= np; ++p)
        for (i = 1; i <= n; ++i) {
          a = i SUBSEP policies[p] SUBSEP "0.2"; b = i SUBSEP policies[p] SUBSEP "0.5"
          printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", policies[p], label[i], dnll[a], dnll[b], kl[a], kl[b], top[a], top[b]
        }
    }'
} >"$res/paged.md"
echo "wrote $res/paged.md ($wall s)" >&2
