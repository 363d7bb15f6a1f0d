// kvevict — header-only KV-cache eviction (Keyformer, H2O, StreamingLLM, TOVA).
// SPDX-License-Identifier: Apache-2.0
//
// The CUDA eviction code's arithmetic without a GPU: the block functions of
// include/kvevict/cuda/eviction_core.cuh run on the serial `core::HostExec` and are compared
// with the CPU caches fed the same logits (every policy; contiguous, paged token and page
// unit, NHD and HND; a ragged batch; noise off, injected and drawn): lengths, kept sets,
// positions and K/V by slot, and scores bit for bit. Plus the shared scalar pieces (ζ, τ,
// the selection rules) against the CPU functions, and the device error contract.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/kvevict.hpp>
#include <kvevict/paged/paged_cache.hpp>

#include "batch_host.hpp"
#include "harness.hpp"

namespace {

namespace kc = kvevict::cuda;
using kvevict::Policy;
using kvtest_cuda::CaseConfig;
using kvtest_cuda::HostBackend;
using kvtest_cuda::Noise;

static_assert(kc::kChunk == kvevict::detail::kChunk, "the device chunk must be the CPU kernel's");
static_assert(kc::kLanes == kvevict::detail::kLanes, "the device lanes must be the CPU kernel's");

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(CudaCore, ZetaIsTheCpuRowFormulaBitForBit) {
  for (std::uint64_t seed : {0ULL, 1ULL, 0x9e3779b97f4a7c15ULL})
    for (std::uint64_t q : {0ULL, 3ULL, 31ULL})
      for (std::uint64_t pos : {0ULL, 17ULL, 131071ULL}) {
        const std::uint64_t key = kvevict::gumbel_row_key(seed, q, pos);
        std::vector<float> row(1500);
        kvevict::fill_gumbel_row(key, 0, row.data(), row.size());
        for (std::uint32_t s = 0; s < row.size(); ++s)
          ASSERT_EQ(bits(kvevict::detail::gumbel_zeta(key, s)), bits(row[s])) << "slot " << s;
        std::vector<float> part(100);  // a row started mid-way: the same ζ by slot
        kvevict::fill_gumbel_row(key, 700, part.data(), part.size());
        for (std::uint32_t s = 0; s < part.size(); ++s) ASSERT_EQ(bits(part[s]), bits(row[700 + s]));
      }
}

TEST(CudaCore, TemperatureScheduleIsTheCpuSchedule) {
  const kvevict::LinearTemperature lin(1.0f, 2.0f, 7);
  const kvevict::IncrementTemperature inc(0.5f, 0.03f);
  kc::TemperatureParams tl;
  tl.kind = kc::TemperatureKind::linear;
  tl.tau_init = 1.0f;
  tl.tau_end = 2.0f;
  tl.horizon = 7;
  kc::TemperatureParams ti;
  ti.kind = kc::TemperatureKind::increment;
  ti.tau_init = 0.5f;
  ti.delta = 0.03f;
  for (std::uint64_t t = 0; t < 20; ++t) {
    EXPECT_EQ(bits(tl.tau_at(t)), bits(lin(t))) << t;
    EXPECT_EQ(bits(ti.tau_at(t)), bits(inc(t))) << t;
  }
  kc::TemperatureParams tc;
  tc.tau_init = 1.5f;
  EXPECT_EQ(tc.tau_at(9), 1.5f);
  EXPECT_EQ(tl.tau_at(3), static_cast<float>(1.0 + 3.0 / 7.0));
  EXPECT_TRUE(kc::tau_valid(1.17549435e-38f));
  EXPECT_FALSE(kc::tau_valid(1e-39f));
  EXPECT_FALSE(kc::tau_valid(std::numeric_limits<float>::infinity()));
  EXPECT_FALSE(kc::tau_valid(std::nanf("")));
}

/// `prefill_select` (threshold search + tie cut-off) against `select_keep`, with many ties.
TEST(CudaCore, PrefillSelectionIsSelectKeep) {
  const kc::core::HostExec ex;
  std::uint64_t state = 7;
  auto next = [&] { return static_cast<std::uint32_t>((state = kvevict::detail::splitmix64(state)) >> 40); };
  for (int trial = 0; trial < 300; ++trial) {
    const std::uint32_t n = 1 + next() % 300, k = 1 + next() % (n + 5), w = next() % (k + 1);
    std::vector<float> s(n);
    for (auto& x : s) x = static_cast<float>(next() % 9) * 0.25f;  // few distinct values: ties
    kc::PolicyParams p;
    p.score = kc::ScoreKind::h2o;
    p.k = k;
    p.w = w;
    std::vector<std::int32_t> keep(n + 1);
    const std::uint32_t m = kc::core::prefill_select(
        ex, p, n, [&](std::uint32_t i) { return bits(s[i]); }, keep.data(), keep.data() + n);
    const std::vector<std::size_t> want = kvevict::select_keep(s, k, w);
    ASSERT_EQ(m, want.size());
    for (std::uint32_t i = 0; i < m; ++i) ASSERT_EQ(static_cast<std::size_t>(keep[i]), want[i]) << "trial " << trial;
  }
  // StreamingLLM: 2 sinks + the last 3 of 8 (k = 5).
  kc::PolicyParams p;
  p.score = kc::ScoreKind::none;
  p.k = 5;
  p.sinks = 2;
  std::vector<std::int32_t> keep(9);
  const std::uint32_t m = kc::core::prefill_select(
      ex, p, 8, [](std::uint32_t) { return 0u; }, keep.data(), keep.data() + 8);
  ASSERT_EQ(m, 5u);
  EXPECT_EQ(std::vector<std::int32_t>(keep.begin(), keep.begin() + 5), (std::vector<std::int32_t>{0, 1, 5, 6, 7}));
}

/// The victim searches against `RecentTopKSelection::victim` and `SinkRecentSelection::victim`.
TEST(CudaCore, VictimSearchIsTheCpuSelection) {
  const kc::core::HostExec ex;
  std::uint64_t state = 11;
  auto next = [&] { return static_cast<std::uint32_t>((state = kvevict::detail::splitmix64(state)) >> 40); };
  for (int trial = 0; trial < 300; ++trial) {
    const std::uint32_t n = 2 + next() % 200;
    std::vector<float> s(n);
    std::vector<std::uint8_t> recent(n);
    std::vector<std::int64_t> pos(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      s[i] = static_cast<float>(next() % 5) * 0.5f;
      recent[i] = next() % 4 == 0 ? 1 : 0;
      pos[i] = static_cast<std::int64_t>(i) * 3;
    }
    recent[next() % n] = 0;
    std::shuffle(pos.begin(), pos.end(), std::mt19937(trial));
    const std::size_t want = kvevict::RecentTopKSelection{}.victim(s.data(), recent.data(), pos.data(), n);
    const std::uint32_t got = kc::core::score_victim(
        ex, n, [&](std::uint32_t i) { return kc::core::victim_key(s[i], recent[i]); },
        [&](std::uint32_t i) { return pos[i]; });
    ASSERT_EQ(got, want) << "trial " << trial;
    const std::uint32_t sinks = next() % 6;
    if (sinks < n) {
      const std::size_t wsink = kvevict::SinkRecentSelection{sinks}.victim(s.data(), recent.data(), pos.data(), n);
      ASSERT_EQ(kc::core::sink_victim(ex, n, sinks, [&](std::uint32_t i) { return pos[i]; }), wsink) << trial;
    }
  }
}

/// Every policy, contiguous and paged, through the host executor: identical to the CPU caches.
struct Case {
  Policy policy;
  bool paged, page_unit;
  kvevict::PageLayout layout;
  Noise noise;
  bool ragged;
};
void PrintTo(const Case& c, std::ostream* os) {
  *os << kvevict::policy_name(c.policy) << (c.paged ? (c.page_unit ? " paged/page " : " paged/token ") : " contiguous ")
      << kvevict::page_layout_name(c.layout) << " noise " << static_cast<int>(c.noise) << (c.ragged ? " ragged" : "");
}
class CudaCoreVsCpu : public ::testing::TestWithParam<Case> {};

TEST_P(CudaCoreVsCpu, BitIdenticalToTheCpuCache) {
  const Case c = GetParam();
  CaseConfig cfg;
  cfg.policy = c.policy;
  cfg.paged = c.paged;
  cfg.page_unit = c.page_unit;
  cfg.layout = c.layout;
  cfg.noise = c.noise;
  cfg.ragged = c.ragged;
  cfg.steps = 40;
  HostBackend backend;
  const kvtest_cuda::Report rep = kvtest_cuda::run_case(backend, cfg);
  EXPECT_TRUE(rep.exact()) << kvtest_cuda::case_name(cfg) << ": " << rep.first_problem << " (sets "
                           << rep.set_mismatches << ", slots " << rep.slot_mismatches << ", scores "
                           << rep.score_bit_mismatches << ", status " << rep.status_errors << ")";
  EXPECT_EQ(rep.pairs, 41u * (c.paged ? 3u : 6u));  // (prefill + 40 steps) x rows
}

const Case kCases[] = {
    {Policy::keyformer, false, false, kvevict::PageLayout::NHD, Noise::off, false},
    {Policy::keyformer, false, false, kvevict::PageLayout::NHD, Noise::injected, true},
    {Policy::keyformer, false, false, kvevict::PageLayout::NHD, Noise::drawn, false},
    {Policy::h2o, false, false, kvevict::PageLayout::NHD, Noise::off, true},
    {Policy::tova, false, false, kvevict::PageLayout::NHD, Noise::off, false},
    {Policy::window, false, false, kvevict::PageLayout::NHD, Noise::off, false},
    {Policy::streaming_llm, false, false, kvevict::PageLayout::NHD, Noise::off, true},
    {Policy::keyformer, true, false, kvevict::PageLayout::NHD, Noise::drawn, true},
    {Policy::keyformer, true, false, kvevict::PageLayout::HND, Noise::injected, false},
    {Policy::h2o, true, false, kvevict::PageLayout::HND, Noise::off, false},
    {Policy::tova, true, false, kvevict::PageLayout::NHD, Noise::off, true},
    {Policy::streaming_llm, true, false, kvevict::PageLayout::NHD, Noise::off, false},
    {Policy::window, true, false, kvevict::PageLayout::HND, Noise::off, false},
    {Policy::h2o, true, true, kvevict::PageLayout::NHD, Noise::off, false},
    {Policy::keyformer, true, true, kvevict::PageLayout::HND, Noise::drawn, true},
    {Policy::tova, true, true, kvevict::PageLayout::NHD, Noise::off, false},
};
INSTANTIATE_TEST_SUITE_P(AllPolicies, CudaCoreVsCpu, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           std::string s = kvevict::policy_name(c.policy);
                           s += c.paged ? (c.page_unit ? "_pagedPage" : "_pagedToken") : "_contiguous";
                           s += c.paged ? std::string("_") + kvevict::page_layout_name(c.layout) : "";
                           s += c.noise == Noise::off        ? "_noiseOff"
                                : c.noise == Noise::injected ? "_noiseInjected"
                                                             : "_noiseDrawn";
                           s += c.ragged ? "_ragged" : "_dense";
                           return s;
                         });

