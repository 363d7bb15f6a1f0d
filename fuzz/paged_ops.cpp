// kvevict fuzzing — paged_ops: several sequences sharing one PagePool, each with a PagedCache.
// SPDX-License-Identifier: Apache-2.0
//
// Input bytes choose one layer's page pool (1–24 pages of 1–6 slots or 64, 1–3 KV heads, head_dim 1–4,
// NHD or HND, float or Eigen::half) — its own free list, or an engine's allocate / release
// callbacks whose allocate may return no page while it has some, an id out of range, an id in
// use, or throw, and whose (noexcept) release records every page — and up to three sequences on it,
// each with a page table of 1–10 entries and a PagedCache (every policy through make_paged_cache or
// the aliases; token or page unit; start_pages 0–2; sum or mean page score; budgets and windows as
// counts including 0, > capacity and huge, or ratios; GQA group 1–3; SnapKV with its three decode rules;
// an executor claiming 1, 2, 3, 7 or SIZE_MAX workers). A construction that throws invalid_argument leaves
// the sequence without a cache (its storage is still appended to and released). Then up to 128
// calls: PagePool::append (valid and invalid positions; an empty pool or a full table must throw
// length_error), prefill and decode_step with random / NaN / ±inf logits, wrong lengths and a
// corrupted page table (a duplicated entry, kNoPage, an id out of range, a free page: must be
// rejected), restore_position_order, reset / release_sequence, and pages the harness takes with
// PagePool::allocate and gives back with release_list (duplicates named, sometimes a bad id).
// Size arguments also reach 2^64 − 1 (issue 51; kvfuzz::kHugeSizes, all >= 2^62): a view field
// (num_pages, page_size, n_kv_heads, head_dim, max_pages, page_stride_elements) of a cache built over a copy
// of the view, start_pages, prefill's P and a step's n; each must be refused with nothing changed.
//
// Throwing std::invalid_argument or std::length_error is allowed (and the engine's own exception
// from a failing allocate). After every call:
//  - engine callbacks: the engine's free pages are exactly the pool's free pages; no page reaches
//    release twice;
//  - pool: used_pages() == Σ_sequences ceil(length / page_size) + the harness's own pages; no page
//    id appears twice in one table, in two tables, or in a table and the harness's list; every
//    live table entry is in range and in use; every entry past pages_used() is kNoPage;
//    pages_released() only grows; cache.pages_in_use() == ceil(length / page_size);
//  - sequence: every live slot's K/V rows (every KV head) are the bytes appended with its position
//    for this sequence; the slots the cache manages hold distinct positions accepted by its prefill
//    or decode steps since the last reset, with finite scores >= 0;
//  - budget: token unit: after prefill min(k, P) slots, after a decode step min(n, k); page unit:
//    between min(P or n, k) and k + page_size − 1 slots, positions in accepted order (no K/V moved),
//    the first start_pages pages untouched;
//  - policy: RecentTopK keeps the w most recently accepted positions (page unit: max(w, 1));
//    StreamingLLM (token unit) keeps exactly the first min(sinks, m) and the last m − min(sinks, m);
//  - after a throw: the pool (used count, every in-use flag, pages_released), every table, length,
//    position and K/V byte of every sequence, and every cache's budget, window, step, temperature,
//    scores and pages_freed are exactly as before the call.
//
// The pool, its sequences, the engine and the invariants: paged_ops_harness.hpp (included here only); here the
// draws of a cache per sequence, the calls decoded from the input and the entry point.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <kvevict/kvevict.hpp>

#include "fuzz_util.hpp"
#include "paged_ops_harness.hpp"

