// python/cache_calls.cpp — the argument checks PyCache and PyPagedCache share (cache_calls.hpp).
// SPDX-License-Identifier: Apache-2.0
#include "cache_calls.hpp"

#include <cmath>

namespace kvpy {

ScoreArgs checked_scores(py::handle logits, py::handle gumbel, const PolicySetup& setup,
                         const std::vector<py::ssize_t>& shape, const char* what) {
  ScoreArgs a;
  if (!logits.is_none()) {
    a.logits = checked_array(logits, "logits", Elem::float32, shape, what);
    a.lp = static_cast<const float*>(a.logits.data());
  }
  setup.check_gumbel(gumbel);
  if (!gumbel.is_none()) {
    a.gumbel = checked_array(gumbel, "gumbel", Elem::float32, shape, what);
    a.gp = static_cast<const float*>(a.gumbel.data());
  }
  return a;
}

AttentionArgs checked_attention(py::handle q, py::handle scale, py::handle bias, py::handle out,
                                std::size_t n_q_heads, std::size_t n, std::size_t head_dim) {
  const auto H = static_cast<py::ssize_t>(n_q_heads), nn = static_cast<py::ssize_t>(n);
  AttentionArgs a;
  a.q = checked_array(q, "q", Elem::float32, {H, static_cast<py::ssize_t>(head_dim)}, "[n_q_heads, head_dim]");
  if (!bias.is_none()) {
    a.bias = checked_array(bias, "bias", Elem::float32, {H, nn}, "[n_q_heads, n]");
    a.bp = static_cast<const float*>(a.bias.data());
  }
  a.out = out.is_none() ? py::array_t<float>(std::vector<py::ssize_t>{H, nn})
                        : checked_array(out, "out", Elem::float32, {H, nn}, "[n_q_heads, n]", true);
  a.scale = scale.is_none() ? 1.0f / std::sqrt(static_cast<float>(head_dim))
                            : static_cast<float>(to_double(scale, "scale"));
  if (!std::isfinite(a.scale)) throw py::value_error("scale must be finite (got " + text(scale) + ")");
  a.qp = static_cast<const float*>(a.q.data());
  a.op = static_cast<float*>(a.out.mutable_data());
  return a;
}

}  // namespace kvpy