TEST(CudaCore, PageMeanAndWiderGroupsMatchTheCpu) {
  CaseConfig cfg;
  cfg.policy = Policy::h2o;
  cfg.paged = true;
  cfg.page_unit = true;
  cfg.page_mean = true;
  cfg.n_q = 8;
  cfg.n_kv = 2;
  cfg.prompts = {600, 33};
  cfg.steps = 35;
  HostBackend backend;
  const kvtest_cuda::Report rep = kvtest_cuda::run_case(backend, cfg);
  EXPECT_TRUE(rep.exact()) << rep.first_problem;
}

/// A small contiguous batch for the error tests: B = 2, 2 q heads, 1 KV head, d = 2, k = 3, w = 1.
struct Small {
  kvtest_cuda::BatchHost h;
  kc::PolicyParams p;
  Small() {
    h.batch = 2;
    h.n_kv = 1;
    h.n_q = 2;
    h.head_dim = 2;
    h.capacity = 8;
    h.max_prompt = 4;
    h.allocate(1);
    p.score = kc::ScoreKind::h2o;
    p.k = 3;
    p.w = 1;
    p.n_q_heads = 2;
    for (std::uint32_t b = 0; b < 2; ++b) {
      for (std::uint32_t s = 0; s < 4; ++s) h.positions[b * 8 + s] = s;
      h.lengths[b] = 4;
    }
    kvtest_cuda::HostLogits pre;
    pre.stride = 4;
    pre.x.assign(2 * 2 * 4 * 4, 0.0f);
    kvtest_cuda::HostBackend().prefill(h, p, pre);
  }
  void append(std::uint32_t b, std::int64_t pos) {
    h.positions[b * 8 + static_cast<std::uint32_t>(h.lengths[b])] = pos;
    ++h.lengths[b];
  }
};

