// kvevict tools — llama2/sampler.cpp: picking the next token from logits.
// SPDX-License-Identifier: Apache-2.0
#include "llama2/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace llama2 {

int argmax(const float* logits, std::size_t n) {
  return static_cast<int>(std::max_element(logits, logits + n) - logits);
}

Sampler::Sampler(float temperature, std::uint64_t seed) : temperature_(temperature), rng_(seed) {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    throw std::invalid_argument("llama2::Sampler: temperature must be finite and >= 0 (got " +
                                std::to_string(temperature) + ")");
}

int Sampler::sample(const float* logits, std::size_t n) {
  if (temperature_ == 0.0f) return argmax(logits, n);
  probs_.resize(n);
  const float max_logit = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    probs_[i] = std::exp((logits[i] - max_logit) / temperature_);
    sum += probs_[i];
  }
  // Inverse CDF on one uniform draw; the last index absorbs rounding.
  const double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  double cdf = 0.0;
  for (std::size_t i = 0; i + 1 < n; ++i) {
    cdf += probs_[i];
    if (u < cdf) return static_cast<int>(i);
  }
  return static_cast<int>(n - 1);
}

}  // namespace llama2
