// kvevict fuzzing — helpers: attention_logits, the RoPE helpers and layer_budgets, outside any Cache.
// SPDX-License-Identifier: Apache-2.0
//
// Input bytes draw a KVView whose fields may be inconsistent (n_kv_heads, capacity, head_dim 0–5,
// strides that overlap or pad, lengths 0–12 that may differ across heads or exceed the capacity,
// null pointers), over storage sized exactly for what the fields address when they are valid (so
// ASan reports any read or write past it), and then calls:
//  - attention_logits(view, q, n_q_heads, out, scale, bias) with n_q_heads 0–9, bias null,
//    separate, equal to out or overlapping it, q overlapping out;
//  - rope_rotate_keys / rope_rotate_key / rope_rotate with θ and delta drawn from normal and
//    hostile values (0, negative, 1e-300, 1e300, ±inf, NaN);
//  - layer_budgets with every schedule, k up to SIZE_MAX, floors up to k, weights with zeros,
//    negatives and NaN; then (the same schedule, k and prompt) plan_layers over a LayerLayout drawn as a period
//    (0–8, window 0–600, either convention) or layer by layer (0–40 layers, some sliding);
//  - Expected Attention: QueryStatistics::add, expected_attention_scores / _logits with drawn statistics,
//    options, RoPE, next position, row stride and hostile keys, values and queries; n_q_heads, head_dim, the
//    rows added and the row stride also from kvfuzz::kHugeSizes / kHugeStrides (issue 51, items 5 and 6);
//  - sizes (issue 51): KVBuffer, KVView (contiguous and drawn fields, and a cache on it), QKChunkScratch,
//    attention_logits' n_q_heads, PagedKVView, softmax_scratch_size and the CUDA host sizing functions with
//    size arguments up to 2^64 − 1 over small storage.
// Throwing std::invalid_argument is allowed. Invariants (a violation aborts):
//  - attention_logits: on success, out[h][s] equals scale · (q[h] · K[h / g][s]) + bias[h][s]
//    (a double reference, within float rounding); on a throw, out is untouched;
//  - RoPE: on success every rotated element is finite and V is untouched; on a throw K and V are
//    untouched;
//  - layer_budgets: on success n_layers budgets, each >= floor, summing to n_layers · k exactly;
//  - plan_layers: on success one plan per layer, its kind the layout's, a sliding layer's budget 0, the global
//    layers' budgets >= floor and summing to n_global · k exactly;
//  - Expected Attention: a refused add adds nothing, a refused call writes nothing; on success every written
//    score is finite and >= 0 (logits: finite), nothing past a head's length is written, and a head's sinks
//    (its n_sink held tokens with the lowest positions) share one score above every other token's; a huge
//    n_q_heads or head_dim, a row count whose q overflows and a stride over two or more rows are refused;
//  - sizes: a size >= 2^62 that the storage needs is refused (invalid_argument, or length_error from a vector
//    before it allocates) and nothing is written; the CUDA sizes are exact or refused exactly on overflow.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include <kvevict/cuda/views.cuh>
#include <kvevict/kvevict.hpp>
#include <kvevict/layer_budgets.hpp>
#include <kvevict/layer_layout.hpp>

#include "fuzz_util.hpp"

namespace {

using namespace kvevict;

/// A view with drawn fields over storage sized for them (when they pass `validate`).
struct DrawnView {
  std::vector<float> k, v;
  std::vector<std::int64_t> pos;
  std::vector<std::size_t> len;
  KVView<float> view;
  bool valid = false;