TEST(CudaCore, PrefillCutOfUniformLogitsKeepsTheExpectedSlots) {
  Small s;
  // Row r of each of the 2 q heads spreads 1 over r + 1 slots: slot 0 gets 2 * (1 + 1/2 + 1/3 + 1/4),
  // slot 3 only 2 * 1/4. k = 3, w = 1: slot 3 is recent, slots 0 and 1 are the top two of [0, 3).
  for (std::uint32_t b = 0; b < 2; ++b) {
    EXPECT_EQ(s.h.status[b], kc::kStatusOk);
    EXPECT_EQ(s.h.lengths[b], 3);
    EXPECT_EQ(s.h.positions[b * 8 + 0], 0);
    EXPECT_EQ(s.h.positions[b * 8 + 1], 1);
    EXPECT_EQ(s.h.positions[b * 8 + 2], 3);
    EXPECT_FLOAT_EQ(s.h.scores[b * 8 + 0], 2.0f * (1.0f + 0.5f + 1.0f / 3.0f + 0.25f));
    EXPECT_FLOAT_EQ(s.h.scores[b * 8 + 2], 0.5f);
    EXPECT_EQ(s.h.recent[b * 8 + 2], 1);
    EXPECT_EQ(s.h.rows[b].tracked, 3);
    EXPECT_EQ(s.h.rows[b].last_position, 3);
    EXPECT_EQ(s.h.rows[b].prefilled, 1);
  }
}

