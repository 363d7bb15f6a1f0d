// head_budgets.hpp — head-adaptive budgets (AdaKV, Feng et al. 2024, arXiv 2407.11550): a layer's k · n_kv_heads tokens shared among its KV heads by their scores, with a floor per head.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvevict/detail/check.hpp"

namespace kvevict {

/// How a layer's budget is shared among its KV heads (`CacheConfig::head_budgets`).
///
///  - `uniform()` (the default, as in Keyformer and H2O): every KV head keeps `k` tokens.
///  - `adaptive(floor)` (AdaKV, Feng et al. 2024, §3.2 "Adaptive budget allocation", Algorithm 1): the
///    layer keeps `k · n_kv_heads` tokens in total, and at its first cut (the prefill's, or the first decode
///    step over budget when the prompt fits) they are shared among the KV heads by the scores the selection
///    ranks. Every head keeps its recent window `w` and at least `floor(floor · (k − w))` key tokens (AdaKV's
///    safeguard α, default 0.2 as in the paper's code), and the rest of the layer's `n_kv_heads · (k − w)`
///    key tokens go to the highest-ranked candidates of any head. A head's share `k_j` is then its budget
///    for the rest of the sequence (each decode step evicts one of its tokens once it holds `k_j + 1`), so
///    the heads hold different numbers of tokens and the layer's total is exact. The view's `lengths[j]`
///    differ per KV head: the engine's attention reads head `j` over its own `lengths[j]` slots and lays
///    the decode logits out as `[q_head][n]`, `n = max_j lengths[j]` (head `j`'s rows read on
///    `[0, lengths[j])`; see `Cache::decode_step`). Scores are comparable across the heads of a layer as
///    AdaKV needs: each is a sum of softmax probabilities over the same queries.
struct HeadBudgets {
  enum class Kind {
    uniform,  ///< every KV head keeps k
    adaptive  ///< AdaKV: the layer's k · n_kv_heads shared by score, with a floor per head
  };
  Kind kind = Kind::uniform;
  /// `adaptive`: AdaKV's α in [0, 1], the share of the key budget `k − w` every head keeps at least.
  float floor = 0.0f;

  /// Every KV head keeps k (the default).
  static HeadBudgets uniform() { return HeadBudgets{}; }
  /// AdaKV with safeguard `floor` (α, in [0, 1]; 0.2 as in the paper). Checked by the cache
  /// (`check_head_budgets`).
  static HeadBudgets adaptive(float floor = 0.2f) {
    HeadBudgets b;
    b.kind = Kind::adaptive;
    b.floor = floor;
    return b;
  }
  bool is_adaptive() const { return kind == Kind::adaptive; }
};

/// "uniform" or "adaptive".
inline const char* head_budgets_name(const HeadBudgets& b) { return b.is_adaptive() ? "adaptive" : "uniform"; }

/// Checks `b`: a known kind; for `adaptive`, `floor` finite in [0, 1]; for `uniform`, `floor == 0` (a floor
/// given to uniform budgets would be ignored). Throws `std::invalid_argument` "<who>: head_budgets …" naming
/// the value. O(1).
inline void check_head_budgets(const HeadBudgets& b, const char* who) {
  detail::require(b.kind == HeadBudgets::Kind::uniform || b.kind == HeadBudgets::Kind::adaptive, who,
                  ": head_budgets.kind is not uniform or adaptive (got ", static_cast<int>(b.kind), ")");
  if (b.is_adaptive())
    detail::require(std::isfinite(b.floor) && b.floor >= 0.0f && b.floor <= 1.0f, who,
                    ": head_budgets.floor (AdaKV's alpha) must be in [0, 1] (got ", b.floor, ")");
  else
    detail::require(b.floor == 0.0f, who, ": head_budgets.floor = ", b.floor,
                    " is only used by HeadBudgets::adaptive (uniform budgets have no floor)");
}

/// One candidate of `allocate_head_budgets`: its score, KV head and index.
struct HeadCandidate {
  float score;
  std::uint32_t head;
  std::uint32_t index;
};

/// AdaKV's allocation (Feng et al. 2024, Algorithm 1, with its safeguard): how many key tokens each of
/// `n_heads` KV heads keeps. `scores`: `[head][stride]`, head `j`'s `n` candidates (the tokens outside its
/// recent window) at `scores + j · stride`, finite and >= 0 (the values the selection ranks). `per_head`:
/// the nominal key budget `k − w` of a head; `floor`: the least any head keeps (`<= per_head`); `cap`: the
/// most any head keeps (`>= per_head`; the view's room). Writes `counts[j]` with `floor <= counts[j] <=
/// min(n, cap)` and `Σ counts = n_heads · min(per_head, n, cap)` (exact: a head at its cap leaves its share to the others): every head's `floor` best
/// candidates, then the best of the rest over all heads, in the order of score (descending), then head, then
/// index (ascending: an older token before a newer one, as the selections break ties). `scratch` holds at
/// least `n_heads · n` entries. O(H n log(H n)) for `H n` candidates (a sort); no allocation, no throw; the
/// caller checks the arguments.
inline void allocate_head_budgets(const float* scores, std::size_t stride, std::size_t n_heads, std::size_t n,
                                  std::size_t per_head, std::size_t floor, std::size_t cap, HeadCandidate* scratch,
                                  std::size_t* counts) noexcept {
  const std::size_t top = std::min(n, cap), f = std::min(floor, top);
  std::size_t c = 0;
  for (std::size_t j = 0; j < n_heads; ++j)
    for (std::size_t i = 0; i < n; ++i)
      scratch[c++] = HeadCandidate{scores[j * stride + i], static_cast<std::uint32_t>(j), static_cast<std::uint32_t>(i)};
  std::sort(scratch, scratch + c, [](const HeadCandidate& a, const HeadCandidate& b) {
    if (a.score != b.score) return a.score > b.score;
    return a.head != b.head ? a.head < b.head : a.index < b.index;
  });
  // One pass in that order. A head's floor is its first f candidates (while its count is below f, each of
  // its candidates is one of them); every later candidate is in the pool, taken while the layer's budget
  // lasts and its head is below the cap.
  std::fill(counts, counts + n_heads, std::size_t{0});
  std::size_t left = n_heads * (std::min(per_head, top) - f);
  for (std::size_t e = 0; e < c; ++e) {
    std::size_t& m = counts[scratch[e].head];
    if (m < f) {
      ++m;
    } else if (left != 0 && m < top) {
      ++m;
      --left;
    }
  }
}

}  // namespace kvevict
