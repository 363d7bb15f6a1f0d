#!/usr/bin/env bash
# Builds everything (Release, warnings as errors) and runs all tests with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# KVEVICT_BENCH_O2=OFF also in a build/ configured before it became opt-in (its cache kept ON): the -O2 copy of the
# benchmark suite is bench/run.sh --opt-levels' alone.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DKVEVICT_BENCH_O2=OFF >/dev/null
cmake --build build -j"$(nproc)"
ctest --test-dir build --output-on-failure -j"$(nproc)"