  explicit DrawnView(FuzzedDataProvider& in) {
    view.n_kv_heads = in.ConsumeIntegralInRange<std::size_t>(0, 4);
    view.capacity = in.ConsumeIntegralInRange<std::size_t>(0, 8);
    view.head_dim = in.ConsumeIntegralInRange<std::size_t>(0, 5);
    const bool slot_major = in.ConsumeBool();
    const std::size_t row = view.head_dim + in.ConsumeIntegralInRange<std::size_t>(0, 2);
    view.head_stride = slot_major ? row : view.capacity * row;
    view.slot_stride = slot_major ? view.n_kv_heads * row : row;
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) view.head_stride = in.ConsumeIntegralInRange<std::size_t>(0, 9);
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) view.slot_stride = in.ConsumeIntegralInRange<std::size_t>(0, 9);
    len.resize(std::max<std::size_t>(view.n_kv_heads, 1));
    const std::size_t n = in.ConsumeIntegralInRange<std::size_t>(0, view.capacity + 4);
    for (auto& l : len)
      l = in.ConsumeIntegralInRange<int>(0, 7) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, 12) : n;
    pos.assign(std::max<std::size_t>(view.n_kv_heads * view.capacity, 1), 0);
    for (std::size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<std::int64_t>(i);
    view.positions = pos.data();
    view.lengths = len.data();
    // Storage for exactly the rows the fields address: (h, s) for h < n_kv_heads, s < capacity.
    std::size_t need = 1;
    if (view.n_kv_heads >= 1 && view.capacity >= 1 && view.head_dim >= 1)
      need = (view.n_kv_heads - 1) * view.head_stride + (view.capacity - 1) * view.slot_stride + view.head_dim;
    k.resize(need);
    v.resize(need);
    for (std::size_t i = 0; i < need; ++i) {
      k[i] = static_cast<float>(in.ConsumeIntegralInRange<int>(-8, 8)) / 4.0f;
      v[i] = -k[i];
    }
    const int nulls = in.ConsumeIntegralInRange<int>(0, 15);
    view.k = nulls == 1 ? nullptr : k.data();
    view.v = nulls == 2 ? nullptr : v.data();
    if (nulls == 3) view.positions = nullptr;
    if (nulls == 4) view.lengths = nullptr;
    try {
      view.validate();
      valid = true;
    } catch (const std::invalid_argument&) {
    }
  }
};

double pick_double(FuzzedDataProvider& in, double usual) {
  static const double hostile[] = {0.0, -1.0, 1e-300, 1e300, -1e300, 1e-320, std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN(),
                                   1e150, 0.5, 1e6};
  return in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.PickValueInArray(hostile)
                                                   : usual * in.ConsumeIntegralInRange<int>(-40, 40) / 8.0;
}

void fuzz_attention(FuzzedDataProvider& in, DrawnView& d) {
  const std::size_t nq = in.ConsumeIntegralInRange<std::size_t>(0, 9);
  const std::size_t hd = d.view.head_dim, n = d.valid && d.view.n_kv_heads >= 1 ? d.len[0] : 0;
  // One buffer holds out and, depending on `alias`, bias and q next to or inside it.
  const std::size_t out_len = nq * n, q_len = nq * hd;
  std::vector<float> buf(out_len + out_len + q_len + 4, 0.0f);
  for (auto& x : buf) x = static_cast<float>(in.ConsumeIntegralInRange<int>(-8, 8)) / 8.0f;
  float* out = buf.data();
  const float* bias = nullptr;
  const float* q = buf.data() + 2 * out_len + 4;
  switch (in.ConsumeIntegralInRange<int>(0, 5)) {
    case 0: break;
    case 1: bias = buf.data() + out_len; break;  // separate
    case 2: bias = out; break;                   // in place
    case 3: bias = out_len > 1 ? out + 1 : out; break;
    case 4: q = out; break;                      // q overlapping out
    default: bias = buf.data() + out_len; q = in.ConsumeBool() ? nullptr : q; break;
  }
  const float scale = static_cast<float>(in.ConsumeIntegralInRange<int>(-4, 4)) / 2.0f;
  const std::vector<float> before = buf;
  // A reference from the inputs, computed before the call (bias and q may be overwritten by a bug).
  std::vector<double> want(out_len, 0.0);
  const bool checkable = d.valid && nq >= 1 && nq % d.view.n_kv_heads == 0 && q != nullptr;
  if (checkable)
    for (std::size_t h = 0; h < nq; ++h)
      for (std::size_t s = 0; s < n && s < d.view.capacity; ++s) {
        double dot = 0.0;
        for (std::size_t e = 0; e < hd; ++e)
          dot += static_cast<double>(q[h * hd + e]) * d.view.k_row(h / (nq / d.view.n_kv_heads), s)[e];
        want[h * n + s] = scale * dot + (bias != nullptr ? bias[h * n + s] : 0.0);
      }
  try {
    attention_logits(d.view, q, nq, out, scale, bias);
  } catch (const std::invalid_argument&) {
    KVFUZZ_CHECK(std::memcmp(buf.data(), before.data(), buf.size() * sizeof(float)) == 0,
                 "attention_logits threw but wrote");
    return;
  }
  KVFUZZ_CHECK(checkable, "attention_logits accepted n_q_heads = ", nq, ", n_kv_heads = ", d.view.n_kv_heads);
  for (std::size_t i = 0; i < out_len; ++i)
    KVFUZZ_CHECK(std::fabs(out[i] - want[i]) <= 1e-4 * (1.0 + std::fabs(want[i])), "attention_logits out[", i,
                 "] = ", out[i], ", expected ", want[i]);
}

