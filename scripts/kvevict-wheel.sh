#!/usr/bin/env bash
# Builds this checkout's kvevict wheel once and prints its path: scripts/kvevict-wheel.sh PYTHON.
# The transformers and vLLM flavours both install kvevict into a venv of their own; building the module once
# (about 100 s on 2 cores) and installing the same wheel into both is what `pip install .` in each would give,
# at half the cost. The wheel is kept in build-wheel/<key>/, where the key hashes the contents of every file
# the wheel is built from (the sdist's sources: include/, python/, tools/, cmake/, the top CMakeLists.txt,
# pyproject.toml, docs/python.md; tracked or not, edited or not) and PYTHON's interpreter tag, so an edit or
# another Python builds a new one. The build runs in pip's isolated build environment (scikit-build-core and
# pybind11 from PyPI: a pybind11 new enough for NumPy 1 and 2, unlike Debian's 2.10).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:?usage: scripts/kvevict-wheel.sh PYTHON (the venv interpreter that will install the wheel)}
tag=$("$py" -c 'import sys; print(sys.implementation.cache_tag)')
key=$( { echo "$tag"
         git ls-files -co --exclude-standard -z -- include python tools cmake CMakeLists.txt pyproject.toml \
             docs/python.md | sort -z | xargs -0 sha256sum; } | sha256sum | cut -c1-12)
dir="build-wheel/$key"
wheel=$(ls "$dir"/kvevict-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  rm -rf "$dir.partial"
  "$py" -m pip --disable-pip-version-check --no-input wheel --quiet --no-deps . -w "$dir.partial" >&2
  rm -rf "$dir" && mv "$dir.partial" "$dir"
  wheel=$(ls "$dir"/kvevict-*.whl | head -1)
fi
echo "$wheel"
