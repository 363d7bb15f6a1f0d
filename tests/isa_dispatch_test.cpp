// Tests of the run-time ISA dispatch (core/dispatch.hpp, detail/vec16.hpp): every path this CPU
// runs gives the same bits as the baseline path and as the scalar definitions (the noise
// formula, the fixed-order reductions, the victim rule), kernel by kernel and through whole
// Keyformer / H2O / TOVA runs; forcing a path the CPU lacks throws and changes nothing; the
// KVEVICT_ISA variable is parsed with clear errors. Paths this CPU cannot run are reported
// as not covered here (an AVX-512 path needs an AVX-512 machine).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

const kvevict::Isa kAll[] = {kvevict::Isa::kBaseline, kvevict::Isa::kAvx2, kvevict::Isa::kAvx512};

std::vector<kvevict::Isa> supported() {
  std::vector<kvevict::Isa> out;
  for (kvevict::Isa isa : kAll)
    if (kvevict::isa_supported(isa)) out.push_back(isa);
  return out;
}

// Restores the path chosen before the test.
struct IsaGuard {
  kvevict::Isa saved = kvevict::active_isa();
  ~IsaGuard() { kvevict::set_isa(saved); }
};

// Every kernel's output on fixed inputs, as bits: sizes that are not multiples of 4, 8, 16 or
// of the 512-element chunk, unaligned pointers, NaN / -inf rows.
std::vector<std::uint32_t> kernel_outputs() {
  std::vector<std::uint32_t> out;
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (std::size_t n : {1u, 7u, 15u, 16u, 17u, 33u, 511u, 1000u, 1537u}) {
    std::vector<float> x(n + 1), z(n + 1), y(n + 1);
    for (float& v : x) v = nd(gen);
    const std::uint64_t key = kvevict::gumbel_row_key(11, n % 8, n);
    kvevict::fill_gumbel_row(key, 3 + n, z.data() + 1, n);  // unaligned
    kvevict::detail::add_gumbel_row(key, 3 + n, x.data() + 1, y.data() + 1, n);
    for (std::size_t i = 1; i <= n; ++i) {
      out.push_back(bits(z[i]));
      out.push_back(bits(y[i]));
    }
    out.push_back(bits(kvevict::detail::max_propagate_nan(x.data() + 1, n)));
    out.push_back(bits(kvevict::detail::sum_fixed_order(x.data() + 1, n)));
    // The softmax of the row, drawn noise and none.
    std::vector<float> e(n), f(2 * kvevict::detail::chunk_count(n)), acc(n, 0.25f);
    EXPECT_TRUE(kvevict::detail::softmax_chunks(x.data() + 1, kvevict::detail::DrawnNoise{key}, n, 0.7f, e.data(),
                                                f.data()));
    kvevict::detail::add_chunks(e.data(), f.data(), n, acc.data(), false);
    for (float v : acc) out.push_back(bits(v));
    EXPECT_TRUE(kvevict::detail::softmax_chunks(x.data() + 1, kvevict::detail::NoNoise{}, n, 1.0f, e.data(), f.data()));
    kvevict::detail::add_chunks(e.data(), f.data(), n, acc.data(), true);
    for (float v : acc) out.push_back(bits(v));
    // In-place Gumbel transform of uniforms.
    std::vector<float> u(n);
    for (std::size_t i = 0; i < n; ++i) u[i] = (static_cast<float>(i % 4096) + 0.5f) / 4096.0f;
    kvevict::detail::gumbel_from_uniform(u.data(), n);
    for (float v : u) out.push_back(bits(v));
    // A NaN and a +inf row are rejected; a row of -inf is accepted.
    x[1 + n / 2] = std::numeric_limits<float>::quiet_NaN();
    out.push_back(bits(kvevict::detail::max_propagate_nan(x.data() + 1, n)));
    out.push_back(kvevict::detail::softmax_chunks(x.data() + 1, kvevict::detail::NoNoise{}, n, 1.0f, e.data(),
                                                  f.data()));
    std::vector<float> masked(n, -kInf);
    out.push_back(bits(kvevict::detail::max_propagate_nan(masked.data(), n)));
    // The victim of a score row with recent flags and ties.
    std::vector<float> scores(n);
    std::vector<std::uint8_t> recent(n);
    std::vector<std::int64_t> positions(n);
    for (std::size_t i = 0; i < n; ++i) {
      scores[i] = static_cast<float>(gen() % 16) * 0.125f;
      recent[i] = static_cast<std::uint8_t>(gen() % 5 == 0);
      positions[i] = static_cast<std::int64_t>(gen() % 100000);
    }
    out.push_back(static_cast<std::uint32_t>(
        kvevict::RecentTopKSelection{}.victim(scores.data(), recent.data(), positions.data(), n)));
  }
  return out;
}