void fuzz_rope(FuzzedDataProvider& in, DrawnView& d) {
  RopeSpec spec;
  spec.style = in.ConsumeBool() ? RopeStyle::interleaved : RopeStyle::half_split;
  spec.theta = pick_double(in, 10000.0);
  const double delta = pick_double(in, 7.0);
  const std::vector<float> k0 = d.k, v0 = d.v;
  const int which = in.ConsumeIntegralInRange<int>(0, 2);
  const std::size_t h = in.ConsumeIntegralInRange<std::size_t>(0, 4), s = in.ConsumeIntegralInRange<std::size_t>(0, 9);
  try {
    if (which == 0)
      rope_rotate_keys(d.view, delta, spec);
    else if (which == 1)
      rope_rotate_key(d.view, h, s, delta, spec);
    else
      rope_rotate(d.k.data(), std::min(d.k.size(), d.view.head_dim), delta, spec);
  } catch (const std::invalid_argument&) {
    KVFUZZ_CHECK(d.k == k0 && d.v == v0, "a RoPE helper threw but changed K or V");
    return;
  }
  KVFUZZ_CHECK(d.v == v0, "a RoPE helper changed V");
  for (std::size_t i = 0; i < d.k.size(); ++i)
    KVFUZZ_CHECK(std::isfinite(d.k[i]), "a RoPE helper wrote ", d.k[i], " (theta = ", spec.theta, ", delta = ", delta,
                 ")");
}

// plan_layers (layer_layout.hpp) with the schedule, k and prompt fuzz_layer_budgets drew.
void fuzz_plan_layers(FuzzedDataProvider& in, const LayerBudgets& s, std::size_t k, std::size_t prompt) {
  kvevict::LayerLayout layout;
  try {
    if (in.ConsumeBool()) {
      layout = kvevict::LayerLayout::periodic(in.ConsumeIntegralInRange<std::size_t>(0, 40),
                                              in.ConsumeIntegralInRange<std::size_t>(0, 8),
                                              in.ConsumeIntegralInRange<std::size_t>(0, 600), in.ConsumeBool());
    } else {
      layout.kinds.resize(in.ConsumeIntegralInRange<std::size_t>(0, 40));
      for (auto& kind : layout.kinds)
        kind = in.ConsumeBool() ? kvevict::AttentionKind::global : kvevict::AttentionKind::sliding;
      layout.window = in.ConsumeIntegralInRange<std::size_t>(0, 600);
    }
  } catch (const std::invalid_argument&) {
    return;
  }
  std::vector<kvevict::LayerPlan> plan;
  try {
    plan = kvevict::plan_layers(s, layout, k, prompt);
  } catch (const std::invalid_argument&) {
    return;
  }
  KVFUZZ_CHECK(plan.size() == layout.size(), "plan_layers returned ", plan.size(), " plans for ", layout.size(),
               " layers");
  std::size_t sum = 0, n_global = 0;
  for (std::size_t l = 0; l < plan.size(); ++l) {
    KVFUZZ_CHECK(plan[l].kind == layout.kinds[l], "plan_layers changed layer ", l, "'s kind");
    if (plan[l].kind == kvevict::AttentionKind::sliding) {
      KVFUZZ_CHECK(plan[l].budget == 0, "plan_layers gave sliding layer ", l, " a budget of ", plan[l].budget);
      continue;
    }
    ++n_global;
    KVFUZZ_CHECK(plan[l].budget >= s.floor, "plan_layers gave ", plan[l].budget, " below floor ", s.floor);
    KVFUZZ_CHECK(!__builtin_add_overflow(sum, plan[l].budget, &sum), "plan_layers budgets overflow");
  }
  std::size_t total = 0;
  KVFUZZ_CHECK(!__builtin_mul_overflow(n_global, k, &total) && sum == total, "plan_layers sum ", sum,
               " != n_global * k = ", n_global, " * ", k);
}

