#!/usr/bin/env bash
# The checks that left the per-submission CI (.ci/run) to keep it under 30 minutes on 2 cores: run this before
# resolving an issue that changes include/, tools/ or fuzz/, and at least once a round (.ci/README.md says when,
# and records the date and result of the last run). About 90 minutes on 2 idle cores with the defaults.
#  E1. g++ AddressSanitizer + UndefinedBehaviorSanitizer over every target but the benchmarks and all tests but
#      the realmodel ones (.ci/run's flavour 3 is the same with clang++: this is the other compiler's view)
#  E2. clang++ Release -Werror: every target but the benchmarks, all tests but realmodel (clang's code generation;
#      .ci/run compiles with clang++ only under the sanitizers at -O0)
#  E3. clang++ bits: bench/plain_build_check.sh without --quick (g++ and clang++, -O2 and -O3 -march=native, the
#      same checksums on every dispatched path)
#  E4. ThreadSanitizer (g++) over every unit test and the llama2 engine's tests, not only the parallel ones
#  E5. -march=x86-64-v4 (g++ -Werror): every target, examples and tools included; the tests run when the CPU has
#      AVX-512
#  E6. libFuzzer: every target for FUZZ_SECONDS (default 600) each, two at a time
#  E7. vLLM: every test of tests/vllm, the variants .ci/run leaves out (marked `extended`: window's and chunked
#      StreamingLLM's engine runs, tensor parallelism under StreamingLLM) included
# Usage: bash scripts/ci-extended.sh [E1 E2 ...]   (default: all). Exit status: 0 when every flavour passed.
# At the end it prints a table of seconds and a result per flavour (copy it into .ci/README.md).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
jobs="$(nproc)"
export KVEVICT_REQUIRE_MODELS=1
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
bash scripts/deps.sh
selected=("$@")
((${#selected[@]})) || selected=(E1 E2 E3 E4 E5 E6 E7)
want() { local f; for f in "${selected[@]}"; do [ "$f" = "$1" ] && return 0; done; return 1; }

declare -a table=()
failed=0
run_flavour() {  # run_flavour ID TITLE FUNCTION
  want "$1" || return 0
  local t0 rc; t0=$(date +%s)
  echo "== $1 $2   [$((t0 - start)) s since the start]"
  ( set -e; "$3" ); rc=$?
  ((rc == 0)) || failed=1
  table+=("$(printf '%-4s %-62s %6d  %s' "$1" "$2" $(($(date +%s) - t0)) "$([ $rc -eq 0 ] && echo passed || echo "FAILED ($rc)")")")
}

e1() {
  cmake -S . -B build-asan-gcc -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
        -DKVEVICT_SANITIZE=address,undefined -DKVEVICT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan-gcc -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan-gcc --output-on-failure -j"$jobs" -LE realmodel
}
e2() {
  CXX=clang++ cmake -S . -B build-clang -DCMAKE_BUILD_TYPE=Release -DKVEVICT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-clang -j"$jobs"
  ctest --test-dir build-clang --output-on-failure -j"$jobs" -LE realmodel
}
e3() {
  bash bench/plain_build_check.sh --out build-plain-check-extended
}
e4() {
  cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVEVICT_SANITIZE=thread -DKVEVICT_BUILD_BENCH=OFF \
        -DKVEVICT_BUILD_EXAMPLES=OFF >/dev/null
  cmake --build build-tsan -j"$jobs"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    ctest --test-dir build-tsan --output-on-failure -j"$jobs" -LE "realmodel|slow|compile|cli|replay|readme"
}
e5() {
  cmake -S . -B build-v4 -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-march=x86-64-v4 -DKVEVICT_BUILD_EXAMPLES=ON \
        -DKVEVICT_BUILD_TOOLS=ON -DKVEVICT_BENCH_O2=ON >/dev/null
  cmake --build build-v4 -j"$jobs"
  if grep -qw avx512f /proc/cpuinfo; then
    ctest --test-dir build-v4 --output-on-failure -j"$jobs" -LE "realmodel|slow"
  else
    echo "   this CPU has no AVX-512: the x86-64-v4 build is compiled, not run"
  fi
}
e6() {
  FUZZ_SECONDS="${FUZZ_SECONDS:-600}" bash scripts/fuzz.sh
}
e7() {
  bash scripts/vllm-test.sh
}

run_flavour E1 "g++ ASan + UBSan, all but bench, all tests but realmodel" e1
run_flavour E2 "clang++ Release -Werror, all but bench, all tests" e2
run_flavour E3 "plain_build_check: g++ and clang++ bits" e3
run_flavour E4 "g++ ThreadSanitizer: unit and engine tests" e4
run_flavour E5 "-march=x86-64-v4: every target" e5
run_flavour E6 "libFuzzer: every target for ${FUZZ_SECONDS:-600} s each" e6
run_flavour E7 "vLLM plugin: every test, the extended variants included" e7

echo
echo "== scripts/ci-extended.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
printf '%s\n' "${table[@]}"
printf '%-4s %-62s %6d\n' "" "total" $(($(date +%s) - start))
exit $failed
