#!/usr/bin/env bash
# Tests kvevict's vLLM plugin on vLLM's CPU backend:
#   1. gets the pinned vLLM venv (scripts/get-vllm-venv.sh; made once, then reused from its cache folder),
#   2. installs into it, as a user would, this checkout's kvevict (its wheel, scripts/kvevict-wheel.sh: built
#      once per source content, shared with the transformers flavour; the module the tests compare the
#      plugin's blocks with) and the plugin (pip install ./integrations/vllm),
#   3. converts SmolLM2-135M's GGUF into the HF folder vLLM loads (scripts/get-vllm-model.sh; once),
#   4. runs tests/vllm with pytest. Extra arguments go to pytest (e.g. -k policy -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh cmake g++ libeigen3-dev nlohmann-json3-dev
py=$(bash scripts/get-vllm-venv.sh)
wheel=$(bash scripts/kvevict-wheel.sh "$py")
# --force-reinstall: an edited checkout keeps its version number.
"$py" -m pip --disable-pip-version-check --no-input install --quiet --no-deps --force-reinstall "$wheel" \
  ./integrations/vllm
model=$(bash scripts/get-vllm-model.sh)
KVEVICT_VLLM_MODEL="$model" "$py" -m pytest -q -p no:cacheprovider tests/vllm "$@"