void fuzz_layer_budgets(FuzzedDataProvider& in) {
  LayerBudgets s;
  const std::size_t n_layers = in.ConsumeIntegralInRange<std::size_t>(0, 40);
  static const std::size_t huge[] = {SIZE_MAX, std::size_t{1} << 53, (std::size_t{1} << 53) + 1,
                                     (std::size_t{1} << 63) + 3, std::size_t{1} << 26, std::size_t{1} << 40};
  const std::size_t k = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.PickValueInArray(huge)
                                                                  : in.ConsumeIntegralInRange<std::size_t>(0, 300);
  switch (in.ConsumeIntegralInRange<int>(0, 2)) {
    case 0: s = LayerBudgets::make_uniform(); break;
    case 1: s = LayerBudgets::make_pyramid(pick_double(in, 20.0), in.ConsumeIntegralInRange<std::size_t>(0, 40)); break;
    default: {
      std::vector<double> w(in.ConsumeBool() ? n_layers : in.ConsumeIntegralInRange<std::size_t>(0, 40));
      for (auto& x : w)
        x = in.ConsumeIntegralInRange<int>(0, 9) == 0 ? pick_double(in, 1.0) : in.ConsumeIntegralInRange<int>(0, 4);
      s = LayerBudgets::make_weights(std::move(w));
    }
  }
  s.floor = in.ConsumeBool() ? 1 : in.ConsumeBool() ? k / 2 : in.ConsumeIntegralInRange<std::size_t>(0, 400);
  const std::size_t prompt = in.ConsumeBool() ? 0 : in.ConsumeIntegralInRange<std::size_t>(0, 600);
  if (in.ConsumeBool()) {
    fuzz_plan_layers(in, s, k, prompt);
    return;
  }
  std::vector<std::size_t> b;
  try {
    b = layer_budgets(s, n_layers, k, prompt);
  } catch (const std::invalid_argument&) {
    return;
  }
  KVFUZZ_CHECK(b.size() == n_layers, "layer_budgets returned ", b.size(), " budgets for ", n_layers, " layers");
  std::size_t sum = 0;
  for (const std::size_t x : b) {
    KVFUZZ_CHECK(x >= s.floor, "layer_budgets gave ", x, " below floor ", s.floor);
    KVFUZZ_CHECK(!__builtin_add_overflow(sum, x, &sum), "layer_budgets budgets overflow");
  }
  std::size_t total = 0;
  KVFUZZ_CHECK(!__builtin_mul_overflow(n_layers, k, &total), "layer_budgets accepted n_layers * k = ", n_layers,
               " * ", k, ", which wraps");
  KVFUZZ_CHECK(sum == total, "layer_budgets sum ", sum, " != n_layers * k = ", total);
}

}  // namespace

