// kvevict tools — llama2/sampler.hpp: picking the next token from logits.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace llama2 {

/// Index of the largest of `logits[0 .. n)` (the first one on ties), as llama2.c's argmax.
/// Requires `n >= 1`.
int argmax(const float* logits, std::size_t n);

/// Draws the next token: greedy (`argmax`) when `temperature == 0`, otherwise
/// from `softmax(logits / temperature)` with its own seeded generator.
class Sampler {
 public:
  /// Throws `std::invalid_argument` if `temperature` is negative or not finite.
  Sampler(float temperature, std::uint64_t seed);
  /// Next token id from `logits[0 .. n)`, `n >= 1`. Allocates only on the first
  /// call or when `n` grows.
  int sample(const float* logits, std::size_t n);

 private:
  float temperature_;
  std::mt19937_64 rng_;
  std::vector<float> probs_;
};

}  // namespace llama2
