// python/cache_binding.cpp — kvevict.Cache and its policy classes (Keyformer, H2O, StreamingLLM, Window,
// TOVA, SnapKV), make_cache, attention_logits and select_keep: signatures, options table, docstrings.
// SPDX-License-Identifier: Apache-2.0
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <array>
#include <kvevict/kvevict.hpp>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "cache.hpp"
#include "conversions.hpp"
#include "docstrings.hpp"
#include "options.hpp"
#include "policy_properties.hpp"

namespace kvpy {

namespace {

/// Cache's keyword-only options after `policy`, in the order help() shows them (kCacheDoc explains each).
const std::array<OptionSpec, 22> kCacheOptions{{{"n_q_heads"},
                                                {"budget", default_budget},
                                                {"recent"},
                                                {"n_kv_heads"},
                                                {"capacity"},
                                                {"head_dim"},
                                                {"dtype"},
                                                {"k"},
                                                {"v"},
                                                {"sinks"},
                                                {"tau_init"},
                                                {"tau_end"},
                                                {"horizon"},
                                                {"noise"},
                                                {"seed"},
                                                {"shared_heads", default_false},
                                                {"snap_window"},
                                                {"snap_kernel"},
                                                {"snap_pooling"},
                                                {"snap_decode"},
                                                {"mean_attention"},
                                                {"head_budgets"}}};

/// The most workers a kvevict.ThreadPool takes (a thread each, spinning after every call: far more than the CPUs
/// only slows the calls, and the system's thread limit would end the constructor).
constexpr long long kMaxPoolWorkers = 1024;

/// `ThreadPool(workers)`'s argument: an int (any __index__, not a bool) in [1, kMaxPoolWorkers], else TypeError /
/// ValueError naming it and its value.
std::size_t pool_workers(py::handle workers) {
  const std::string got = py::repr(workers);
  if (py::isinstance<py::bool_>(workers) || PyIndex_Check(workers.ptr()) == 0)
    throw py::type_error("ThreadPool: workers must be an int (got " + got + ")");
  const py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(workers.ptr()));
  if (!index) throw py::error_already_set();
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0 || n < 1 || n > kMaxPoolWorkers)
    throw py::value_error("ThreadPool: workers must be in [1, " + std::to_string(kMaxPoolWorkers) + "] (got " + got +
                          ")");
  return static_cast<std::size_t>(n);
}

/// The ready-made policies as subclasses (`kvevict.Keyformer(...)` = `kvevict.Cache("keyformer", ...)`).
struct KeyformerCache : PyCache { using PyCache::PyCache; };
struct H2OCache : PyCache { using PyCache::PyCache; };
struct StreamingCache : PyCache { using PyCache::PyCache; };
struct WindowCache : PyCache { using PyCache::PyCache; };
struct TOVACache : PyCache { using PyCache::PyCache; };
struct SnapKVCache : PyCache { using PyCache::PyCache; };
struct KeyNormCache : PyCache { using PyCache::PyCache; };
struct KeyDiffCache : PyCache { using PyCache::PyCache; };

/// Binds the subclass `Sub` of Cache for policy `policy`: the same options, without `policy`.
template <class Sub>
void bind_preset(py::module_& m, const char* name, const char* policy, const char* doc) {
  auto init = taking_options<>(kCacheOptions, [policy](Options o) { return new Sub(policy, o); });
  py::class_<Sub, PyCache> c(m, name, doc);
  with_args(kCacheOptions, [&](auto... args) { c.def(py::init(init), py::kw_only(), args...); });
}

