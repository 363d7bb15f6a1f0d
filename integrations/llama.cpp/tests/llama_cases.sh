#!/usr/bin/env bash
# The integration's test cases (issue 33), one per ctest: bash llama_cases.sh CASE.
# Environment (set by tests/CMakeLists.txt): KVL (kvevict-llama), KVR (kvevict-replay), EXAMPLE
# (kvevict-llama-example), MODEL (stories260K.gguf), TEXT (tinystories_val.txt), HOWTO (a python-howto
# document), SMOLLM2 (SmolLM2-135M GGUF, or empty: its cases are skipped with exit 77), WORK (scratch folder).
# GEN (kvevict-generate, or empty: the independent_logits cases are skipped with exit 77), CHECK_TRACE
# (kvevict-llama-check-trace, tests/check_trace.cpp).
# Every run uses --threads 1: the ids are the same for any count, and 2 busy cores make llama.cpp's
# spinning threads slow.
set -euo pipefail
case_name=$1
mkdir -p "$WORK/$case_name"
w="$WORK/$case_name"
fail() { echo "FAIL: $*" >&2; exit 1; }

need_gemma3() { [ -n "${GEMMA3:-}" ] || { echo "Gemma 3 270M GGUF not given (KVEVICT_GEMMA3_GGUF)"; exit 77; }; }

# After k256_on on a model with sliding-window layers (window W): kvevict-llama checked at every step that the
# sliding layers' mask showed exactly the held positions within the window, so a position kvevict drops leaves the
# sliding cache too (llama.cpp's iSWA memory: llama_memory_seq_rm removes it from both caches). Here the count it
# printed for the last step is recomputed from the kept sets: the step before's kept set and the new position,
# those within (t - W, t]. With k < W, the window held positions kvevict dropped, so the count is below W.
sliding_cells() {  # W
  python3 - "$w/kept.jsonl" "$w/summary.txt" "$1" <<'PY'
import json, re, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
W = int(sys.argv[3])
t = lines[-1]["t"]
held = set(lines[-2]["kept"][0]) | {t}
expected = sum(1 for p in held if p > t - W)
seen = int(re.search(r"its cells seen (\d+)", open(sys.argv[2]).read()).group(1))
assert seen == expected, (seen, expected)
assert expected < W, expected
print("sliding layers' cells at the last step:", seen, "= held positions in the window of", W)
PY
}

# The same greedy loop twice, llama.cpp alone and with kvevict's full cache (callback on): the same ids.
full_vs_llama() {  # model text prompt_tokens steps
  "$KVL" --model "$1" --prompt-file "$2" --prompt-tokens "$3" --steps "$4" --ignore-eos --threads 1 --no-kvevict \
    >"$w/llama.txt"
  "$KVL" --model "$1" --prompt-file "$2" --prompt-tokens "$3" --steps "$4" --ignore-eos --threads 1 --policy full \
    >"$w/full.txt"
  [ "$(wc -w <"$w/llama.txt")" -eq $(( $4 + 1 )) ] || fail "expected $4 ids: $(cat "$w/llama.txt")"
  cmp "$w/llama.txt" "$w/full.txt" || fail "--policy full differs from llama.cpp alone"
  cat "$w/full.txt"
}

# k = 256 on a 1000-token prompt, 24 decode steps: kvevict-llama checks at every step that llama.cpp's mask
# shows at most k cells + the batch, that kept positions come only from the previous kept set or the new
# token, that evicted ones never return and that llama.cpp's memory spans exactly the kept range (exit 1
# otherwise); here the kept sets of every line are checked again, and must equal kvevict-replay's on the
# recorded model-wide trace, byte for byte (positions, scores and τ).
k256() { k256_on "$MODEL" "$TEXT" 40 "$@"; }  # policy [flags for both]
kvl_only=()  # flags for kvevict-llama alone (k256_on)
k256_on() {  # model text q-heads-per-kv policy [flags for both]
  local model=$1 text=$2 q_heads=$3 policy=$4
  shift 4
  "$KVL" --model "$model" --prompt-file "$text" --prompt-tokens 1000 --steps 24 --ignore-eos --threads 1 \
    --policy "$policy" --budget 256 "$@" "${kvl_only[@]}" --kept-out "$w/kept.jsonl" --trace-out "$w/trace.npy" \
    >"$w/ids.txt" 2>"$w/summary.txt" || { cat "$w/summary.txt" >&2; fail "kvevict-llama failed"; }
  cat "$w/summary.txt"
  local gen=()
  [ "$policy" = keyformer ] && gen=(--gen-steps 24)
  "$KVR" --logits "$w/trace.npy" --prompt-len 1000 --q-heads-per-kv "$q_heads" --policy "$policy" --budget 256 "$@" \
    "${gen[@]}" >"$w/replay.jsonl"
  python3 - "$w/kept.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 25, len(lines)
assert lines[0]["t"] == 999, lines[0]["t"]
prev, evicted = None, set()
for i, l in enumerate(lines):
    kept = l["kept"][0]
    assert len(l["kept"]) == 1 and len(kept) == 256, (i, len(kept))        # one model-wide selection of k
    assert kept == sorted(kept) and max(kept) <= l["t"], i
    if prev is not None:
        t = l["t"]
        assert t == lines[i - 1]["t"] + 1
        assert set(kept) <= set(prev) | {t}, (t, set(kept) - set(prev) - {t})   # kept positions unchanged
        assert not (set(kept) & evicted), (t, set(kept) & evicted)               # evicted never return
        evicted |= (set(prev) | {t}) - set(kept)
    else:
        evicted = set(range(1000)) - set(kept)
    prev = kept
print("kept sets ok:", len(lines), "lines, last kept", prev[:4], "...", prev[-2:])
PY
  cmp "$w/kept.jsonl" "$w/replay.jsonl" || fail "kept sets differ from kvevict-replay's"
  grep -q "cells reused [1-9]" "$w/summary.txt" || fail "llama.cpp reused no freed cell (the case tests the mask map)"
  grep -q "most cells seen 1000, dropped 76[89]" "$w/summary.txt" || fail "unexpected summary"
}

