// kvevict step probe — one policy's decode step, as a consumer who only includes the umbrella
// header builds it (no CMake target, any flags): no Google Benchmark, no Eigen code of its own.
//
//   step_probe POLICY N STEPS [D]      POLICY: keyformer, h2o, streamingllm, window, tova, h2o-mean,
//                                      keyformer-mean (PolicyParams::mean_attention), h2o-adakv
//                                      (HeadBudgets::adaptive(0.2): the heads share 8 k, so they hold
//                                      different counts; the step's logits have the longest head's stride),
//                                      knorm, keydiff (scores from the keys, w = 0.3k, no logits passed),
//                                      expected-attention (a TOVA cache ranking expected_attention_logits,
//                                      recomputed before every step from the held keys and values, as the
//                                      llama2 engine does; the step counted = those rows + decode_step;
//                                      compiled with -DPROBE_EXPECTED_ATTENTION only, as instructions.sh does)
//
// Builds one layer of 8 KV heads (GQA group 1, float K/V of dimension D, default 128) holding
// N = k tokens (Keyformer: τ 1 → 2 over 1024 steps, w = 0.3k; H2O w = 0.3k; StreamingLLM 4
// sinks; TOVA w = 0, as bench/), then runs STEPS decode steps on fixed logits (uniform in [-4, 4)) and
// prints one line: `POLICY n=N steps=STEPS isa=ISA ns_per_elem=T checksum=C`, where T is the
// thread CPU time of the steps / (STEPS · 8 · N) and C an FNV-1a hash of every head's positions and
// score bits afterwards. C must be the same for every build (compiler, -O level, -march,
// -ffp-contract) and every dispatched path (KVEVICT_ISA): bench/plain_build_check.sh compares.
// bench/instructions.sh runs it under callgrind.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <time.h>
#include <vector>

#include <kvevict/kvevict.hpp>

// Under callgrind (bench/instructions.sh) only the timed steps are counted.
#include "probe_callgrind.hpp"

// Also builds against headers from before the run-time dispatch (bench/instructions.sh --include),
// to count what each change saved.
#if __has_include(<kvevict/core/dispatch.hpp>)
#define PROBE_ISA_NAME kvevict::isa_name(kvevict::active_isa())
#else
#define PROBE_ISA_NAME "none"
#endif

namespace {

constexpr std::size_t kKVHeads = 8;

std::uint64_t fnv(std::uint64_t h, const void* p, std::size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < bytes; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

// This thread's CPU time: on a shared machine the wall clock of a 0.1 ms step also counts whole
// time slices of other processes.
double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::size_t parse_size(const char* flag, const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (end == text || *end != '\0' || v == 0) {
    std::fprintf(stderr, "step_probe: %s must be a positive integer, got '%s'\n", flag, text);
    std::exit(2);
  }
  return static_cast<std::size_t>(v);
}

// knorm and keydiff score from the keys (no logits); headers from before them have neither.
bool policy_reads_keys(kvevict::Policy p) {
#if __has_include(<kvevict/score/expected_attention.hpp>)
  return p == kvevict::Policy::knorm || p == kvevict::Policy::keydiff;
#else
  (void)p;
  return false;
#endif
}

}  // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // e.g. KVEVICT_ISA names a path this CPU cannot run
    std::fprintf(stderr, "step_probe: %s\n", e.what());
    return 2;
  }
}

int run(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::fprintf(stderr, "usage: step_probe POLICY N STEPS [D]\n");
    return 2;
  }
  kvevict::Policy policy;
  // h2o-mean, keyformer-mean: the policy with PolicyParams::mean_attention (kvevict::H2OMean, KeyformerMean).
  std::string name = argv[1];
  const std::string adakv_suffix = "-adakv";
  const bool adakv = name.size() > adakv_suffix.size() &&
                     name.compare(name.size() - adakv_suffix.size(), adakv_suffix.size(), adakv_suffix) == 0;
  if (adakv) name.resize(name.size() - adakv_suffix.size());
  const std::string mean_suffix = "-mean";
  const bool mean = name.size() > mean_suffix.size() &&
                    name.compare(name.size() - mean_suffix.size(), mean_suffix.size(), mean_suffix) == 0;
  if (mean) name.resize(name.size() - mean_suffix.size());
  const bool expected = name == "expected-attention";
  if (expected) name = "tova";
  try {
    policy = kvevict::parse_policy(name);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_probe: POLICY: %s\n", e.what());
    return 2;
  }
  const std::size_t n = parse_size("N", argv[2]), steps = parse_size("STEPS", argv[3]);
  const std::size_t d = argc == 5 ? parse_size("D", argv[4]) : 128;

  kvevict::CacheConfig cfg;
  cfg.n_q_heads = kKVHeads;
  cfg.budget = kvevict::Budget::tokens(n);
  const bool key_score = policy_reads_keys(policy);
  const bool windowed = policy == kvevict::Policy::keyformer || policy == kvevict::Policy::h2o || key_score;
  cfg.recent = kvevict::RecentWindow::ratio(windowed ? 0.3 : 0.0);
  cfg.seed = 42;
  kvevict::PolicyParams params;
  params.tau_init = 1.0f;
  params.tau_end = 2.0f;
  params.horizon = 1024;
#if __has_include(<kvevict/score/mean_attention.hpp>)
  params.mean_attention = mean;
#else
  if (mean) {
    std::fprintf(stderr, "step_probe: POLICY %s needs headers with kvevict::MeanAttention\n", argv[1]);
    return 2;
  }
#endif

#if __has_include(<kvevict/head_budgets.hpp>)
  if (adakv) cfg.head_budgets = kvevict::HeadBudgets::adaptive(0.2f);