// The retained positions and score bits of every head after a noisy Keyformer, an H2O and a
// TOVA run (8 KV heads, g = 2, k = 300, 40 decode steps past the budget).
std::vector<std::uint32_t> cache_outputs() {
  std::vector<std::uint32_t> out;
  for (kvevict::Policy p : {kvevict::Policy::keyformer, kvevict::Policy::h2o, kvevict::Policy::tova}) {
    constexpr std::size_t kHeads = 8, kG = 2, kK = 300, kD = 4;
    kvevict::CacheConfig cfg;
    cfg.n_q_heads = kHeads * kG;
    cfg.budget = kvevict::Budget::tokens(kK);
    cfg.recent = kvevict::RecentWindow::ratio(p == kvevict::Policy::tova ? 0.0 : 0.3);
    cfg.seed = 99;
    kvevict::KVBuffer<float> buffer(kHeads, kK + 1, kD);
    kvevict::KVView<float> kv = buffer.view();
    kvevict::PolicyParams params;
    params.tau_init = 1.0f;
    params.tau_end = 2.0f;
    params.horizon = 20;
    auto cache = kvevict::make_cache(p, cfg, kv, params);
    std::mt19937 gen(3);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> row(kHeads * kD, 0.5f);  // [kv_head][head_dim]: one K (and V) row per KV head
    std::int64_t pos = 0;
    const std::size_t P = 200;
    std::vector<float> prompt(cfg.n_q_heads * P * P);
    for (float& v : prompt) v = nd(gen);
    for (std::size_t i = 0; i < P; ++i) kv.append(pos++, row.data(), row.data());
    cache->prefill(prompt.data(), P);
    for (int t = 0; t < 140; ++t) {
      kv.append(pos++, row.data(), row.data());
      const std::size_t n = kv.length(0);
      std::vector<float> logits(cfg.n_q_heads * n);
      for (float& v : logits) v = nd(gen);
      cache->decode_step(logits.data(), n);
    }
    for (std::size_t h = 0; h < kHeads; ++h) {
      for (std::size_t i = 0; i < cache->length(h); ++i) {
        out.push_back(static_cast<std::uint32_t>(cache->positions(h)[i]));
        out.push_back(bits(cache->scores(h)[i]));
      }
    }
  }
  return out;
}

TEST(IsaDispatch, NamesAndBaselineAlwaysSupported) {
  EXPECT_STREQ(kvevict::isa_name(kvevict::Isa::kBaseline), "baseline");
  EXPECT_STREQ(kvevict::isa_name(kvevict::Isa::kAvx2), "avx2");
  EXPECT_STREQ(kvevict::isa_name(kvevict::Isa::kAvx512), "avx512");
  EXPECT_TRUE(kvevict::isa_supported(kvevict::Isa::kBaseline));
  EXPECT_TRUE(kvevict::isa_supported(kvevict::best_isa()));
  // AVX-512 implies AVX2 here (the AVX-512 path is compiled with AVX2 + FMA as well).
  if (kvevict::isa_supported(kvevict::Isa::kAvx512)) {
    EXPECT_TRUE(kvevict::isa_supported(kvevict::Isa::kAvx2));
  }
}