# The key scores (--policy knorm, a score from each key alone; --policy keydiff, every held key against their mean
# unit key), so flash attention may be on: k = 256 (w = 76, the default 30 %) on a 1000-token prompt, 24 steps; the
# tool checks its per-step invariants as in k256 (with flash attention off also llama.cpp's mask), and the policy's
# checker (check_key_norm.py, check_key_diff.py) recomputes every kept set from the recorded keys.
key_policy() {  # policy checker model text flash-attn
  "$KVL" --model "$3" --prompt-file "$4" --prompt-tokens 1000 --steps 24 --ignore-eos --threads 1 --policy "$1" \
    --budget 256 --flash-attn "$5" --kept-out "$w/kept.jsonl" --keys-out "$w/keys.npy" \
    >"$w/ids.txt" 2>"$w/summary.txt" || { cat "$w/summary.txt" >&2; fail "kvevict-llama failed"; }
  cat "$w/summary.txt"
  python3 "$(dirname "$0")/$2" "$w/keys.npy" "$w/kept.jsonl" 1000 256 76
  grep -q "dropped 768[, ]" "$w/summary.txt" || fail "unexpected summary"
}
knorm() {  # model text flash-attn
  key_policy knorm check_key_norm.py "$@"
  if [ "$3" = off ]; then
    grep -q "most cells seen 1000, dropped 768, cells reused [1-9]" "$w/summary.txt" || fail "unexpected summary"
  fi
}
keydiff() { key_policy keydiff check_key_diff.py "$@"; }  # model text flash-attn

# An independent check of what the cache is given (issue 51): kvevict-llama's recorded logits against the project's
# own engine (kvevict-generate, float32, full cache) on the same GGUF and tokens, and a replay of THAT trace, not of
# the tool's own, so a probability read from the wrong cell (a wrong cell map) fails instead of replaying
# identically. Teacher-forced (P = 400 tokens of tinystories-val, T = 24 steps, k = 64): the tokens decoded are
# the text's, so kvevict-generate, given the same text, runs the same tokens at the same positions. stories260K has
# 5 layers of 8 heads. kvevict-llama-check-trace (check_trace.cpp) checks, for every head and row: finite exactly
# on the cells llama.cpp held (the prompt whole; after the cut, --kept-out's set before the step plus the new
# token), exp(log p) summing to 1 over them, and log p equal to the reference's log_softmax over the same cells for
# every prompt row and layer 0's decode rows (the decode rows of later layers depend on the eviction, which the
# full-cache engine does not run); it splices the reference's rows into the trace replayed (layers >= 1's decode
# rows stay the tool's), and the kept sets must equal kvevict-llama's at every step.
# kvevict-generate's pre-softmax logits of layers 0 .. L - 1 on TEXT (full cache, one run per layer): $w/ref<l>.npy.
dump_references() {  # text L
  for ((l = 0; l < $2; ++l)); do
    "$GEN" --model "$MODEL" --prompt "$1" --steps 0 --threads 1 --dump-logits "$w/ref$l.npy" --dump-layer $l \
      >/dev/null 2>"$w/gen.txt" || { cat "$w/gen.txt" >&2; fail "kvevict-generate failed"; }
  done
}

independent_logits() {  # policy
  [ -n "${GEN:-}" ] || { echo "kvevict-generate not built (tools/llama2 needs SentencePiece and PCRE2)"; exit 77; }
  local policy=$1 P=400 T=24 L=5 text
  text=$(head -c 1000 "$TEXT")  # ASCII, 515 tokens: more than P + T + 1
  "$KVL" --model "$MODEL" --prompt "$text" --prompt-tokens $P --teacher-force $T --threads 1 --policy "$policy" \
    --budget 64 --kept-out "$w/kept.jsonl" --trace-out "$w/trace.npy" >"$w/nll.txt" 2>"$w/summary.txt" \
    || { cat "$w/summary.txt" >&2; fail "kvevict-llama failed"; }
  cat "$w/summary.txt"
  grep -q "cells reused [1-9]" "$w/summary.txt" || fail "llama.cpp reused no freed cell (the case tests the cell map)"
  dump_references "$text" $L
  "$CHECK_TRACE" logits "$w/trace.npy" "$w/kept.jsonl" $P $L "$w/ref" "$w/spliced.npy" \
    || fail "kvevict-llama's logits differ from kvevict-generate's"
  local gen=()
  [ "$policy" = keyformer ] && gen=(--gen-steps $T)
  [ "$policy" = tova ] && gen=(--recent 1)  # kvevict-llama's TOVA keeps the newest token (w = 1)
  "$KVR" --logits "$w/spliced.npy" --prompt-len $P --q-heads-per-kv $(( L * 8 )) --policy "$policy" --budget 64 \
    "${gen[@]}" >"$w/replay.jsonl"
  "$CHECK_TRACE" kept "$w/kept.jsonl" "$w/replay.jsonl" \
    || fail "kept sets differ from the replay of kvevict-generate's logits"
}

