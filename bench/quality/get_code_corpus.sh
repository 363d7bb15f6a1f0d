#!/usr/bin/env bash
# The quality report's second corpus, of another genre than ../shared/data/python-howto (technical prose):
# Python source code, the modules of requests 2.32.3 (Apache-2.0), from its source distribution on PyPI.
# Fetched once with pip (`pip download --no-deps --no-binary :all: requests==2.32.3`), its SHA-256 checked,
# and each module longer than 8 KB written as NAME.py.txt (kvevict-quality --data DIR reads *.txt files,
# each tokenized whole, windows never crossing a file) into
#   ${KVEVICT_CORPUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/corpora}/requests-2.32.3/
# with the package's LICENSE beside them. Never committed.
# Stdout: that folder, one line. Everything else goes to stderr. PYTHON picks pip's interpreter (python3).
set -euo pipefail
readonly NAME=requests VERSION=2.32.3
readonly SHA256=55365417734eb18255590a9ff9eb97e9e1da868d4ccd6402399eaf68af20a760
root="${KVEVICT_CORPUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvevict/corpora}"
out="$root/$NAME-$VERSION"
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "get_code_corpus.sh: downloading $NAME==$VERSION (sdist, no dependencies) ..." >&2
"${PYTHON:-python3}" -m pip download --quiet --no-deps --no-binary :all: "$NAME==$VERSION" -d "$tmp" >&2
sdist="$tmp/$NAME-$VERSION.tar.gz"
[ -f "$sdist" ] || { echo "get_code_corpus.sh: pip did not write $sdist" >&2; exit 1; }
got=$(sha256sum "$sdist" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
  echo "get_code_corpus.sh: SHA-256 of $sdist is $got, expected $SHA256" >&2
  exit 1
fi
tar xzf "$sdist" -C "$tmp"
rm -rf "$out"
mkdir -p "$out"
src="$tmp/$NAME-$VERSION/src/$NAME"
for f in "$src"/*.py; do
  [ "$(wc -c <"$f")" -ge 8192 ] && cp "$f" "$out/$(basename "$f").txt"
done
cp "$tmp/$NAME-$VERSION/LICENSE" "$out/LICENSE"
touch "$out/.complete"
echo "get_code_corpus.sh: stored $(ls "$out"/*.txt | wc -l) modules in $out" >&2
echo "$out"
