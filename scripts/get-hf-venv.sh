#!/usr/bin/env bash
# Creates (once) the virtual environment that kvevict.transformers, its tests (tests/transformers),
# its speed bench (bench/transformers) and the kvpress side by side (bench/quality/kvpress) run in:
# PyTorch, transformers, kvpress, gguf (transformers' GGUF loader), NumPy, pytest and pybind11 at the
# pinned versions below; wonderwords (RULER's word lists, bench/ruler) and matplotlib (its plots).
#
# The venv lives under ${KVEVICT_HF_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict}/hf-venv-<hash>,
# <hash> being a hash of the pins and of the interpreter's version: a venv already there is reused as it
# is (CI caches that folder by the same key), a change of a pin makes a new one. A venv counts as there
# only once every install in it succeeded (it then holds the file .complete); a partial one is removed
# and made again.
#
# PyTorch comes from PyTorch's CPU index when it can be reached (about 200 MB); otherwise from PyPI's
# default index, whose Linux wheel pulls the CUDA libraries (about 4 GB more, minutes of download).
#
# Stdout: the venv's python executable, one line, nothing else. Everything else goes to stderr.
# PYTHON=/path/to/python3 picks the interpreter the venv is made from (default: python3 on PATH).
set -euo pipefail

readonly PINS=(
  "torch==2.10.0"
  "transformers==5.2.0"
  "kvpress==0.5.5"
  "gguf==0.17.1"
  "numpy==2.3.5"
  "pytest==8.4.2"
  "pybind11==2.13.6"
  "wonderwords==2.2.0"
  "matplotlib==3.10.8"
)
readonly TORCH_CPU_INDEX="https://download.pytorch.org/whl/cpu"

die() { echo "get-hf-venv.sh: $1" >&2; exit 1; }

PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || die "'$PYTHON' is not on PATH"
pyver="$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
source "$(dirname "$0")/cached-venv.sh"
venv_open hf-venv "${KVEVICT_HF_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict}" \
  "$(printf '%s\n' "python $pyver" "${PINS[@]}")" "python $pyver; ${PINS[*]}"
torch_pin="${PINS[0]}"
if "${pip[@]}" install --retries 1 --timeout 30 --index-url "$TORCH_CPU_INDEX" "$torch_pin" >&2; then
  echo "get-hf-venv.sh: $torch_pin from PyTorch's CPU index" >&2
else
  echo "get-hf-venv.sh: PyTorch's CPU index cannot be reached; $torch_pin from PyPI (with its CUDA wheels)" >&2
  "${pip[@]}" install "$torch_pin" >&2 || die "pip install $torch_pin failed"
fi
"${pip[@]}" install "${PINS[@]}" >&2 || die "pip install ${PINS[*]} failed"
venv_close
