// kvevict fuzzing — head_budgets: AdaKV's allocation and the head-adaptive Cache (HeadBudgets::adaptive).
// SPDX-License-Identifier: Apache-2.0
//
// Input bytes draw:
//  - allocate_head_budgets over 1–6 heads of 0–24 candidates with few distinct scores (many ties), a per-head
//    budget 0–30, a floor up to it and a cap from 0 to above it; compared with a plain reference;
//  - a configuration (policy h2o, keyformer, snapkv, tova, h2o+mean through make_cache; 1–4 KV heads, GQA group
//    1–3, head_dim 1–4; budgets as counts 1–40 or ratios; a recent window as a count or ratio; alpha in [0, 1],
//    or NaN, -0.5, 1.5 (refused); a floor given to uniform budgets, shared_heads, bounded_prefill (refused)),
//    two caches built from it (one driven by decode_step, one by the per-head step), and up to 64 calls: a
//    prefill of 1–24 tokens with random, NaN and ±inf logits, decode steps (each head one more token) whose rows
//    past a head's length are NaN, with a wrong n, a head not appended to, NaN inside a head's length, or a
//    position that does not rise; reset. Issue 51: sizes up to 2^64 − 1 (kvfuzz::kHugeSizes, all >= 2^62): a
//    cache over a copy of the view with its capacity, head_dim or n_kv_heads huge, and a decode step's n; each
//    must be refused with nothing changed.
// Invariants (a violation aborts):
//  - the allocation equals the reference, each count in [min(floor, n, cap), min(n, cap)], the total exact;
//  - both caches have the same outcome (thrown or not, the same message) and afterwards the same positions,
//    lengths and score bits on every head;
//  - after a throw, every head's positions, length and score bits are as before the call;
//  - once the layer holds more than k tokens per head: Σ lengths = k · n_kv_heads, every length >= w +
//    floor(alpha (k − w)), positions distinct, and the newest token on every head (w >= 1);
//  - only std::invalid_argument or std::length_error is thrown.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <kvevict/kvevict.hpp>

#include "fuzz_util.hpp"

