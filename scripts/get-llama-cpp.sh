#!/usr/bin/env bash
# Fetches llama.cpp's source and builds its CPU library once, for integrations/llama.cpp (issue 33).
#
# The source is the PyPI source distribution llama-cpp-python==0.3.36, which carries llama.cpp's whole
# tree (MIT) under vendor/llama.cpp. `python3 -m pip download --no-deps --no-binary llama-cpp-python` fetches it
# (pip prepares the sdist's metadata in an isolated environment with scikit-build-core from a wheel;
# nothing is built or installed), its SHA-256 is checked, and
# vendor/llama.cpp is built with CMake: the CPU backend only, GGML_NATIVE=OFF (the library does not
# depend on the CPU it was built on), no curl, no examples, tests, tools or server; static libraries.
# The result is installed into
#   ${KVEVICT_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/llama.cpp}/<sha256>/
# and reused when present (a prefix is complete when its .complete marker exists).
#
# Stdout: the install prefix, one line (pass it to CMake as CMAKE_PREFIX_PATH). Everything else goes
# to stderr. Exit 1: download, unpack or build failed; 2: checksum mismatch.
# Environment: KVEVICT_LLAMA_JOBS (parallel build jobs, default 2); KVEVICT_LLAMA_SDIST (an already
# downloaded llama_cpp_python-0.3.36.tar.gz to use instead of pip; its SHA-256 is checked all the same).
set -euo pipefail

readonly PACKAGE="llama-cpp-python==0.3.36"
readonly SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

die() { echo "get-llama-cpp.sh: $1" >&2; exit "${2:-1}"; }

cache="${KVEVICT_LLAMA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/llama.cpp}"
prefix="$cache/$SHA256"
if [ -f "$prefix/.complete" ]; then
  echo "$prefix"
  exit 0
fi

command -v python3 >/dev/null || die "python3 is not on PATH (needed for 'python3 -m pip download')"
command -v cmake >/dev/null || die "cmake is not on PATH"
mkdir -p "$cache" || die "cannot create the cache folder '$cache'"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/kvevict-llama-cpp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

start=$(date +%s)
if [ -n "${KVEVICT_LLAMA_SDIST:-}" ]; then
  sdist="$KVEVICT_LLAMA_SDIST"
  [ -f "$sdist" ] || die "KVEVICT_LLAMA_SDIST='$sdist' is not a file"
else
  echo "get-llama-cpp.sh: downloading $PACKAGE (source distribution, no dependencies) ..." >&2
  python3 -m pip download --no-deps --no-binary llama-cpp-python --no-cache-dir \
    --disable-pip-version-check --retries 2 -q -d "$tmp/dl" "$PACKAGE" >&2 \
    || die "'python3 -m pip download --no-deps --no-binary llama-cpp-python $PACKAGE' failed"
  sdist="$(ls "$tmp"/dl/llama_cpp_python-0.3.36.tar.gz 2>/dev/null || true)"
  [ -n "$sdist" ] || die "pip did not leave llama_cpp_python-0.3.36.tar.gz in $tmp/dl"
fi
got="$(sha256sum "$sdist" | cut -d' ' -f1)"
[ "$got" = "$SHA256" ] || die "SHA-256 of $(basename "$sdist") is $got, expected $SHA256" 2

echo "get-llama-cpp.sh: unpacking vendor/llama.cpp ..." >&2
tar -xzf "$sdist" -C "$tmp" --wildcards 'llama_cpp_python-0.3.36/vendor/llama.cpp/*' \
  || die "cannot unpack vendor/llama.cpp from $(basename "$sdist")"
src="$tmp/llama_cpp_python-0.3.36/vendor/llama.cpp"
[ -f "$src/include/llama.h" ] || die "the sdist has no vendor/llama.cpp/include/llama.h"

echo "get-llama-cpp.sh: building llama.cpp's CPU library (${KVEVICT_LLAMA_JOBS:-2} jobs) ..." >&2
rm -rf "$prefix.partial"
cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix.partial" \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF \
  -DGGML_OPENMP=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_OPENSSL=OFF -DGGML_BUILD_TESTS=OFF \
  -DGGML_BUILD_EXAMPLES=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON >"$tmp/configure.log" 2>&1 \
  || { tail -30 "$tmp/configure.log" >&2; die "configuring llama.cpp failed"; }
cmake --build "$tmp/build" -j "${KVEVICT_LLAMA_JOBS:-2}" >"$tmp/build.log" 2>&1 \
  || { tail -30 "$tmp/build.log" >&2; die "building llama.cpp failed"; }
cmake --install "$tmp/build" >"$tmp/install.log" 2>&1 \
  || { tail -30 "$tmp/install.log" >&2; die "installing llama.cpp failed"; }
rm -rf "$prefix"
mv "$prefix.partial" "$prefix"
touch "$prefix/.complete"
echo "get-llama-cpp.sh: built and installed in $(( $(date +%s) - start )) s" >&2
echo "$prefix"
