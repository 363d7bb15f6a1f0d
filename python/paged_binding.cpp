// python/paged_binding.cpp — kvevict.PagePool and kvevict.PagedCache (paged.hpp) and attention_logits over a
// paged cache: signatures, options tables and docstrings.
// SPDX-License-Identifier: Apache-2.0
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <string>

#include "bindings.hpp"
#include "docstrings.hpp"
#include "options.hpp"
#include "paged.hpp"
#include "policy_properties.hpp"

namespace kvpy {

namespace {

py::object default_nhd() { return py::str("NHD"); }
py::object default_token() { return py::str("token"); }
py::object default_zero() { return py::int_(0); }
py::object default_sum() { return py::str("sum"); }

/// PagePool's keyword-only options after k and v (doc::kPagePool explains each).
const std::array<OptionSpec, 6> kPagePoolOptions{
    {{"num_pages"}, {"page_size"}, {"n_kv_heads"}, {"head_dim"}, {"dtype"}, {"layout", default_nhd}}};

/// PagedCache's keyword-only options after policy and pool (doc::kPagedCache explains each).
const std::array<OptionSpec, 18> kPagedCacheOptions{{{"n_q_heads"},
                                                     {"max_pages"},
                                                     {"budget", default_budget},
                                                     {"recent"},
                                                     {"unit", default_token},
                                                     {"start_pages", default_zero},
                                                     {"page_score", default_sum},
                                                     {"sinks"},
                                                     {"tau_init"},
                                                     {"tau_end"},
                                                     {"horizon"},
                                                     {"noise"},
                                                     {"seed"},
                                                     {"snap_window"},
                                                     {"snap_kernel"},
                                                     {"snap_pooling"},
                                                     {"snap_decode"},
                                                     {"mean_attention"}}};

void bind_pool(py::module_& m) {
  py::class_<PyPagePool> pool(m, "PagePool", doc::kPagePool);
  const auto make = taking_options<py::object, py::object>(
      kPagePoolOptions, [](py::object k, py::object v, Options o) { return new PyPagePool(k, v, o); });
  with_args(kPagePoolOptions, [&](auto... args) {
    pool.def(py::init(make), py::arg("k") = py::none(), py::arg("v") = py::none(), py::kw_only(), args...);
  });
  pool.def_property_readonly("k", &PyPagePool::k, "The K page pool (the caller's array, or the pool's own), no copy.")
      .def_property_readonly("v", &PyPagePool::v, "The V page pool, same layout as k.")
      .def_property_readonly("num_pages", &PyPagePool::num_pages, "Pages in each pool.")
      .def_property_readonly("page_size", &PyPagePool::page_size, "Slots (tokens) per page.")
      .def_property_readonly("n_kv_heads", &PyPagePool::n_kv_heads, "KV heads.")
      .def_property_readonly("head_dim", &PyPagePool::head_dim, "Elements per K or V row.")
      .def_property_readonly("layout", [](const PyPagePool& p) { return kvevict::page_layout_name(p.layout()); },
                             "'NHD' or 'HND'.")
      .def_property_readonly("dtype", [](const PyPagePool& p) { return py::dtype(dtype_name(p.dtype())); },
                             "numpy dtype of the pools (float32 or float16).")
      .def_property_readonly("used_pages", &PyPagePool::used_pages, "Pages held by the pool's sequences.")
      .def_property_readonly("free_pages", &PyPagePool::free_pages, "Pages that can still be handed out.")
      .def_property_readonly("pages_released", &PyPagePool::pages_released,
                             "Pages returned to the pool since it was made.")
      .def("in_use", &PyPagePool::in_use, py::arg("page"),
           "Whether page `page` is held by a sequence. IndexError if it is outside [0, num_pages).")
      .def("__repr__", &PyPagePool::describe);
}

void bind_paged_cache(py::module_& m) {
  py::class_<PyPagedCache> c(m, "PagedCache", doc::kPagedCache);
  const auto make = taking_options<const std::string&, PyPagePool&>(
      kPagedCacheOptions,
      [](const std::string& policy, PyPagePool& pool, Options o) { return new PyPagedCache(policy, pool, o); });
  with_args(kPagedCacheOptions, [&](auto... args) {
    c.def(py::init(make), py::arg("policy"), py::arg("pool"), py::kw_only(), args...);
  });
  c.def("append", &PyPagedCache::append, py::arg("position"), py::arg("k"), py::arg("v"), doc::kPagedAppend)
      .def("prefill", &PyPagedCache::prefill, py::arg("logits") = py::none(), py::arg("gumbel") = py::none(),
           doc::kPagedPrefill)
      .def("decode_step", &PyPagedCache::decode_step, py::arg("logits") = py::none(), py::arg("gumbel") = py::none(),
           doc::kPagedDecodeStep)
      .def("positions", &PyPagedCache::positions, py::arg("h"),
           "Position IDs by logical slot, int64 [length] (a copy; the same for every KV head h). IndexError if h is "
           "out of range.")
      .def("scores", &PyPagedCache::scores, py::arg("h"),
           "Scores of KV head h by logical slot, float32 [length] (a copy). IndexError if h is out of range.")
      .def("retained_positions", &PyPagedCache::retained_positions, py::arg("h"),
           "Retained position IDs, ascending, a list of ints (the same for every KV head). O(n log n).")
      .def("k_rows", [](PyPagedCache& self, py::handle h) { return self.rows(h, true); }, py::arg("h"),
           "K rows of KV head h by logical slot, [length, head_dim] of the pool's dtype (a copy gathered through "
           "the page table). IndexError if h is out of range.")
      .def("v_rows", [](PyPagedCache& self, py::handle h) { return self.rows(h, false); }, py::arg("h"),
           "V rows of KV head h by logical slot, as k_rows.")
      .def("restore_position_order", &PyPagedCache::restore_position_order, doc::kPagedRestorePositionOrder)
      .def("reset", &PyPagedCache::reset, py::arg("seed") = py::none(), doc::kPagedReset)
      .def_property_readonly("page_table", &PyPagedCache::page_table, doc::kPageTable)
      .def_property_readonly("length", &PyPagedCache::length, "Live slots (tokens) of the sequence.")
      .def_property_readonly("lengths", &PyPagedCache::lengths,
                             "[length] * n_kv_heads (as Cache.lengths; every KV head holds the same slots).")
      .def_property_readonly("pages_in_use", &PyPagedCache::pages_in_use, "Pages the sequence holds, ceil(length / "
                             "page_size).")
      .def_property_readonly("pages_freed", &PyPagedCache::pages_freed,
                             "Pages this cache returned to the pool (evictions and resets).")
      .def_property_readonly("evict_unit", &PyPagedCache::evict_unit, "'token' or 'page'.");
  bind_policy_properties<PyPagedCache>(c);
  c.def_property_readonly("n_q_heads", &PyPagedCache::n_q_heads, "Query heads.")
      .def_property_readonly("n_kv_heads", [](const PyPagedCache& s) { return s.pool().n_kv_heads(); }, "KV heads.")
      .def_property_readonly("head_dim", [](const PyPagedCache& s) { return s.pool().head_dim(); },
                             "Elements per K or V row.")
      .def_property_readonly("page_size", [](const PyPagedCache& s) { return s.pool().page_size(); },
                             "Slots per page.")
      .def_property_readonly("max_pages", &PyPagedCache::max_pages, "Entries of the page table.")
      .def_property_readonly("capacity", [](const PyPagedCache& s) { return s.max_pages() * s.pool().page_size(); },
                             "Slots the sequence can hold, max_pages * page_size.")
      .def_property_readonly("dtype", [](const PyPagedCache& s) { return py::dtype(dtype_name(s.pool().dtype())); },
                             "numpy dtype of K and V (the pool's).")
      .def_property_readonly("pool", &PyPagedCache::pool_object, "The kvevict.PagePool the sequence draws pages from.")
      .def("__repr__", &PyPagedCache::describe);

  m.def("attention_logits",
        [](PyPagedCache& cache, py::handle q, py::handle scale, py::handle bias, py::handle out) {
          return cache.attention_logits(q, scale, bias, out);
        },
        py::arg("cache"), py::arg("q"), py::arg("scale") = py::none(), py::arg("bias") = py::none(),
        py::arg("out") = py::none(), doc::kPagedAttentionLogits);
}

}  // namespace

void bind_paged(py::module_& m) {
  bind_pool(m);
  bind_paged_cache(m);
}

}  // namespace kvpy
