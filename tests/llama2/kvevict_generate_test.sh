#!/bin/sh
# tests/llama2/kvevict_generate_test.sh — end-to-end checks of the kvevict-generate CLI.
# Usage: kvevict_generate_test.sh <kvevict-generate> <default shared dir> <repo root>
# Exit 0 pass, 1 fail, 77 skip (shared data missing and KVEVICT_REQUIRE_MODELS != 1).
set -u
gen=$1
shared=${KVEVICT_SHARED_DIR:-$2}
root=$3
fail() { echo "FAIL: $*"; exit 1; }

# A missing model exits with code 2 and says where to get one.
out=$(KVEVICT_MODEL_DIR=/nonexistent/kvevict "$gen" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "missing model: exit code $rc, expected 2 ($out)"
echo "$out" | grep -q 'karpathy/tinyllamas' || fail "missing model: the message does not say where to get it: $out"

# Bad arguments: exit 2 (usage error, as in every kvevict tool) with one line naming the option (a negative
# count must not wrap to 2^64 - 1).
for args in "--steps -1" "--steps abc" "--policy bogus" "--sinks -1"; do
  out=$("$gen" --prompt-ids 1 $args 2>&1)
  rc=$?
  [ "$rc" -eq 2 ] || fail "'$args': exit code $rc, expected 2 ($out)"
  opt=${args%% *}
  [ "$(echo "$out" | wc -l)" -eq 1 ] && echo "$out" | grep -q "^kvevict-generate: $opt" ||
    fail "'$args': expected one line naming $opt: $out"
done

model=$shared/models/stories260K
if [ ! -f "$model/stories260K.bin" ] || [ ! -f "$shared/reference/stories260K_greedy_from_bos.ids" ]; then
  [ "${KVEVICT_REQUIRE_MODELS:-}" = 1 ] && fail "shared data missing under $shared (KVEVICT_REQUIRE_MODELS=1)"
  echo "SKIP: no stories260K under $shared"
  exit 77
fi

# Greedy ids from a lone BOS, without the tokenizer, equal llama2.c's.
"$gen" --model "$model/stories260K.bin" --tokenizer /nonexistent.model --prompt-ids 1 --temperature 0 \
  --steps 511 --print-ids 2>/dev/null | diff -q - "$shared/reference/stories260K_greedy_from_bos.ids" >/dev/null ||
  fail "greedy ids from BOS differ from $shared/reference/stories260K_greedy_from_bos.ids"

# Keyformer at 50% of a real prompt: text, then one summary line with the retained entries and KV bytes.
prompt="Once upon a time, in a big forest, there lived a rhinoceros named Roxy. Roxy loved to climb. She climbed trees, rocks, and hills. One day, Roxy found an icy hill."
out=$(KVEVICT_MODEL_DIR=$model "$gen" --prompt "$prompt" --policy keyformer --budget 50% --steps 64 2>&1) ||
  fail "keyformer run failed: $out"
echo "$out" | grep -q '^Once upon a time, in a big forest' || fail "keyformer run: no text: $out"
echo "$out" | grep -Eq 'tok/s \| retained per layer: [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ of [0-9]+ \| KV held .* vs full ' ||
  fail "keyformer run: no summary line: $out"

# From the repository root, the default model location ../shared/models/stories260K is found.
if [ -f "$root/../shared/models/stories260K/stories260K.bin" ]; then
  (cd "$root" && env -u KVEVICT_MODEL_DIR "$gen" --steps 8 --temperature 0 >/dev/null 2>&1) ||
    fail "the default model location does not work from $root"
fi
echo "PASS"