template <class Class>
void bind_cache_methods(Class& c) {
  c.def("append", &PyCache::append, py::arg("position"), py::arg("k"), py::arg("v"), doc::kAppend)
      .def("extend", &PyCache::extend, py::arg("positions"), py::arg("k"), py::arg("v"), doc::kExtend)
      .def("prefill", &PyCache::prefill, py::arg("logits") = py::none(), py::arg("gumbel") = py::none(), doc::kPrefill)
      .def("prefill_qk", &PyCache::prefill_qk, py::arg("q"), py::arg("scale") = py::none(), doc::kPrefillQK)
      .def("prefill_chunk", &PyCache::prefill_chunk, py::arg("chunk_len"), py::arg("logits") = py::none(),
           py::arg("gumbel") = py::none(), doc::kPrefillChunk)
      .def("finish_prefill", &PyCache::finish_prefill, doc::kFinishPrefill)
      .def("prefill_from_attention", &PyCache::prefill_from_attention, py::arg("sums"), doc::kPrefillFromAttention)
      .def("decode_step", &PyCache::decode_step, py::arg("logits") = py::none(), py::arg("gumbel") = py::none(),
           doc::kDecodeStep)
      .def("positions", &PyCache::positions, py::arg("h"), doc::kPositions)
      .def("scores", &PyCache::scores, py::arg("h"), doc::kScores)
      .def("retained_positions", &PyCache::retained_positions, py::arg("h"), doc::kRetainedPositions)
      .def("restore_position_order", &PyCache::restore_position_order, doc::kRestorePositionOrder)
      .def("reset", &PyCache::reset, py::arg("seed") = py::none(), doc::kReset)
      .def("copy_from", &PyCache::copy_from, py::arg("other"), doc::kCopyFrom)
      .def("set_executor", &PyCache::set_executor, py::arg("pool"), doc::kSetExecutor)
      .def_property_readonly("executor", &PyCache::executor, doc::kExecutor)
      .def_property_readonly("k", [](PyCache& self) { return self.storage(true); }, doc::kK)
      .def_property_readonly("v", [](PyCache& self) { return self.storage(false); }, doc::kV)
      .def_property_readonly("lengths", &PyCache::lengths, "Live slots per KV head, a list of n_kv_heads ints.")
      .def_property_readonly(
          "prompt_sums",
          [](PyCache& self) {
            const kvevict::PromptSums spec = self.prompt_sums();
            py::dict d;
            using Kind = kvevict::PromptSums::Kind;
            d["kind"] = spec.kind == Kind::attention ? "attention" : spec.kind == Kind::gumbel ? "gumbel" : "none";
            if (spec.kind == Kind::gumbel) {
              d["seed"] = spec.seed;
              d["tau"] = spec.tau;
              d["noise_scale"] = spec.noise_scale;
              d["noise"] = spec.noise;
            }
            return d;
          },
          doc::kPromptSums);
  bind_policy_properties<PyCache>(c);
  c.def_property_readonly("n_kv_heads", &PyCache::n_kv_heads, "KV heads.")
      .def_property_readonly("n_q_heads", &PyCache::n_q_heads, "Query heads.")
      .def_property_readonly("capacity", &PyCache::capacity, "Slots per KV head.")
      .def_property_readonly("head_dim", &PyCache::head_dim, "Elements per K or V row.")
      .def_property_readonly("dtype", &PyCache::dtype, "numpy dtype of K and V (float32 or float16).")
      .def_property_readonly("owns_storage", &PyCache::owns_storage,
                             "True if the cache allocated k and v, False if it wraps caller arrays.")
      .def("__repr__", &PyCache::describe);
}

