// paged/page_eviction.hpp — the eviction unit of a paged cache (token or page),
// its settings, and page-granular eviction (OpenVINO GenAI style): whole pages of
// the middle area leave the page table and return to the pool, no K/V bytes move.
// SPDX-License-Identifier: Apache-2.0
//
// The page unit's three areas of one sequence's page table (`page_size` = 4,
// `start_pages` = 1, w = 3, n = 22 tokens in 6 pages; `.` = an empty slot):
//
//   page table:  | p0 | p1 | p2 | p3 | p4 | p5 |
//   tokens:      |0123|4567|89ab|cdef|ghij|kl..|
//   area:        | S  | E  | E  | E  | R  | R  |
//
//   S  start area: the first `start_pages` pages, never evicted (attention sinks, rounded up to pages)
//   E  evictable (middle) area: whole pages leave, the lowest page score first
//   R  recent area: every page holding one of the last max(w, 1) tokens (j, k, l here), so the
//      page being written is always recent
//
// A cut (once the sequence exceeds k by a whole page) removes middle pages (p1..p3 here), the
// lowest page score first, until it holds k to k + page_size − 1 tokens; the later pages' table
// entries slide down, their K/V stay put.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvevict/detail/check.hpp"
#include "kvevict/paged/page_pool.hpp"
#include "kvevict/detail/paged_slots.hpp"

namespace kvevict {

/// What one eviction removes from a paged sequence.
enum class EvictUnit {
  token,  ///< one token per decode step, chosen by the policy's selection (all KV heads share it)
  page    ///< whole pages of the middle area, lowest page score first (OpenVINO GenAI style)
};
/// How a page's score is formed from its tokens' scores (page unit only).
enum class PageScore {
  sum,  ///< sum of the tokens' scores (summed over KV heads), OpenVINO GenAI's block score
  mean  ///< the sum divided by the page's filled slots
};

/// Parses "token" or "page"; throws `std::invalid_argument` naming the value otherwise.
inline EvictUnit parse_evict_unit(const std::string& name) {
  if (name == "token") return EvictUnit::token;
  if (name == "page") return EvictUnit::page;
  throw std::invalid_argument(
      detail::concat("kvevict::parse_evict_unit: unknown evict unit '", name, "' (expected token or page)"));
}
/// "token" or "page".
inline const char* evict_unit_name(EvictUnit u) { return u == EvictUnit::token ? "token" : "page"; }

/// Settings of a paged cache beyond `CacheConfig`.
struct PagedEvictionConfig {
  /// Token- or page-granular eviction.
  EvictUnit unit = EvictUnit::token;
  /// Page unit: the first `start_pages` pages of the table are never evicted
  /// (attention sinks, rounded up to pages). Must be 0 with the token unit.
  std::size_t start_pages = 0;
  /// Page unit: sum (default) or mean. Must be `sum` with the token unit.
  PageScore page_score = PageScore::sum;
};

namespace detail {

/// Page-granular eviction over a `PagedSlotTable`. The page table of a sequence
/// of `n` tokens splits into the start area (the first `start_pages` pages), the
/// recent area (every page holding one of the last `max(w, 1)` tokens, so the
/// page being written is always recent) and the middle. `evict` removes the
/// `count` middle pages with the lowest page score — the sum of its tokens'
/// scores summed over KV heads, or that sum over `page_size` (`mean`: a middle
/// page is always full) — ties to the older page (lower table index); their
/// table entries go, the pages return to the pool, and the later pages' table
/// entries, position IDs and scores shift down by one page per removed page
/// (O(n) ints and floats); no K/V bytes move and positions keep their values.
/// Scratch `[max_pages]` is allocated by the constructor; `evict` allocates nothing.
class PageEvictor {
 public:
  PageEvictor() = default;
  /// Scratch for a table of `max_pages` entries.
  PageEvictor(const PagedEvictionConfig& config, std::size_t max_pages)
      : start_pages_(config.start_pages), mean_(config.page_score == PageScore::mean),
        page_score_(max_pages, 0.0f), page_mark_(max_pages, 0) {}

  /// Evicts `count` middle pages of the `n`-token sequence of `slots`, ranked by
  /// `summed` (`[n]`, the scores summed over KV heads), returning them to `pool`.
  /// Requires `count` <= the middle's page count (guaranteed by the cache's
  /// budget rule `k >= start_pages · page_size + max(w, 1)`). Returns the new
  /// length `n − count · page_size` (also written to the view) and adds the
  /// released pages to `released`.
  std::size_t evict(PagedSlotTable& slots, PagePool& pool, const float* summed, std::size_t n, std::size_t w,
                    std::size_t count, std::size_t& released) {
    const std::size_t ps = slots.kv().page_size;
    const std::size_t hi = (n - std::max<std::size_t>(w, 1)) / ps;  // end of the middle (table index)
    for (std::size_t i = start_pages_; i < hi; ++i) {
      float sum = 0.0f;
      for (std::size_t o = 0; o < ps; ++o) sum += summed[i * ps + o];
      page_score_[i] = mean_ ? sum / static_cast<float>(ps) : sum;
    }
    std::fill(page_mark_.begin(), page_mark_.end(), std::uint8_t{0});
    for (std::size_t e = 0; e < count; ++e) page_mark_[lowest_page(hi)] = 1;
    return remove_marked(slots, pool, n, released);
  }

 private:
  /// The unmarked middle page with the lowest score; ties: the older (lower index).
  std::size_t lowest_page(std::size_t hi) const {
    std::size_t best = hi;
    for (std::size_t i = start_pages_; i < hi; ++i)
      if (page_mark_[i] == 0 && (best == hi || page_score_[i] < page_score_[best])) best = i;
    return best;
  }
  std::size_t remove_marked(PagedSlotTable& slots, PagePool& pool, std::size_t n, std::size_t& released) {
    const ErasedPagedKV& kv = slots.kv();
    const std::size_t ps = kv.page_size, used = (n + ps - 1) / ps;
    std::size_t out = 0;
    for (std::size_t i = 0; i < used; ++i) {
      if (page_mark_[i] != 0) {
        pool.release(kv.table[i]);
        ++released;
        continue;
      }
      if (out != i) {
        kv.table[out] = kv.table[i];
        const std::size_t len = std::min(ps, n - i * ps);
        std::memmove(kv.positions + out * ps, kv.positions + i * ps, len * sizeof(std::int64_t));
        for (std::size_t j = 0; j < kv.n_kv_heads; ++j)
          std::memmove(slots.scores(j) + out * ps, slots.scores(j) + i * ps, len * sizeof(float));
      }
      ++out;
    }
    for (std::size_t i = out; i < used; ++i) kv.table[i] = kNoPage;
    const std::size_t m = n - (used - out) * ps;
    *kv.length = m;
    return m;
  }

  std::size_t start_pages_ = 0;
  bool mean_ = false;
  std::vector<float> page_score_;        // [max_pages]
  std::vector<std::uint8_t> page_mark_;  // [max_pages], 1 = to evict
};

}  // namespace detail
}  // namespace kvevict
