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
//    negatives and NaN;
//  - Expected Attention: QueryStatistics::add, expected_attention_scores / _logits with drawn statistics,
//    options, RoPE, next position, row stride and hostile keys, values and queries.
// Throwing std::invalid_argument is allowed. Invariants (a violation aborts):
//  - attention_logits: on success, out[h][s] equals scale · (q[h] · K[h / g][s]) + bias[h][s]
//    (a double reference, within float rounding); on a throw, out is untouched;
//  - RoPE: on success every rotated element is finite and V is untouched; on a throw K and V are
//    untouched;
//  - layer_budgets: on success n_layers budgets, each >= floor, summing to n_layers · k exactly;
//  - Expected Attention: a refused add adds nothing, a refused call writes nothing; on success every written
//    score is finite and >= 0 (logits: finite), nothing past a head's length is written, and a head's sinks
//    share one score above every other token's.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include <kvevict/kvevict.hpp>
#include <kvevict/layer_budgets.hpp>

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
  const std::size_t nq = in.ConsumeIntegralInRange<std::size_t>(0, 9), hd = in.ConsumeBool() ? d.view.head_dim : 3;
  std::unique_ptr<QueryStatistics> st;
  try {
    st = std::make_unique<QueryStatistics>(nq, hd);
  } catch (const std::invalid_argument&) {
    if (nq >= 1 && hd >= 1) std::abort();  // only a zero size may be refused
    return;
  }
  const std::size_t rows = in.ConsumeIntegralInRange<std::size_t>(0, 4);
  std::vector<float> q(std::max<std::size_t>(1, rows * nq * hd));
  for (auto& x : q) x = pick(0.25f);
  const std::size_t count = st->count();
  try {
    st->add(q.data(), rows);
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
  const std::size_t stride = in.ConsumeIntegralInRange<std::size_t>(0, 14);
  const std::size_t nkv = std::max<std::size_t>(d.view.n_kv_heads, 1);
  std::vector<float> out(nkv * std::max<std::size_t>(stride, 1) * std::max<std::size_t>(nq, 1), -7.0f);
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
  const std::size_t g = nq / d.view.n_kv_heads;
  for (std::size_t h = 0; h < (logits ? nq : d.view.n_kv_heads); ++h) {
    const std::size_t j = logits ? h / g : h, n = d.view.length(j);
    if (n > stride) std::abort();
    float live_max = 0.0f, sink = -1.0f;
    for (std::size_t s = 0; s < stride; ++s) {
      const float x = out[h * stride + s];
      if (s >= n) {
        if (x != -7.0f) std::abort();  // past the head's length: untouched
        continue;
      }
      if (!std::isfinite(x)) std::abort();
      const float score = logits ? std::exp(x) : x;
      if (!logits && score < 0.0f) std::abort();
      if (d.view.head_positions(j)[s] < static_cast<std::int64_t>(o.n_sink)) {
        if (sink >= 0.0f && score != sink) std::abort();  // every sink of a head the same score
        sink = score;
      } else {
        live_max = std::max(live_max, score);
      }
    }
    if (sink >= 0.0f && !(sink > live_max * (1.0f - 1e-6f))) std::abort();  // sinks above every other token
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const int what = in.ConsumeIntegralInRange<int>(0, 3);
  if (what == 2) {
    fuzz_layer_budgets(in);
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