TEST(CudaCore, BadLogitsLeaveTheSequenceUnchangedAndSetItsStatus) {
  Small s;
  s.append(0, 10);
  s.append(1, 10);
  const kvtest_cuda::BatchHost before = s.h;
  kvtest_cuda::HostLogits lg;
  lg.stride = 4;
  lg.x.assign(2 * 2 * 4, 0.0f);
  lg.x[1 * 4 + 2] = std::nanf("");  // sequence 0, q head 1, slot 2
  kvtest_cuda::HostBackend().step(s.h, s.p, lg);
  EXPECT_EQ(s.h.status[0], kc::kStatusBadLogits);
  EXPECT_EQ(s.h.status[1], kc::kStatusOk);
  EXPECT_EQ(s.h.lengths[0], 4);  // unchanged: still the appended length
  EXPECT_EQ(std::vector<float>(s.h.scores.begin(), s.h.scores.begin() + 8),
            std::vector<float>(before.scores.begin(), before.scores.begin() + 8));
  EXPECT_EQ(s.h.rows[0].tracked, 3);
  EXPECT_EQ(s.h.lengths[1], 3);  // sequence 1 stepped and evicted one token
  EXPECT_EQ(s.h.rows[1].step, 1);
  lg.x[1 * 4 + 2] = std::numeric_limits<float>::infinity();
  s.h.lengths[0] = 4;
  kvtest_cuda::HostBackend().step(s.h, s.p, lg);
  EXPECT_EQ(s.h.status[0], kc::kStatusBadLogits);
}

