// core/random.hpp — the seeded pseudo-random generator behind the Gumbel noise.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

namespace kvevict {

/// xoshiro256++ pseudo-random generator (Blackman & Vigna, 2019), seeded
/// through SplitMix64 so that every 64-bit seed gives a distinct, well-mixed
/// state. Period 2^256 - 1. Satisfies the UniformRandomBitGenerator concept.
/// Same seed => same sequence on every platform.
class Xoshiro256pp {
 public:
  using result_type = std::uint64_t;

  explicit Xoshiro256pp(std::uint64_t seed = 0) { this->seed(seed); }

  /// Re-seeds: the state becomes four SplitMix64 outputs of `seed`.
  void seed(std::uint64_t seed) {
    for (auto& word : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      std::uint64_t z = seed;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      word = z ^ (z >> 31);
    }
  }

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return ~result_type{0}; }

  /// Next 64 random bits. O(1).
  result_type operator()() {
    const std::uint64_t result = rotl(s_[0] + s_[3], 23) + s_[0];
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }

  friend bool operator==(const Xoshiro256pp& a, const Xoshiro256pp& b) {
    return a.s_[0] == b.s_[0] && a.s_[1] == b.s_[1] && a.s_[2] == b.s_[2] && a.s_[3] == b.s_[3];
  }
  friend bool operator!=(const Xoshiro256pp& a, const Xoshiro256pp& b) { return !(a == b); }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4];
};

}  // namespace kvevict
