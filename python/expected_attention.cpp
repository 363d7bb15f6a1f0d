// python/expected_attention.cpp — kvevict.QueryStatistics and kvevict.expected_attention_logits: Expected Attention
// (Devoto, Jeblick, Jégou 2025, arXiv 2510.00636; kvevict/score/expected_attention.hpp) over a Cache's held K/V.
// SPDX-License-Identifier: Apache-2.0
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <kvevict/kvevict.hpp>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "cache.hpp"
#include "conversions.hpp"
#include "docstrings.hpp"
#include "locking.hpp"

namespace kvpy {

namespace {

/// kvevict.QueryStatistics: one layer's running mean and covariance of the pre-RoPE queries, per query head,
/// behind a mutex (calls on one object are serialised, the GIL released while rows are added).
class PyQueryStatistics {
 public:
  PyQueryStatistics(py::handle n_q_heads, py::handle head_dim)
      : stats_(positive(n_q_heads, "n_q_heads"), positive(head_dim, "head_dim")) {}

  void add(py::handle q) {
    const auto H = static_cast<py::ssize_t>(stats_.n_q_heads()), d = static_cast<py::ssize_t>(stats_.head_dim());
    const py::array probe = py::isinstance<py::array>(q) ? py::reinterpret_borrow<py::array>(q)
                                                         : py::array(py::module_::import("numpy").attr("asarray")(q));
    const py::ssize_t rows = probe.ndim() == 3 ? probe.shape(0) : 0;
    const py::array a = checked_array(q, "q", Elem::float32, {rows, H, d}, "[rows, n_q_heads, head_dim]");
    GilFreeLock lock(mutex_);
    stats_.add(static_cast<const float*>(a.data()), static_cast<std::size_t>(rows));
  }
  std::size_t count() {
    GilFreeLock lock(mutex_);
    return stats_.count();
  }
  py::array_t<double> mean(py::handle h) {
    const std::size_t j = to_size(h, "h"), d = stats_.head_dim();
    std::vector<double> out(d);
    {
      GilFreeLock lock(mutex_);
      stats_.mean(j, out.data());
    }
    return py::array_t<double>(std::vector<py::ssize_t>{static_cast<py::ssize_t>(d)}, out.data());
  }
  py::array_t<double> covariance(py::handle h) {
    const std::size_t j = to_size(h, "h"), d = stats_.head_dim();
    std::vector<double> out(d * d);
    {
      GilFreeLock lock(mutex_);
      stats_.covariance(j, out.data());
    }
    const auto n = static_cast<py::ssize_t>(d);
    return py::array_t<double>(std::vector<py::ssize_t>{n, n}, out.data());
  }
  void clear() {
    GilFreeLock lock(mutex_);
    stats_.clear();
  }
  /// Takes `other`'s rows (its sums and count): ValueError unless both have the same n_q_heads and head_dim. Both
  /// mutexes are taken together (std::scoped_lock: no deadlock with a concurrent other.copy_from(self)), the GIL
  /// released while waiting. A copy of itself does nothing.
  void copy_from(PyQueryStatistics& other) {
    if (&other == this) return;
    if (other.n_q_heads() != n_q_heads() || other.head_dim() != head_dim())
      throw py::value_error("QueryStatistics.copy_from: other has n_q_heads = " + std::to_string(other.n_q_heads()) +
                            ", head_dim = " + std::to_string(other.head_dim()) + "; this has " +
                            std::to_string(n_q_heads()) + ", " + std::to_string(head_dim()));
    py::gil_scoped_release nogil;
    std::scoped_lock lock(mutex_, other.mutex_);
    stats_ = other.stats_;
  }
  std::size_t n_q_heads() const { return stats_.n_q_heads(); }
  std::size_t head_dim() const { return stats_.head_dim(); }

  kvevict::QueryStatistics& stats() { return stats_; }
  std::mutex& mutex() { return mutex_; }

