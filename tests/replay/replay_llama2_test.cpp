// The engine and the replay agree: a trace dumped by `kvevict-generate --dump-logits` (full cache,
// stories260K, layer 0) replayed by kvevict-replay keeps exactly the tokens that the llama2 engine
// keeps in layer 0 when it runs the same tokens with the same policy. Layer 0's logits for the
// retained tokens do not depend on eviction (its input is the token embedding), so the two runs
// see the same logits; deeper layers would not (eviction in earlier layers feeds back).
//
// Needs ../shared/models/stories260K (or $KVEVICT_SHARED_DIR): skipped without it, a failure
// when KVEVICT_REQUIRE_MODELS=1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "llama2/engine.hpp"
#include "llama2/eviction.hpp"
#include "llama2/model.hpp"
#include "replay_test_support.hpp"

namespace {

using rtest::json;

std::filesystem::path shared_dir() {
  const char* env = std::getenv("KVEVICT_SHARED_DIR");
  return (env != nullptr && *env != '\0') ? env : KVEVICT_SHARED_DIR_DEFAULT;
}
bool models_required() {
  const char* env = std::getenv("KVEVICT_REQUIRE_MODELS");
  return env != nullptr && std::string(env) == "1";
}

struct PolicyRun {
  const char* name;
  std::string replay_options;  // given to kvevict-replay
  llama2::EvictionSettings settings;
};

llama2::EvictionSettings settings(const std::string& policy, std::size_t k, std::size_t w, bool shared = false) {
  llama2::EvictionSettings s;
  s.policy = policy;
  s.budget = kvevict::Budget::tokens(k);
  s.recent = kvevict::RecentWindow::tokens(w);
  s.shared_heads = shared;
  s.params.gumbel_noise = false;
  return s;
}

TEST(ReplayVsEngine, Stories260KLayer0KeepsTheSameTokens) {
  const auto model_dir = shared_dir() / "models" / "stories260K";
  const auto model_file = model_dir / "stories260K.bin";
  if (!std::filesystem::exists(model_file) || !std::filesystem::exists(model_dir / "tok512.model")) {
    if (models_required()) FAIL() << "missing " << model_dir << " (KVEVICT_REQUIRE_MODELS=1; set KVEVICT_SHARED_DIR)";
    GTEST_SKIP() << "missing " << model_dir << " (set KVEVICT_SHARED_DIR)";
  }
  rtest::TempDir dir;
  const std::string trace_file = dir.file("layer0.json");

  // 1. Dump layer 0 of a greedy full-cache run.
  const std::string dump_cmd = std::string("'") + KVEVICT_GENERATE_BIN + "' --model '" + model_file.string() +
                               "' --prompt 'Once upon a time, there was a little girl named Lily. She loved to play "
                               "outside in the sunshine with her friends.' --temperature 0 --steps 64 --dump-logits '" +
                               trace_file + "' --dump-layer 0 > '" + dir.file("text.txt") + "' 2> '" +
                               dir.file("gen.err") + "'";
  ASSERT_EQ(std::system(dump_cmd.c_str()), 0) << rtest::slurp(dir.file("gen.err"));
  const json trace = json::parse(rtest::slurp(trace_file));
  const auto tokens = trace.at("meta").at("tokens").get<std::vector<int>>();
  const auto P = trace.at("prompt_len").get<std::size_t>();
  const std::size_t N = tokens.size();
  ASSERT_EQ(trace.at("logits").at(0).size(), N);
  ASSERT_GT(N, P + 32) << "the run should generate a few dozen tokens";
  EXPECT_EQ(trace.at("meta").at("layer"), 0);
  EXPECT_EQ(trace.at("q_heads_per_kv"), 2);  // stories260K: 8 query heads, 4 KV heads

  // 2. Replay each policy and run the engine with it on the same tokens (all layers evicting).
  const llama2::Model model = llama2::Model::load(model_file.string());
  const std::size_t n_kv = model.config().n_kv_heads, T = N - P;
  std::vector<PolicyRun> runs{
      {"keyformer", "--policy keyformer --noise none --budget 16 --recent 4", settings("keyformer", 16, 4)},
      {"keyformer tau 0.5..3", "--policy keyformer --noise none --budget 12 --recent 3 --tau-init 0.5 --tau-end 3",
       settings("keyformer", 12, 3)},
      {"keyformer shared", "--policy keyformer --noise none --budget 16 --recent 4 --shared-heads",
       settings("keyformer", 16, 4, true)},
      {"h2o", "--policy h2o --budget 12 --recent 3", settings("h2o", 12, 3)},
      {"tova", "--policy tova --budget 10", settings("tova", 10, 0)},
      {"streaming", "--policy streaming --budget 10 --sinks 4", settings("streaming", 10, 0)},
  };
  runs[1].settings.params.tau_init = 0.5f;
  runs[1].settings.params.tau_end = 3.0f;
  for (auto& run : runs) run.settings.params.horizon = T;  // kvevict-replay's default --gen-steps: N - P

  for (const PolicyRun& run : runs) {
    SCOPED_TRACE(run.name);
    const auto replayed = rtest::run_replay(dir, trace_file + " " + run.replay_options);
    ASSERT_EQ(replayed.exit_code, 0) << replayed.err;
    const auto lines = replayed.lines();
    ASSERT_EQ(lines.size(), N - P + 1);

    llama2::Engine engine(model, llama2::make_cache_factory(run.settings, model.config().n_heads));
    auto expect_same = [&](const json& line) {
      const kvevict::CacheInterface* cache = engine.cache(0);
      ASSERT_NE(cache, nullptr);
      EXPECT_EQ(line.at("t").get<std::size_t>(), engine.position() - 1);
      EXPECT_FLOAT_EQ(line.at("tau").get<float>(), cache->temperature()) << "t = " << line.at("t");
      for (std::size_t h = 0; h < n_kv; ++h) {
        ASSERT_EQ(line.at("kept").at(h).get<std::vector<std::int64_t>>(), cache->retained_positions(h))
            << "KV head " << h << ", t = " << line.at("t");
        // The same library calls on the same logits up to rounding: the engine's attention sums the
        // dot products of a shorter, reordered slot range than the full-cache run that was dumped.
        std::vector<std::pair<std::int64_t, float>> by_position;
        for (std::size_t s = 0; s < cache->length(h); ++s)
          by_position.emplace_back(cache->positions(h)[s], cache->scores(h)[s]);
        std::sort(by_position.begin(), by_position.end());
        for (std::size_t i = 0; i < by_position.size(); ++i)
          ASSERT_NEAR(line.at("scores").at(h).at(i).get<float>(), by_position[i].second,
                      1e-5f * std::max(1.0f, by_position[i].second))
              << "KV head " << h << ", t = " << line.at("t") << ", position " << by_position[i].first;
      }
    };
    engine.prefill(std::vector<int>(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(P)));
    expect_same(lines[0]);
    for (std::size_t t = P; t < N; ++t) {
      engine.step(tokens[t]);
      expect_same(lines[t - P + 1]);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