py::list select_keep(py::handle scores, py::handle k, py::handle w) {
  std::vector<float> s;
  if (py::isinstance<py::array>(scores)) {
    const auto a = py::reinterpret_borrow<py::array>(scores);
    if (a.ndim() != 1 || !has_elem(a, Elem::float32))
      throw py::value_error("scores must be a 1-D float32 array of shape [n] (or a list of numbers), got a " +
                            a.dtype().attr("name").cast<std::string>() + " array of shape " + array_shape(a));
    const py::array c = py::module_::import("numpy").attr("ascontiguousarray")(a);
    s.assign(static_cast<const float*>(c.data()), static_cast<const float*>(c.data()) + c.size());
  } else if (py::isinstance<py::sequence>(scores) && !py::isinstance<py::str>(scores)) {
    std::size_t i = 0;
    for (py::handle x : scores) s.push_back(static_cast<float>(to_double(x, "scores[" + std::to_string(i++) + "]")));
  } else {
    throw py::type_error("scores must be a sequence of numbers or a 1-D float32 array, got " + type_name(scores));
  }
  const std::size_t kk = to_size(k, "k"), ww = to_size(w, "w");
  py::list out;
  for (std::size_t i : kvevict::select_keep(s, kk, ww)) out.append(i);
  return out;
}

}  // namespace

void bind_cache(py::module_& m) {
  m.def("select_keep", &select_keep, py::arg("scores"), py::arg("k"), py::arg("w"), doc::kSelectKeep);

  py::class_<PyThreadPool>(m, "ThreadPool", doc::kThreadPool)
      .def(py::init([](py::handle workers) { return new PyThreadPool(pool_workers(workers)); }), py::arg("workers"))
      .def_property_readonly("workers", &PyThreadPool::workers, "Threads that run a call's tasks, the caller's included.");

  py::class_<PyCache> cache(m, "Cache", doc::kCache);
  const auto make = taking_options<const std::string&>(
      kCacheOptions, [](const std::string& policy, Options o) { return new PyCache(policy, o); });
  with_args(kCacheOptions, [&](auto... args) {
    cache.def(py::init(make), py::arg("policy"), py::kw_only(), args...);
    m.def("make_cache", make, py::arg("policy"), py::kw_only(), args...,
          "make_cache(policy, **options): the same as Cache(policy, **options).");
  });
  bind_cache_methods(cache);
  bind_preset<KeyformerCache>(m, "Keyformer", "keyformer",
                              "Cache('keyformer', ...): Gumbel-logit score, tau_init -> tau_end over horizon steps.");
  bind_preset<H2OCache>(m, "H2O", "h2o", "Cache('h2o', ...): accumulated attention (heavy hitters) + recent window.");
  bind_preset<StreamingCache>(m, "StreamingLLM", "streaming",
                              "Cache('streaming', ...): `sinks` attention sinks + the most recent tokens.");
  bind_preset<WindowCache>(m, "Window", "window", "Cache('window', ...): the most recent k tokens.");
  bind_preset<TOVACache>(m, "TOVA", "tova",
                         "Cache('tova', ...): the top-k of the current step's attention (recent: none by default; recent=1 is kvpress's TOVAPress).");
  bind_preset<SnapKVCache>(m, "SnapKV", "snapkv", doc::kSnapKV);
  bind_preset<KeyNormCache>(m, "KeyNorm", "knorm",
                            "Cache('knorm', ...): the key norm (Devoto et al. 2024; kvpress's Knorm): each token's "
                            "score is 1 / (1 + ||k||) of its key, set when it enters; no logits (prefill() and "
                            "decode_step() take None); recent window + the smallest norms.");
  bind_preset<KeyDiffCache>(m, "KeyDiff", "keydiff",
                            "Cache('keydiff', ...): KeyDiff (Park et al. 2025; kvpress's KeyDiff): each held token's "
                            "score is 1 - cos(k, a), a the mean unit key the KV head holds, recomputed whenever "
                            "tokens enter; no logits (prefill() and decode_step() take None); recent window + the "
                            "keys least like the rest.");

  m.def("attention_logits",
        [](PyCache& cache, py::handle q, py::handle scale, py::handle bias, py::handle out) {
          return cache.attention_logits(q, scale, bias, out);
        },
        py::arg("cache"), py::arg("q"), py::arg("scale") = py::none(), py::arg("bias") = py::none(),
        py::arg("out") = py::none(), doc::kAttentionLogits);
}

}  // namespace kvpy
