#!/usr/bin/env bash
# Builds the Python module kvevict (build/python) and the two C++ tools its tests compare with
# (kvevict-replay, kvevict-generate), then runs the Python tests (tests/python) with pytest.
# It installs python3-torch when missing (as CI does), so that the PyTorch example and its test run;
# KVEVICT_NO_TORCH=1 leaves PyTorch out (its test is then skipped, saying so).
# Uses /usr/bin/python3, the Debian interpreter with NumPy, PyTorch and pytest (a python3 first
# on PATH, e.g. pyenv's, may lack them); override with PYTHON=/path/to/python3.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-/usr/bin/python3}
packages=(pybind11-dev python3-dev python3-numpy python3-pytest)
[ "${KVEVICT_NO_TORCH:-}" = 1 ] || packages+=(python3-torch)
bash scripts/deps.sh "${packages[@]}"
BUILD=${KVEVICT_BUILD_DIR:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DKVEVICT_BUILD_PYTHON=ON -DPython3_EXECUTABLE="$PYTHON" >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target kvevict_python kvevict-replay kvevict-generate
KVEVICT_BUILD_DIR="$(cd "$BUILD" && pwd)" PYTHONPATH="$(cd "$BUILD" && pwd)/python${PYTHONPATH:+:$PYTHONPATH}" \
  "$PYTHON" -m pytest -q -p no:cacheprovider tests/python "$@"
