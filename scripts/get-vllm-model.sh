#!/usr/bin/env bash
# The HF safetensors folder vLLM loads SmolLM2-135M from, converted once from the GGUF scripts/get-models.sh
# fetches (SHA-256 checked there) by integrations/vllm/scripts/convert_gguf.py in the vLLM venv (float32).
# The folder: ${KVEVICT_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/models}/SmolLM2-135M-Instruct-hf-f32
# (517 MB); a finished conversion of the same file is reused. Stdout: the folder, one line.
set -euo pipefail
cd "$(dirname "$0")/.."
gguf="${KVEVICT_SMOLLM2_GGUF:-$(bash scripts/get-models.sh)}"
py="$(bash scripts/get-vllm-venv.sh)"
out="${KVEVICT_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/models}/SmolLM2-135M-Instruct-hf-f32"
"$py" integrations/vllm/scripts/convert_gguf.py "$gguf" "$out" 2> >(grep -v "it/s\]" >&2)
