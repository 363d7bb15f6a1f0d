#!/usr/bin/env bash
# The report logic of scripts/gpu-check.sh (--report-only) on fixed inputs: the timing table
# joins gpu_bench's RESULT lines with the PyTorch TORCH lines by (batch, q heads, n), computes
# step / SDPA and PyTorch / kvevict, and says "n/a" (plus a note) where PyTorch gave nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "NVIDIA H200, 570.00, 143771 MiB, 9.0" > "$tmp/gpu.txt"
printf '### table\n\n| case | result |\n|---|---|\n| x | pass |\n' > "$tmp/gpu-check.md"
cat > "$tmp/gpu-bench.txt" <<'IN'
gpu_bench: NVIDIA H200, policy keyformer
RESULT policy=keyformer batch=1 q_heads=8 kv_heads=8 head_dim=128 n=4096 evict_us=10.00 append_us=2.00
RESULT policy=keyformer batch=32 q_heads=32 kv_heads=8 head_dim=128 n=131072 evict_us=50.00 append_us=2.00
IN
echo "TORCH batch=1 q_heads=8 n=4096 sdpa_us=40.00 torch_step_us=120.00" > "$tmp/torch-bench.txt"
out="$(OUT="$tmp" bash "$root/scripts/gpu-check.sh" --report-only)"
grep -qxF '| 1 | 8 | 4096 | 10.00 | 40.00 | 25.0% | 120.00 | 12.0x |' <<<"$out"
grep -qxF '| 32 | 32 | 131072 | 50.00 | n/a | n/a | n/a | n/a |' <<<"$out"
grep -qxF '| x | pass |' <<<"$out"
grep -qF 'GPU (nvidia-smi: name, driver, memory, compute capability): NVIDIA H200, 570.00, 143771 MiB, 9.0' <<<"$out"
if grep -q 'PyTorch with CUDA is not importable' <<<"$out"; then echo "unexpected no-PyTorch note" >&2; exit 1; fi
: > "$tmp/torch-bench.txt"
out="$(OUT="$tmp" bash "$root/scripts/gpu-check.sh" --report-only)"
grep -qxF '| 1 | 8 | 4096 | 10.00 | n/a | n/a | n/a | n/a |' <<<"$out"
grep -q 'PyTorch with CUDA is not importable on this machine' <<<"$out"
set +e
OUT="$tmp" bash "$root/scripts/gpu-check.sh" --bogus 2>"$tmp/err"
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "unknown argument '--bogus'" "$tmp/err"
echo "gpu-check report logic: ok"
