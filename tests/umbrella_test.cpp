// The umbrella header alone reaches every public name of the library (a name that compiles only with
// a second include is a packaging bug: LayerBudgets once did). Compiling this file is most of the test;
// the cases pin a few values through the names it reaches.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <kvevict/kvevict.hpp>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace kv = kvevict;

// Every public class, struct and enum, named through kvevict.hpp only.
static_assert(std::is_class<kv::CacheConfig>::value && std::is_class<kv::PolicyParams>::value, "");
static_assert(std::is_polymorphic<kv::CacheInterface>::value && std::is_polymorphic<kv::PagedCacheInterface>::value,
              "");
static_assert(std::is_base_of<kv::CacheInterface, kv::Keyformer>::value, "");
static_assert(std::is_base_of<kv::CacheInterface, kv::H2O>::value &&
                  std::is_base_of<kv::CacheInterface, kv::TOVA>::value,
              "");
static_assert(std::is_base_of<kv::CacheInterface, kv::StreamingLLM>::value, "");
static_assert(std::is_base_of<kv::CacheInterface, kv::SnapKV>::value &&
                  std::is_base_of<kv::CacheInterface, kv::SnapKVWindow>::value,
              "");
static_assert(std::is_base_of<kv::PagedCacheInterface, kv::PagedKeyformer>::value &&
                  std::is_base_of<kv::PagedCacheInterface, kv::PagedH2O>::value &&
                  std::is_base_of<kv::PagedCacheInterface, kv::PagedStreamingLLM>::value &&
                  std::is_base_of<kv::PagedCacheInterface, kv::PagedTOVA>::value &&
                  std::is_base_of<kv::PagedCacheInterface, kv::PagedSnapKV>::value &&
                  std::is_base_of<kv::PagedCacheInterface, kv::PagedSnapKVWindow>::value,
              "");
static_assert(std::is_base_of<kv::CacheInterface, kv::H2OMean>::value &&
                  std::is_base_of<kv::CacheInterface, kv::KeyformerMean>::value &&
                  std::is_base_of<kv::PagedCacheInterface, kv::PagedH2OMean>::value &&
                  std::is_base_of<kv::PagedCacheInterface, kv::PagedKeyformerMean>::value &&
                  kv::is_score_policy<kv::MeanAttention<kv::AccumulatedAttentionScore>>::value,
              "");
static_assert(kv::is_score_policy<kv::GumbelLogitScore>::value &&
                  kv::is_score_policy<kv::AccumulatedAttentionScore>::value &&
                  kv::is_score_policy<kv::CurrentAttentionScore>::value && kv::is_score_policy<kv::NoScore>::value &&
                  kv::is_score_policy<kv::SnapKVScore>::value,
              "");
static_assert(kv::is_temperature_schedule<kv::LinearTemperature>::value &&
                  kv::is_temperature_schedule<kv::ConstantTemperature>::value &&
                  kv::is_temperature_schedule<kv::IncrementTemperature>::value,
              "");
static_assert(kv::is_selection_policy<kv::RecentTopKSelection>::value &&
                  kv::is_selection_policy<kv::SinkRecentSelection>::value &&
                  kv::is_selection_policy<kv::TopKThenWindowSelection>::value,
              "");
static_assert(kv::is_executor<kv::SerialExecutor>::value, "");
static_assert(std::is_class<kv::ExecutorRef>::value && std::is_class<kv::Xoshiro256pp>::value, "");
static_assert(std::is_class<kv::KVView<float>>::value && kv::KVView<const float>::is_read_only, "");
static_assert(std::is_class<kv::KVBuffer<float>>::value && std::is_class<kv::PagedKVView<float>>::value, "");
static_assert(std::is_class<kv::PagePool>::value && std::is_class<kv::PagedEvictionConfig>::value, "");
static_assert(std::is_class<kv::TokenAmount>::value && std::is_class<kv::Budget>::value &&
                  std::is_class<kv::RecentWindow>::value,
              "");
static_assert(std::is_class<kv::LayerBudgets>::value, "");
static_assert(std::is_abstract<kv::ChunkRows>::value && std::is_base_of<kv::ChunkRows, kv::MaterializedChunk>::value &&
                  std::is_base_of<kv::ChunkRows, kv::QKChunkRows<float, kv::NoBias>>::value,
              "");
static_assert(std::is_class<kv::QKChunkScratch>::value && std::is_class<kv::NoBias>::value, "");
static_assert(std::is_class<kv::RopeSpec>::value && std::is_enum<kv::RopeStyle>::value, "");
static_assert(std::is_enum<kv::Policy>::value && std::is_enum<kv::SnapDecode>::value &&
                  std::is_enum<kv::Pooling>::value && std::is_enum<kv::EvictUnit>::value &&
                  std::is_enum<kv::PageScore>::value && std::is_enum<kv::PageLayout>::value &&
                  std::is_enum<kv::Isa>::value,
              "");

