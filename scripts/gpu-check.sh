#!/usr/bin/env bash
# The GPU check of kvevict's CUDA eviction kernels (include/kvevict/cuda/), in one call on a
# machine with an NVIDIA GPU and the CUDA toolkit (no network needed):
#  1. prints the GPU, its driver and the toolkit; fails if there is none;
#  2. builds, with nvcc for sm_90 (KVEVICT_GPU_ARCH to change) and the host g++, without CMake:
#     tests/cuda/gpu_check (the kernels vs the CPU caches) and bench/cuda/gpu_bench;
#  3. runs gpu_check: every policy, contiguous and paged (token NHD/HND, page), batch 1 and 16
#     ragged, 200 steps, noise off / injected / drawn (pass rules in tests/cuda/gpu_check_main.cpp);
#  4. runs gpu_bench (CUDA events over CUDA-graph replays) and, if PyTorch with CUDA is importable,
#     scripts/gpu_bench_torch.py (SDPA decode and the plain-PyTorch Keyformer step, same shapes);
#     without PyTorch the table has the CUDA timings only and says so;
#  5. writes the Markdown report to $OUT/gpu-check-report.md (and stdout).
# Every phase has a timeout; the whole run is meant to take under 8 minutes.
#
# Usage: scripts/gpu-check.sh [--build-only] [--quick] [--host]
#        (--host: no GPU; gpu_check on the serial host executor, no timings: this script's own test)
#        scripts/gpu-check.sh --report-only   (rewrites the report from the files already in $OUT:
#                                               gpu-check.md, gpu-bench.txt, torch-bench.txt, gpu.txt)
#        scripts/gpu-check.sh --prepare-deps   (here: copies the Eigen 3 headers to .gpu-deps/eigen3,
#                                               for a GPU machine without them; carry .gpu-deps)
# Env: OUT (report folder, default ./out-gpu-check), NVCC, CXX, KVEVICT_GPU_ARCH (default sm_90),
#      KVEVICT_EIGEN3_INCLUDE (a folder with Eigen/Core).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
log() { echo "[gpu-check +$(( $(date +%s) - start )) s] $*"; }
fail() { echo "gpu-check: FAILED: $*" >&2; exit 1; }

build_only=0 quick=0 report_only=0 host=0
for a in "$@"; do
  case "$a" in
    --build-only) build_only=1 ;;
    --report-only) report_only=1 ;;
    --quick) quick=1 ;;
    --host) host=1 ;;
    --prepare-deps)
      src="${KVEVICT_EIGEN3_INCLUDE:-/usr/include/eigen3}"
      [ -f "$src/Eigen/Core" ] || fail "--prepare-deps: no Eigen headers at $src (set KVEVICT_EIGEN3_INCLUDE)"
      rm -rf .gpu-deps/eigen3 && mkdir -p .gpu-deps && cp -r "$src" .gpu-deps/eigen3
      echo "copied $src to .gpu-deps/eigen3 ($(du -sh .gpu-deps/eigen3 | cut -f1)); carry .gpu-deps to the GPU machine"
      exit 0 ;;
    *) echo "gpu-check: unknown argument '$a' (usage: scripts/gpu-check.sh [--build-only] [--quick] [--host] |" \
            "--report-only | --prepare-deps)" >&2
       exit 2 ;;
  esac
done

OUT="${OUT:-$PWD/out-gpu-check}"
mkdir -p "$OUT"
report="$OUT/gpu-check-report.md"
arch="${KVEVICT_GPU_ARCH:-sm_90}"

