#!/usr/bin/env bash
# Quality report: builds kvevict-quality and runs it from the repository root
# (default 32 windows, under 10 minutes on 2 cores; pass --windows all for the
# whole text), then renders the plot. Extra arguments go to kvevict-quality.
set -euo pipefail
cd "$(dirname "$0")/../.." && bash scripts/deps.sh && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build -j"$(nproc)" --target kvevict-quality && mkdir -p bench/quality/results && ./build/bench/quality/kvevict-quality --out bench/quality/results/quality "$@" | tee bench/quality/results/quality.md && gnuplot bench/quality/results/quality.gp && echo "plot: bench/quality/results/quality.png" >&2
