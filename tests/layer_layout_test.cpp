// Layer layouts (kvevict/layer_layout.hpp): which layers are global (evicted) and which slide, and the plan of
// budgets over a hybrid model. Expected values worked out by hand in the comments.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/layer_layout.hpp>

namespace {

using kvevict::AttentionKind;
using kvevict::LayerBudgets;
using kvevict::LayerLayout;
using kvevict::plan_layers;
using Layers = std::vector<std::size_t>;

// Gemma 3 270M: 18 layers, a period of 6, the last of each global (llama.cpp's set_swa_pattern(6) and
// transformers' layer_types): layers 5, 11, 17; window 512.
TEST(LayerLayout, Gemma3PeriodMakesTheLastLayerOfEachPeriodGlobal) {
  const LayerLayout l = LayerLayout::periodic(18, 6, 512);
  EXPECT_EQ(l.size(), 18u);
  EXPECT_EQ(l.n_global(), 3u);
  EXPECT_EQ(l.global_layers(), (Layers{5, 11, 17}));
  EXPECT_EQ(l.window, 512u);
  EXPECT_FALSE(l.is_global(0));
  EXPECT_TRUE(l.is_global(5));
}

// Gemma 2's period 2: layers 1, 3, 5 of 6 global; global_first (llama.cpp's dense_first): 0, 4 of 8 with period 4.
TEST(LayerLayout, OtherPeriodsAndGlobalFirst) {
  EXPECT_EQ(LayerLayout::periodic(6, 2, 4096).global_layers(), (Layers{1, 3, 5}));
  EXPECT_EQ(LayerLayout::periodic(8, 4, 128, true).global_layers(), (Layers{0, 4}));
  // 7 layers, period 6: only layer 5 is global (layer 6 starts a period that does not end).
  EXPECT_EQ(LayerLayout::periodic(7, 6, 512).global_layers(), (Layers{5}));
  const LayerLayout all = LayerLayout::periodic(3, 1, 512);  // period 1: every layer global, no window
  EXPECT_EQ(all.n_global(), 3u);
  EXPECT_EQ(all.window, 0u);
  EXPECT_EQ(LayerLayout::all_global(4).global_layers(), (Layers{0, 1, 2, 3}));
}

// Uniform: every global layer k, every sliding layer no cache (budget 0).
TEST(PlanLayers, UniformGivesEveryGlobalLayerKAndNoSlidingLayerACache) {
  const auto plan = plan_layers(LayerBudgets::make_uniform(), LayerLayout::periodic(6, 3, 64), 100);
  ASSERT_EQ(plan.size(), 6u);
  for (std::size_t l = 0; l < 6; ++l) {
    const bool global = l == 2 || l == 5;
    EXPECT_EQ(plan[l].kind, global ? AttentionKind::global : AttentionKind::sliding) << l;
    EXPECT_EQ(plan[l].budget, global ? 100u : 0u) << l;
  }
}

// PyramidKV spreads over the global layers alone: 5 global layers of a period-2 model of 10 get
// layer_budgets(pyramid, 5, 100) = [195, 148, 100, 52, 5] (layer_budgets_test), in the global layers' order.
TEST(PlanLayers, PyramidSpreadsOverTheGlobalLayersOnly) {
  const auto plan = plan_layers(LayerBudgets::make_pyramid(20.0), LayerLayout::periodic(10, 2, 512), 100);
  const Layers want{0, 195, 0, 148, 0, 100, 0, 52, 0, 5};
  for (std::size_t l = 0; l < 10; ++l) EXPECT_EQ(plan[l].budget, want[l]) << l;
}

TEST(LayerLayout, BadArgumentsAreRefusedByName) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no exception");
  };
  EXPECT_EQ(message([] { LayerLayout::periodic(0, 6, 512); }),
            "kvevict::LayerLayout::periodic: n_layers must be >= 1 (got 0)");
  EXPECT_EQ(message([] { LayerLayout::periodic(18, 0, 512); }),
            "kvevict::LayerLayout::periodic: period must be >= 1 (got 0)");
  EXPECT_EQ(message([] { LayerLayout::periodic(18, 6, 0); }),
            "kvevict::LayerLayout::periodic: window must be >= 1 when layers slide (got 0)");
  EXPECT_EQ(message([] { LayerLayout::all_global(0); }),
            "kvevict::LayerLayout::all_global: n_layers must be >= 1 (got 0)");
  EXPECT_EQ(message([] { (void)LayerLayout::periodic(18, 6, 512).is_global(18); }),
            "kvevict::LayerLayout::is_global: layer 18 of a model of 18 layers");
  LayerLayout sliding;
  sliding.kinds.assign(4, AttentionKind::sliding);
  sliding.window = 8;
  EXPECT_EQ(message([&] { plan_layers(LayerBudgets::make_uniform(), sliding, 10); }),
            "kvevict::plan_layers: every one of the 4 layers slides (window 8): there is no global layer to evict in");
  EXPECT_EQ(message([] { plan_layers(LayerBudgets::make_uniform(), LayerLayout{}, 10); }),
            "kvevict::plan_layers: the layout has no layer");
  // layer_budgets' own checks name it (here k = 0).
  EXPECT_EQ(message([] { plan_layers(LayerBudgets::make_uniform(), LayerLayout::periodic(6, 2, 8), 0); }),
            "kvevict::layer_budgets: budget k must be >= 1 (got 0)");
}

}  // namespace
