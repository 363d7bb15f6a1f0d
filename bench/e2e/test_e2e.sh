#!/usr/bin/env bash
# ctest e2e_bench_runs: kvevict-e2e on stories260K (P = 64, G = 16: 80 positions, 1280 KV bytes per position
# over its 5 layers), then report.py on those rows. Pins the counts that do not depend on timing: k, the KV
# bytes held, the full cache's bytes and the sequences that fit in 2 full sequences' KV; and the usage errors.
set -euo pipefail
e2e=$1
shared=${KVEVICT_SHARED_DIR:-$2}
model=$shared/models/stories260K/stories260K.bin
text=$shared/data/tinystories-val/tinystories_val.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "test_e2e.sh: $1" >&2; exit 1; }
run() { "$e2e" --model "$model" --text "$text" --prompt 64 --generate 16 --batch-steps 8 --threads 1 "$@"; }
# columns: policy,label,k,prompt,generate,threads,prefill_s,decode_s,decode_tok_s,kv_held_prompt_bytes,
#          kv_held_decode_bytes,kv_full_bytes,peak_rss_bytes,batch_memory_seqs,batch_seqs,batch_steps,...
fields() { cut -d, -f1,2,3,4,5,6,10,11,12,14,15,16 <<<"$1"; }
full=$(run --header 2>/dev/null)
[[ $(head -n1 <<<"$full") == policy,label,k,prompt,generate,threads,prefill_s,decode_s,decode_tok_s,* ]] ||
  fail "header: $(head -n1 <<<"$full")"
full=$(tail -n1 <<<"$full")
# full: held 64 positions after the prompt, at most 80 in decode; 2 full sequences fit in 2 full sequences' KV
[[ $(fields "$full") == "full,full,80,64,16,1,81920,102400,102400,2,2,8" ]] || fail "full row: $full"
kf=$(run --policy keyformer --budget 50% 2>/dev/null)
# Keyformer k = 32 (w = 30% of k = 9): 32 positions held after the prompt and in decode, so 2 * 80 / 32 = 5 fit
[[ $(fields "$kf") == "keyformer,keyformer k=32 w=9 sinks=0,32,64,16,1,40960,40960,102400,2,5,8" ]] ||
  fail "keyformer row: $kf"
st=$(run --policy streaming --budget 20% --batch-memory 0 2>/dev/null)
# k = floor(0.2 * 64) = 12 (4 sinks + 8 recent); no batch phase
[[ $(fields "$st") == "streaming,streaming k=12 w=8 sinks=4,12,64,16,1,15360,15360,102400,0,0,8" ]] ||
  fail "streaming row: $st"
for r in "$full" "$kf" "$st"; do
  n=$(awk -F, '{print NF}' <<<"$r")
  [[ $n == 19 ]] || fail "expected 19 columns, got $n: $r"
done

# usage errors name the flag and exit 2
expect_usage() {  # expect_usage FLAG ARGS...
  local flag=$1 err rc=0
  shift
  err=$(run "$@" 2>&1 >/dev/null) || rc=$?
  [[ $rc == 2 && $err == *"$flag"* ]] || fail "expected exit 2 naming $flag for '$*', got $rc: $err"
}
expect_usage --batch-steps --batch-steps 17
expect_usage --generate --generate 500
expect_usage --prompt --prompt 0
expect_usage --text --text "$tmp/missing.txt"
expect_usage --budget --budget 50%

# the report: the ratios of a row against the full cache at the same P
{
  echo "row,prompt_key,policy,label,k,prompt,generate,threads,prefill_s,decode_s,decode_tok_s,kv_held_prompt_bytes,kv_held_decode_bytes,kv_full_bytes,peak_rss_bytes,batch_memory_seqs,batch_seqs,batch_steps,batch_prefill_s,batch_decode_s,batch_tok_s"
  echo "full,64,full,full,80,64,16,1,2.0,1,10.0,81920,102400,102400,104857600,2,2,8,1,1,20.0"
  echo "keyformer:50%,64,keyformer,keyformer k=32 w=9 sinks=0,32,64,16,1,2.5,1,12.5,40960,40960,102400,209715200,2,5,8,1,1,45.0"
} >"$tmp/e2e.csv"
python3 "$(dirname "$0")/report.py" "$tmp/e2e.csv" "$tmp/out" --no-plot >/dev/null
grep -qF "| full | 2.0 (1.00x) | 10.0 (1.00x) | 0.1 (100%) | 10485.8 | 100 | 2, 20.0 (1.00x) |" "$tmp/out/e2e.md" ||
  fail "report full row: $(cat "$tmp/out/e2e.md")"
grep -qF "| keyformer k=32 w=9 sinks=0 | 2.5 (1.25x) | 12.5 (1.25x) | 0.0 (40%) | 26214.4 | 200 | 5, 45.0 (2.25x) |" \
  "$tmp/out/e2e.md" || fail "report keyformer row: $(cat "$tmp/out/e2e.md")"
echo "test_e2e.sh: ok"