 private:
  static std::size_t positive(py::handle o, const char* name) {
    const std::size_t v = to_size(o, name);
    if (v == 0) throw py::value_error(std::string(name) + " must be >= 1 (got 0)");
    return v;
  }
  kvevict::QueryStatistics stats_;
  std::mutex mutex_;
};

kvevict::RopeStyle to_rope_style(py::handle o) {
  const std::string s = to_text(o, "rope_style");
  if (s == "half_split") return kvevict::RopeStyle::half_split;
  if (s == "interleaved") return kvevict::RopeStyle::interleaved;
  throw py::value_error("rope_style: unknown pairing '" + s + "' (expected 'half_split', Hugging Face's rotate_half, "
                        "or 'interleaved', Meta / llama2.c)");
}

py::array expected_attention_logits(PyQueryStatistics& stats, PyCache& cache, py::handle next_position,
                                    py::handle rope_theta, py::handle rope_style, py::handle n_future_positions,
                                    py::handle n_sink, py::handle use_covariance, py::handle use_vnorm,
                                    py::handle epsilon) {
  kvevict::RopeSpec rope;
  rope.theta = to_double(rope_theta, "rope_theta");
  rope.style = to_rope_style(rope_style);
  kvevict::ExpectedAttentionOptions opts;
  opts.n_future_positions = to_size(n_future_positions, "n_future_positions");
  opts.n_sink = to_size(n_sink, "n_sink");
  opts.use_covariance = to_bool(use_covariance, "use_covariance");
  opts.use_vnorm = to_bool(use_vnorm, "use_vnorm");
  opts.epsilon = static_cast<float>(to_double(epsilon, "epsilon"));
  const std::int64_t next = to_i64(next_position, "next_position");
  if (stats.n_q_heads() != cache.n_q_heads() || stats.head_dim() != cache.head_dim())
    throw py::value_error("stats has " + std::to_string(stats.n_q_heads()) + " query heads x head_dim " +
                          std::to_string(stats.head_dim()) + ", the cache " + std::to_string(cache.n_q_heads()) +
                          " x " + std::to_string(cache.head_dim()) + " (one QueryStatistics per layer)");
  const std::size_t n = cache.longest_length();
  const auto H = static_cast<py::ssize_t>(cache.n_q_heads());
  py::array_t<float> out(std::vector<py::ssize_t>{H, static_cast<py::ssize_t>(n)});
  float* op = out.mutable_data();
  std::fill(op, op + out.size(), -std::numeric_limits<float>::infinity());
  kvevict::ExpectedAttentionScratch ws;
  bool changed = false;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> stats_lock(stats.mutex());
    cache.with_locked_view([&](auto view, std::size_t now) {
      changed = now != n;
      if (!changed) kvevict::expected_attention_logits(stats.stats(), view, rope, next, opts, op, n, ws);
    });
  }
  if (changed) throw py::value_error("the cache's length changed during expected_attention_logits (another thread)");
  return out;
}

}  // namespace

void bind_expected_attention(py::module_& m) {
  py::class_<PyQueryStatistics>(m, "QueryStatistics", doc::kQueryStatistics)
      .def(py::init<py::handle, py::handle>(), py::arg("n_q_heads"), py::arg("head_dim"))
      .def("add", &PyQueryStatistics::add, py::arg("q"), doc::kQueryStatisticsAdd)
      .def("mean", &PyQueryStatistics::mean, py::arg("h"), "μ of query head h, float64 [head_dim] (a copy). "
           "ValueError for h >= n_q_heads or before any row was added.")
      .def("covariance", &PyQueryStatistics::covariance, py::arg("h"),
           "Σ of query head h, float64 [head_dim, head_dim], the population covariance (a copy). Errors as mean.")
      .def("clear", &PyQueryStatistics::clear, "Forgets every row added.")
      .def("copy_from", &PyQueryStatistics::copy_from, py::arg("other"),
           "Takes other's rows (same n_q_heads and head_dim, else ValueError): this object's statistics become a copy "
           "of other's (beam search: a beam takes over another's). copy_from(self) does nothing.")
      .def_property_readonly("count", &PyQueryStatistics::count, "Rows added so far.")
      .def_property_readonly("n_q_heads", &PyQueryStatistics::n_q_heads)
      .def_property_readonly("head_dim", &PyQueryStatistics::head_dim);
  m.def("expected_attention_logits", &expected_attention_logits, py::arg("stats"), py::arg("cache"), py::kw_only(),
        py::arg("next_position"), py::arg("rope_theta") = 10000.0, py::arg("rope_style") = "half_split",
        py::arg("n_future_positions") = 512, py::arg("n_sink") = 4, py::arg("use_covariance") = true,
        py::arg("use_vnorm") = true, py::arg("epsilon") = 0.0, doc::kExpectedAttentionLogits);
}

}  // namespace kvpy