namespace {

using namespace kvevict;

std::vector<float> pick_floats(FuzzedDataProvider& in, std::size_t count) {
  std::vector<float> x(count);
  const int mode = in.ConsumeIntegralInRange<int>(0, 7);  // 0..5: clean; 6: hostile; 7: all zero
  for (float& f : x) {
    if (mode == 7) {
      f = 0.0f;
      continue;
    }
    const std::uint8_t b = in.ConsumeIntegral<std::uint8_t>();
    if (mode < 6 || b < 200) {
      f = b == 255 ? -kInf : (static_cast<float>(b) - 100.0f) / 8.0f;
      continue;
    }
    static const float hostile[] = {kNaN, kInf, -kInf, 3.4e38f, -3.4e38f, 1e-45f, 0.0f};
    f = hostile[b % 7];
  }
  return x;
}

std::size_t pick_count(FuzzedDataProvider& in, std::size_t cap) {
  switch (in.ConsumeIntegralInRange<int>(0, 15)) {
    case 0: return std::numeric_limits<std::size_t>::max();
    case 1: return std::size_t{1} << 53;
    default: return in.ConsumeIntegralInRange<std::size_t>(0, cap + 2);
  }
}

template <class T>
void make_cache_for(FuzzedDataProvider& in, Sequence<T>& s, std::size_t nkv, PagePool& pool) {
  CacheConfig c;
  c.n_q_heads = nkv * in.ConsumeIntegralInRange<std::size_t>(1, 3);
  int hostile_field = -1;  // issue 51: a cache over a copy of the view with this field huge must be refused
  if (in.ConsumeIntegralInRange<int>(0, 31) == 0) {
    const std::size_t v = in.ConsumeIntegralInRange<std::size_t>(0, 15);
    if (v < 8) c.n_q_heads = v;
    else hostile_field = static_cast<int>(v - 8) % 6;
  }
  const std::size_t hostile_value = hostile_field >= 0 ? in.PickValueInArray(kvfuzz::kHugeSizes) : 0;
  const std::size_t cap = s.view.capacity();
  const bool budget_tokens = in.ConsumeIntegralInRange<int>(0, 3) != 0, recent_tokens = in.ConsumeBool();
  const std::size_t budget_count = pick_count(in, cap), recent_count = pick_count(in, cap);
  const double budget_ratio = in.ConsumeIntegralInRange<int>(0, 80) / 64.0,
               recent_ratio = in.ConsumeIntegralInRange<int>(0, 70) / 64.0;
  c.shared_heads = in.ConsumeIntegralInRange<int>(0, 31) != 0;
  c.seed = in.ConsumeIntegral<std::uint64_t>();
  PagedEvictionConfig paged;
  paged.unit = in.ConsumeBool() ? EvictUnit::page : EvictUnit::token;
  paged.start_pages = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, 7) : 0;
  if (paged.start_pages >= 3) paged.start_pages = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
  paged.page_score = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? PageScore::mean : PageScore::sum;
  PolicyParams params;
  static const float taus[] = {1.0f, 2.0f, 0.5f, 0.0f, kNaN, 1e-40f};
  params.tau_init = in.PickValueInArray(taus);
  params.tau_end = in.PickValueInArray(taus);
  params.horizon = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  params.gumbel_noise = in.ConsumeBool();
  params.sinks = in.ConsumeIntegralInRange<std::size_t>(0, 5);
  static const Policy policies[] = {Policy::keyformer, Policy::h2o, Policy::streaming_llm, Policy::window,
                                    Policy::tova, Policy::snapkv, Policy::knorm, Policy::keydiff};
  const Policy p = in.PickValueInArray(policies);
  if (p == Policy::snapkv) {  // L and K including 0, even K and L > k (rejected); the three decode rules
    params.snap_window = in.ConsumeIntegralInRange<std::size_t>(0, 8);
    params.snap_kernel = in.ConsumeIntegralInRange<std::size_t>(0, 7);
    params.snap_pooling = in.ConsumeBool() ? Pooling::max : Pooling::avg;
    params.snap_decode = in.PickValueInArray({SnapDecode::h2o, SnapDecode::window, SnapDecode::keyformer});
  }
  // Mean attention (H2OMean, KeyformerMean): other policies and the page unit reject it.
  params.mean_attention = in.ConsumeIntegralInRange<int>(0, 3) == 0;
  static const std::size_t workers[] = {1, 2, 3, 7, SIZE_MAX};
  s.executor = std::make_unique<ClaimExecutor>(ClaimExecutor{in.PickValueInArray(workers)});
  s.n_q = c.n_q_heads;
  s.page_unit = paged.unit == EvictUnit::page;
  s.start_pages = paged.start_pages;
  try {  // Budget / RecentWindow check their values too (e.g. a ratio of 0)
    c.budget = budget_tokens ? Budget::tokens(budget_count) : Budget::ratio(budget_ratio);
    c.recent = recent_tokens ? RecentWindow::tokens(recent_count) : RecentWindow::ratio(recent_ratio);
    if (hostile_field >= 0) {
      PagedKVView<T> bad = s.view;
      static const char* const names[] = {"num_pages", "page_size", "n_kv_heads", "head_dim", "max_pages",
                                          "page_stride_elements"};
      std::size_t* fields[] = {&bad.num_pages, &bad.page_size, &bad.n_kv_heads, &bad.head_dim, &bad.max_pages,
                               &bad.page_stride_elements};
      *fields[hostile_field] = hostile_value;
      const std::size_t used = pool.used_pages();
      bool built = false;
      try {
        (void)make_paged_cache(p, c, paged, bad, pool, params);
        built = true;
      } catch (const std::invalid_argument&) {
      } catch (const std::length_error&) {
      }
      KVFUZZ_CHECK(!built, "a paged cache was built over a view with ", names[hostile_field], " = ", hostile_value);
      KVFUZZ_CHECK(pool.used_pages() == used, "a refused paged cache changed the pool");
    }
    s.cache = make_paged_cache(p, c, paged, s.view, pool, params);
    s.cache->set_executor(*s.executor);
  } catch (const std::invalid_argument&) {
    s.cache.reset();
    s.name = "no cache";
    return;
  }
  // A huge start_pages is refused at construction with a token budget; a ratio budget is resolved (and the page
  // unit's rule checked) at prefill, which must then refuse it (below).
  KVFUZZ_CHECK(paged.start_pages <= 2 || c.budget.is_ratio(), "a paged cache was built with start_pages = ",
               paged.start_pages);
  s.name = std::string(policy_name(p)) + (params.mean_attention ? "+mean" : "") + (s.page_unit ? "/page" : "/token");
  s.streaming = p == Policy::streaming_llm || p == Policy::window;
  s.any_kept = p == Policy::snapkv && params.snap_decode == SnapDecode::window;
  s.sinks = p == Policy::window ? 0 : params.sinks;
}

