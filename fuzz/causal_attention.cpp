// kvevict fuzzing — causal_attention (attention/causal_attention.hpp): the fused prompt attention with H2O's and
// Keyformer's prompt sums and KVzip's maxes, over the whole prompt or its last queries (query_offset), with or
// without the output, on drawn shapes, strides, padding, options and values.
// SPDX-License-Identifier: Apache-2.0
//
// Input bytes draw n_q_heads 0–6, n_kv_heads 0–3, head_dim 0–48, P 0–70 (one input in 16: 0–600),
// first 0–P + 1,
// query_offset (0, or 0–P + 1 one input in 2), row and head strides
// (padded, exact or below head_dim; [head][P][d] or [P][head][d]), scale and the noisy options from normal and
// hostile values (0, negative, 1e-300 as float, ±inf, NaN), which scores are asked for, out (and v) null or not,
// the executor (serial, 2 or
// 3 workers) and every input element (normal, large, ±inf, NaN). The storage is sized exactly for what the
// strides address when the call is valid, so ASan reports any read or write past it.
// Throwing std::invalid_argument is allowed. Invariants (a violation aborts):
//  - a refused call writes nothing (out, both sums and the maxes untouched);
//  - on success with finite inputs of moderate size: out, the sums and the maxes equal a double reference (query
//    row i at position query_offset + i, its softmax over keys [first, query_offset + i]; Keyformer's with the
//    cache's Gumbel noise) within float rounding, the padded rows and columns are 0, every sum is finite and >= 0,
//    every max in [0, 1]; nothing is written past [n_q_heads][P].
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include <kvevict/kvevict.hpp>

#include "thread_pool.hpp"