namespace {

using namespace kvevict;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<std::size_t> reference_allocation(const std::vector<float>& s, std::size_t H, std::size_t n,
                                              std::size_t per_head, std::size_t floor, std::size_t cap) {
  struct C {
    float s;
    std::size_t h, i;
  };
  auto better = [](const C& a, const C& b) { return a.s != b.s ? a.s > b.s : a.h != b.h ? a.h < b.h : a.i < b.i; };
  const std::size_t top = std::min(n, cap), f = std::min(floor, top);
  std::vector<std::size_t> counts(H, f);
  std::vector<C> pool;
  for (std::size_t h = 0; h < H; ++h) {
    std::vector<C> mine;
    for (std::size_t i = 0; i < n; ++i) mine.push_back({s[h * n + i], h, i});
    std::sort(mine.begin(), mine.end(), better);
    pool.insert(pool.end(), mine.begin() + static_cast<std::ptrdiff_t>(f), mine.end());
  }
  std::sort(pool.begin(), pool.end(), better);
  std::size_t left = H * (std::min(per_head, top) - f);
  for (const C& c : pool)
    if (left != 0 && counts[c.h] < top) ++counts[c.h], --left;
  return counts;
}

void fuzz_allocation(FuzzedDataProvider& in) {
  const std::size_t H = in.ConsumeIntegralInRange<std::size_t>(1, 6), n = in.ConsumeIntegralInRange<std::size_t>(0, 24);
  const std::size_t per_head = in.ConsumeIntegralInRange<std::size_t>(0, 30);
  const std::size_t floor = in.ConsumeIntegralInRange<std::size_t>(0, per_head);
  const std::size_t cap = per_head + in.ConsumeIntegralInRange<std::size_t>(0, 8);
  std::vector<float> s(H * n);
  for (float& v : s) v = static_cast<float>(in.ConsumeIntegralInRange<int>(0, 5)) * 0.25f;
  std::vector<HeadCandidate> scratch(H * n + 1);
  std::vector<std::size_t> got(H, 12345);
  allocate_head_budgets(s.data(), n, H, n, per_head, floor, cap, scratch.data(), got.data());
  const auto want = reference_allocation(s, H, n, per_head, floor, cap);
  KVFUZZ_CHECK(got == want, "allocate_head_budgets differs from the reference (H = ", H, ", n = ", n, ")");
  std::size_t sum = 0;
  const std::size_t top = std::min(n, cap);
  for (std::size_t c : got) {
    KVFUZZ_CHECK(c >= std::min(floor, top) && c <= top, "count ", c, " outside [floor, min(n, cap)]");
    sum += c;
  }
  KVFUZZ_CHECK(sum == H * std::min(per_head, top), "the total ", sum, " is not H * min(per_head, n, cap)");
}

/// One layer: storage, a cache over it, and the tokens appended so far.
struct Side {
  KVBuffer<float> buf;
  KVView<float> kv;
  std::unique_ptr<CacheInterface> cache;
  Side(std::size_t H, std::size_t cap, std::size_t d) : buf(H, cap, d), kv(buf.view()) {}
};

struct State {
  std::vector<std::vector<std::int64_t>> pos;
  std::vector<std::vector<std::uint32_t>> bits;
  bool operator==(const State& o) const { return pos == o.pos && bits == o.bits; }
};
State state(const Side& s) {
  State st;
  for (std::size_t j = 0; j < s.kv.n_kv_heads; ++j) {
    const std::size_t n = s.kv.lengths[j];
    st.pos.emplace_back(s.kv.head_positions(j), s.kv.head_positions(j) + n);
    std::vector<std::uint32_t> b(n);
    if (n != 0) std::memcpy(b.data(), s.cache->scores(j), n * sizeof(float));
    st.bits.push_back(std::move(b));
  }
  return st;
}

/// Runs `f(side, per_head)` on both sides; returns whether it succeeded. The same outcome on both (and, with
/// `same_message`, the same message); a throw leaves a side's state as it was unless `*dirty` was set (a
/// per-head step abandoned after some heads were scored); on success the states are equal bit for bit.
template <class F>
bool both(Side& a, Side& b, F f, const char* what, bool same_message, bool* dirty) {
  std::string err[2];
  bool ok[2] = {true, true};
  Side* sides[2] = {&a, &b};
  for (int i = 0; i < 2; ++i) {
    const State before = state(*sides[i]);
    *dirty = false;
    try {
      f(*sides[i], i == 1);
    } catch (const std::invalid_argument& e) {
      ok[i] = false, err[i] = e.what();
    } catch (const std::length_error& e) {
      ok[i] = false, err[i] = e.what();
    }
    if (!ok[i] && !*dirty) KVFUZZ_CHECK(state(*sides[i]) == before, what, ": a throw changed the cache: ", err[i]);
  }
  KVFUZZ_CHECK(ok[0] == ok[1], what, ": one cache threw, the other did not: '", err[0], "' / '", err[1], "'");
  if (same_message) KVFUZZ_CHECK(err[0] == err[1], what, ": different messages: '", err[0], "' vs '", err[1], "'");
  if (ok[0]) KVFUZZ_CHECK(state(a) == state(b), what, ": decode_step and the per-head step left different states");
  return ok[0];
}

void fuzz_cache(FuzzedDataProvider& in) {
  const std::size_t H = in.ConsumeIntegralInRange<std::size_t>(1, 4), g = in.ConsumeIntegralInRange<std::size_t>(1, 3);
  const std::size_t d = in.ConsumeIntegralInRange<std::size_t>(1, 4), cap = in.ConsumeIntegralInRange<std::size_t>(1, 64);
  const int pick = in.ConsumeIntegralInRange<int>(0, 4);
  const Policy policy = pick == 0 ? Policy::h2o : pick == 1 ? Policy::keyformer : pick == 2 ? Policy::snapkv
                        : pick == 3 ? Policy::tova : Policy::h2o;
  PolicyParams params;
  params.mean_attention = pick == 4;
  params.horizon = 64;
  params.snap_window = in.ConsumeIntegralInRange<std::size_t>(1, 4);
  params.snap_kernel = 1 + 2 * in.ConsumeIntegralInRange<std::size_t>(0, 2);
  CacheConfig cfg;
  cfg.n_q_heads = H * g;
  cfg.budget = in.ConsumeBool() ? Budget::tokens(in.ConsumeIntegralInRange<std::size_t>(1, 40))
                                : Budget::ratio(in.ConsumeFloatingPointInRange<double>(0.05, 1.0));
  cfg.recent = in.ConsumeBool() ? RecentWindow::tokens(in.ConsumeIntegralInRange<std::size_t>(0, 6))
                                : RecentWindow::ratio(in.ConsumeFloatingPointInRange<double>(0.0, 0.6));  // TOVA too
  const int a = in.ConsumeIntegralInRange<int>(0, 15);
  const float alpha = a == 12 ? kNaN : a == 13 ? -0.5f : a == 14 ? 1.5f : a == 15 ? 0.2f
                                                                        : static_cast<float>(a) / 11.0f;
  cfg.head_budgets = HeadBudgets::adaptive(alpha);
  const int odd = in.ConsumeIntegralInRange<int>(0, 15);
  if (odd == 0) cfg.shared_heads = true;
  if (odd == 1) cfg.bounded_prefill = true, cfg.max_prefill_chunk = 4;
  if (odd == 2) cfg.head_budgets = HeadBudgets::uniform(), cfg.head_budgets.floor = alpha;
  Side A(H, cap, d), B(H, cap, d);
  if (odd == 3) {  // issue 51: a huge view field, refused before anything is allocated
    KVView<float> bad = A.kv;
    const int field = in.ConsumeIntegralInRange<int>(0, 2);
    const std::size_t huge = in.PickValueInArray(kvfuzz::kHugeSizes);
    if (field == 0) bad.capacity = huge;
    if (field == 1) bad.head_dim = bad.slot_stride = huge;
    if (field == 2) bad.n_kv_heads = huge;
    bool built = false;
    try {
      (void)make_cache(policy, cfg, bad, params);
      built = true;
    } catch (const std::invalid_argument&) {
    } catch (const std::length_error&) {
    }
    KVFUZZ_CHECK(!built, "an adaptive cache was built over a view with field ", field, " = ", huge);
    return;
  }
  try {
    A.cache = make_cache(policy, cfg, A.kv, params);
    B.cache = make_cache(policy, cfg, B.kv, params);
  } catch (const std::invalid_argument&) {
    return;  // refused configurations (shared, bounded, bad floor, budgets) are all invalid_argument
  }
  std::int64_t next_pos = 0;
  bool prefilled = false;
  auto logit = [&]() -> float {
    const int r = in.ConsumeIntegralInRange<int>(0, 63);
    if (r == 0) return kNaN;
    if (r == 1) return std::numeric_limits<float>::infinity();
    if (r == 2) return -std::numeric_limits<float>::infinity();
    return static_cast<float>(in.ConsumeIntegralInRange<int>(-40, 40)) * 0.25f;
  };
  auto append_all = [&](Side& s, std::int64_t p, std::size_t skip_head) {
    std::vector<float> row(H * d, static_cast<float>(p));
    for (std::size_t j = 0; j < H; ++j) {
      if (j == skip_head) continue;
      if (s.kv.lengths[j] >= cap) throw std::length_error("full");
      const std::size_t slot = s.kv.lengths[j];
      std::copy_n(row.data(), d, s.kv.k_row(j, slot));
      std::copy_n(row.data(), d, s.kv.v_row(j, slot));
      s.kv.head_positions(j)[slot] = p;
      s.kv.lengths[j] = slot + 1;
    }
  };
  for (int op = 0; op < 64 && in.remaining_bytes() > 0; ++op) {
    const int kind = in.ConsumeIntegralInRange<int>(0, 9);
    if (kind == 0) {  // reset
      A.cache->reset(1);
      B.cache->reset(1);
      next_pos = 0, prefilled = false;
      continue;
    }
    if (!prefilled) {  // a prompt
      const std::size_t P = in.ConsumeIntegralInRange<std::size_t>(1, std::min<std::size_t>(24, cap));
      for (Side* s : {&A, &B})
        for (std::size_t j = 0; j < H; ++j) s->kv.lengths[j] = 0;
      for (std::size_t t = 0; t < P; ++t) {
        append_all(A, static_cast<std::int64_t>(t), H);
        append_all(B, static_cast<std::int64_t>(t), H);
      }
      std::vector<float> x(H * g * P * P, 0.0f);
      for (std::size_t h = 0; h < H * g; ++h)
        for (std::size_t r = 0; r < P; ++r)
          for (std::size_t c = 0; c <= r; ++c) x[(h * P + r) * P + c] = logit();
      bool dirty = false;
      prefilled = both(A, B, [&](Side& s, bool) { s.cache->prefill(x.data(), P); }, "prefill", true, &dirty);
      next_pos = static_cast<std::int64_t>(P);
      if (!prefilled)
        for (Side* s : {&A, &B}) s->cache->reset(1);
    } else {  // a decode step, sometimes broken
      const int bad = in.ConsumeIntegralInRange<int>(0, 15);
      const std::size_t skip = bad == 1 ? in.ConsumeIntegralInRange<std::size_t>(0, H - 1) : H;
      const std::int64_t p = bad == 2 ? next_pos - 1 : next_pos;
      try {
        append_all(A, p, skip);
        append_all(B, p, skip);
      } catch (const std::length_error&) {
        return;  // the view is full: nothing more to do
      }
      std::size_t n = 0;
      for (std::size_t j = 0; j < H; ++j) n = std::max(n, A.kv.lengths[j]);
      const std::size_t passed = bad == 3                ? n + 1
                                 : bad == 4 && n > 1     ? n - 1
                                 : bad == 6              ? in.PickValueInArray(kvfuzz::kHugeSizes)  // issue 51
                                                         : n;
      std::vector<float> x(H * g * (bad == 6 ? n : std::max<std::size_t>(passed, n)), kNaN);
      for (std::size_t h = 0; h < H * g; ++h)
        for (std::size_t s = 0; s < A.kv.lengths[h / g]; ++s)
          x[h * (bad == 6 ? n : passed) + s] =
              bad == 5 ? logit() : static_cast<float>(in.ConsumeIntegralInRange<int>(-8, 8));
      bool dirty = false;
      const bool ok = both(A, B, [&](Side& s, bool per_head) {
        if (!per_head) {
          s.cache->decode_step(x.data(), passed);
          return;
        }
        s.cache->begin_decode_step(passed);
        try {
          for (std::size_t j = 0; j < H; ++j) s.cache->score_decode_head(j, x.data() + j * g * passed);
        } catch (...) {
          dirty = true;  // heads before j were scored: the step stays open; the input ends below
          throw;
        }
        s.cache->end_decode_step();
      }, "decode step", false, &dirty);
      if (!ok) return;  // a failed step leaves the appended token(s): stop this input here
      ++next_pos;
      const std::size_t k = A.cache->budget(), w = A.cache->recent_window();
      std::size_t sum = 0;
      bool over = false;
      for (std::size_t j = 0; j < H; ++j) {
        sum += A.kv.lengths[j];
        std::vector<std::int64_t> ps(A.kv.head_positions(j), A.kv.head_positions(j) + A.kv.lengths[j]);
        std::sort(ps.begin(), ps.end());
        KVFUZZ_CHECK(std::adjacent_find(ps.begin(), ps.end()) == ps.end(), "head ", j, " holds a position twice");
        if (w >= 1) KVFUZZ_CHECK(!ps.empty() && ps.back() == next_pos - 1, "head ", j, " lost the newest token");
        over = over || A.kv.lengths[j] != A.kv.lengths[0];
      }
      const auto floor = static_cast<std::size_t>(std::floor(static_cast<double>(alpha) * static_cast<double>(k - w)));
      if (over || sum < H * static_cast<std::size_t>(next_pos)) {  // something was evicted: the layer is at k * H
        KVFUZZ_CHECK(sum == H * k, "the layer holds ", sum, " tokens, not k * H = ", H * k);
        for (std::size_t j = 0; j < H; ++j)
          KVFUZZ_CHECK(A.kv.lengths[j] >= w + floor, "head ", j, " holds ", A.kv.lengths[j], " < w + floor");
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  if (in.ConsumeBool())
    fuzz_allocation(in);
  else
    fuzz_cache(in);
  return 0;
}