# --score-rows summed: the cache is given one row per token, log of the probabilities summed over every layer and
# head. The tool's summed rows against the sum of kvevict-generate's per-layer softmaxes (every layer: L = 5 is all
# of stories260K), then the kept sets against kvevict-replay of that independent trace with one query head.
summed_logits() {  # policy
  [ -n "${GEN:-}" ] || { echo "kvevict-generate not built (tools/llama2 needs SentencePiece and PCRE2)"; exit 77; }
  local policy=$1 P=400 T=24 L=5 text
  text=$(head -c 1000 "$TEXT")
  "$KVL" --model "$MODEL" --prompt "$text" --prompt-tokens $P --teacher-force $T --threads 1 --policy "$policy" \
    --budget 64 --score-rows summed --kept-out "$w/kept.jsonl" --trace-out "$w/trace.npy" >"$w/nll.txt" \
    2>"$w/summary.txt" || { cat "$w/summary.txt" >&2; fail "kvevict-llama failed"; }
  cat "$w/summary.txt"
  grep -q "q-heads-per-kv 1 " "$w/summary.txt" || fail "the summed trace is not one query head"
  grep -q "compactions [1-9]" "$w/summary.txt" || fail "the cells were never compacted"
  dump_references "$text" $L
  "$CHECK_TRACE" summed "$w/trace.npy" "$w/kept.jsonl" $P $L "$w/ref" "$w/spliced.npy" \
    || fail "kvevict-llama's summed rows differ from kvevict-generate's"
  local gen=()
  [ "$policy" = keyformer ] && gen=(--gen-steps $T)
  "$KVR" --logits "$w/spliced.npy" --prompt-len $P --q-heads-per-kv 1 --policy "$policy" --budget 64 "${gen[@]}" \
    >"$w/replay.jsonl"
  "$CHECK_TRACE" kept "$w/kept.jsonl" "$w/replay.jsonl" \
    || fail "kept sets differ from the replay of the summed reference"
}

# --parallel 3 (issue 52): three teacher-forced windows as sequences of one context, each in its own budget k = 64,
# against three single-sequence runs of the same windows: the same kept sets after the prompt and every step
# (positions exactly, scores within check_trace's tolerance: the cells lie elsewhere, so sums differ in rounding)
# and the same NLL within 1e-3. The context holds (N - 1)(k + 1) + P + N = 433 cells, not N (P + T) = 1020; cells
# freed by one sequence's eviction are reused by the others, and the whole context is compacted after each prompt.
# With a stream per sequence (--kv-unified off) and --bounded-prefill (each prompt cut after every chunk of 32), the
# context is 3 streams of k + C + 1 = 97 cells: 291.
parallel_vs_single() {  # policy "expected summary text" "flags of the --parallel run" [flags for both runs]
  local policy=$1 expected=$2 par_flags=$3 P=300 T=40 S=341
  shift 3
  head -c 6000 "$TEXT" >"$w/t.txt"
  # shellcheck disable=SC2086
  "$KVL" --model "$MODEL" --prompt-file "$w/t.txt" --prompt-tokens $P --teacher-force $T --threads 1 --policy "$policy" \
    --budget 64 --parallel 3 $par_flags --kept-out "$w/kept.jsonl" "$@" >"$w/par.txt" 2>"$w/summary.txt" \
    || { cat "$w/summary.txt" >&2; fail "kvevict-llama --parallel 3 failed"; }
  cat "$w/summary.txt"
  grep -qF "$expected" "$w/summary.txt" || fail "the summary does not say: $expected"
  grep -q "cells reused [1-9]" "$w/summary.txt" || fail "no freed cell was reused"
  [ -n "$par_flags" ] || grep -q "compactions [3-9]" "$w/summary.txt" || fail "one pool was not compacted after each prompt"
  [ "$(wc -l <"$w/par.txt")" -eq 3 ] || fail "expected one line per sequence: $(cat "$w/par.txt")"
  for i in 0 1 2; do
    "$KVL" --model "$MODEL" --prompt-file "$w/t.txt" --skip-tokens $(( i * S )) --prompt-tokens $P --teacher-force $T \
      --threads 1 --policy "$policy" --budget 64 --kept-out "$w/k$i.jsonl" "$@" >"$w/one$i.txt" 2>/dev/null \
      || fail "the single run of window $i failed"
    grep "^{\"seq\":$i," "$w/kept.jsonl" >"$w/p$i.jsonl"
    [ "$(wc -l <"$w/p$i.jsonl")" -eq $(( T + 1 )) ] || fail "sequence $i: expected $(( T + 1 )) kept lines"
    "$CHECK_TRACE" kept "$w/p$i.jsonl" "$w/k$i.jsonl" || fail "sequence $i's kept sets differ from its single run"
    local a b
    a=$(sed -n "$(( i + 1 ))p" "$w/par.txt" | sed -E 's/.*"nll":([0-9.]+).*/\1/')
    b=$(sed -E 's/.*"nll":([0-9.]+).*/\1/' "$w/one$i.txt")
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-3) }' \
      || fail "sequence $i: NLL $a, its single run $b"
    echo "sequence $i: NLL $a (single run $b)"
  done
}

