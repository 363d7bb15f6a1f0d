#!/usr/bin/env bash
# Tests kvevict.transformers (KVEvictCache, a Hugging Face transformers Cache over kvevict caches):
#   1. gets the pinned venv (scripts/get-hf-venv.sh: torch, transformers, kvpress, gguf, numpy, pytest,
#      pybind11; made once, then reused from its cache folder),
#   2. builds the module kvevict against that venv's interpreter and pybind11 in its own build folder
#      (${KVEVICT_HF_BUILD_DIR:-build-hf}, so the Debian-python build/ stays as it is),
#   3. runs tests/transformers with pytest (SmolLM2-135M: $KVEVICT_SMOLLM2_GGUF, as .ci/run exports it, else
#      scripts/get-models.sh; Gemma 3 270M: $KVEVICT_GEMMA3_GGUF, else scripts/get-models.sh gemma3-270m).
# The venv's folder is ${KVEVICT_HF_VENV_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kvevict}/hf-venv-<hash of the pins>:
# cache that folder (keyed by scripts/get-hf-venv.sh's pins) to skip the install (152 s cold, 7.4 GB here).
# Extra arguments go to pytest (e.g. -k full -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh cmake g++ libeigen3-dev nlohmann-json3-dev libcli11-dev
py=$(bash scripts/get-hf-venv.sh)
build=${KVEVICT_HF_BUILD_DIR:-build-hf}
pybind11_dir=$("$py" -m pybind11 --cmakedir)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVEVICT_BUILD_PYTHON=ON -DKVEVICT_BUILD_TESTS=OFF \
  -DKVEVICT_BUILD_EXAMPLES=OFF -DKVEVICT_BUILD_BENCH=OFF -DKVEVICT_BUILD_LLAMA2=OFF -DPython3_EXECUTABLE="$py" -Dpybind11_DIR="$pybind11_dir" \
  >/dev/null
cmake --build "$build" -j"$(nproc)" --target kvevict_python
KVEVICT_SMOLLM2_GGUF="${KVEVICT_SMOLLM2_GGUF:-$(bash scripts/get-models.sh)}" \
  KVEVICT_GEMMA3_GGUF="${KVEVICT_GEMMA3_GGUF:-$(bash scripts/get-models.sh gemma3-270m)}" \
  PYTHONPATH="$(pwd)/$build/python:$(pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$py" -m pytest -q -p no:cacheprovider tests/transformers "$@"