TEST(CudaCore, StepErrorsAreReportedPerSequence) {
  Small s;
  kvtest_cuda::HostLogits lg;
  lg.stride = 4;
  lg.x.assign(2 * 2 * 4, 0.0f);
  s.append(0, 3);                                 // not after the last prompt position (3)
  kvtest_cuda::HostBackend().step(s.h, s.p, lg);  // sequence 1 appended nothing
  EXPECT_EQ(s.h.status[0], kc::kStatusBadPosition);
  EXPECT_EQ(s.h.status[1], kc::kStatusBadLength);
  EXPECT_EQ(s.h.rows[0].step, 0);
  EXPECT_EQ(s.h.rows[1].step, 0);

  kvtest_cuda::BatchHost fresh = s.h;
  for (auto& r : fresh.rows) r.prefilled = 0;
  kvtest_cuda::HostBackend().step(fresh, s.p, lg);
  EXPECT_EQ(fresh.status[0], kc::kStatusNotPrefilled);

  kc::PolicyParams hot = s.p;
  hot.score = kc::ScoreKind::keyformer;
  hot.temperature.kind = kc::TemperatureKind::increment;
  hot.temperature.tau_init = 1.0f;
  hot.temperature.delta = -2.0f;  // τ_1 = -1
  s.h.positions[8 + 3] = 20;
  s.h.lengths[1] = 4;
  s.h.positions[3] = 20;
  kvtest_cuda::HostBackend().step(s.h, hot, lg);
  EXPECT_EQ(s.h.status[0], kc::kStatusBadTemperature);
  EXPECT_EQ(s.h.status[1], kc::kStatusBadTemperature);
}

TEST(CudaCore, CheckPolicyNamesTheBadValue) {
  kc::PolicyParams p;
  p.score = kc::ScoreKind::h2o;
  p.k = 4;
  p.w = 5;
  p.n_q_heads = 4;
  auto msg = [&](std::uint32_t nkv, std::uint32_t cap, std::uint32_t ps) {
    try {
      kc::check_policy(p, nkv, cap, ps, "test");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no throw");
  };
  EXPECT_EQ(msg(2, 16, 0), "test: recent window w = 5 exceeds budget k = 4");
  p.w = 1;
  EXPECT_EQ(msg(3, 16, 0), "test: n_q_heads (4) must be a positive multiple of n_kv_heads (3)");
  EXPECT_EQ(msg(2, 4, 0), "test: capacity 4 slots is below 5 (k + 1: a step appends before it evicts)");
  p.score = kc::ScoreKind::tova;
  EXPECT_EQ(msg(2, 16, 0), "test: the CUDA kernels run TOVA without a recent window (w = 1; the CPU caches take one)");
  p.w = 0;
  p.page_unit = true;
  p.start_pages = 1;
  EXPECT_EQ(msg(2, 64, 4),
            "test: page unit needs k >= start_pages * page_size + max(w, 1) (k = 4, start_pages = 1, "
            "page_size = 4, w = 0)");
  p.start_pages = 0;
  EXPECT_EQ(msg(2, 64, 4), "no throw");
}

TEST(CudaCore, ExportFlashInferTable) {
  kvtest_cuda::BatchHost h;
  h.paged = true;
  h.batch = 3;
  h.n_kv = 1;
  h.n_q = 1;
  h.head_dim = 1;
  h.page_size = 4;
  h.max_pages = 3;
  h.num_pages = 9;
  h.capacity = 12;
  h.max_prompt = 1;
  h.allocate(0);
  h.lengths = {5, 0, 12};
  h.indices = {7, 2, -1, -1, -1, -1, 4, 0, 8};
  std::vector<std::int32_t> indptr(4), indices(9, -9), last(3);
  kc::core::export_flashinfer_table(kc::core::HostExec{}, h.paged_view(), indptr.data(), indices.data(), last.data());
  EXPECT_EQ(indptr, (std::vector<std::int32_t>{0, 2, 2, 5}));
  EXPECT_EQ(std::vector<std::int32_t>(indices.begin(), indices.begin() + 5),
            (std::vector<std::int32_t>{7, 2, 4, 0, 8}));
  EXPECT_EQ(last, (std::vector<std::int32_t>{1, 0, 4}));
}

}  // namespace