// Every public function template, bound to one instantiation (overloads by their pointer type).
using Logits = void (*)(const kv::KVView<const float>&, const float*, std::size_t, float*, float, const float*);
using PagedLogits = void (*)(const kv::PagedKVView<float>&, const float*, std::size_t, float*, float, const float*);
using ChunkQK = void (*)(kv::Keyformer&, const kv::KVView<const float>&, const float*, std::size_t, std::size_t, float,
                         kv::QKChunkScratch&, kv::NoBias);
using SelectKeep = std::vector<std::size_t> (*)(const std::vector<float>&, std::size_t, std::size_t);
[[maybe_unused]] const Logits kLogits = &kv::attention_logits<float>;
[[maybe_unused]] const PagedLogits kPagedLogits = &kv::paged_attention_logits<float>;
[[maybe_unused]] const ChunkQK kChunkQK = &kv::prefill_chunk_qk<kv::Keyformer, float, kv::NoBias>;
[[maybe_unused]] const SelectKeep kSelectKeep = &kv::select_keep;
[[maybe_unused]] const auto kMakeCache = &kv::make_cache<float>;
[[maybe_unused]] const auto kMakePagedCache = &kv::make_paged_cache<float>;
[[maybe_unused]] const auto kRope = &kv::rope_rotate<float>;
[[maybe_unused]] const auto kRopeKey = &kv::rope_rotate_key<float>;
[[maybe_unused]] const auto kRopeKeys = &kv::rope_rotate_keys<float>;
[[maybe_unused]] const auto kGumbelRow = &kv::fill_gumbel_row;
[[maybe_unused]] const auto kGumbel = &kv::fill_gumbel;
[[maybe_unused]] const auto kSoftmax = &kv::accumulate_softmax;
[[maybe_unused]] const auto kSnapScore = &kv::make_snapkv_score<kv::AccumulatedAttentionScore>;
[[maybe_unused]] const auto kSetIsa = &kv::set_isa;

TEST(Umbrella, LayerBudgetsThroughTheUmbrellaHeader) {
  EXPECT_EQ(kv::layer_budgets(kv::LayerBudgets::make_pyramid(20.0), 5, 100, 150),
            (std::vector<std::size_t>{150, 125, 100, 75, 50}));
  EXPECT_STREQ(kv::layer_budgets_name(kv::parse_layer_budgets("pyramid:4")), "pyramid");
}

TEST(Umbrella, NamesRoundTrip) {
  for (const char* name : {"keyformer", "h2o", "tova"})
    EXPECT_EQ(kv::policy_name(kv::parse_policy(name)), std::string(name));
  EXPECT_STREQ(kv::evict_unit_name(kv::parse_evict_unit("page")), "page");
  EXPECT_STREQ(kv::pooling_name(kv::parse_pooling("avg")), "avg");
  EXPECT_STREQ(kv::snap_decode_name(kv::parse_snap_decode("window")), "window");
  EXPECT_STREQ(kv::page_layout_name(kv::PageLayout::HND), "HND");
  EXPECT_STREQ(kv::isa_name(kv::Isa::kBaseline), "baseline");
  EXPECT_TRUE(kv::isa_supported(kv::Isa::kBaseline));
}

TEST(Umbrella, SelectionThroughTheUmbrellaHeader) {
  // k = 3, w = 1: the recent token 4, then the two best of the others (3: 9, 0: 5), in position order.
  EXPECT_EQ(kv::select_keep(std::vector<float>{5, 1, 0, 9, 2}, 3, 1), (std::vector<std::size_t>{0, 3, 4}));
}

TEST(Umbrella, MakeCacheThroughTheUmbrellaHeader) {
  // H2O over a 6-token prompt with all logits 0: row r gives 1/(r+1) to each token <= r, so the
  // accumulated scores fall with the position; k = 4, w = 1 keeps the recent token 5 and the best
  // three others, 0, 1 and 2.
  const std::size_t P = 6;
  kv::KVBuffer<float> buffer(1, 8, 2);
  kv::KVView<float> view = buffer.view();
  const float row[2] = {0.0f, 0.0f};
  kv::CacheConfig config;
  config.n_q_heads = 1;
  config.budget = kv::Budget::tokens(4);
  config.recent = kv::RecentWindow::tokens(1);
  std::unique_ptr<kv::CacheInterface> cache = kv::make_cache(kv::Policy::h2o, config, view);
  for (std::size_t t = 0; t < P; ++t) view.append(static_cast<std::int64_t>(t), row, row);
  const std::vector<float> logits(P * P, 0.0f);
  cache->prefill(logits.data(), P);
  EXPECT_EQ(cache->budget(), 4u);
  EXPECT_EQ(cache->retained_positions(0), (std::vector<std::int64_t>{0, 1, 2, 5}));
}