# The Markdown report from the files in $OUT (gpu.txt, gpu-check.md, gpu-bench.txt, torch-bench.txt).
write_report() {
  local gpu_line torch_note=""
  gpu_line="$(cat "$OUT/gpu.txt" 2>/dev/null || echo unknown)"
  [ -s "$OUT/torch-bench.txt" ] || torch_note="PyTorch with CUDA is not importable on this machine: the table has \
the kvevict CUDA timings only (no SDPA or PyTorch-step comparison)."
  grep -q '^RESULT' "$OUT/gpu-bench.txt" 2>/dev/null \
    || torch_note="No timings in this run (--host, or gpu_bench printed none)."
  {
  echo "## kvevict CUDA eviction: GPU check of $(date -u +%Y-%m-%d)"
  echo
  echo "GPU (nvidia-smi: name, driver, memory, compute capability): $gpu_line"
  echo
  echo "Toolkit: $(cat "$OUT/toolkit.txt" 2>/dev/null || echo unknown). Built with -fmad=false."
  echo
  if [ -f "$OUT/gpu-check.md" ]; then cat "$OUT/gpu-check.md"; else echo "gpu_check wrote no table."; fi
  echo
  echo "### Eviction step time per layer (Keyformer, drawn noise, contiguous fp16 KV, 8 KV heads, d = 128)"
  echo
  [ -n "$torch_note" ] && { echo "$torch_note"; echo; }
  echo "| batch | q heads | n | kvevict step (us) | SDPA decode (us) | step / SDPA | PyTorch step (us) |" \
       "PyTorch / kvevict |"
  echo "|---|---|---|---|---|---|---|---|"
  awk '
    function val(s, key,   i, n, kv) {
      n = split(s, kv, " ")
      for (i = 1; i <= n; ++i) if (index(kv[i], key "=") == 1) return substr(kv[i], length(key) + 2)
      return ""
    }
    FILENAME == ARGV[1] {
      if ($1 == "TORCH") {
        k = val($0, "batch") "/" val($0, "q_heads") "/" val($0, "n")
        sdpa[k] = val($0, "sdpa_us")
        step[k] = val($0, "torch_step_us")
      }
      next
    }
    $1 == "RESULT" {
      k = val($0, "batch") "/" val($0, "q_heads") "/" val($0, "n"); e = val($0, "evict_us")
      s = (k in sdpa) ? sdpa[k] : ""; t = (k in step) ? step[k] : ""
      r1 = (s != "" && s + 0 > 0) ? sprintf("%.1f%%", 100 * e / s) : "n/a"
      r2 = (t != "" && e + 0 > 0) ? sprintf("%.1fx", t / e) : "n/a"
      printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", val($0, "batch"), val($0, "q_heads"), val($0, "n"), e,
             (s == "" ? "n/a" : s), r1, (t == "" ? "n/a" : t), r2
    }' "$OUT/torch-bench.txt" "$OUT/gpu-bench.txt"
  echo
  echo "Goal (issue): step <= 10% of SDPA decode at n >= 32K, and >= 10x faster than the PyTorch step."
  } > "$report"
}

if [ "$report_only" = 1 ]; then
  write_report
  cat "$report"
  exit 0
fi
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
CXX="${CXX:-g++}"
[ -x "$NVCC" ] || fail "nvcc not found (looked on PATH and at /usr/local/cuda/bin/nvcc; set NVCC)"
command -v "$CXX" >/dev/null || fail "host compiler $CXX not found (set CXX)"

eigen=""
for d in "${KVEVICT_EIGEN3_INCLUDE:-}" /usr/include/eigen3 /usr/local/include/eigen3 .gpu-deps/eigen3; do
  if [ -n "$d" ] && [ -f "$d/Eigen/Core" ]; then eigen="$d"; break; fi
done
[ -n "$eigen" ] || fail "the Eigen 3 headers (needed by the CPU caches the check compares with) are not here: run
  'scripts/gpu-check.sh --prepare-deps' on a machine that has them and carry .gpu-deps, or set KVEVICT_EIGEN3_INCLUDE"