TEST(IsaDispatch, EveryPathGivesTheBaselineBitsKernelByKernel) {
  IsaGuard guard;
  kvevict::set_isa(kvevict::Isa::kBaseline);
  const std::vector<std::uint32_t> want = kernel_outputs();
  ASSERT_FALSE(want.empty());
  for (kvevict::Isa isa : supported()) {
    kvevict::set_isa(isa);
    EXPECT_EQ(kvevict::active_isa(), isa);
    EXPECT_EQ(kernel_outputs(), want) << "path " << kvevict::isa_name(isa);
  }
  for (kvevict::Isa isa : kAll)
    if (!kvevict::isa_supported(isa)) std::printf("path %s: not run (this CPU lacks it)\n", kvevict::isa_name(isa));
}

TEST(IsaDispatch, EveryPathGivesTheScalarNoiseFormula) {
  IsaGuard guard;
  const std::uint64_t key = kvevict::gumbel_row_key(2026, 5, 77);
  for (kvevict::Isa isa : supported()) {
    kvevict::set_isa(isa);
    std::vector<float> z(1203);
    kvevict::fill_gumbel_row(key, 4000000000u, z.data(), z.size());  // slots wrap modulo 2^32
    for (std::size_t i = 0; i < z.size(); ++i) {
      const auto slot = static_cast<std::uint32_t>(4000000000u + i);
      ASSERT_EQ(bits(z[i]), bits(kvevict::detail::gumbel_zeta(key, slot))) << kvevict::isa_name(isa) << " i=" << i;
    }
  }
}

TEST(IsaDispatch, EveryPathGivesTheBaselineBitsThroughCaches) {
  IsaGuard guard;
  kvevict::set_isa(kvevict::Isa::kBaseline);
  const std::vector<std::uint32_t> want = cache_outputs();
  ASSERT_EQ(want.size(), 3u * 8 * 300 * 2);
  for (kvevict::Isa isa : supported()) {
    kvevict::set_isa(isa);
    EXPECT_EQ(cache_outputs(), want) << "path " << kvevict::isa_name(isa);
  }
}

TEST(IsaDispatch, ForcingAPathThisCpuLacksThrowsAndChangesNothing) {
  IsaGuard guard;
  kvevict::set_isa(kvevict::Isa::kBaseline);
  for (kvevict::Isa isa : kAll) {
    if (kvevict::isa_supported(isa)) continue;
    try {
      kvevict::set_isa(isa);
      FAIL() << "set_isa(" << kvevict::isa_name(isa) << ") did not throw";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("set_isa: isa ") + kvevict::isa_name(isa) + " is not supported by this CPU");
    }
    EXPECT_EQ(kvevict::active_isa(), kvevict::Isa::kBaseline);
  }
  EXPECT_THROW(kvevict::set_isa(static_cast<kvevict::Isa>(3)), std::invalid_argument);
  EXPECT_EQ(kvevict::active_isa(), kvevict::Isa::kBaseline);
}

TEST(IsaDispatch, EnvironmentVariableChoosesThePathOnFirstUse) {
  IsaGuard guard;
  const char* old = std::getenv("KVEVICT_ISA");
  const std::string saved = old != nullptr ? old : "";
  auto first_use = [](const char* value) {
    setenv("KVEVICT_ISA", value, 1);
    kvevict::detail::g_isa.store(-1);  // as in a fresh process
    return kvevict::active_isa();
  };
  EXPECT_EQ(first_use("baseline"), kvevict::Isa::kBaseline);
  try {
    first_use("sse9");
    FAIL() << "KVEVICT_ISA=sse9 did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "KVEVICT_ISA: 'sse9' is not one of baseline, avx2, avx512");
  }
  EXPECT_EQ(kvevict::detail::g_isa.load(), -1);  // nothing chosen: the next call reports again
  EXPECT_EQ(first_use(""), kvevict::best_isa());   // empty: as unset
  for (kvevict::Isa isa : kAll) {
    if (kvevict::isa_supported(isa)) {
      EXPECT_EQ(first_use(kvevict::isa_name(isa)), isa);
    } else {
      EXPECT_THROW(first_use(kvevict::isa_name(isa)), std::invalid_argument);
    }
  }
  if (old != nullptr) setenv("KVEVICT_ISA", saved.c_str(), 1);
  else unsetenv("KVEVICT_ISA");
  kvevict::detail::g_isa.store(-1);
}

}  // namespace