namespace {

float hostile(FuzzedDataProvider& in) {
  switch (in.ConsumeIntegralInRange<int>(0, 7)) {
    case 0: return 0.0f;
    case 1: return -1.0f;
    case 2: return static_cast<float>(1e-300 * in.ConsumeProbability<double>());
    case 3: return INFINITY;
    case 4: return -INFINITY;
    case 5: return NAN;
    case 6: return 1e30f;
    default: return 0.05f + 2.0f * in.ConsumeProbability<float>();
  }
}

float element(FuzzedDataProvider& in, bool wild) {
  if (wild && in.ConsumeIntegralInRange<int>(0, 15) == 0) return hostile(in);
  return (in.ConsumeProbability<float>() - 0.5f) * 6.0f;
}

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  const std::size_t nq = in.ConsumeIntegralInRange<std::size_t>(0, 6);
  const std::size_t nkv = in.ConsumeIntegralInRange<std::size_t>(0, 3);
  const std::size_t d = in.ConsumeIntegralInRange<int>(0, 4) == 0 ? in.ConsumeIntegralInRange<std::size_t>(0, 48)
                                                                  : 16 * in.ConsumeIntegralInRange<std::size_t>(1, 3);
  // Mostly within one 256-key tile; one input in 16 past two of them (the online softmax rescales).
  const std::size_t P = in.ConsumeIntegralInRange<std::size_t>(0, in.ConsumeIntegralInRange<int>(0, 15) == 0 ? 600 : 70);
  const std::size_t first = in.ConsumeIntegralInRange<std::size_t>(0, P + 1);
  const std::size_t q0 = in.ConsumeBool() ? in.ConsumeIntegralInRange<std::size_t>(0, P + 1) : 0;
  const std::size_t n = q0 < P ? P - q0 : P;  // the query rows (P when the offset is refused: storage only)
  const bool wild = in.ConsumeBool();
  // Row strides: d + pad, or below d; q and out may be [P][head][d].
  auto row_stride = [&](std::size_t heads_inline) {
    if (in.ConsumeIntegralInRange<int>(0, 9) == 0) return d > 0 ? d - 1 : 0;
    return heads_inline * d + in.ConsumeIntegralInRange<std::size_t>(0, 3);
  };
  const bool q_rows_outer = in.ConsumeBool(), out_rows_outer = in.ConsumeBool();
  const std::size_t q_row = row_stride(q_rows_outer ? std::max<std::size_t>(nq, 1) : 1);
  const std::size_t k_row = row_stride(1), v_row = row_stride(1);
  const std::size_t out_row = row_stride(out_rows_outer ? std::max<std::size_t>(nq, 1) : 1);
  const std::size_t q_head = q_rows_outer ? d : n * q_row, out_head = out_rows_outer ? d : n * out_row;
  auto extent = [&](std::size_t heads, std::size_t hs, std::size_t rs, std::size_t rows) {
    return heads == 0 || rows == 0 || d == 0 ? 1 : (heads - 1) * hs + (rows - 1) * rs + d;  // exactly what is addressed
  };
  std::vector<float> q(extent(nq, q_head, q_row, n)), k(extent(nkv, P * k_row, k_row, P)),
      v(extent(nkv, P * v_row, v_row, P));
  const std::size_t n_out = extent(nq, out_head, out_row, n);
  std::vector<float> out(n_out, 123.0f), sums(nq * P + 1, 123.0f), noisy(nq * P + 1, 123.0f), maxes(nq * P + 1, 123.0f);
  kvevict::CausalAttentionArgs a;
  a.q = in.ConsumeIntegralInRange<int>(0, 30) == 0 ? nullptr : q.data();
  a.q_head_stride = q_head;
  a.q_row_stride = q_row;
  a.k = k.data();
  a.k_head_stride = P * k_row;
  a.k_row_stride = k_row;
  a.v = v.data();
  a.v_head_stride = P * v_row;
  a.v_row_stride = v_row;
  a.out = out.data();
  a.out_head_stride = out_head;
  a.out_row_stride = out_row;
  const int which = in.ConsumeIntegralInRange<int>(0, 7);  // bits: sums, noisy, maxes
  a.sums = (which & 1) ? sums.data() : nullptr;
  a.noisy_sums = (which & 2) ? noisy.data() : nullptr;
  a.maxes = (which & 4) ? maxes.data() : nullptr;
  if (in.ConsumeIntegralInRange<int>(0, 3) == 0) {  // no output: v null too, mostly (its strides unchecked)
    a.out = nullptr;
    if (in.ConsumeBool()) a.v = nullptr;
  } else if (in.ConsumeIntegralInRange<int>(0, 30) == 0) {
    a.v = nullptr;  // refused: out needs v
  }
  a.n_q_heads = nq;
  a.n_kv_heads = nkv;
  a.head_dim = d;
  a.prompt_len = P;
  a.first = first;
  a.query_offset = q0;
  a.scale = in.ConsumeBool() ? 0.25f : hostile(in);
  a.noise_seed = in.ConsumeIntegral<std::uint64_t>();
  a.tau = in.ConsumeBool() ? 1.0f + in.ConsumeProbability<float>() : hostile(in);
  a.noise_scale = in.ConsumeBool() ? 1.0f : hostile(in);
  a.noise = in.ConsumeBool();
  const int workers = in.ConsumeIntegralInRange<int>(1, 3);
  // The elements last: every option above is drawn from the input's bytes before the elements use them up (a
  // draw from spent bytes gives its range's low end: a null q, no scores).
  for (auto* buf : {&q, &k, &v})
    for (float& x : *buf) x = element(in, wild);
  try {
    if (workers == 1) {
      kvevict::causal_attention(a);
    } else {
      kvtools::ThreadPool pool(static_cast<std::size_t>(workers));
      kvevict::causal_attention(a, pool);
    }
  } catch (const std::invalid_argument&) {
    for (float x : out) check(x == 123.0f);
    for (float x : sums) check(x == 123.0f);
    for (float x : noisy) check(x == 123.0f);
    for (float x : maxes) check(x == 123.0f);
    return 0;
  }
  check(sums.back() == 123.0f && noisy.back() == 123.0f && maxes.back() == 123.0f);  // nothing past [n_q][P]
  if (a.out == nullptr)
    for (float x : out) check(x == 123.0f);
  if (wild) return 0;                                      // non-finite inputs: no reference
  // The double reference.
  const std::size_t g = nq / nkv;
  std::vector<double> y(P), p(P);
  std::vector<float> zeta(P);
  for (std::size_t h = 0; h < nq; ++h) {
    std::vector<double> rs(P, 0.0), rn(P, 0.0), rm(P, 0.0);
    for (std::size_t row = 0; row < n; ++row) {
      const std::size_t i = q0 + row;  // the query's position
      const float* orow = a.out != nullptr ? out.data() + h * out_head + row * out_row : nullptr;
      if (i < first) {
        if (orow != nullptr)
          for (std::size_t x = 0; x < d; ++x) check(orow[x] == 0.0f);
        continue;
      }
      const std::size_t j = h / g;
      double m = -INFINITY, l = 0.0;
      for (std::size_t c = first; c <= i; ++c) {
        double s = 0.0;
        for (std::size_t x = 0; x < d; ++x)
          s += static_cast<double>(q[h * q_head + row * q_row + x]) * k[j * P * k_row + c * k_row + x];
        y[c] = s * a.scale;
        m = std::max(m, y[c]);
      }
      for (std::size_t c = first; c <= i; ++c) l += (p[c] = std::exp(y[c] - m));
      for (std::size_t x = 0; orow != nullptr && x < d; ++x) {
        double o = 0.0;
        for (std::size_t c = first; c <= i; ++c) o += p[c] / l * v[j * P * v_row + c * v_row + x];
        check(std::fabs(o - orow[x]) <= 1e-4 * (1.0 + std::fabs(o)));
      }
      for (std::size_t c = first; c <= i; ++c) {
        rs[c] += p[c] / l;
        rm[c] = std::max(rm[c], p[c] / l);
      }
      if (a.noisy_sums != nullptr) {
        kvevict::fill_gumbel_row(kvevict::gumbel_row_key(a.noise_seed, h, i - first), 0, zeta.data(), i - first + 1);
        double m2 = -INFINITY, l2 = 0.0;
        for (std::size_t c = first; c <= i; ++c) {
          p[c] = (y[c] + (a.noise ? static_cast<double>(a.noise_scale) * zeta[c - first] : 0.0)) / a.tau;
          m2 = std::max(m2, p[c]);
        }
        for (std::size_t c = first; c <= i; ++c) l2 += (p[c] = std::exp(p[c] - m2));
        for (std::size_t c = first; c <= i; ++c) rn[c] += p[c] / l2;
      }
    }
    for (std::size_t c = 0; c < P; ++c) {
      if (a.sums != nullptr) {
        const float s = sums[h * P + c];
        check(std::isfinite(s) && s >= 0.0f && std::fabs(s - rs[c]) <= 1e-4 * (1.0 + rs[c]));
        if (c < first) check(s == 0.0f);
      }
      if (a.noisy_sums != nullptr) {
        const float s = noisy[h * P + c];
        check(std::isfinite(s) && s >= 0.0f && std::fabs(s - rn[c]) <= 1e-3 * (1.0 + rn[c]));
        if (c < first) check(s == 0.0f);
      }
      if (a.maxes != nullptr) {
        const float s = maxes[h * P + c];
        check(s >= 0.0f && s <= 1.0f && std::fabs(s - rm[c]) <= 1e-5);
        if (c < first) check(s == 0.0f);
      }
    }
  }
  return 0;
}
