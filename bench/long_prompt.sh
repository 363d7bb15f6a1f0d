#!/usr/bin/env bash
# Long-prompt prefill benchmarks, each in its own process so that its peak
# resident memory (ru_maxrss) is its own. Usage: bench/long_prompt.sh [path/to/kvevict_bench]
# Prints one line per benchmark: name, scoring time, kept tokens, logits / K,V / peak memory.
set -euo pipefail
bench=${1:-build/bench/kvevict_bench}
for P in 2048 8192 32768; do
  for mode in OneShot Chunked ChunkedQK Bounded BoundedQK; do
    name="LongPrompt/$mode/P:$P"
    out=$("$bench" --long-prompt --benchmark_filter="^${name}/" --benchmark_format=csv 2>/dev/null | grep "^\"$name/" || true)
    if [ -z "$out" ]; then
      echo "$name,skipped (one-shot logits would need $((P * P * 8 * 4 / 1073741824)) GiB)"
    else
      echo "$out"
    fi
  done
done