/// Expected Attention (score/expected_attention.hpp) on the drawn view: query statistics from 0–4 drawn rows
/// (hostile values included), drawn options (F 0–600, sinks 0–6, ε hostile), RoPE θ and style, next position
/// and row stride; sometimes a key or value element made NaN, ±inf or 1e30.
void fuzz_expected_attention(FuzzedDataProvider& in, DrawnView& d) {
  static const float hostile[] = {0.0f, 1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::quiet_NaN(), 1e-30f, 3.5f};
  auto pick = [&](float usual) {
    return in.ConsumeIntegralInRange<int>(0, 5) == 0 ? in.PickValueInArray(hostile)
                                                     : usual * static_cast<float>(in.ConsumeIntegralInRange<int>(-8, 8));
  };
  // n_q_heads 0–9, or (issue 51, item 5) n_q_heads or head_dim from kvfuzz::kHugeSizes: refused.
  const std::size_t nq_draw = in.ConsumeIntegralInRange<std::size_t>(0, 15);
  std::size_t nq = nq_draw, hd = in.ConsumeBool() ? d.view.head_dim : 3;
  if (nq_draw >= 10) {
    if (nq_draw <= 12)
      nq = in.PickValueInArray(kvfuzz::kHugeSizes);
    else
      nq = nq_draw - 12, hd = in.PickValueInArray(kvfuzz::kHugeSizes);
    try {
      QueryStatistics huge(nq, hd);
    } catch (const std::invalid_argument&) {  // n_q_heads · head_dim² overflows
      return;
    } catch (const std::length_error&) {      // above std::vector's max_size(), nothing allocated
      return;
    }
    KVFUZZ_CHECK(false, "QueryStatistics accepted n_q_heads = ", nq, ", head_dim = ", hd);
  }
  std::unique_ptr<QueryStatistics> st;
  try {
    st = std::make_unique<QueryStatistics>(nq, hd);
  } catch (const std::invalid_argument&) {
    if (nq >= 1 && hd >= 1) std::abort();  // only a zero size may be refused
    return;
  }
  // 0–4 rows, or a huge row count whose n_rows · n_q_heads · head_dim overflows (a q no array holds): refused.
  const std::size_t rows_draw = in.ConsumeIntegralInRange<std::size_t>(0, 7);
  std::size_t rows = rows_draw <= 4 ? rows_draw : in.PickValueInArray(kvfuzz::kHugeSizes), elements = 0;
  const bool huge_rows = rows_draw > 4 && __builtin_mul_overflow(rows, nq * hd, &elements);
  if (rows_draw > 4 && !huge_rows) rows = 0;  // a product that fits would need that many floats of q: skip
  std::vector<float> q(huge_rows ? 1 : std::max<std::size_t>(1, rows * nq * hd));
  for (auto& x : q) x = pick(0.25f);
  const std::size_t count = st->count();
  try {
    st->add(q.data(), rows);
    KVFUZZ_CHECK(!huge_rows, "QueryStatistics::add accepted n_rows = ", rows, " of ", nq, " x ", hd);
  } catch (const std::invalid_argument&) {
    if (st->count() != count) std::abort();  // a refused add adds nothing
  }
  ExpectedAttentionOptions o;
  o.n_future_positions = in.ConsumeIntegralInRange<std::size_t>(0, 600);
  o.n_sink = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  o.use_covariance = in.ConsumeBool();
  o.use_vnorm = in.ConsumeBool();
  o.epsilon = in.ConsumeBool() ? 0.0f : pick(0.125f);
  RopeSpec rope;
  rope.style = static_cast<RopeStyle>(in.ConsumeIntegralInRange<int>(0, 2));
  rope.theta = pick_double(in, 10000.0);
  const std::int64_t next = in.ConsumeIntegralInRange<int>(0, 3) == 0
                                ? in.ConsumeIntegral<std::int64_t>() / 16
                                : in.ConsumeIntegralInRange<std::int64_t>(0, 40);
  if (d.valid && d.view.head_dim >= 1 && d.view.capacity >= 1 && in.ConsumeIntegralInRange<int>(0, 3) == 0) {
    const std::size_t e = in.ConsumeIntegralInRange<std::size_t>(0, d.k.size() - 1);
    (in.ConsumeBool() ? d.k : d.v)[e] = in.PickValueInArray(hostile);
  }
  // Row stride 0–14, or (issue 51, item 6) one above SIZE_MAX / 2 (kvfuzz::kHugeStrides): out then has room for
  // row 0 only (16 floats, above any drawn length), which is all a call may write when it has one row; with two or
  // more rows the extent overflows and the call must be refused before it sizes or writes anything.
  const std::size_t stride_draw = in.ConsumeIntegralInRange<std::size_t>(0, 31);
  const bool huge_stride = stride_draw > 14;
  const std::size_t stride = huge_stride ? in.PickValueInArray(kvfuzz::kHugeStrides) : stride_draw;
  const std::size_t nkv = std::max<std::size_t>(d.view.n_kv_heads, 1);
  std::vector<float> out(huge_stride ? 16 : nkv * std::max<std::size_t>(stride, 1) * std::max<std::size_t>(nq, 1),
                         -7.0f);
  const std::vector<float> before = out;
  float* dst = in.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : out.data();
  ExpectedAttentionScratch ws;
  const bool logits = in.ConsumeBool();
  try {
    if (logits)
      expected_attention_logits(*st, d.view, rope, next, o, dst, stride, ws);
    else
      expected_attention_scores(*st, d.view, rope, next, o, dst, stride, ws);
  } catch (const std::invalid_argument&) {
    if (out != before) std::abort();  // a refused call writes nothing
    return;
  }
  // Success: the view was valid, stats fit it, the stride holds every head.
  if (!d.valid || dst == nullptr || st->count() == 0 || nq % d.view.n_kv_heads != 0) std::abort();
  const std::size_t g = nq / d.view.n_kv_heads, out_rows = logits ? nq : d.view.n_kv_heads;
  KVFUZZ_CHECK(!huge_stride || out_rows == 1, "expected_attention_", logits ? "logits" : "scores", " accepted ",
               out_rows, " rows of stride ", stride);
  for (std::size_t h = 0; h < out_rows; ++h) {
    const std::size_t j = logits ? h / g : h, n = d.view.length(j);
    if (n > stride) std::abort();
    // The sinks: the head's min(n_sink, n) held tokens with the lowest (position, slot).
    std::vector<std::pair<std::int64_t, std::size_t>> by_pos;
    for (std::size_t s = 0; s < n; ++s) by_pos.emplace_back(d.view.head_positions(j)[s], s);
    std::sort(by_pos.begin(), by_pos.end());
    std::vector<bool> is_sink(n, false);
    for (std::size_t i = 0; i < n && i < o.n_sink; ++i) is_sink[by_pos[i].second] = true;
    float live_max = 0.0f, sink = -1.0f;
    for (std::size_t s = 0; s < std::min(stride, out.size() - h * stride); ++s) {
      const float x = out[h * stride + s];
      if (s >= n) {
        if (x != -7.0f) std::abort();  // past the head's length: untouched
        continue;
      }
      if (!std::isfinite(x)) std::abort();
      const float score = logits ? std::exp(x) : x;
      if (!logits && score < 0.0f) std::abort();
      if (is_sink[s]) {
        if (sink >= 0.0f && score != sink) std::abort();  // every sink of a head the same score
        sink = score;
      } else {
        live_max = std::max(live_max, score);
      }
    }
    if (sink >= 0.0f && !(sink > live_max * (1.0f - 1e-6f))) std::abort();  // sinks above every other token
  }
}

