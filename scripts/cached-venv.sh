# Sourced by scripts/get-hf-venv.sh and scripts/get-vllm-venv.sh: a virtual environment made once per key and
# reused from a cache folder. The caller defines die() and $PYTHON, and sets -euo pipefail.
#
#   venv_open NAME CACHE_DIR KEY_TEXT DESCRIPTION
#     venv = CACHE_DIR/NAME-<first 12 hex digits of sha256(KEY_TEXT plus a newline)>. When it holds a python and the file
#     .complete (every install in it succeeded), prints its python on stdout and exits 0 (the caller stops
#     there). Otherwise it takes the lock file <venv>.lock (flock, held until the caller exits: a second caller,
#     e.g. .ci/run's flavour waiting on the venv its background prefetch is making, waits there and then finds
#     the venv complete), removes any partial one, makes it anew with $PYTHON -m venv, and sets venv, pip (the
#     pip command array) and venv_start (seconds) for the caller's installs.
#   venv_close
#     marks the venv complete, reports time and size on stderr, prints its python on stdout.

venv_open() {
  local name=$1 root=$2 key_text=$3 what=$4 key
  venv_name=$name
  key="$(printf '%s\n' "$key_text" | sha256sum | cut -c1-12)"
  venv="$root/$name-$key"
  if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then
    echo "$venv/bin/python"
    exit 0
  fi
  mkdir -p "$root" || die "cannot create '$root'"
  exec {venv_lock}>"$venv.lock" || die "cannot open '$venv.lock'"
  if ! flock -n "$venv_lock"; then
    echo "get-$name.sh: waiting for another process making $venv" >&2
    flock "$venv_lock" || die "cannot lock '$venv.lock'"
  fi
  if [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; then  # made while this one waited
    echo "$venv/bin/python"
    exit 0
  fi
  rm -rf "$venv"
  echo "get-$name.sh: creating $venv ($what)" >&2
  venv_start=$(date +%s)
  "$PYTHON" -m venv "$venv" >&2 || die "'$PYTHON -m venv' failed"
  pip=("$venv/bin/python" -m pip --disable-pip-version-check --no-input)
}

venv_close() {
  touch "$venv/.complete"
  echo "get-$venv_name.sh: done in $(( $(date +%s) - venv_start )) s, $(du -sh "$venv" | cut -f1)" >&2
  echo "$venv/bin/python"
}