log "toolkit: $("$NVCC" --version | tail -1); host compiler: $("$CXX" --version | head -1); Eigen: $eigen"
gpu_line="(build only: GPU not queried)"
[ "$host" = 1 ] && gpu_line="none (--host: the serial host executor)"
if [ "$build_only" = 0 ] && [ "$host" = 0 ]; then
  if command -v nvidia-smi >/dev/null; then
    gpu_line="$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader)" \
      || fail "nvidia-smi could not query the GPU"
    [ -n "$gpu_line" ] || fail "nvidia-smi lists no GPU"
  else
    gpu_line="nvidia-smi not found (gpu_check's first line names the device and the driver API)"
  fi
  log "GPU: $gpu_line"
fi
echo "$gpu_line" > "$OUT/gpu.txt"
echo "$("$NVCC" --version | tail -1), arch $arch" > "$OUT/toolkit.txt"

# ---- build: four compiles in parallel, then the link ----
b=build-gpu-check
mkdir -p "$b"
cxxflags=(-std=c++17 -O2 -ffp-contract=off -fopenmp-simd -DKVEVICT_OMP_SIMD -Wall -Wextra -Iinclude -I"$eigen")
nvflags=(-std=c++17 -O2 -fmad=false -arch="$arch" -Xcompiler=-Wall,-Wextra -Iinclude)
log "building for $arch in $b/"
pids=()
"$CXX" "${cxxflags[@]}" -c tests/cuda/harness.cpp -o "$b/harness.o" & pids+=($!)
"$CXX" "${cxxflags[@]}" -c tests/cuda/gpu_check_main.cpp -o "$b/gpu_check_main.o" & pids+=($!)
"$NVCC" "${nvflags[@]}" -c tests/cuda/gpu_backend.cu -o "$b/gpu_backend.o" & pids+=($!)
"$NVCC" "${nvflags[@]}" bench/cuda/gpu_bench.cu -o "$b/gpu_bench" & pids+=($!)
for p in "${pids[@]}"; do wait "$p" || fail "a compile failed (see above)"; done
"$NVCC" -arch="$arch" "$b/harness.o" "$b/gpu_check_main.o" "$b/gpu_backend.o" -o "$b/gpu_check" \
  || fail "link of gpu_check"
log "built $b/gpu_check and $b/gpu_bench"
[ "$build_only" = 1 ] && { log "--build-only: done"; exit 0; }

# ---- correctness ----
check_args=()
[ "$quick" = 1 ] && check_args+=(--quick)
[ "$host" = 1 ] && check_args+=(--host)
log "gpu_check ${check_args[*]:-} (every policy x layout x batch, vs the CPU caches)"
set +e
timeout 330 "$b/gpu_check" "${check_args[@]}" "$OUT/gpu-check.md"
check_rc=$?
set -e
[ "$check_rc" = 124 ] && fail "gpu_check ran past its 330 s limit"

# ---- timing ----
bench_args=()
[ "$quick" = 1 ] && bench_args+=(--quick)
if [ "$host" = 1 ]; then
  log "--host: no timings"
  echo "(--host: no GPU, no timings)" > "$OUT/gpu-bench.txt"
  : > "$OUT/torch-bench.txt"
else
  log "gpu_bench (CUDA events over graph replays)"
  timeout 150 "$b/gpu_bench" "${bench_args[@]}" --policy keyformer | tee "$OUT/gpu-bench.txt" \
    || fail "gpu_bench failed"
fi
if [ "$host" = 1 ]; then
  :
elif command -v python3 >/dev/null &&
   python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  log "PyTorch with CUDA found: SDPA decode and the plain-PyTorch Keyformer step"
  timeout 150 python3 scripts/gpu_bench_torch.py "${bench_args[@]}" | tee "$OUT/torch-bench.txt" \
    || fail "scripts/gpu_bench_torch.py failed"
else
  : > "$OUT/torch-bench.txt"
  log "PyTorch with CUDA is not importable here: CUDA-only timings"
fi

write_report
cat "$report"
log "report: $report"
[ "$check_rc" = 0 ] || fail "gpu_check found a difference from the CPU caches (exit $check_rc); see the table above"
log "all checks passed"