# A refusal: exit 2 and exactly this line on stderr.
refuses() {  # expected-line args...
  local expected=$1
  shift
  set +e
  "$KVL" "$@" >"$w/out.txt" 2>"$w/err.txt"
  local rc=$?
  set -e
  [ "$rc" -eq 2 ] || fail "exit $rc, expected 2: $(cat "$w/err.txt")"
  [ "$(cat "$w/err.txt")" = "$expected" ] || fail "stderr was: $(cat "$w/err.txt")"
  echo "refused as expected: $expected"
}

# No output may be an input or another output, by any spelling (issue 51): each (output, input) and
# (output, output) pair is refused before llama.cpp loads anything, exit 2, one line naming both flags, and
# every input is left byte for byte; an empty --prompt-file is named as such.
refuse_output_that_is_an_input() {
  cp "$MODEL" "$w/m.gguf"
  printf 'Once upon a time there was a little dog.' >"$w/p.txt"
  mkdir -p "$w/sub"
  ln -sf "$w/m.gguf" "$w/sub/model-link.gguf"
  ln -f "$w/p.txt" "$w/sub/p-hard.txt"
  local sums
  sums=$(sha256sum "$w/m.gguf" "$w/p.txt")
  expect_pair() {  # out_flag other_flag args...
    local out_flag=$1 other=$2
    shift 2
    local rc=0
    "$KVL" --threads 1 --steps 2 --budget 8 "$@" >/dev/null 2>"$w/err.txt" || rc=$?
    [ "$rc" -eq 2 ] || fail "$*: exit $rc, expected 2: $(cat "$w/err.txt")"
    grep -q "^kvevict-llama: $out_flag: '.*' is the same file as $other '" "$w/err.txt" ||
      fail "$*: the message does not name $out_flag and $other: $(cat "$w/err.txt")"
    [ "$(wc -l <"$w/err.txt")" -eq 1 ] || fail "$*: more than one line: $(cat "$w/err.txt")"
    [ "$(sha256sum "$w/m.gguf" "$w/p.txt")" = "$sums" ] || fail "$*: an input changed"
    ! ls "$w" "$w/sub" | grep -q '\.tmp\.' || fail "$*: a temporary file was left"
  }
  local m=(--model "$w/m.gguf" --prompt-file "$w/p.txt")
  expect_pair --kept-out --model "${m[@]}" --policy h2o --kept-out "$w/m.gguf"
  expect_pair --kept-out --model "${m[@]}" --policy h2o --kept-out "$w/sub/../m.gguf"
  expect_pair --trace-out --model "${m[@]}" --policy h2o --trace-out "$w/sub/model-link.gguf"
  expect_pair --keys-out --model "${m[@]}" --policy knorm --keys-out "$w/m.gguf"
  expect_pair --kept-out --prompt-file "${m[@]}" --policy h2o --kept-out "$w/p.txt"
  expect_pair --trace-out --prompt-file "${m[@]}" --policy h2o --trace-out "$w/sub/p-hard.txt"
  expect_pair --keys-out --prompt-file "${m[@]}" --policy keydiff --keys-out "$w/./p.txt"
  expect_pair --trace-out --kept-out "${m[@]}" --policy h2o --kept-out "$w/o.jsonl" --trace-out "$w/sub/../o.jsonl"
  expect_pair --keys-out --kept-out "${m[@]}" --policy knorm --kept-out "$w/o.npy" --keys-out "$w/o.npy"
  # Distinct outputs run, and are written whole.
  "$KVL" --threads 1 --steps 2 --budget 8 "${m[@]}" --policy h2o --kept-out "$w/k.jsonl" --trace-out "$w/t.npy" \
    >/dev/null 2>"$w/err.txt" || fail "distinct outputs refused: $(cat "$w/err.txt")"
  [ "$(wc -l <"$w/k.jsonl")" -eq 3 ] || fail "--kept-out: expected 3 lines: $(cat "$w/k.jsonl")"
  ! ls "$w" | grep -q '\.tmp\.' || fail "a temporary file was left"
  # An empty --prompt-file is named as the flag given, and as empty.
  : >"$w/empty.txt"
  local rc=0
  "$KVL" --model "$w/m.gguf" --prompt-file "$w/empty.txt" --threads 1 >/dev/null 2>"$w/err.txt" || rc=$?
  [ "$rc" -eq 2 ] || fail "empty --prompt-file: exit $rc"
  grep -qx "kvevict-llama: --prompt-file: '$w/empty.txt' is empty; give a file with the prompt's text" "$w/err.txt" ||
    fail "empty --prompt-file: $(cat "$w/err.txt")"
  echo "every (output, input) and (output, output) pair refused, inputs intact"
}