#else
  if (adakv) {
    std::fprintf(stderr, "step_probe: POLICY %s needs headers with kvevict::HeadBudgets\n", argv[1]);
    return 2;
  }
#endif

  kvevict::KVBuffer<float> buffer(kKVHeads, n + 1, d);
  kvevict::KVView<float> kv = buffer.view();
  auto cache = kvevict::make_cache(policy, cfg, kv, params);

  std::vector<float> k_new(kKVHeads * d, 0.5f), v_new(kKVHeads * d, -0.5f);
  std::vector<float> logits(kKVHeads * (n + 1));
  // Inputs from integers, exactly (std::normal_distribution's own arithmetic may contract into FMAs
  // under -march=native and give other inputs): uniform multiples of 2^-20 in [-4, 4).
  std::mt19937_64 gen(7);
  auto draw = [&gen] { return static_cast<float>(static_cast<std::int32_t>(gen() >> 41) - (1 << 22)) * 0x1p-20f; };
  for (float& x : logits) x = draw();
  // The scores that read keys and values see distinct rows (the others only move them): a new row per token.
  const bool distinct_rows = key_score || expected;
  auto next_rows = [&] {
    if (!distinct_rows) return;
    for (float& x : k_new) x = draw();
    for (float& x : v_new) x = draw();
  };
  auto append = [&](std::int64_t p) {
    next_rows();
    kv.append(p, k_new.data(), v_new.data());
  };
#if defined(PROBE_EXPECTED_ATTENTION) && __has_include(<kvevict/score/expected_attention.hpp>)
  // Expected Attention's query statistics: 64 pre-RoPE query rows per query head; kvpress's defaults.
  kvevict::QueryStatistics stats(kKVHeads, d);
  std::vector<float> q_rows(64 * kKVHeads * d);
  for (float& x : q_rows) x = draw();
  stats.add(q_rows.data(), 64);
  kvevict::ExpectedAttentionScratch ea_scratch;
  const kvevict::ExpectedAttentionOptions ea_options;
  auto expected_rows = [&](std::int64_t next_position, std::size_t stride) {
    kvevict::expected_attention_logits(stats, kv, kvevict::RopeSpec{}, next_position, ea_options, logits.data(), stride,
                                       ea_scratch);
  };
#else
  if (expected) {  // its Eigen products (GCC 12 warns inside its own AVX-512 intrinsics under -march=native,
                   // which the -Werror build check of plain_build_check.sh would not pass): compiled on request
    std::fprintf(stderr, "step_probe: POLICY %s needs -DPROBE_EXPECTED_ATTENTION and headers with it\n", argv[1]);
    return 2;
  }
  auto expected_rows = [](std::int64_t, std::size_t) {};
#endif

  // Fill to the budget cheaply: a short prefill, then non-evicting steps on fully masked logits
  // with zero injected noise (they add nothing), then 16 real steps. The key scores need no logits:
  // they prefill all N tokens at once (their steps rescore every held key, O(N · D) each).
  std::int64_t pos = 0;
  const std::size_t P = key_score ? n : (n < 64 ? n : 64);
  std::vector<float> prompt(key_score ? 0 : kKVHeads * P * P);
  for (float& x : prompt) x = draw();
  for (std::size_t p = 0; p < P; ++p) append(pos++);
  cache->prefill(key_score ? nullptr : prompt.data(), P);
  std::vector<float> masked(logits.size(), -std::numeric_limits<float>::infinity()), zeros(logits.size(), 0.0f);
  while (kv.length(0) < n) {
    if (expected) {  // Expected Attention reads the held rows: fill them too
      append(pos);
      cache->decode_step(masked.data(), kv.length(0), zeros.data());
      ++pos;
      continue;
    }
    const std::size_t len = kv.length(0) + 1;
    for (std::size_t j = 0; j < kKVHeads; ++j) {
      kv.head_positions(j)[len - 1] = pos;
      kv.lengths[j] = len;
    }
    ++pos;
    cache->decode_step(masked.data(), len, zeros.data());
  }
  // The logits' row stride: every head's length, or the longest one with head-adaptive budgets.
  auto stride = [&kv] {
    std::size_t m = 0;
    for (std::size_t j = 0; j < kKVHeads; ++j) m = kv.length(j) > m ? kv.length(j) : m;
    return m;
  };
  for (int t = 0; t < 16; ++t) {  // with head-adaptive budgets the first shares the layer's 8 k
    append(pos++);
    if (expected) expected_rows(pos, stride());
    cache->decode_step(key_score ? nullptr : logits.data(), stride());
  }

  double seconds = 0.0;
  CALLGRIND_START_INSTRUMENTATION;  // with --instr-atstart=no the filling above runs uninstrumented
  for (std::size_t t = 0; t < steps; ++t) {
    append(pos++);
    const double t0 = thread_seconds();
    const std::size_t m = stride();
    CALLGRIND_TOGGLE_COLLECT;
    if (expected) expected_rows(pos, m);  // the rows the TOVA cache ranks by: part of the step's cost
    cache->decode_step(key_score ? nullptr : logits.data(), m);
    CALLGRIND_TOGGLE_COLLECT;
    seconds += thread_seconds() - t0;
  }

  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::size_t j = 0; j < kKVHeads; ++j) {
    h = fnv(h, cache->positions(j), cache->length(j) * sizeof(std::int64_t));
    h = fnv(h, cache->scores(j), cache->length(j) * sizeof(float));
  }
  std::printf("%s n=%zu steps=%zu isa=%s ns_per_elem=%.3f checksum=%016llx\n", argv[1], n, steps,
              PROBE_ISA_NAME,
              seconds * 1e9 / (static_cast<double>(steps) * kKVHeads * static_cast<double>(n)),
              static_cast<unsigned long long>(h));
  return 0;
}
