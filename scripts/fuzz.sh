#!/usr/bin/env bash
# Builds only the libFuzzer targets (fuzz/, clang++, -fsanitize=fuzzer,address,undefined) in
# build-fuzz/ and runs each for a bounded time with `ctest -L fuzz`; fails on any finding.
# FUZZ_SECONDS sets the seconds per target (default 40; nine targets, two at a time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
seconds="${FUZZ_SECONDS:-40}"
CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVEVICT_FUZZ=ON \
      -DKVEVICT_FUZZ_SECONDS="$seconds" -DKVEVICT_BUILD_TESTS=OFF -DKVEVICT_BUILD_EXAMPLES=OFF \
      -DKVEVICT_BUILD_TOOLS=OFF -DKVEVICT_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_targets
ctest --test-dir build-fuzz -L fuzz --output-on-failure -j"$(nproc)"