case "$case_name" in
  full_ids_stories260K)
    out=$(full_vs_llama "$MODEL" "$TEXT" 200 64)
    echo "$out"
    # Pinned: llama.cpp 0.3.36's CPU build (GGML_NATIVE=OFF), greedy, 200 prompt tokens of tinystories-val.
    [ "$(echo "$out" | cut -d' ' -f2-9)" = "$EXPECT_STORIES_IDS" ] || fail "first ids changed: $out"
    ;;
  full_ids_smollm2)
    [ -n "${SMOLLM2:-}" ] || { echo "SmolLM2 GGUF not given (KVEVICT_SMOLLM2_GGUF)"; exit 77; }
    full_vs_llama "$SMOLLM2" "$HOWTO" 300 32
    ;;
  scoring_without_eviction_stories260K)
    # A budget at the sequence's length: the callback and kvevict score every step, nothing is dropped, and the
    # ids are llama.cpp's own.
    "$KVL" --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 200 --steps 32 --ignore-eos --threads 1 \
      --ctx-size 240 --no-kvevict >"$w/llama.txt"
    "$KVL" --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 200 --steps 32 --ignore-eos --threads 1 \
      --policy keyformer --budget 232 --ctx-size 240 >"$w/kf.txt" 2>"$w/summary.txt"
    cmp "$w/llama.txt" "$w/kf.txt" || fail "keyformer with k = N changed the ids"
    grep -q "dropped 0," "$w/summary.txt" || fail "dropped positions: $(cat "$w/summary.txt")"
    cat "$w/kf.txt"
    ;;
  full_nll_stories260K)
    a=$("$KVL" --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 1000 --teacher-force 50 --threads 1 --no-kvevict)
    b=$("$KVL" --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 1000 --teacher-force 50 --threads 1)
    echo "$a"
    [ "$a" = "$b" ] || fail "teacher-forced NLL: full $b, llama.cpp alone $a"
    [ "$a" = '{"nll":2.015207,"predictions":50,"prompt":1000,"policy":"full","k":1050}' ] || fail "NLL changed: $a"
    ;;
  k256_keyformer) k256 keyformer ;;
  k256_h2o) k256 h2o ;;
  k256_tova) k256 tova --recent 1 ;;  # kvevict-llama's default for TOVA, given to the replay too
  k256_streaming) k256 streaming ;;
  k256_window) k256 window ;;
  knorm_stories260K) knorm "$MODEL" "$TEXT" off ;;
  knorm_flash_attn_stories260K) knorm "$MODEL" "$TEXT" on ;;
  keydiff_flash_attn_stories260K) keydiff "$MODEL" "$TEXT" on ;;
  knorm_flash_attn_smollm2)
    [ -n "${SMOLLM2:-}" ] || { echo "SmolLM2 GGUF not given (KVEVICT_SMOLLM2_GGUF)"; exit 77; }
    knorm "$SMOLLM2" "$HOWTO" on
    ;;
  example)
    "$EXAMPLE" "$MODEL" | tee "$w/example.txt"
    grep -q "^kept 64 positions, last 231$" "$w/example.txt" || fail "the example's last line changed"
    ;;
  refuse_not_gguf)
    refuses "kvevict-llama: --model: llama.cpp cannot load '$TEXT' (not a GGUF model it supports; --verbose shows its log)" \
      --model "$TEXT" --prompt hi
    ;;
  refuse_flash_attn)
    refuses "kvevict-llama: --flash-attn: on: --policy h2o scores tokens from attention probabilities, which llama.cpp does not compute with flash attention; use --flash-attn off, or --policy streaming, window, knorm, keydiff or full" \
      --model "$MODEL" --prompt hi --policy h2o --flash-attn on
    ;;
  refuse_key_flags)
    refuses "kvevict-llama: --trace-out: --policy knorm scores each token from its keys, not from logits; record the keys with --keys-out" \
      --model "$MODEL" --prompt hi --policy knorm --trace-out "$w/t.npy"
    refuses "kvevict-llama: --keys-out: records the keys a key score is given: it needs --policy knorm or keydiff (got h2o)" \
      --model "$MODEL" --prompt hi --policy h2o --keys-out "$w/k.npy"
    refuses "kvevict-llama: --recent: w = 0 (k = 64): llama.cpp decodes each new token at the position right after the last one the sequence holds, so the newest token must be kept; give a recent window w >= 1 (--recent 1, or a ratio with k >= 2)" \
      --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 300 --policy knorm --budget 64 --recent 0
    # The default budget (50 %) of a 3-token prompt: k = 1, w = 0; the flag named is the one that made it so.
    refuses "kvevict-llama: --prompt-tokens: w = 0 (k = 1): llama.cpp decodes each new token at the position right after the last one the sequence holds, so the newest token must be kept; give a recent window w >= 1 (--recent 1, or a ratio with k >= 2)" \
      --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 3 --policy knorm
    # Output files are checked before any work: writable, and not one path for two outputs.
    refuses "kvevict-llama: --kept-out: needs a value (got an empty one)" \
      --model "$MODEL" --prompt hi --policy knorm --kept-out ""
    refuses "kvevict-llama: --keys-out: cannot write '/proc/kvevict-no/k.npy': the folder '/proc/kvevict-no' does not exist; create it or choose another --keys-out" \
      --model "$MODEL" --prompt hi --policy knorm --keys-out /proc/kvevict-no/k.npy
    refuses "kvevict-llama: --keys-out: '$w/./same' is the same file as --kept-out '$w/same'; give each output its own file" \
      --model "$MODEL" --prompt hi --policy knorm --kept-out "$w/same" --keys-out "$w/./same"
    refuses "kvevict-llama: --keys-out: records the keys a key score is given: it needs --policy knorm or keydiff (got --no-kvevict)" \
      --model "$MODEL" --prompt hi --no-kvevict --keys-out "$w/k.npy"
    ;;
  refuse_generate_flags_when_teacher_forced)
    refuses "kvevict-llama: --steps: generates tokens; --teacher-force scores the text's own tokens instead (give one of the two)" \
      --model "$MODEL" --prompt-file "$TEXT" --teacher-force 8 --steps 4
    refuses "kvevict-llama: --ignore-eos: applies to generation; --teacher-force scores the text's own tokens and never stops early (drop --ignore-eos)" \
      --model "$MODEL" --prompt-file "$TEXT" --teacher-force 8 --ignore-eos
    ;;
  refuse_budget_over_context)
    refuses "kvevict-llama: --budget: k = 600 exceeds the context: --ctx-size 512 holds at most 511 kept positions besides the token being decoded; lower --budget or raise --ctx-size" \
      --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 300 --policy h2o --budget 600 --ctx-size 512
    ;;
  refuse_recurrent)
    # A recurrent model (a 1-layer Mamba GGUF written by make_tiny_gguf.py): refused before any token, for every
    # evicting policy; with --policy full the next check speaks (this model has no vocabulary).
    python3 "$(dirname "$0")/make_tiny_gguf.py" mamba "$w/mamba.gguf"
    refuses "kvevict-llama: --model: the model's memory is recurrent or hybrid: llama.cpp cannot drop a middle range of its positions (llama_memory_seq_rm), so nothing can be evicted; use --policy full" \
      --model "$w/mamba.gguf" --prompt hi --policy h2o --budget 4
    refuses "kvevict-llama: --model: '$w/mamba.gguf' has no vocabulary: llama.cpp cannot tokenize text for it" \
      --model "$w/mamba.gguf" --prompt hi
    ;;
  flash_attn_streaming)
    # A policy without scores runs with flash attention on, and keeps the same positions as with it off.
    "$KVL" --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 300 --steps 16 --ignore-eos --threads 1 \
      --policy streaming --budget 64 --flash-attn on --kept-out "$w/on.jsonl" >/dev/null
    "$KVL" --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 300 --steps 16 --ignore-eos --threads 1 \
      --policy streaming --budget 64 --flash-attn off --kept-out "$w/off.jsonl" >/dev/null
    python3 -c "import json,sys; a=[json.loads(l)['kept'] for l in open(sys.argv[1])]; b=[json.loads(l)['kept'] for l in open(sys.argv[2])]; assert a==b and a[-1][0]==[0,1,2,3]+list(range(256,316)), a[-1]" \
      "$w/on.jsonl" "$w/off.jsonl"
    echo "streaming keeps the same positions with flash attention on and off"
    ;;
  independent_logits_h2o) independent_logits h2o ;;
  independent_logits_keyformer) independent_logits keyformer ;;
  independent_logits_tova) independent_logits tova ;;
  summed_logits_h2o) summed_logits h2o ;;
  parallel_h2o) parallel_vs_single h2o "3 sequences (one pool of cells), n_ctx 433 cells" "" ;;
  parallel_keyformer_summed)
    parallel_vs_single keyformer "3 sequences (one pool of cells), n_ctx 433 cells" "" --score-rows summed ;;
  bounded_prefill_small)
    # A bounded prefill holds at most k + C cells: a 256-token prompt runs in a 100-cell context (k = 64, C = 16),
    # and a budget beyond the prompt with the default --batch still runs (the evictor's view is k + C slots).
    "$KVL" --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 256 --teacher-force 8 --threads 1 --policy h2o \
      --budget 64 --batch 16 --bounded-prefill --ctx-size 100 >"$w/out.txt" 2>"$w/summary.txt" \
      || { cat "$w/summary.txt" >&2; fail "bounded prefill in 100 cells failed"; }
    cat "$w/summary.txt"
    seen=$(sed -E 's/.*most cells seen ([0-9]+).*/\1/' "$w/summary.txt")
    [ "$seen" -le 80 ] || fail "a token saw $seen cells, more than k + C = 80"
    "$KVL" --model "$MODEL" --prompt "Once upon a time there was" --threads 1 --policy h2o --bounded-prefill \
      --steps 4 >"$w/out2.txt" 2>"$w/summary2.txt" || { cat "$w/summary2.txt" >&2; fail "a short bounded prompt failed"; }
    ;;
  parallel_streams_bounded)
    parallel_vs_single h2o "3 sequences (a stream each), n_ctx 291 cells" "--kv-unified off" --score-rows summed \
      --mean-attention --bounded-prefill --batch 32 ;;
  refuse_parallel_flags)
    refuses "kvevict-llama: --seq-stride: places the windows of --parallel N > 1 sequences (got --parallel 1)" \
      --model "$MODEL" --prompt hi --policy h2o --seq-stride 5
    refuses "kvevict-llama: --trace-out: records one sequence; it cannot be combined with --parallel" \
      --model "$MODEL" --prompt hi --policy h2o --parallel 2 --trace-out "$w/t.npy"
    refuses "kvevict-llama: --parallel: --policy knorm reads each batch's keys (Kcur) for one sequence; with several sequences use a policy that scores from attention or positions" \
      --model "$MODEL" --prompt hi --policy knorm --parallel 2
    refuses "kvevict-llama: --parallel: 2 windows of 4 tokens, 4 apart, need 8 tokens; the text has 4" \
      --model "$MODEL" --prompt "hi there" --policy h2o --budget 2 --parallel 2
    refuses "kvevict-llama: --ctx-size: 100 cells are fewer than the 433 the run needs (k + 1 per sequence, one prompt, the batch); raise --ctx-size or leave it out" \
      --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 300 --teacher-force 40 --policy h2o --budget 64 \
      --parallel 3 --ctx-size 100
    refuses "kvevict-llama: --kv-unified: off with an evicting policy needs every sequence to run all its steps (--ignore-eos or --teacher-force): a sequence that ended would split llama.cpp's batch into several ubatches" \
      --model "$MODEL" --prompt hi --policy h2o --parallel 2 --kv-unified off
    refuses "kvevict-llama: --bounded-prefill: cuts the prompt to the budget: it needs an evicting --policy (got --no-kvevict)" \
      --model "$MODEL" --prompt hi --no-kvevict --bounded-prefill
    ;;
  summed_logits_keyformer) summed_logits keyformer ;;
  refuse_output_that_is_an_input) refuse_output_that_is_an_input ;;
  tova_keeps_newest)
    # The paper's TOVA (no recent window) evicts the token just decoded when its own attention is the lowest, and
    # llama.cpp then cannot decode the next one: at k = 3 on stories260K the run stopped with exit 1. kvevict-llama
    # gives TOVA a recent window of 1 (kvpress's TOVAPress rule). Each run ends; every kept set holds k positions,
    # the newest among them; the sets are kvevict-replay's with --recent 1 byte for byte; and replay with the paper's
    # --recent 0 on the same trace does evict a newest token at some step (the case meets the situation it fixes).
    for k in 1 2 3; do
      "$KVL" --model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 200 --steps 48 --ignore-eos --threads 1 \
        --policy tova --budget $k --kept-out "$w/kept.jsonl" --trace-out "$w/trace.npy" >"$w/ids.txt" \
        2>"$w/summary.txt" || { cat "$w/summary.txt" >&2; fail "kvevict-llama failed at k = $k"; }
      "$KVR" --logits "$w/trace.npy" --prompt-len 200 --q-heads-per-kv 40 --policy tova --budget $k --recent 1 \
        >"$w/replay.jsonl"
      cmp "$w/kept.jsonl" "$w/replay.jsonl" || fail "k = $k: kept sets differ from kvevict-replay's (--recent 1)"
      "$KVR" --logits "$w/trace.npy" --prompt-len 200 --q-heads-per-kv 40 --policy tova --budget $k --recent 0 \
        >"$w/paper.jsonl"
      python3 - "$w/kept.jsonl" "$w/paper.jsonl" $k <<'PY'
