#!/usr/bin/env bash
# Tests kvevict.transformers (KVEvictCache, a Hugging Face transformers Cache over kvevict caches):
#   1. gets the pinned venv (scripts/get-hf-venv.sh: torch, transformers, kvpress, gguf, numpy, pytest,
#      pybind11; made once, then reused from its cache folder),
#   2. installs this checkout into that venv as a user would: its wheel (scripts/kvevict-wheel.sh: pip wheel .,
#      scikit-build-core and pybind11 from PyPI, built once per source content and shared with the vLLM
#      flavour) with the extra "transformers" (its pins are already there, so nothing else is downloaded);
#      every bench and quality script then imports it from the venv,
#   3. runs tests/transformers with pytest (SmolLM2-135M: $KVEVICT_SMOLLM2_GGUF, as .ci/run exports it, else
#      scripts/get-models.sh; Gemma 3 270M: $KVEVICT_GEMMA3_GGUF, else scripts/get-models.sh gemma3-270m).
# The venv's folder is ${KVEVICT_HF_VENV_CACHE:-${XDG_CACHE_HOME:-~/.cache}/kvevict}/hf-venv-<hash of the pins>:
# cache that folder (keyed by scripts/get-hf-venv.sh's pins) to skip the install (152 s cold, 7.4 GB here).
# Extra arguments go to pytest (e.g. -k full -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh cmake g++ libeigen3-dev nlohmann-json3-dev
py=$(bash scripts/get-hf-venv.sh)
wheel=$(bash scripts/kvevict-wheel.sh "$py")
# --force-reinstall: an edited checkout keeps its version number; the second line checks the extra's pins.
"$py" -m pip --disable-pip-version-check --no-input install --quiet --no-deps --force-reinstall "$wheel"
"$py" -m pip --disable-pip-version-check --no-input install --quiet "$wheel[transformers]"
KVEVICT_SMOLLM2_GGUF="${KVEVICT_SMOLLM2_GGUF:-$(bash scripts/get-models.sh)}" \
  KVEVICT_GEMMA3_GGUF="${KVEVICT_GEMMA3_GGUF:-$(bash scripts/get-models.sh gemma3-270m)}" \
  "$py" -m pytest -q -p no:cacheprovider tests/transformers "$@"