/// A size argument: small (0–4), or one of kvfuzz::kHugeSizes (>= 2^62).
std::size_t pick_size(FuzzedDataProvider& in, bool& huge) {
  const int c = in.ConsumeIntegralInRange<int>(0, 7);
  if (c < 5) return static_cast<std::size_t>(c);
  huge = true;
  return in.PickValueInArray(kvfuzz::kHugeSizes);
}

/// The product of `terms` in 128 bits into `out`, and whether it fits std::size_t (a term 0: 0, fits).
bool fits(std::initializer_list<unsigned __int128> terms, std::size_t& out) {
  unsigned __int128 p = 1;
  for (const auto t : terms)
    if (t == 0) return out = 0, true;
  for (const auto t : terms) {
    p *= t;
    if (p > SIZE_MAX) return false;
  }
  out = static_cast<std::size_t>(p);
  return true;
}

/// Runs `f`; std::invalid_argument and std::length_error (a std::vector above its max_size(), nothing allocated)
/// are refusals. A call that `must` be refused and is not is a finding.
template <class F>
void expect_refused(const char* what, bool must, F&& f) {
  try {
    f();
  } catch (const std::invalid_argument&) {
    return;
  } catch (const std::length_error&) {
    return;
  }
  KVFUZZ_CHECK(!must, what, " accepted a size >= 2^62");
}

