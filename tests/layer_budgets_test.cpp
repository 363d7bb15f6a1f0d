// Per-layer budgets (kvevict/layer_budgets.hpp): uniform, PyramidKV (Cai et al. 2024) and weights.
// Exact expected values, worked out by hand in the comments.
#include <cstddef>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <kvevict/layer_budgets.hpp>

namespace {

using Budgets = std::vector<std::size_t>;
using kvevict::LayerBudgets;
using kvevict::layer_budgets;

std::size_t sum(const Budgets& b) { return std::accumulate(b.begin(), b.end(), std::size_t{0}); }

TEST(LayerBudgets, UniformIsKEverywhere) {
  EXPECT_EQ(layer_budgets(LayerBudgets::make_uniform(), 4, 7), (Budgets{7, 7, 7, 7}));
  EXPECT_EQ(layer_budgets(LayerBudgets::make_uniform(), 1, 1), (Budgets{1}));
}

// k = 100, 5 layers, beta 20: b_min = 100 / 20 = 5, b_max = 200 - 5 = 195, step (195 - 5) / 4 = 47.5:
// [195, 147.5, 100, 52.5, 5] (mean 100). Floors sum to 499; the one token left goes to the largest
// fractional part, 0.5 at layers 1 and 3: the lower layer (1).
TEST(LayerBudgets, PyramidFollowsThePapersArithmeticSequence) {
  const Budgets b = layer_budgets(LayerBudgets::make_pyramid(20.0), 5, 100);
  EXPECT_EQ(b, (Budgets{195, 148, 100, 52, 5}));
  EXPECT_EQ(sum(b), 500u);
}

// A reserved window (PyramidKV's alpha, SnapKV's L) in every layer: k = 64, reserved 32, B = 32,
// b_min = 1.6, b_max = 62.4, step 15.2: 32 + [62.4, 47.2, 32, 16.8, 1.6] = [94.4, 79.2, 64, 48.8, 33.6];
// floors sum 318, +1 to layers 3 (.8) and 4 (.6).
TEST(LayerBudgets, PyramidKeepsTheReservedWindowInEveryLayer) {
  const Budgets b = layer_budgets(LayerBudgets::make_pyramid(20.0, 32), 5, 64);
  EXPECT_EQ(b, (Budgets{94, 79, 64, 49, 34}));
  EXPECT_EQ(sum(b), 320u);
  for (std::size_t x : b) EXPECT_GE(x, 32u);
}

// Short prompt (PyramidKV's rule): k = 100, P = 150: b_max = 195 > 150, so b_max = 150 and
// b_min = 200 - 150 = 50: [150, 125, 100, 75, 50]. No layer above the prompt.
TEST(LayerBudgets, PyramidCapsTheBottomLayerAtThePromptLength) {
  EXPECT_EQ(layer_budgets(LayerBudgets::make_pyramid(20.0), 5, 100, 150), (Budgets{150, 125, 100, 75, 50}));
  // k >= P: every layer keeps the whole prompt anyway -> uniform.
  EXPECT_EQ(layer_budgets(LayerBudgets::make_pyramid(20.0), 5, 100, 80), (Budgets{100, 100, 100, 100, 100}));
}

// k = 1, 5 layers: [1.95, 1.475, 1, 0.525, 0.05] -> floors [1, 1, 1, 0, 0] (3), +1 to layers 0 (.95) and
// 3 (.525) -> [2, 1, 1, 1, 0]; layer 4 below the floor 1 takes a token from the largest (layer 0).
TEST(LayerBudgets, NoLayerIsRoundedToZero) {
  const Budgets b = layer_budgets(LayerBudgets::make_pyramid(20.0), 5, 1);
  EXPECT_EQ(b, (Budgets{1, 1, 1, 1, 1}));
  // k = 2: [3.95, 2.975, 2, 1.025, 0.05] -> [3, 2, 2, 1, 0] + 2 -> [4, 3, 2, 1, 0] -> floor: [3, 3, 2, 1, 1].
  EXPECT_EQ(layer_budgets(LayerBudgets::make_pyramid(20.0), 5, 2), (Budgets{3, 3, 2, 1, 1}));
  // One layer: the whole budget.
  EXPECT_EQ(layer_budgets(LayerBudgets::make_pyramid(20.0), 1, 9), (Budgets{9}));
  EXPECT_EQ(layer_budgets(LayerBudgets::make_pyramid(20.0), 1, 1, 1), (Budgets{1}));
  // Short prompt of 2 tokens, k = 1: [1.95, ...] capped at P = 2 changes nothing; still no 0.
  EXPECT_EQ(layer_budgets(LayerBudgets::make_pyramid(20.0), 5, 1, 2), (Budgets{1, 1, 1, 1, 1}));
}

// A per-layer floor of 40 on [94, 79, 64, 49, 34]: layer 4 takes 6 tokens from the largest (layer 0).
TEST(LayerBudgets, FloorRaisesSmallLayersWithoutExceedingTheTotal) {
  LayerBudgets s = LayerBudgets::make_pyramid(20.0, 32);
  s.floor = 40;
  const Budgets b = layer_budgets(s, 5, 64);
  EXPECT_EQ(b, (Budgets{88, 79, 64, 49, 40}));
  EXPECT_EQ(sum(b), 320u);
  s.floor = 64;  // floor == k: uniform
  EXPECT_EQ(layer_budgets(s, 5, 64), (Budgets{64, 64, 64, 64, 64}));
}

// Weights 4, 2, 1, 1 with k = 10: total 40 -> [20, 10, 5, 5]; 3, 1, 1 with k = 4: total 12 ->
// [7.2, 2.4, 2.4] -> [7, 2, 2] + 1 to the lower of the tied .4 parts -> [7, 3, 2].
TEST(LayerBudgets, WeightsAreProportionalWithTheSameTotal) {
  EXPECT_EQ(layer_budgets(LayerBudgets::make_weights({4, 2, 1, 1}), 4, 10), (Budgets{20, 10, 5, 5}));
  EXPECT_EQ(layer_budgets(LayerBudgets::make_weights({3, 1, 1}), 3, 4), (Budgets{7, 3, 2}));
  EXPECT_EQ(layer_budgets(LayerBudgets::make_weights({1, 0}), 2, 3), (Budgets{5, 1}));  // floor 1
}

template <class F>
void expect_invalid(F f, const std::string& message) {
  try {
    f();
    ADD_FAILURE() << "expected std::invalid_argument: " << message;
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

TEST(LayerBudgets, BadInputIsNamed) {
  expect_invalid([] { layer_budgets(LayerBudgets::make_uniform(), 0, 4); },
                 "kvevict::layer_budgets: n_layers must be >= 1 (got 0)");
  expect_invalid([] { layer_budgets(LayerBudgets::make_uniform(), 3, 0); },
                 "kvevict::layer_budgets: budget k must be >= 1 (got 0)");
  LayerBudgets s;
  s.floor = 5;
  expect_invalid([&] { layer_budgets(s, 3, 4); },
                 "kvevict::layer_budgets: floor = 5 exceeds the budget k = 4 (the layers could not sum to n_layers * "
                 "k)");
  expect_invalid([] { layer_budgets(LayerBudgets::make_pyramid(0.5), 3, 4); },
                 "kvevict::layer_budgets: pyramid beta must be finite and >= 1 (got 0.5)");
  expect_invalid([] { layer_budgets(LayerBudgets::make_pyramid(20.0, 5), 3, 4); },
                 "kvevict::layer_budgets: pyramid reserved = 5 exceeds the budget k = 4");
  expect_invalid([] { layer_budgets(LayerBudgets::make_weights({1, 2}), 3, 4); },
                 "kvevict::layer_budgets: 2 weights for 3 layers (give one per layer)");
  expect_invalid([] { layer_budgets(LayerBudgets::make_weights({1, -2}), 2, 4); },
                 "kvevict::layer_budgets: weight 1 must be finite and >= 0 (got -2)");
  expect_invalid([] { layer_budgets(LayerBudgets::make_weights({0, 0}), 2, 4); },
                 "kvevict::layer_budgets: the weights sum to 0");
}

TEST(LayerBudgets, ParsesTheFlagSyntax) {
  EXPECT_EQ(kvevict::parse_layer_budgets("uniform").kind, LayerBudgets::Kind::uniform);
  const LayerBudgets p = kvevict::parse_layer_budgets("pyramid");
  EXPECT_EQ(p.kind, LayerBudgets::Kind::pyramid);
  EXPECT_EQ(p.beta, 20.0);
  EXPECT_EQ(kvevict::parse_layer_budgets("pyramid:8").beta, 8.0);
  const LayerBudgets w = kvevict::parse_layer_budgets("4,2,1.5");
  EXPECT_EQ(w.kind, LayerBudgets::Kind::weights);
  EXPECT_EQ(w.weights, (std::vector<double>{4, 2, 1.5}));
  EXPECT_STREQ(kvevict::layer_budgets_name(w), "weights");
  expect_invalid([] { kvevict::parse_layer_budgets("pyramid:0.5"); },
                 "kvevict::parse_layer_budgets: pyramid beta must be >= 1 (got 0.5)");
  expect_invalid([] { kvevict::parse_layer_budgets("4,,1"); },
                 "kvevict::parse_layer_budgets: weight '' in '4,,1' is not a number (expected uniform, pyramid, "
                 "pyramid:BETA or a list of weights such as 4,2,1,1)");
  expect_invalid([] { kvevict::parse_layer_budgets("pyramids"); },
                 "kvevict::parse_layer_budgets: weight 'pyramids' in 'pyramids' is not a number (expected uniform, "
                 "pyramid, pyramid:BETA or a list of weights such as 4,2,1,1)");
}

}  // namespace
