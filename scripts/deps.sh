#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages kvevict's build, tests, examples and
# benchmarks need, if any is missing, plus any package named as an argument
# (e.g. scripts/python-test.sh adds the Python ones). Uses sudo when not root.
set -euo pipefail
packages=(build-essential cmake clang libclang-rt-14-dev libeigen3-dev googletest libgtest-dev libbenchmark-dev
          libsentencepiece-dev libpcre2-dev libcli11-dev nlohmann-json3-dev gnuplot-nox python3 ccache "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
