#!/usr/bin/env bash
# Builds and tests kvevict inside llama.cpp (integrations/llama.cpp, issue 33), from the repository root:
#   1. scripts/get-llama-cpp.sh: llama.cpp's CPU library, built once and cached by its sdist's SHA-256;
#   2. scripts/get-models.sh: SmolLM2-135M's GGUF (cached), unless KVEVICT_SMOLLM2_GGUF names one or
#      KVEVICT_LLAMA_NO_SMOLLM2=1 (its cases are then skipped); the same for Gemma 3 270M's (a model with
#      sliding-window layers; KVEVICT_GEMMA3_GGUF, KVEVICT_LLAMA_NO_GEMMA3=1);
#   3. configures integrations/llama.cpp in ${BUILD_DIR:-build-llama} with -Werror on our code (llama.cpp's
#      headers are SYSTEM), builds it with ${JOBS:-2} jobs and runs its ctest cases (label llama).
# Needs cmake, g++, python3 (pip for the downloads; json for a test), Eigen 3.4, CLI11 and nlohmann-json
# (Debian: libeigen3-dev libcli11-dev nlohmann-json3-dev), and the shared data in
# ${KVEVICT_SHARED_DIR:-../shared} (models/stories260K, data/tinystories-val, data/python-howto).
# Exit status: ctest's (0: every case passed), or the failing step's.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
build=${BUILD_DIR:-build-llama}
jobs=${JOBS:-2}
prefix=$(bash scripts/get-llama-cpp.sh)
smollm2=${KVEVICT_SMOLLM2_GGUF:-}
if [ -z "$smollm2" ] && [ "${KVEVICT_LLAMA_NO_SMOLLM2:-0}" != 1 ]; then
  smollm2=$(bash scripts/get-models.sh)
fi
gemma3=${KVEVICT_GEMMA3_GGUF:-}
if [ -z "$gemma3" ] && [ "${KVEVICT_LLAMA_NO_GEMMA3:-0}" != 1 ]; then
  gemma3=$(bash scripts/get-models.sh gemma3-270m)
fi
shared=${KVEVICT_SHARED_DIR:-$(pwd)/../shared}
cmake -S integrations/llama.cpp -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DKVEVICT_WERROR=ON -DKVEVICT_SHARED_DIR="$shared" -DKVEVICT_SMOLLM2_GGUF="$smollm2" -DKVEVICT_GEMMA3_GGUF="$gemma3" >/dev/null
cmake --build "$build" -j "$jobs"
rc=0
ctest --test-dir "$build" --output-on-failure -L llama || rc=$?
echo "llama-test.sh: $(( $(date +%s) - start )) s (exit $rc)" >&2
exit $rc