template <class T>
void run(FuzzedDataProvider& in) {
  const std::size_t pages = in.ConsumeIntegralInRange<std::size_t>(1, 24);
  // Rarely 64-slot pages (up to 640 slots): rows over 512 slots, split into chunk ranges when an
  // executor claims more workers than there are KV heads (the path where SIZE_MAX workers wrapped).
  const std::size_t ps = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? 64 : in.ConsumeIntegralInRange<std::size_t>(1, 6);
  const std::size_t nkv = in.ConsumeIntegralInRange<std::size_t>(1, 3);
  const std::size_t hd = in.ConsumeIntegralInRange<std::size_t>(1, 4);
  const PageLayout layout = in.ConsumeBool() ? PageLayout::HND : PageLayout::NHD;
  const bool engine = in.ConsumeIntegralInRange<int>(0, 2) == 0;
  Harness<T> H(pages, ps, nkv, hd, layout, engine ? &in : nullptr);
  const std::size_t n_seqs = in.ConsumeIntegralInRange<std::size_t>(1, 3);
  for (std::size_t i = 0; i < n_seqs; ++i) H.add_sequence(in.ConsumeIntegralInRange<std::size_t>(1, 10));
  H.bind_views();
  for (auto& s : H.seqs) make_cache_for(in, s, nkv, H.pool);
  H.check();

  for (int op = 0; op < 128 && in.remaining_bytes() > 0; ++op) {
    const std::size_t i = in.ConsumeIntegralInRange<std::size_t>(0, H.seqs.size() - 1);
    Sequence<T>& s = H.seqs[i];
    const std::size_t n = s.length;
    const std::int64_t last = n > 0 ? s.positions[n - 1] : -1;
    switch (in.ConsumeIntegralInRange<int>(0, 15)) {
      case 0: case 1: case 2: case 3: case 4: {  // append
        std::int64_t p = last + 1;
        switch (in.ConsumeIntegralInRange<int>(0, 9)) {
          case 0: p = last; break;
          case 1: p = in.ConsumeIntegralInRange<std::int64_t>(-3, 40); break;
          case 2: p = last + in.ConsumeIntegralInRange<std::int64_t>(2, 50); break;
          default: break;
        }
        const bool full = n == s.view.capacity() || (n % ps == 0 && H.pool.free_pages() == 0);
        H.engine.fault = 0;
        const bool ok = H.call("append", i, [&] { H.append(i, p); });
        const bool faulted = H.engine.fault != 0 && !full;  // only a new page asks the engine
        KVFUZZ_CHECK(ok != (full || faulted), H.where(i), ": append ",
                     ok ? "succeeded on a full table or pool, or despite a bad page from the engine" : "failed");
        break;
      }
      case 5: case 6: {  // prefill, sometimes with a wrong length or a corrupted page table
        if (!s.cache) break;
        std::size_t P = n;
        const int p_draw = in.ConsumeIntegralInRange<int>(0, 15);
        if (p_draw == 0) P = in.ConsumeIntegralInRange<std::size_t>(0, s.view.capacity() + 1);
        if (p_draw == 8) P = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
        const std::vector<float> x = pick_floats(in, p_draw == 8 ? 16 : s.n_q * P * P);
        const std::vector<std::int64_t> prompt(s.positions.begin(), s.positions.begin() + static_cast<std::ptrdiff_t>(n));
        const std::size_t used = s.view.pages_used();
        const int corrupt = used >= 1 ? in.ConsumeIntegralInRange<int>(0, 11) : 0;
        if (corrupt >= 1 && corrupt <= 4) {  // a page table the pool must reject
          const std::size_t e = in.ConsumeIntegralInRange<std::size_t>(0, used - 1);
          const std::int32_t saved = s.table[e];
          std::int32_t bad = kNoPage;
          if (corrupt == 2) bad = static_cast<std::int32_t>(pages);
          if (corrupt == 3 && used >= 2) bad = s.table[(e + 1) % used];  // listed twice
          if (corrupt == 4)
            for (std::size_t p = 0; p < pages; ++p)
              if (!H.pool.in_use(static_cast<std::int32_t>(p))) bad = static_cast<std::int32_t>(p);  // a free page
          s.table[e] = bad;
          const bool ok = H.call("prefill(corrupted table)", i, [&] { s.cache->prefill(x.data(), P); });
          s.table[e] = saved;
          KVFUZZ_CHECK(!ok, H.where(i), ": prefill accepted table[", e, "] = ", bad);
          break;
        }
        const bool ok = H.call("prefill", i, [&] { s.cache->prefill(in.ConsumeIntegralInRange<int>(0, 15) != 0 ? x.data() : nullptr, P); });
        KVFUZZ_CHECK(!ok || p_draw != 8, H.where(i), ": prefill accepted prompt_len = ", P);
        KVFUZZ_CHECK(!ok || s.start_pages <= 2, H.where(i), ": prefill accepted start_pages = ", s.start_pages);
        if (!ok) break;
        KVFUZZ_CHECK(!s.prefilled, H.where(i), ": a second prefill succeeded");
        KVFUZZ_CHECK(std::is_sorted(prompt.begin(), prompt.end()), H.where(i), ": unordered prompt accepted");
        const std::size_t k = s.cache->budget();
        KVFUZZ_CHECK(k >= 1 && s.cache->recent_window() <= k, H.where(i), ": k = ", k, ", w = ",
                     s.cache->recent_window());
        if (s.page_unit) {
          KVFUZZ_CHECK(P <= k ? s.length == P : s.length >= k && s.length <= k + ps - 1, H.where(i),
                       ": page unit prefill kept ", s.length, " of ", P, " (k = ", k, ", page size ", ps, ")");
          KVFUZZ_CHECK((P - s.length) % ps == 0, H.where(i), ": page unit evicted a partial page");
        } else {
          KVFUZZ_CHECK(s.length == std::min(k, P), H.where(i), ": prefill kept ", s.length, ", expected min(k, P)");
        }
        s.accepted = prompt;
        s.managed = s.length;
        s.prefilled = true;
        s.start_positions.assign(prompt.begin(),
                                 prompt.begin() + static_cast<std::ptrdiff_t>(std::min(s.start_pages * ps, s.length)));
        break;
      }
      case 7: case 8: case 9: {  // decode step
        if (!s.cache) break;
        std::size_t m = n;
        const int m_draw = in.ConsumeIntegralInRange<int>(0, 15);
        if (m_draw == 0) m = in.ConsumeIntegralInRange<std::size_t>(0, s.view.capacity() + 1);
        if (m_draw == 8) m = in.PickValueInArray(kvfuzz::kHugeSizes);  // issue 51: refused
        const std::vector<float> x = pick_floats(in, m_draw == 8 ? 16 : s.n_q * m);
        const std::int64_t new_pos = m >= 1 && m <= n ? s.positions[m - 1] : 0;
        const bool ok = H.call("decode_step", i, [&] { s.cache->decode_step(in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : x.data(), m); });
        KVFUZZ_CHECK(!ok || m_draw != 8, H.where(i), ": decode_step accepted n = ", m);
        if (!ok) break;
        KVFUZZ_CHECK(s.prefilled && m == s.managed + 1 && m == n, H.where(i), ": decode_step(n = ", m,
                     ") accepted with managed ", s.managed, ", length ", n);
        KVFUZZ_CHECK(s.accepted.empty() || new_pos > s.accepted.back(), H.where(i), ": position ", new_pos,
                     " accepted after ", s.accepted.back());
        const std::size_t k = s.cache->budget();
        if (s.page_unit)
          KVFUZZ_CHECK(s.length == (m >= k + ps ? m - ps : m), H.where(i), ": page unit decode step left ", s.length,
                       " of ", m, " (k = ", k, ", page size ", ps, ")");
        else
          KVFUZZ_CHECK(s.length == std::min(m, k), H.where(i), ": decode step left ", s.length, ", expected min(n, k)");
        s.accepted.push_back(new_pos);
        s.managed = s.length;
        break;
      }
      case 10: {  // restore_position_order
        if (!s.cache) break;
        H.call("restore_position_order", i, [&] { s.cache->restore_position_order(); });
        if (s.page_unit) break;
        // The managed slots are now in ascending position order (appended ones stay where they are).
        if (s.prefilled)
          KVFUZZ_CHECK(std::is_sorted(s.positions.begin(), s.positions.begin() + static_cast<std::ptrdiff_t>(s.managed)),
                       H.where(i), ": restore_position_order left the slots unsorted");
        break;
      }
      case 11: {  // end the sequence: reset (cache) or release_sequence (no cache)
        const std::size_t pages_before = s.view.pages_used(), released_before = H.pool.pages_released();
        const bool ok = H.call("reset", i, [&] {
          if (s.cache)
            s.cache->reset(in.ConsumeIntegral<std::uint64_t>());
          else
            H.pool.release_sequence(s.view);
        });
        KVFUZZ_CHECK(ok, H.where(i), ": ending a sequence with a valid table threw");
        KVFUZZ_CHECK(s.length == 0 && H.pool.pages_released() == released_before + pages_before, H.where(i),
                     ": reset returned ", H.pool.pages_released() - released_before, " of ", pages_before, " pages");
        s.prefilled = false;
        s.managed = 0;
        s.accepted.clear();
        s.start_positions.clear();
        break;
      }
      case 12: case 13: {  // the harness takes a page
        const bool empty = H.pool.free_pages() == 0;
        std::int32_t got = kNoPage;
        H.engine.fault = 0;
        const bool ok = H.call("allocate", i, [&] { got = H.pool.allocate(); });
        KVFUZZ_CHECK(ok != (empty || H.engine.fault != 0), "pool: allocate ",
                     ok ? "succeeded on an empty pool or took a bad page" : "failed with free pages");
        if (ok) H.strays.push_back(got);
        break;
      }
      default: {  // release_list of the harness's pages, each maybe named twice, sometimes with a bad id
        if (H.strays.empty()) break;
        const std::size_t cnt = in.ConsumeIntegralInRange<std::size_t>(1, H.strays.size());
        std::vector<std::int32_t> list(H.strays.end() - static_cast<std::ptrdiff_t>(cnt), H.strays.end());
        const std::size_t dups = in.ConsumeIntegralInRange<std::size_t>(0, 3);
        for (std::size_t d = 0; d < dups; ++d) list.push_back(list[in.ConsumeIntegralInRange<std::size_t>(0, cnt - 1)]);
        const int bad = in.ConsumeIntegralInRange<int>(0, 5);
        bool invalid = bad == 0 || bad == 1;
        if (bad == 0) list.push_back(static_cast<std::int32_t>(pages));
        if (bad == 1) list.push_back(-1);
        if (bad == 2) {  // a page that is free
          for (std::size_t p = 0; p < pages && !invalid; ++p)
            if (!H.pool.in_use(static_cast<std::int32_t>(p))) {
              list.push_back(static_cast<std::int32_t>(p));
              invalid = true;
            }
        }
        std::reverse(list.begin(), list.end());
        std::size_t freed = 0;
        const bool ok = H.call("release_list", i, [&] { freed = H.pool.release_list(list.data(), list.size()); });
        KVFUZZ_CHECK(ok != invalid, "pool: release_list ", ok ? "accepted a bad id" : "of pages in use threw");
        if (ok) {
          KVFUZZ_CHECK(freed == cnt, "pool: release_list freed ", freed, " of ", cnt, " distinct pages");
          H.strays.resize(H.strays.size() - cnt);
        }
        break;
      }
    }
    H.check();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0)
    run<Eigen::half>(in);
  else
    run<float>(in);
  return 0;
}
