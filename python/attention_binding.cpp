// python/attention_binding.cpp — kvevict.causal_attention: the prompt's causal attention with H2O's column sums,
// and kvevict.attention_maxes: each key's largest probability over a causal sequence's last queries (KVzip's
// score), both attention/causal_attention.hpp on strided float32 arrays, e.g. transformers' query / key tensors.
// SPDX-License-Identifier: Apache-2.0
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "cache.hpp"
#include "conversions.hpp"
#include "docstrings.hpp"
#include "executor_pool.hpp"

namespace kvpy {

namespace {

/// A strided view's element strides, checked: a 3-D native float32 array whose last axis is contiguous and
/// whose other strides are whole, non-negative numbers of elements; ValueError naming `name` otherwise.
struct Strided3 {
  py::array a;
  std::size_t heads, rows, dim, head_stride, row_stride;
};

Strided3 strided3(py::handle obj, const std::string& name, const std::string& what) {
  const std::string expected = "a float32 array of shape " + what + " with its last axis contiguous";
  py::array a = as_array(obj, name, expected);
  if (!has_elem(a, Elem::float32) || a.ndim() != 3)
    throw py::value_error(name + " must be " + expected + ", got a " + dtype_text(a) + " array of shape " +
                          array_shape(a));
  // An axis of length 1 is never stepped along: its stride (any value NumPy or torch gives it) is not used.
  const py::ssize_t s0 = a.shape(0) > 1 ? a.strides(0) : 0, s1 = a.shape(1) > 1 ? a.strides(1) : a.shape(2) * 4;
  const py::ssize_t s2 = a.shape(2) > 1 ? a.strides(2) : 4;
  if (s2 != 4 || s0 < 0 || s1 < 0 || s0 % 4 != 0 || s1 % 4 != 0)
    throw py::value_error(name + " must be " + expected + ", got byte strides [" + std::to_string(s0) + ", " +
                          std::to_string(s1) + ", " + std::to_string(s2) + "]");
  return {a, static_cast<std::size_t>(a.shape(0)), static_cast<std::size_t>(a.shape(1)),
          static_cast<std::size_t>(a.shape(2)), static_cast<std::size_t>(s0 / 4), static_cast<std::size_t>(s1 / 4)};
}

/// The pool argument: a kvevict.ThreadPool, or None (nullptr); TypeError naming `who` otherwise.
PyThreadPool* pool_arg(py::handle pool_obj, const char* who) {
  if (pool_obj.is_none()) return nullptr;
  if (!py::isinstance<PyThreadPool>(pool_obj))
    throw py::type_error(std::string(who) + ": pool must be a kvevict.ThreadPool or None (got " + type_name(pool_obj) +
                         ")");
  return &pool_obj.cast<PyThreadPool&>();
}

/// scale (None: 1 / sqrt(head_dim)) as a positive finite float32; ValueError naming `who` otherwise.
float scale_arg(py::handle scale_obj, std::size_t head_dim, const char* who) {
  double scale = 1.0 / std::sqrt(static_cast<double>(head_dim == 0 ? 1 : head_dim));
  if (!scale_obj.is_none()) scale = to_double(scale_obj, "scale");
  const auto f = static_cast<float>(scale);
  if (!(std::isfinite(scale) && scale > 0.0 && static_cast<double>(f) > 0.0 && std::isfinite(f)))
    throw py::value_error(std::string(who) + ": scale must be a positive finite float32 (got " + text(scale_obj) + ")");
  return f;
}

template <class Args>
void run_attention(const Args& a, PyThreadPool* pool) {
  py::gil_scoped_release release;
  if (pool != nullptr)
    kvevict::causal_attention(a, *pool);
  else
    kvevict::causal_attention(a);
}

py::tuple causal_attention(py::handle q_obj, py::handle k_obj, py::handle v_obj, py::handle scale_obj,
                           py::handle first_obj, py::handle sums_obj, py::handle sums_for_obj, py::handle pool_obj) {
  const Strided3 q = strided3(q_obj, "q", "[n_q_heads, P, head_dim]");
  const Strided3 k = strided3(k_obj, "k", "[n_kv_heads, P, head_dim]");
  const Strided3 v = strided3(v_obj, "v", "[n_kv_heads, P, head_dim]");
  const auto shape = [](const Strided3& s) {
    return "[" + std::to_string(s.heads) + ", " + std::to_string(s.rows) + ", " + std::to_string(s.dim) + "]";
  };
  if (k.rows != q.rows || k.dim != q.dim || v.heads != k.heads || v.rows != k.rows || v.dim != k.dim)
    throw py::value_error("causal_attention: k and v must be [n_kv_heads, P, head_dim] with q's P and head_dim (q " +
                          shape(q) + ", k " + shape(k) + ", v " + shape(v) + ")");
  const std::size_t first = to_size(first_obj, "first");
  bool want_sums = to_bool(sums_obj, "sums");
  kvevict::PromptSums spec;  // sums_for's
  if (!sums_for_obj.is_none()) {
    if (!py::isinstance<PyCache>(sums_for_obj))
      throw py::type_error("causal_attention: sums_for must be a kvevict.Cache or None (got " +
                           type_name(sums_for_obj) + ")");
    if (want_sums) throw py::value_error("causal_attention: give sums=True or sums_for, not both");
    PyCache& cache = sums_for_obj.cast<PyCache&>();
    spec = cache.prompt_sums();
    if (spec.kind == kvevict::PromptSums::Kind::none)
      throw py::value_error("causal_attention: sums_for: a '" + cache.policy() +
                            "' cache takes no prompt sums (prefill_from_attention: h2o and keyformer)");
    want_sums = true;
  }
  const bool noisy = spec.kind == kvevict::PromptSums::Kind::gumbel;
  const float scale = scale_arg(scale_obj, q.dim, "causal_attention");
  PyThreadPool* pool = pool_arg(pool_obj, "causal_attention");
  py::array_t<float> out({static_cast<py::ssize_t>(q.rows), static_cast<py::ssize_t>(q.heads),
                          static_cast<py::ssize_t>(q.dim)});
  py::array_t<float> sums;
  if (want_sums) sums = py::array_t<float>({static_cast<py::ssize_t>(q.heads), static_cast<py::ssize_t>(q.rows)});
  kvevict::CausalAttentionArgs a;
  a.q = static_cast<const float*>(q.a.data());
  a.q_head_stride = q.head_stride;
  a.q_row_stride = q.row_stride;
  a.k = static_cast<const float*>(k.a.data());
  a.k_head_stride = k.head_stride;
  a.k_row_stride = k.row_stride;
  a.v = static_cast<const float*>(v.a.data());
  a.v_head_stride = v.head_stride;
  a.v_row_stride = v.row_stride;
  a.out = out.mutable_data();
  a.out_head_stride = q.dim;
  a.out_row_stride = q.heads * q.dim;
  a.sums = want_sums && !noisy ? sums.mutable_data() : nullptr;
  if (noisy) {
    a.noisy_sums = sums.mutable_data();
    a.noise_seed = spec.seed;
    a.tau = spec.tau;
    a.noise_scale = spec.noise_scale;
    a.noise = spec.noise;
  }
  a.n_q_heads = q.heads;
  a.n_kv_heads = k.heads;
  a.head_dim = q.dim;
  a.prompt_len = q.rows;
  a.first = first;
  a.scale = scale;
  run_attention(a, pool);
  return py::make_tuple(out, want_sums ? py::object(sums) : py::object(py::none()));
}

py::array_t<float> attention_maxes(py::handle q_obj, py::handle k_obj, py::handle query_offset_obj,
                                   py::handle scale_obj, py::handle first_obj, py::handle pool_obj) {
  const Strided3 q = strided3(q_obj, "q", "[n_q_heads, P - query_offset, head_dim]");
  const Strided3 k = strided3(k_obj, "k", "[n_kv_heads, P, head_dim]");
  const std::size_t offset = to_size(query_offset_obj, "query_offset");
  if (k.rows == 0 || offset >= k.rows || q.rows != k.rows - offset || k.dim != q.dim)
    throw py::value_error("attention_maxes: q must be [n_q_heads, P - query_offset, head_dim] for k [n_kv_heads, P, "
                          "head_dim] (q [" + std::to_string(q.heads) + ", " + std::to_string(q.rows) + ", " +
                          std::to_string(q.dim) + "], k [" + std::to_string(k.heads) + ", " + std::to_string(k.rows) +
                          ", " + std::to_string(k.dim) + "], query_offset " + std::to_string(offset) + ")");
  const std::size_t first = to_size(first_obj, "first");
  const float scale = scale_arg(scale_obj, q.dim, "attention_maxes");
  PyThreadPool* pool = pool_arg(pool_obj, "attention_maxes");
  py::array_t<float> maxes({static_cast<py::ssize_t>(q.heads), static_cast<py::ssize_t>(k.rows)});
  kvevict::CausalAttentionArgs a;
  a.q = static_cast<const float*>(q.a.data());
  a.q_head_stride = q.head_stride;
  a.q_row_stride = q.row_stride;
  a.k = static_cast<const float*>(k.a.data());
  a.k_head_stride = k.head_stride;
  a.k_row_stride = k.row_stride;
  a.maxes = maxes.mutable_data();
  a.n_q_heads = q.heads;
  a.n_kv_heads = k.heads;
  a.head_dim = q.dim;
  a.prompt_len = k.rows;
  a.query_offset = offset;
  a.first = first;
  a.scale = scale;
  try {
    run_attention(a, pool);
  } catch (const std::invalid_argument& e) {  // the kernel's message, in this function's and its arguments' names
    std::string what = e.what();
    const std::string from = "causal_attention: ";
    if (what.compare(0, from.size(), from) == 0) what = "attention_maxes: " + what.substr(from.size());
    for (std::size_t at; (at = what.find("prompt_len")) != std::string::npos;) what.replace(at, 10, "P (k's rows)");
    throw py::value_error(what);
  }
  return maxes;
}

}  // namespace

void bind_attention(py::module_& m) {
  m.def("causal_attention", &causal_attention, doc::kCausalAttention, py::arg("q"), py::arg("k"), py::arg("v"),
        py::kw_only(), py::arg("scale") = py::none(), py::arg("first") = 0, py::arg("sums") = false,
        py::arg("sums_for") = py::none(), py::arg("pool") = py::none());
  m.def("attention_maxes", &attention_maxes, doc::kAttentionMaxes, py::arg("q"), py::arg("k"), py::kw_only(),
        py::arg("query_offset"), py::arg("scale") = py::none(), py::arg("first") = 0, py::arg("pool") = py::none());
}

}  // namespace kvpy
