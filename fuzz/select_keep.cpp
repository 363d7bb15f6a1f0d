// kvevict fuzzing — select_keep against a plain full-sort reference of the rule.
// SPDX-License-Identifier: Apache-2.0
//
// Input bytes: k, w and n candidates' scores (small integers so that ties are frequent, ±inf,
// NaN, denormals, ±0). Reference: keep the last min(w, n) candidates, then sort the others by
// (score descending, index ascending) — ties to the older token — and keep the first
// min(k, n) - min(w, n); report ascending. Both overloads must return exactly that, and throw
// std::invalid_argument (writing nothing) exactly when k < 1, w > k, or a score is NaN.
// The victim entry point of RecentTopKSelection (`victim` over per-slot recent flags) is checked against
// the same order: the weakest non-recent candidate, ties to the newest.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <kvevict/selection/recent_topk_selection.hpp>
#include <kvevict/selection/select_keep.hpp>

#include "fuzz_util.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<std::size_t> reference(const std::vector<float>& s, std::size_t k, std::size_t w) {
  const std::size_t n = s.size(), m = std::min(k, n), r = std::min(w, n), pool = n - r;
  std::vector<std::size_t> order(pool);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
  std::vector<std::size_t> out(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m - r));
  for (std::size_t i = pool; i < n; ++i) out.push_back(i);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  static const std::size_t huge[] = {std::numeric_limits<std::size_t>::max(), std::size_t{1} << 63, 0};
  std::size_t k = in.ConsumeIntegralInRange<std::size_t>(0, 70);
  std::size_t w = in.ConsumeIntegralInRange<std::size_t>(0, 70);
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) k = in.PickValueInArray(huge);
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) w = in.PickValueInArray(huge);
  const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(0, 300);
  std::vector<float> s(n);
  bool has_nan = false;
  for (float& x : s) {
    const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
    if (b < 240) {
      x = static_cast<float>(b % 16) * 0.125f;
    } else {
      static const float odd[] = {kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), -0.0f, 1e-45f, -1e-45f,
                                  3.4e38f, -3.4e38f, 0.0f, 1e30f, -1.0f, 2.0f, 0.1f, 1e-38f, 7.0f, -7.0f};
      x = odd[b - 240];
    }
    has_nan = has_nan || std::isnan(x);
  }
  const bool valid = k >= 1 && w <= k && !has_nan;

  // Pointer overload: out doubles as scratch; sentinel past n checks it writes nothing beyond n.
  std::vector<std::size_t> out(n + 1, 12345);
  bool threw = false;
  std::size_t m = 0;
  try {
    m = kvevict::select_keep(s.data(), n, k, w, out.data());
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  KVFUZZ_CHECK(out[n] == 12345, "select_keep wrote past n = ", n);
  if (!valid) {
    KVFUZZ_CHECK(threw || (n == 0 && k >= 1 && w <= k), "select_keep accepted k = ", k, ", w = ", w, ", n = ", n);
    if (threw)
      KVFUZZ_CHECK(std::all_of(out.begin(), out.end(), [](std::size_t v) { return v == 12345; }),
                   "select_keep threw after writing");
    return 0;
  }
  KVFUZZ_CHECK(!threw, "select_keep threw on valid input k = ", k, ", w = ", w, ", n = ", n);
  const std::vector<std::size_t> want = reference(s, k, w);
  KVFUZZ_CHECK(std::vector<std::size_t>(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(m)) == want,
               "select_keep differs from the full-sort reference (k = ", k, ", w = ", w, ", n = ", n, ")");
  KVFUZZ_CHECK(kvevict::select_keep(s, k, w) == want, "vector overload differs from the reference");

  // Decode-step victim over the same n candidates, the last min(w, n) recent: the weakest other one
  // (ties to the newest), n if every candidate is recent.
  if (n == 0) return 0;
  const kvevict::RecentTopKSelection sel;
  std::vector<std::int64_t> pos(n);
  std::iota(pos.begin(), pos.end(), std::int64_t{0});
  // Shuffle slots by a fuzzed rotation so slot order differs from position order.
  const std::size_t rot = in.ConsumeIntegralInRange<std::size_t>(0, n - 1);
  std::rotate(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(rot), pos.end());
  std::vector<float> by_slot(n);
  for (std::size_t i = 0; i < n; ++i) by_slot[i] = s[static_cast<std::size_t>(pos[i])];
  const std::size_t r = std::min(w, n);
  const std::int64_t recent_from = static_cast<std::int64_t>(n - r);
  std::size_t expect = n;
  for (std::size_t i = 0; i < n; ++i) {
    if (pos[i] >= recent_from) continue;
    if (expect == n || by_slot[i] < by_slot[expect] || (by_slot[i] == by_slot[expect] && pos[i] > pos[expect]))
      expect = i;
  }
  // victim(scores, recent_flags, positions, n) requires finite scores >= +0 (the cache's scores: sums of
  // probabilities), whose order is their bits' order.
  if (std::all_of(by_slot.begin(), by_slot.end(),
                  [](float x) { return std::isfinite(x) && x >= 0.0f && !std::signbit(x); })) {
    std::vector<std::uint8_t> flags(n);
    for (std::size_t i = 0; i < n; ++i) flags[i] = pos[i] >= recent_from ? 1 : 0;
    const std::size_t got = sel.victim(by_slot.data(), flags.data(), pos.data(), n);
    KVFUZZ_CHECK(got == expect, "victim = ", got, ", reference ", expect, " (n = ", n, ", w = ", w, ")");
  }
  return 0;
}