/// Issue 51: the size arguments of the constructors and functions that size a buffer or address an array, from
/// kvfuzz::kHugeSizes as well as small values, over small storage. A call given a huge size that its storage
/// needs must be refused (std::invalid_argument, or std::length_error from a std::vector above its max_size(),
/// before anything is allocated) without writing anything. The CUDA host sizing functions must return the exact
/// product (a 128-bit reference) or throw std::invalid_argument exactly when it does not fit std::size_t.
void fuzz_sizes(FuzzedDataProvider& in) {
  bool huge = false;
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: {  // KVBuffer: any huge dimension
      const std::size_t a = pick_size(in, huge), b = pick_size(in, huge), c = pick_size(in, huge);
      expect_refused("KVBuffer", huge, [&] { KVBuffer<Eigen::half> buf(a, b, c); });
      break;
    }
    case 1: {  // a view's fields over 64 floats of K and V, 64 position IDs, 4 lengths
      std::vector<float> k(64, 1.0f), v(64, 2.0f);
      std::vector<std::int64_t> pos(64, 0);
      std::vector<std::size_t> len(4, 0);
      const bool contiguous = in.ConsumeBool();
      bool n_huge = false, cap_huge = false, hd_huge = false, hs_huge = false, ss_huge = false;
      const std::size_t n = pick_size(in, n_huge), cap = pick_size(in, cap_huge), hd = pick_size(in, hd_huge);
      if (contiguous) {
        const bool must = n_huge || cap_huge || hd_huge;
        if (!must && n * cap * hd > 64) break;  // (small) storage the harness lacks
        expect_refused("KVView::contiguous", must, [&] {
          (void)KVView<float>::contiguous(k.data(), v.data(), pos.data(), len.data(), n, cap, hd);
        });
        break;
      }
      KVView<float> view;
      view.k = k.data();
      view.v = v.data();
      view.positions = pos.data();
      view.lengths = len.data();
      view.n_kv_heads = n;
      view.capacity = cap;
      view.head_dim = hd;
      view.head_stride = pick_size(in, hs_huge);
      view.slot_stride = pick_size(in, ss_huge);
      // A huge stride the layout never steps (head_stride of one head, slot_stride of one slot) is allowed.
      const bool must = n_huge || cap_huge || hd_huge || (hs_huge && n >= 2) || (ss_huge && cap >= 2);
      expect_refused("KVView::validate", must, [&] { view.validate(); });  // reads lengths only (n <= 4)
      if (must) expect_refused("Cache", true, [&] { H2O cache(CacheConfig{}, view); });
      KVFUZZ_CHECK(std::all_of(k.begin(), k.end(), [](float x) { return x == 1.0f; }) &&
                       std::all_of(v.begin(), v.end(), [](float x) { return x == 2.0f; }) &&
                       std::all_of(pos.begin(), pos.end(), [](std::int64_t x) { return x == 0; }),
                   "a refused view's storage was written");
      break;
    }
    case 2: {  // QKChunkScratch: any huge size
      const std::size_t a = pick_size(in, huge), b = pick_size(in, huge), c = pick_size(in, huge),
                        e = pick_size(in, huge);
      expect_refused("QKChunkScratch", huge, [&] { QKChunkScratch scratch(a, b, c, e); });
      break;
    }
    case 3: {  // attention_logits' n_q_heads on a valid one-head view of 3 slots of head_dim 2
      KVBuffer<float> buf(1, 4, 2);
      auto kv = buf.view();
      const float row[2] = {1, -1};
      for (std::int64_t p = 0; p < 3; ++p) kv.append(p, row, row);
      const std::size_t nq = pick_size(in, huge);
      std::vector<float> q(8, 0.5f), out(12, -7.0f);
      const std::vector<float> out0 = out;
      try {
        attention_logits(kv, q.data(), nq, out.data(), 1.0f);
        KVFUZZ_CHECK(!huge && nq >= 1, "attention_logits accepted n_q_heads = ", nq);
      } catch (const std::invalid_argument&) {
        KVFUZZ_CHECK(out == out0, "attention_logits threw but wrote");
      }
      break;
    }
    case 4: {  // softmax_scratch_size: exact, or refused exactly when n + 2 ceil(n / 512) does not fit
      const std::size_t n = in.ConsumeBool() ? in.ConsumeIntegral<std::size_t>() : pick_size(in, huge);
      const unsigned __int128 exact =
          static_cast<unsigned __int128>(n) + 2 * ((static_cast<unsigned __int128>(n) + 511) / 512);
      try {
        const std::size_t got = softmax_scratch_size(n);
        KVFUZZ_CHECK(exact <= SIZE_MAX && got == static_cast<std::size_t>(exact), "softmax_scratch_size(", n,
                     ") = ", got);
      } catch (const std::invalid_argument&) {
        KVFUZZ_CHECK(exact > SIZE_MAX, "softmax_scratch_size(", n, ") refused a size that fits");
      }
      break;
    }
    case 5: {  // a paged view's fields (validate reads only *length): any huge field is refused
      std::vector<float> k(64), v(64);
      std::vector<std::int32_t> table(8, kNoPage);
      std::vector<std::int64_t> pos(64);
      std::size_t length = 0;
      PagedKVView<float> view{k.data(), v.data(), 1, 1, 1, 1, PageLayout::NHD, table.data(), 1, &length, pos.data()};
      view.num_pages = pick_size(in, huge);
      view.page_size = pick_size(in, huge);
      view.n_kv_heads = pick_size(in, huge);
      view.head_dim = pick_size(in, huge);
      view.max_pages = pick_size(in, huge);
      if (in.ConsumeBool()) view.page_stride_elements = pick_size(in, huge);
      view.layout = in.ConsumeBool() ? PageLayout::HND : PageLayout::NHD;
      expect_refused("PagedKVView::validate", huge, [&] { view.validate(); });
      break;
    }
    default: {  // the CUDA host sizes
      auto u32 = [&] {
        switch (in.ConsumeIntegralInRange<int>(0, 3)) {
          case 0: return std::uint32_t{0xffffffffu};
          case 1: return in.ConsumeIntegral<std::uint32_t>();
          default: return in.ConsumeIntegralInRange<std::uint32_t>(0, 600);
        }
      };
      const std::uint32_t a = u32(), b = u32(), c = u32(), e = u32();
      namespace kc = kvevict::cuda;
      auto expect = [&](const char* what, bool ok, std::size_t want, auto&& f) {
        try {
          const std::size_t got = f();
          KVFUZZ_CHECK(ok && got == want, what, "(", a, ", ", b, ", ", c, ", ", e, ") = ", got, ", expected ",
                       ok ? "" : "a refusal ", want);
        } catch (const std::invalid_argument&) {
          KVFUZZ_CHECK(!ok, what, "(", a, ", ", b, ", ", c, ", ", e, ") refused a size that fits");
        }
      };
      const auto cc = static_cast<std::uint32_t>((std::uint64_t{c} + kc::kChunk - 1) / kc::kChunk);
      KVFUZZ_CHECK(kc::chunk_count(c) == cc, "chunk_count(", c, ") = ", kc::chunk_count(c));
      std::size_t want = 0, ring = 0;
      bool ok = fits({a, b, kc::kLanes + 2, cc}, want);
      expect("step_workspace_floats", ok, want, [&] { return kc::step_workspace_floats(a, b, c); });
      ok = fits({a, b, c}, want);
      expect("prefill_acc_floats", ok, want, [&] { return kc::prefill_acc_floats(a, b, c); });
      ok = fits({a, b, static_cast<unsigned __int128>(c) + 1}, want);
      expect("prefill_keep_ints", ok, want, [&] { return kc::prefill_keep_ints(a, b, c); });
      ok = fits({a, b, c}, want) && fits({a, b, std::max<std::uint32_t>(e, 1)}, ring);
      expect("contiguous_state_sizes", ok, want, [&] { return kc::contiguous_state_sizes(a, b, c, e).scores; });
      const unsigned __int128 bytes = (8 + 4 * static_cast<unsigned __int128>(c) + 15) / 16 * 16 +
                                      2 * static_cast<unsigned __int128>(c) * e;
      ok = bytes + 15 <= SIZE_MAX && fits({a, b, kc::kStageSlots, (bytes + 15) / 16 * 16}, want);
      expect("prefill_stage_bytes", ok, want, [&] { return kc::prefill_stage_bytes(a, b, c, e); });
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int what = in.ConsumeIntegralInRange<int>(0, 7);
  if (what == 2) {
    fuzz_layer_budgets(in);
    return 0;
  }
  if (what >= 4) {
    fuzz_sizes(in);
    return 0;
  }
  DrawnView d(in);
  if (what == 0)
    fuzz_attention(in, d);
  else if (what == 1)
    fuzz_rope(in, d);
  else
    fuzz_expected_attention(in, d);
  return 0;
}