namespace {

/// The device views' offsets are the CPU views' (FlashInfer's NHD / HND formulas, contiguous rows).
TEST(CudaCore, ViewOffsetsAreTheCpuLayouts) {
  std::vector<std::int32_t> indptr{0, 3, 5}, indices{4, 1, 6, 0, 2};
  kc::PagedKV<float> kv;
  kv.page_size = 4;
  kv.n_kv_heads = 3;
  kv.head_dim = 5;
  kv.num_pages = 7;
  kv.batch = 2;
  kv.table_indptr = indptr.data();
  kv.indices = indices.data();
  for (kvevict::PageLayout layout : {kvevict::PageLayout::NHD, kvevict::PageLayout::HND}) {
    kv.layout = layout;
    // Sequence 1, head 2, logical slot 5: page indices[3 + 1] = 2, offset 1.
    const std::size_t want = layout == kvevict::PageLayout::NHD ? ((2 * 4 + 1) * 3 + 2) * 5 : ((2 * 3 + 2) * 4 + 1) * 5;
    EXPECT_EQ(kv.row(1, 2, 5), want);
  }
  EXPECT_EQ(kv.slot(1, 5), 3u * 4 + 5);
  EXPECT_EQ(kv.capacity(0), 12u);
  EXPECT_EQ(kv.capacity(1), 8u);
  kc::ContiguousKV<float> c;
  c.n_kv_heads = 3;
  c.capacity = 10;
  c.head_dim = 4;
  EXPECT_EQ(c.row(1, 2, 7), ((1 * 3 + 2) * 10 + 7) * 4u);
  EXPECT_EQ(c.slot(1, 2, 7), (1 * 3 + 2) * 10 + 7u);
  kc::LogitsView dense;
  dense.stride = 9;
  EXPECT_EQ(dense.row(2, 1, 4, 7), (2 * 4 + 1) * 9u);
  std::vector<std::int64_t> off{0, 20, 48};
  kc::LogitsView ragged;
  ragged.indptr = off.data();
  EXPECT_EQ(ragged.row(1, 3, 4, 7), 20u + 3 * 7);
  EXPECT_EQ(kc::step_workspace_floats(2, 4, 1025), 2u * 4 * 18 * 3);
  const kc::StateSizes zc = kc::contiguous_state_sizes(2, 3, 10, 4);
  EXPECT_EQ(zc.scores, 60u);
  EXPECT_EQ(zc.recent, 60u);
  EXPECT_EQ(zc.rows, 6u);
  EXPECT_EQ(zc.ring, 24u);
  const kc::StateSizes zp = kc::paged_state_sizes(2, 3, 32, 0);
  EXPECT_EQ(zp.scores, 96u);
  EXPECT_EQ(zp.recent, 32u);
  EXPECT_EQ(zp.rows, 2u);
  EXPECT_EQ(zp.ring_stride, 1u);
  EXPECT_EQ(zp.ring, 2u);
  EXPECT_EQ(kc::stage_bytes(1, 8), 32u);   // 16-byte header (position, score) + K and V rows of 8 bytes
  EXPECT_EQ(kc::stage_bytes(3, 6), 80u);   // header 8 + 3 scores = 20 -> 32, + 2 x 3 rows of 6 bytes = 68 -> 80
}

/// A paged step whose last page-table entry is not a page: kStatusBadPage, nothing changed.
TEST(CudaCore, PagedStepWithABadPageEntryIsRejected) {
  kvtest_cuda::BatchHost h;
  h.paged = true;
  h.batch = 1;
  h.n_kv = 1;
  h.n_q = 1;
  h.head_dim = 1;
  h.page_size = 2;
  h.max_pages = 4;
  h.num_pages = 4;
  h.capacity = 8;
  h.max_prompt = 3;
  h.allocate(0);
  for (std::uint32_t s = 0; s < 3; ++s) h.positions[s] = s;
  h.indices[0] = 0;
  h.indices[1] = 1;
  h.lengths[0] = 3;
  h.free_count = 2;
  kc::PolicyParams p;
  p.score = kc::ScoreKind::none;
  p.k = 3;
  p.n_q_heads = 1;
  kvtest_cuda::HostLogits none;
  kvtest_cuda::HostBackend().prefill(h, p, none);
  ASSERT_EQ(h.status[0], kc::kStatusOk);
  ASSERT_EQ(h.lengths[0], 3);
  h.positions[3] = 10;
  h.lengths[0] = 4;
  h.indices[1] = 9;  // outside [0, num_pages)
  kvtest_cuda::HostBackend().step(h, p, none);
  EXPECT_EQ(h.status[0], kc::kStatusBadPage);
  EXPECT_EQ(h.rows[0].step, 0);
  EXPECT_EQ(h.rows[0].tracked, 3);
}

}  // namespace