import json, sys
kept = [json.loads(l) for l in open(sys.argv[1])]
paper = [json.loads(l) for l in open(sys.argv[2])]
k = int(sys.argv[3])
assert len(kept) == 49, len(kept)
for l in kept:
    assert len(l["kept"][0]) == k and l["kept"][0][-1] == l["t"], l
lost = [l["t"] for l in paper if l["t"] not in l["kept"][0]]
assert lost, "the paper's rule never evicted the newest token here"
print(f"k = {k}: the newest kept at all 49 steps; the paper's rule would have evicted it at t = {lost[:5]} ({len(lost)} steps)")
PY
    done
    ;;
  refuse_newest_evicted)
    # Budgets where the policy would evict the token just decoded (llama.cpp decodes only right after the newest
    # position held): refused before any token, not found mid-run; and --print-tokens / --count-tokens combinations.
    common=(--model "$MODEL" --prompt-file "$TEXT" --prompt-tokens 200 --steps 4)
    refuses "kvevict-llama: --budget: k = 4 holds only the 4 attention sinks: llama.cpp decodes each new token right after the last position the sequence holds, so streaming needs k >= sinks + 1" \
      "${common[@]}" --policy streaming --budget 4
    refuses "kvevict-llama: --sinks: k = 3 holds only the 3 attention sinks: llama.cpp decodes each new token right after the last position the sequence holds, so streaming needs k >= sinks + 1" \
      "${common[@]}" --policy streaming --budget 3 --sinks 3 --parallel 2 --seq-stride 300
    refuses "kvevict-llama: --recent: w = 0 (k = 3): llama.cpp decodes each new token at the position right after the last one the sequence holds, so the newest token must be kept; give a recent window w >= 1 (--recent 1)" \
      "${common[@]}" --policy tova --budget 3 --recent 0
    refuses "kvevict-llama: --print-tokens: prints the ids; --count-tokens prints their count (give one)" \
      --model "$MODEL" --prompt-file "$TEXT" --print-tokens --count-tokens
    refuses "kvevict-llama: --skip-tokens: selects tokens for a run; --print-tokens reports the whole text (drop it)" \
      --model "$MODEL" --prompt-file "$TEXT" --print-tokens --skip-tokens 3
    refuses "kvevict-llama: --prompt-tokens: selects tokens for a run; --count-tokens reports the whole text (drop it)" \
      --model "$MODEL" --prompt-file "$TEXT" --count-tokens --prompt-tokens 50
    "$KVL" "${common[@]}" --policy streaming --budget 5 --threads 1 >/dev/null 2>&1 || fail "streaming at k = sinks + 1"
    ;;
  refuse_unknown_sliding_layout)
    # Sliding-window layers whose layout neither the GGUF nor kvevict's table gives (a 4-layer OLMo 2 with a window
    # of 4, written by make_tiny_gguf.py; llama.cpp hard-codes its period): refused before any token, also with
    # --policy full (the callback would track cells on a sliding layer's mask); --no-kvevict is llama.cpp alone.
    python3 "$(dirname "$0")/make_tiny_gguf.py" olmo2-swa "$w/olmo2.gguf"
    msg="kvevict-llama: --model: the model (architecture 'olmo2') has sliding-window layers (window 4) and its GGUF does not say which (no olmo2.attention.sliding_window_pattern); kvevict knows the layout of gemma2, gemma3 and cohere2 only, so it cannot tell which layers to score and evict"
    refuses "$msg" --model "$w/olmo2.gguf" --prompt hi --policy h2o --budget 4
    refuses "$msg" --model "$w/olmo2.gguf" --prompt hi --policy full
    refuses "kvevict-llama: --swa-full: expected on or off, got 'maybe'" --model "$w/olmo2.gguf" --prompt hi --swa-full maybe
    refuses "kvevict-llama: --model: '$w/olmo2.gguf' has no vocabulary: llama.cpp cannot tokenize text for it" \
      --model "$w/olmo2.gguf" --prompt hi --no-kvevict
    ;;
  gemma3_full_ids)
    # Gemma 3 270M (18 layers: 15 of a 512-token sliding window, 3 global), a 1000-token prompt: --policy full
    # (the callback on, cells tracked on the global layers' mask) gives llama.cpp's own greedy ids.
    need_gemma3
    full_vs_llama "$GEMMA3" "$HOWTO" 1000 24 >/dev/null
    # --print-tokens: llama.cpp's own tokenization (BOS 2, "return" one piece, the indent one; transformers' Unigram
    # reading of the GGUF cuts "return" in two), as the Gemma quality runs use it.
    ids=$("$KVL" --model "$GEMMA3" --prompt "def foo(x):
    return x + 1" --print-tokens)
    [ "$ids" = "2 2063 46293 236769 236781 1473 107 140 2060 1123 900 236743 236770" ] || fail "--print-tokens: $ids"
    [ "$("$KVL" --model "$GEMMA3" --prompt-file "$HOWTO" --print-tokens | wc -w)" = \
      "$("$KVL" --model "$GEMMA3" --prompt-file "$HOWTO" --count-tokens)" ] || fail "--print-tokens and --count-tokens differ"
    "$KVL" --model "$GEMMA3" --prompt-file "$HOWTO" --prompt-tokens 1000 --steps 2 --ignore-eos --threads 1 --policy full \
      2>&1 >/dev/null | grep -q "layers: 3 global of 18 (the others a sliding window of 512; its cells seen 512)" \
      || fail "expected 3 global layers of 18 and a window of 512 cells"
    ;;
  gemma3_k256_h2o) need_gemma3; k256_on "$GEMMA3" "$HOWTO" 12 h2o; sliding_cells 512 ;;
  gemma3_k256_keyformer) need_gemma3; k256_on "$GEMMA3" "$HOWTO" 12 keyformer; sliding_cells 512 ;;
  gemma3_k256_h2o_summed)  # the summed row (one query head) replayed as what it is: a trace of one head
    need_gemma3; kvl_only=(--score-rows summed); k256_on "$GEMMA3" "$HOWTO" 1 h2o; sliding_cells 512 ;;
  gemma3_k256_streaming)  # with llama_context_default_params' full-size sliding cache (--swa-full on)
    need_gemma3; kvl_only=(--swa-full on); k256_on "$GEMMA3" "$HOWTO" 12 streaming; sliding_cells 512 ;;
  gemma3_keydiff) need_gemma3; keydiff "$GEMMA3" "$HOWTO" off ;;
  *) fail "unknown case $case_name" ;;
esac
