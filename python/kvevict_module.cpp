// kvevict — Python bindings (pybind11): `import kvevict`.
// SPDX-License-Identifier: Apache-2.0
//
// The module binds the public API only (kvevict/kvevict.hpp): `make_cache` over a `KVView`
// (`CacheInterface`), `select_keep`, `attention_logits`, and the replay library of
// examples/replay (`replay::replay`, the code behind kvevict-replay).
//
// Memory: a cache either owns its K/V storage (a reference-counted block shared with the NumPy
// arrays returned by `Cache.k` / `Cache.v`, so they stay valid after the cache is deleted) or
// wraps caller NumPy arrays without copying (the cache keeps a reference to them).
//
// Errors: std::invalid_argument -> ValueError, std::out_of_range -> IndexError,
// std::length_error and integer overflow -> OverflowError, each carrying the C++ message;
// array arguments are checked (dtype, shape, C-contiguity) before any C++ call, with a message
// naming the argument and the expected shape. The GIL is released while `prefill`,
// `decode_step`, `attention_logits` and `replay` compute.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <kvevict/kvevict.hpp>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cli/amount.hpp"
#include "replay.hpp"
#include "trace.hpp"

namespace py = pybind11;

namespace {

// ---- argument conversion -------------------------------------------------------------------

/// Element types of K/V storage the bindings support (numpy float16 is IEEE binary16, the
/// bit layout of `Eigen::half`).
enum class DType { float32, float16 };

const char* dtype_name(DType d) { return d == DType::float32 ? "float32" : "float16"; }

std::string type_name(py::handle o) { return py::type::handle_of(o).attr("__name__").cast<std::string>(); }

std::string text(py::handle o) { return py::repr(o).cast<std::string>(); }

/// `[a, b, c]`.
std::string dims(const std::vector<py::ssize_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::string array_shape(const py::array& a) { return dims(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim())); }

/// A Python int (or anything with `__index__`, e.g. numpy.int64; not bool, not float) in
/// [lo, hi]. Raises TypeError (not an int), ValueError (below lo), OverflowError (above hi).
py::int_ to_int(py::handle o, const std::string& name) {
  if (PyBool_Check(o.ptr()) || !PyIndex_Check(o.ptr()))
    throw py::type_error(name + " must be an int, got " + type_name(o) + " " + text(o));
  PyObject* v = PyNumber_Index(o.ptr());
  if (v == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::int_>(v);
}

std::uint64_t to_u64(py::handle o, const std::string& name) {
  const py::int_ v = to_int(o, name);
  if (PyObject_RichCompareBool(v.ptr(), py::int_(0).ptr(), Py_LT) == 1)
    throw py::value_error(name + " must be >= 0 (got " + text(v) + ")");
  const unsigned long long x = PyLong_AsUnsignedLongLong(v.ptr());
  if (PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_SetString(PyExc_OverflowError, (name + " = " + text(v) + " does not fit in 64 bits").c_str());
    throw py::error_already_set();
  }
  return static_cast<std::uint64_t>(x);
}

std::size_t to_size(py::handle o, const std::string& name) { return static_cast<std::size_t>(to_u64(o, name)); }

std::int64_t to_i64(py::handle o, const std::string& name) {
  const py::int_ v = to_int(o, name);
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow != 0) {
    PyErr_SetString(PyExc_OverflowError, (name + " = " + text(v) + " does not fit in int64").c_str());
    throw py::error_already_set();
  }
  if (x == -1 && PyErr_Occurred()) throw py::error_already_set();
  return static_cast<std::int64_t>(x);
}

/// A Python float or int (not bool) as double.
double to_double(py::handle o, const std::string& name) {
  if (PyBool_Check(o.ptr()) || !(PyFloat_Check(o.ptr()) || PyIndex_Check(o.ptr()) || PyNumber_Check(o.ptr())))
    throw py::type_error(name + " must be a number, got " + type_name(o) + " " + text(o));
  const double x = PyFloat_AsDouble(o.ptr());
  if (x == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return x;
}

bool to_bool(py::handle o, const std::string& name) {
  if (!PyBool_Check(o.ptr())) throw py::type_error(name + " must be True or False, got " + type_name(o) + " " + text(o));
  return o.ptr() == Py_True;
}

/// An amount given as tokens (int), a fraction (float) or a string in the tools' grammar ("64", "0.5",
/// "50%"; cli/amount.hpp), with the tools' range checks: ValueError "<name>: <problem>" otherwise.
using kvcli::Amount;
using kvcli::AmountKind;

Amount to_amount(py::handle o, const std::string& name, AmountKind kind) {
  const char* expected = kind == AmountKind::budget
                             ? "an int (tokens), a float (fraction of the prompt) or a string such as '64', '0.5' "
                               "or '50%'"
                             : "an int (tokens), a float (fraction of the budget) or a string such as '8', '0.3' "
                               "or '30%'";
  Amount a;
  std::string problem;
  if (py::isinstance<py::str>(o)) {
    problem = kvcli::parse_amount_text(o.cast<std::string>(), kind, a);
  } else if (!PyBool_Check(o.ptr()) && PyIndex_Check(o.ptr())) {
    a.tokens = to_size(o, name);
    a.text = text(o);  // a count's range is the library's to check (its message names the argument's value)
  } else if (PyFloat_Check(o.ptr())) {
    problem = kvcli::check_amount_fraction(PyFloat_AsDouble(o.ptr()), kind, text(o), a);
  } else {
    throw py::type_error(name + " must be " + expected + ", got " + type_name(o) + " " + text(o));
  }
  if (!problem.empty()) throw py::value_error(name + ": " + problem);
  return a;
}

/// `budget`: k tokens, or k = floor(r * P). The library's message is kept, prefixed with the argument.
kvevict::Budget to_budget(py::handle o) {
  const Amount a = to_amount(o, "budget", AmountKind::budget);
  try {
    return a.is_ratio ? kvevict::Budget::ratio(a.ratio) : kvevict::Budget::tokens(a.tokens);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("budget = ") + text(o) + ": " + e.what());
  }
}

/// `recent`: w tokens, or w = floor(q * k).
kvevict::RecentWindow to_recent(py::handle o) {
  const Amount a = to_amount(o, "recent", AmountKind::recent);
  try {
    return a.is_ratio ? kvevict::RecentWindow::ratio(a.ratio) : kvevict::RecentWindow::tokens(a.tokens);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("recent = ") + text(o) + ": " + e.what());
  }
}

DType to_dtype(py::handle o) {
  py::dtype dt;
  try {
    dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(o));
  } catch (const py::error_already_set&) {  // NumPy's own TypeError for a name it does not know ('bfloat16')
    throw py::value_error("dtype must be float32 or float16 (got " + text(o) + ", which NumPy does not know; "
                          "bfloat16 K/V is supported in C++ only)");
  }
  if (!dt.attr("isnative").cast<bool>())  // '>f4' would be stored and read as native float32
    throw py::value_error("dtype must be a native-endian float32 or float16 (got '" +
                          dt.attr("str").cast<std::string>() + "', a non-native byte order)");
  if (dt.kind() == 'f' && dt.itemsize() == 4) return DType::float32;
  if (dt.kind() == 'f' && dt.itemsize() == 2) return DType::float16;
  throw py::value_error("dtype must be float32 or float16 (got " + dt.attr("name").cast<std::string>() + ")");
}

// ---- array checks ----------------------------------------------------------------------------

/// Element kinds an array argument may need.
enum class Elem { float32, float16, int64 };

Elem elem_of(DType d) { return d == DType::float32 ? Elem::float32 : Elem::float16; }

const char* elem_name(Elem e) {
  switch (e) {
    case Elem::float32: return "float32";
    case Elem::float16: return "float16";
    case Elem::int64: return "int64";
  }
  return "?";
}

/// The dtype of `a` for a message: its name ("float32"), with its byte order when that is not
/// native ("float32 (non-native byte order '>f4')"), so that a big-endian array is not described
/// as the float32 it was refused for.
std::string dtype_text(const py::array& a) {
  const py::dtype dt = a.dtype();
  std::string name = dt.attr("name").cast<std::string>();
  if (!dt.attr("isnative").cast<bool>())
    name += " (non-native byte order '" + dt.attr("str").cast<std::string>() +
            "'; convert with a.astype(a.dtype.newbyteorder('=')))";
  return name;
}

bool has_elem(const py::array& a, Elem e) {
  const py::dtype dt = a.dtype();
  if (!dt.attr("isnative").cast<bool>()) return false;
  switch (e) {
    case Elem::float32: return dt.kind() == 'f' && dt.itemsize() == 4;
    case Elem::float16: return dt.kind() == 'f' && dt.itemsize() == 2;
    case Elem::int64: return dt.kind() == 'i' && dt.itemsize() == 8;
  }
  return false;
}

/// `obj` as a NumPy array (no copy for arrays and objects exposing `__array__` over their
/// memory, e.g. CPU torch tensors), checked to be a native-endian, C-contiguous array of
/// element `e` and exactly `shape`; `writeable` also requires write access. Otherwise raises
/// ValueError (TypeError if `obj` is not array-like) naming `name`, the expected shape (`what`,
/// e.g. "[n_q_heads, n]") with its value, and what was given.
py::array checked_array(py::handle obj, const std::string& name, Elem e, const std::vector<py::ssize_t>& shape,
                        const std::string& what, bool writeable = false) {
  const std::string expected = std::string("a C-contiguous ") + elem_name(e) + " array of shape " + what + " = " +
                               dims(shape);
  py::array a;
  if (py::isinstance<py::array>(obj)) {
    a = py::reinterpret_borrow<py::array>(obj);
  } else {
    if (obj.is_none() || py::isinstance<py::str>(obj))
      throw py::type_error(name + " must be " + expected + ", got " + type_name(obj));
    try {
      a = py::module_::import("numpy").attr("asarray")(obj);
    } catch (py::error_already_set&) {
      throw py::type_error(name + " must be " + expected + ", got " + type_name(obj));
    }
  }
  const std::string given = dtype_text(a) + " array of shape " + array_shape(a);
  if (!has_elem(a, e)) throw py::value_error(name + " must be " + expected + ", got a " + given);
  bool same_shape = a.ndim() == static_cast<py::ssize_t>(shape.size());
  for (std::size_t i = 0; same_shape && i < shape.size(); ++i) same_shape = a.shape(static_cast<py::ssize_t>(i)) == shape[i];
  if (!same_shape) throw py::value_error(name + " must be " + expected + ", got a " + given);
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(name + " must be " + expected + ", got a non-contiguous " + given +
                          " (use numpy.ascontiguousarray)");
  if (writeable && !a.writeable()) throw py::value_error(name + " must be writeable, got a read-only " + given);
  return a;
}

// ---- the cache -----------------------------------------------------------------------------

/// Owned K/V storage, shared (std::shared_ptr) by the cache and every NumPy array over it.
struct StorageBase {
  virtual ~StorageBase() = default;
};
template <class T>
struct OwnedKV final : StorageBase {
  OwnedKV(std::size_t elements) : k(elements), v(elements) {}
  std::vector<T> k, v;
};

/// The options `Cache` takes, by name; see the class docstring.
const char* const kCacheOptions[] = {"n_q_heads", "budget",  "recent", "n_kv_heads", "capacity",
                                     "head_dim",  "dtype",   "k",      "v",          "sinks",
                                     "tau_init",  "tau_end", "horizon", "noise",     "seed",
                                     "shared_heads", "snap_window", "snap_kernel", "snap_pooling", "snap_decode"};

/// One layer's evicting KV cache (`kvevict::make_cache` over a `KVView`), owning or wrapping
/// its K/V storage. Thread safety: every call takes the cache's mutex (prefill and decode_step
/// after releasing the GIL), so concurrent calls on one cache are serialised.
class PyCache {
 public:
  PyCache(const std::string& policy, const py::kwargs& kw) {
    for (auto item : kw) {
      const std::string key = item.first.cast<std::string>();
      bool known = false;
      for (const char* o : kCacheOptions) known = known || key == o;
      if (!known) throw py::type_error("kvevict.Cache: unexpected keyword argument '" + key + "'");
    }
    auto get = [&kw](const char* key) -> py::object {
      return kw.contains(key) && !kw[key].is_none() ? py::reinterpret_borrow<py::object>(kw[key]) : py::object();
    };

    try {
      policy_ = kvevict::parse_policy(policy);
    } catch (const std::invalid_argument& e) {
      throw py::value_error(std::string("policy: ") + e.what());
    }
    policy_name_ = kvevict::policy_name(policy_);
    const bool keyformer = policy_ == kvevict::Policy::keyformer;
    auto only_for = [&](const char* key, bool allowed, const char* who) {
      if (!allowed && get(key))
        throw py::value_error(std::string(key) + " is used only by policy " + who + " (got policy '" + policy_name_ +
                              "')");
    };
    only_for("sinks", policy_ == kvevict::Policy::streaming_llm, "'streaming'");
    for (const char* key : {"tau_init", "tau_end", "horizon", "noise", "seed"}) only_for(key, keyformer, "'keyformer'");
    for (const char* key : {"snap_window", "snap_kernel", "snap_pooling", "snap_decode"})
      only_for(key, policy_ == kvevict::Policy::snapkv, "'snapkv'");

    // ---- storage: owned (n_kv_heads, capacity, head_dim[, dtype]) or wrapped (k, v) ----
    const py::object k = get("k"), v = get("v");
    if (k || v) {
      if (!k || !v) throw py::value_error("give both k and v to wrap caller storage (got only " + std::string(k ? "k" : "v") + ")");
      for (const char* key : {"n_kv_heads", "capacity", "head_dim"})
        if (get(key))
          throw py::value_error(std::string(key) + " is taken from the shape of k when wrapping k and v; do not pass it");
      const py::array ka = py::isinstance<py::array>(k) ? py::reinterpret_borrow<py::array>(k)
                                                         : py::array(py::module_::import("numpy").attr("asarray")(k));
      if (ka.ndim() != 3)
        throw py::value_error("k must be a C-contiguous float32 or float16 array of shape [n_kv_heads, capacity, "
                              "head_dim], got shape " + array_shape(ka));
      if (has_elem(ka, Elem::float16))
        dtype_ = DType::float16;
      else if (has_elem(ka, Elem::float32))
        dtype_ = DType::float32;
      else
        throw py::value_error("k must be a float32 or float16 array of shape [n_kv_heads, capacity, head_dim], got " +
                              dtype_text(ka));
      if (const py::object d = get("dtype"); d && to_dtype(d) != dtype_)
        throw py::value_error(std::string("dtype = ") + dtype_name(to_dtype(d)) + " but k is " + dtype_name(dtype_));
      n_kv_heads_ = static_cast<std::size_t>(ka.shape(0));
      capacity_ = static_cast<std::size_t>(ka.shape(1));
      head_dim_ = static_cast<std::size_t>(ka.shape(2));
      const std::vector<py::ssize_t> shape{ka.shape(0), ka.shape(1), ka.shape(2)};
      const std::string what = "[n_kv_heads, capacity, head_dim]";
      k_obj_ = checked_array(k, "k", elem_of(dtype_), shape, what, true);
      v_obj_ = checked_array(v, "v", elem_of(dtype_), shape, what + " (the shape of k)", true);
      if (k_obj_.ptr() == v_obj_.ptr() || k_obj_.data() == v_obj_.data())
        throw py::value_error("k and v must be different arrays");
      {  // views of one buffer (v = k shifted by a row) would make every V write clobber K
        const auto k0 = reinterpret_cast<std::uintptr_t>(k_obj_.data());
        const auto v0 = reinterpret_cast<std::uintptr_t>(v_obj_.data());
        const auto kn = static_cast<std::uintptr_t>(k_obj_.nbytes()), vn = static_cast<std::uintptr_t>(v_obj_.nbytes());
        if (k0 < v0 + vn && v0 < k0 + kn)
          throw py::value_error("k and v overlap in memory (views of one buffer); give each its own array");
      }
      if (n_kv_heads_ == 0 || capacity_ == 0 || head_dim_ == 0)
        throw py::value_error("k must have no zero dimension, got shape " + array_shape(k_obj_));
      k_ptr_ = k_obj_.mutable_data();
      v_ptr_ = v_obj_.mutable_data();
    } else {
      for (const char* key : {"n_kv_heads", "capacity", "head_dim"})
        if (!get(key))
          throw py::value_error(std::string("give n_kv_heads, capacity and head_dim (owned storage) or k and v "
                                            "(wrapped storage); ") + key + " is missing");
      n_kv_heads_ = to_size(get("n_kv_heads"), "n_kv_heads");
      capacity_ = to_size(get("capacity"), "capacity");
      head_dim_ = to_size(get("head_dim"), "head_dim");
      dtype_ = get("dtype") ? to_dtype(get("dtype")) : DType::float32;
      for (auto [key, value] : {std::pair<const char*, std::size_t>{"n_kv_heads", n_kv_heads_}, {"capacity", capacity_},
                                {"head_dim", head_dim_}})
        if (value == 0) throw py::value_error(std::string(key) + " must be >= 1 (got 0)");
      std::size_t elements = 0;
      if (__builtin_mul_overflow(n_kv_heads_, capacity_, &elements) ||
          __builtin_mul_overflow(elements, head_dim_, &elements))
        throw py::value_error("n_kv_heads * capacity * head_dim = " + std::to_string(n_kv_heads_) + " * " +
                              std::to_string(capacity_) + " * " + std::to_string(head_dim_) + " overflows");
      // Bounded before any allocation, so that a huge capacity is named (not std::vector's max_size).
      const std::size_t max_elements = dtype_ == DType::float32 ? std::vector<float>().max_size()
                                                                : std::vector<Eigen::half>().max_size();
      if (elements > max_elements || n_kv_heads_ * capacity_ > std::vector<std::int64_t>().max_size())
        throw py::value_error("capacity = " + std::to_string(capacity_) + " is too large: n_kv_heads * capacity * "
                              "head_dim = " + std::to_string(elements) + " elements exceed the largest array (" +
                              std::to_string(max_elements) + ")");
      if (dtype_ == DType::float32) {
        auto s = std::make_shared<OwnedKV<float>>(elements);
        k_ptr_ = s->k.data();
        v_ptr_ = s->v.data();
        owned_ = std::move(s);
      } else {
        auto s = std::make_shared<OwnedKV<Eigen::half>>(elements);
        k_ptr_ = s->k.data();
        v_ptr_ = s->v.data();
        owned_ = std::move(s);
      }
    }
    positions_.assign(n_kv_heads_ * capacity_, 0);
    lengths_.assign(n_kv_heads_, 0);

    // ---- configuration ----
    if (!get("n_q_heads")) throw py::value_error("n_q_heads is required (query heads of the layer)");
    config_.n_q_heads = to_size(get("n_q_heads"), "n_q_heads");
    // The tools' defaults (cli/amount.hpp): budget 50%, recent 30% for the policies with a recent window,
    // seed 42, snap_window min(32, k).
    config_.budget = get("budget") ? to_budget(get("budget")) : kvevict::Budget::ratio(0.5);
    const bool has_recent = policy_ == kvevict::Policy::keyformer || policy_ == kvevict::Policy::h2o ||
                            policy_ == kvevict::Policy::snapkv;
    config_.recent = get("recent") ? to_recent(get("recent"))
                                   : has_recent ? kvevict::RecentWindow::ratio(0.3) : kvevict::RecentWindow::none();
    config_.seed = kvcli::defaults::kSeed;
    if (get("shared_heads")) config_.shared_heads = to_bool(get("shared_heads"), "shared_heads");
    if (get("seed")) config_.seed = to_u64(get("seed"), "seed");
    if (get("sinks")) params_.sinks = to_size(get("sinks"), "sinks");
    if (get("tau_init")) params_.tau_init = static_cast<float>(to_double(get("tau_init"), "tau_init"));
    if (get("tau_end")) params_.tau_end = static_cast<float>(to_double(get("tau_end"), "tau_end"));
    if (get("noise")) params_.gumbel_noise = to_bool(get("noise"), "noise");
    if (get("snap_window"))
      params_.snap_window = to_size(get("snap_window"), "snap_window");
    else if (!config_.budget.is_ratio())  // a fraction resolves at prefill: L stays 32 there
      params_.snap_window = kvcli::default_snap_window(config_.budget.token_count());
    if (get("snap_kernel")) params_.snap_kernel = to_size(get("snap_kernel"), "snap_kernel");
    auto choice = [&](const char* key) {
      if (!py::isinstance<py::str>(get(key)))
        throw py::type_error(std::string(key) + " must be a str (got " + type_name(get(key)) + ")");
      return get(key).cast<std::string>();
    };
    try {
      if (get("snap_pooling")) params_.snap_pooling = kvevict::parse_pooling(choice("snap_pooling"));
      if (get("snap_decode")) params_.snap_decode = kvevict::parse_snap_decode(choice("snap_decode"));
    } catch (const std::invalid_argument& e) {
      throw py::value_error(e.what());
    }
    if (keyformer) {
      if (!get("horizon"))
        throw py::value_error("horizon (T, the number of tokens to generate) is required for policy 'keyformer'");
      params_.horizon = to_size(get("horizon"), "horizon");
    }
    noisy_ = keyformer && params_.gumbel_noise;
    uses_logits_ = policy_ != kvevict::Policy::streaming_llm && policy_ != kvevict::Policy::window;
    seed_ = config_.seed;

    try {
      if (dtype_ == DType::float32)
        cache_ = kvevict::make_cache(policy_, config_, view<float>(), params_);
      else
        cache_ = kvevict::make_cache(policy_, config_, view<Eigen::half>(), params_);
    } catch (const std::invalid_argument& e) {
      throw py::value_error(name_snap_window(e.what()));
    }
  }

  PyCache(const PyCache&) = delete;
  PyCache& operator=(const PyCache&) = delete;

  /// The KV view over this cache's storage (default layout [kv_head][slot][head_dim]).
  template <class T>
  kvevict::KVView<T> view() {
    return kvevict::KVView<T>::contiguous(static_cast<T*>(k_ptr_), static_cast<T*>(v_ptr_), positions_.data(),
                                          lengths_.data(), n_kv_heads_, capacity_, head_dim_);
  }

  void append(py::handle position, py::handle k, py::handle v) {
    const std::int64_t pos = to_i64(position, "position");
    const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n_kv_heads_), static_cast<py::ssize_t>(head_dim_)};
    const py::array ka = checked_array(k, "k", elem_of(dtype_), shape, "[n_kv_heads, head_dim]");
    const py::array va = checked_array(v, "v", elem_of(dtype_), shape, "[n_kv_heads, head_dim]");
    std::lock_guard<std::mutex> lock(mutex_);
    if (dtype_ == DType::float32)
      view<float>().append(pos, static_cast<const float*>(ka.data()), static_cast<const float*>(va.data()));
    else
      view<Eigen::half>().append(pos, static_cast<const Eigen::half*>(ka.data()),
                                 static_cast<const Eigen::half*>(va.data()));
  }

  void prefill(py::handle logits, py::handle gumbel) {
    std::size_t P = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      P = lengths_[0];
    }
    const auto H = static_cast<py::ssize_t>(config_.n_q_heads), p = static_cast<py::ssize_t>(P);
    // (py::array{} is an empty array, not a null handle: the pointers say what was given.)
    py::array la, ga;
    const float *lp = nullptr, *gp = nullptr;
    if (!logits.is_none()) {
      la = checked_array(logits, "logits", Elem::float32, {H, p, p}, "[n_q_heads, P, P]");
      lp = static_cast<const float*>(la.data());
    }
    check_gumbel(gumbel);
    if (!gumbel.is_none()) {
      ga = checked_array(gumbel, "gumbel", Elem::float32, {H, p, p}, "[n_q_heads, P, P]");
      gp = static_cast<const float*>(ga.data());
    }
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      cache_->prefill(lp, P, gp);
    } catch (const std::invalid_argument& e) {
      const std::string m = name_snap_window(e.what());
      py::gil_scoped_acquire gil;
      throw py::value_error(m);
    }
  }

  void decode_step(py::handle logits, py::handle gumbel) {
    std::size_t n = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      n = lengths_[0];
    }
    const auto H = static_cast<py::ssize_t>(config_.n_q_heads), nn = static_cast<py::ssize_t>(n);
    py::array la, ga;
    const float *lp = nullptr, *gp = nullptr;
    if (!logits.is_none()) {
      la = checked_array(logits, "logits", Elem::float32, {H, nn}, "[n_q_heads, n]");
      lp = static_cast<const float*>(la.data());
    }
    check_gumbel(gumbel);
    if (!gumbel.is_none()) {
      ga = checked_array(gumbel, "gumbel", Elem::float32, {H, nn}, "[n_q_heads, n]");
      gp = static_cast<const float*>(ga.data());
    }
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    cache_->decode_step(lp, n, gp);
  }

  py::array attention_logits(py::handle q, py::handle scale, py::handle bias, py::handle out) {
    std::size_t n = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      n = lengths_[0];
    }
    const auto H = static_cast<py::ssize_t>(config_.n_q_heads), nn = static_cast<py::ssize_t>(n);
    const py::array qa =
        checked_array(q, "q", Elem::float32, {H, static_cast<py::ssize_t>(head_dim_)}, "[n_q_heads, head_dim]");
    py::array ba;
    const float* bp = nullptr;
    if (!bias.is_none()) {
      ba = checked_array(bias, "bias", Elem::float32, {H, nn}, "[n_q_heads, n]");
      bp = static_cast<const float*>(ba.data());
    }
    py::array oa = out.is_none() ? py::array_t<float>(std::vector<py::ssize_t>{H, nn})
                                 : checked_array(out, "out", Elem::float32, {H, nn}, "[n_q_heads, n]", true);
    const float s = scale.is_none() ? 1.0f / std::sqrt(static_cast<float>(head_dim_))
                                    : static_cast<float>(to_double(scale, "scale"));
    if (!std::isfinite(s)) throw py::value_error("scale must be finite (got " + text(scale) + ")");
    const float* qp = static_cast<const float*>(qa.data());
    float* op = static_cast<float*>(oa.mutable_data());
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mutex_);
      if (dtype_ == DType::float32)
        kvevict::attention_logits(view<float>(), qp, config_.n_q_heads, op, s, bp);
      else
        kvevict::attention_logits(view<Eigen::half>(), qp, config_.n_q_heads, op, s, bp);
    }
    return oa;
  }

  /// `Cache.k` / `Cache.v`: the whole storage `[n_kv_heads, capacity, head_dim]`, no copy.
  py::array storage(bool keys) {
    if (!owned_) return keys ? k_obj_ : v_obj_;
    const py::dtype dt(dtype_name(dtype_));
    const auto item = static_cast<py::ssize_t>(dt.itemsize());
    const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n_kv_heads_), static_cast<py::ssize_t>(capacity_),
                                         static_cast<py::ssize_t>(head_dim_)};
    const std::vector<py::ssize_t> strides{shape[1] * shape[2] * item, shape[2] * item, item};
    // The capsule owns one reference to the storage: the array keeps it alive on its own.
    py::capsule base(new std::shared_ptr<StorageBase>(owned_),
                     [](void* p) { delete static_cast<std::shared_ptr<StorageBase>*>(p); });
    return py::array(dt, shape, strides, keys ? k_ptr_ : v_ptr_, base);
  }

  py::list lengths() {
    std::lock_guard<std::mutex> lock(mutex_);
    py::list out;
    for (std::size_t len : lengths_) out.append(len);
    return out;
  }

  py::array_t<std::int64_t> positions(py::handle h) {
    const std::size_t j = head(h, "positions");
    std::lock_guard<std::mutex> lock(mutex_);
    const std::int64_t* p = guarded([&] { return cache_->positions(j); });
    py::array_t<std::int64_t> out(static_cast<py::ssize_t>(lengths_[j]));
    std::copy_n(p, lengths_[j], out.mutable_data());
    return out;
  }

  py::array_t<float> scores(py::handle h) {
    const std::size_t j = head(h, "scores");
    std::lock_guard<std::mutex> lock(mutex_);
    const float* s = guarded([&] { return cache_->scores(j); });
    py::array_t<float> out(static_cast<py::ssize_t>(lengths_[j]));
    std::copy_n(s, lengths_[j], out.mutable_data());
    return out;
  }

  py::list retained_positions(py::handle h) {
    const std::size_t j = head(h, "retained_positions");
    std::lock_guard<std::mutex> lock(mutex_);
    py::list out;
    for (std::int64_t p : guarded([&] { return cache_->retained_positions(j); })) out.append(p);
    return out;
  }

  void restore_position_order() {
    std::lock_guard<std::mutex> lock(mutex_);
    cache_->restore_position_order();
  }

  void reset(py::handle seed) {
    const std::uint64_t s = seed.is_none() ? seed_ : to_u64(seed, "seed");
    std::lock_guard<std::mutex> lock(mutex_);
    cache_->reset(s);
    seed_ = s;
  }

  std::size_t budget() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_->budget();
  }
  bool budget_resolved() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_->budget_resolved();
  }
  std::size_t recent_window() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_->recent_window();
  }
  std::size_t step() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_->step();
  }
  float temperature() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cache_->temperature();
  }

  const std::string& policy() const { return policy_name_; }
  std::size_t n_kv_heads() const { return n_kv_heads_; }
  std::size_t n_q_heads() const { return config_.n_q_heads; }
  std::size_t capacity() const { return capacity_; }
  std::size_t head_dim() const { return head_dim_; }
  py::dtype dtype() const { return py::dtype(dtype_name(dtype_)); }
  bool owns_storage() const { return static_cast<bool>(owned_); }

  std::string describe() {
    std::ostringstream os;
    os << "kvevict.Cache(policy='" << policy_name_ << "', n_kv_heads=" << n_kv_heads_ << ", n_q_heads="
       << config_.n_q_heads << ", capacity=" << capacity_ << ", head_dim=" << head_dim_ << ", dtype=" << dtype_name(dtype_)
       << ", budget=" << (budget_resolved() ? std::to_string(budget()) : unresolved_budget())
       << ", recent_window=" << recent_window() << ", lengths=" << py::repr(lengths()).cast<std::string>()
       << (owned_ ? "" : ", wrapping caller arrays") << ")";
    return os.str();
  }

 private:
  /// "unresolved (50% of the prompt)": a fraction budget before prefill (budget reads 0 until then).
  std::string unresolved_budget() const {
    std::ostringstream os;
    if (config_.budget.is_ratio())
      os << "unresolved (" << config_.budget.ratio_value() * 100.0 << "% of the prompt)";
    else
      os << "unresolved (" << config_.budget.token_count() << " tokens at prefill)";
    return os.str();
  }
  /// The library's "SnapKV observation window L = … exceeds budget k = …" in the Python argument's terms.
  std::string name_snap_window(const std::string& message) const {
    if (message.find("SnapKV observation window L") == std::string::npos) return message;
    return "snap_window = " + std::to_string(params_.snap_window) + ": " + message +
           "; pass snap_window <= k (its default is min(32, k) for an int budget, 32 for a fraction, which is "
           "resolved only at prefill)";
  }
  /// KV head index `h` in [0, n_kv_heads), else IndexError (the library's message for h too large).
  std::size_t head(py::handle h, const char* who) const {
    const std::int64_t j = to_i64(h, "h");
    if (j < 0)
      throw py::index_error(std::string("kvevict.Cache.") + who + ": KV head " + std::to_string(j) +
                            " out of range (n_kv_heads = " + std::to_string(n_kv_heads_) + ")");
    return static_cast<std::size_t>(j);
  }
  /// Runs an accessor, turning the library's "KV head out of range" into IndexError.
  template <class F>
  static auto guarded(F f) -> decltype(f()) {
    try {
      return f();
    } catch (const std::invalid_argument& e) {
      throw py::index_error(e.what());
    }
  }
  void check_gumbel(py::handle gumbel) const {
    if (!gumbel.is_none() && !noisy_)
      throw py::value_error("gumbel: injected noise is used only by policy 'keyformer' with noise=True (got policy '" +
                            policy_name_ + "'" + (policy_ == kvevict::Policy::keyformer ? " with noise=False)" : ")"));
  }

  kvevict::Policy policy_ = kvevict::Policy::keyformer;
  std::string policy_name_;
  kvevict::CacheConfig config_;
  kvevict::PolicyParams params_;
  bool noisy_ = false, uses_logits_ = true;
  std::uint64_t seed_ = 0;
  DType dtype_ = DType::float32;
  std::size_t n_kv_heads_ = 0, capacity_ = 0, head_dim_ = 0;
  std::shared_ptr<StorageBase> owned_;  // null when wrapping caller arrays
  py::array k_obj_, v_obj_;             // the caller's arrays when wrapping
  void* k_ptr_ = nullptr;
  void* v_ptr_ = nullptr;
  std::vector<std::int64_t> positions_;  // [kv_head][capacity]
  std::vector<std::size_t> lengths_;     // [kv_head]
  std::unique_ptr<kvevict::CacheInterface> cache_;  // declared last: destroyed first
  std::mutex mutex_;
};

/// The ready-made policies as subclasses (`kvevict.Keyformer(...)` = `kvevict.Cache("keyformer", ...)`).
struct KeyformerCache : PyCache { using PyCache::PyCache; };
struct H2OCache : PyCache { using PyCache::PyCache; };
struct StreamingCache : PyCache { using PyCache::PyCache; };
struct WindowCache : PyCache { using PyCache::PyCache; };
struct TOVACache : PyCache { using PyCache::PyCache; };

// ---- select_keep ---------------------------------------------------------------------------

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

// ---- replay --------------------------------------------------------------------------------

const char* const kReplayOptions[] = {"policy", "q_heads_per_kv", "budget", "recent", "sinks", "tau_init", "tau_end",
                                      "gen_steps", "noise", "gumbel", "seed", "shared_heads"};

py::list run_replay(py::handle logits, py::handle prompt_len, const py::kwargs& kw) {
  for (auto item : kw) {
    const std::string key = item.first.cast<std::string>();
    bool known = false;
    for (const char* o : kReplayOptions) known = known || key == o;
    if (!known) throw py::type_error("kvevict.replay: unexpected keyword argument '" + key + "'");
  }
  auto get = [&kw](const char* key) -> py::object {
    return kw.contains(key) && !kw[key].is_none() ? py::reinterpret_borrow<py::object>(kw[key]) : py::object();
  };

  replay::Trace trace;
  py::array la;
  {
    // The shape is read first so that the message can state the expected [H_q, N, N].
    py::array probe = py::isinstance<py::array>(logits) ? py::reinterpret_borrow<py::array>(logits)
                                                         : py::array(py::module_::import("numpy").attr("asarray")(logits));
    const py::ssize_t H = probe.ndim() == 3 ? probe.shape(0) : 0, N = probe.ndim() == 3 ? probe.shape(1) : 0;
    la = checked_array(logits, "logits", Elem::float32, {H, N, N}, "[H_q, N, N]");
    if (H == 0 || N == 0) throw py::value_error("logits must have H_q >= 1 and N >= 1, got shape " + array_shape(la));
    trace.n_q_heads = static_cast<std::size_t>(H);
    trace.n_tokens = static_cast<std::size_t>(N);
    if (const py::object g = get("gumbel")) {
      const py::array ga = checked_array(g, "gumbel", Elem::float32, {H, N, N}, "[H_q, N, N] (the shape of logits)");
      trace.gumbel.assign(static_cast<const float*>(ga.data()), static_cast<const float*>(ga.data()) + ga.size());
    }
  }
  trace.logits.assign(static_cast<const float*>(la.data()), static_cast<const float*>(la.data()) + la.size());
  trace.prompt_len = to_size(prompt_len, "prompt_len");
  trace.q_heads_per_kv = get("q_heads_per_kv") ? to_size(get("q_heads_per_kv"), "q_heads_per_kv") : 1;

  // Every option is set here (the Python defaults), independent of replay::Options' defaults.
  replay::Options o;
  o.policy = get("policy") ? get("policy").cast<std::string>() : std::string("keyformer");
  Amount budget;
  (void)kvcli::parse_amount_text(kvcli::defaults::kBudget, AmountKind::budget, budget);
  if (get("budget")) budget = to_amount(get("budget"), "budget", AmountKind::budget);
  o.budget.reset();
  o.budget_ratio.reset();
  if (budget.is_ratio)
    o.budget_ratio = budget.ratio;
  else
    o.budget = budget.tokens;
  Amount recent;  // the tools' default: 30% for keyformer, h2o and snapkv, 0 for the others
  const bool has_recent = o.policy == "keyformer" || o.policy == "h2o" || o.policy == "snapkv";
  (void)kvcli::parse_amount_text(has_recent ? kvcli::defaults::kRecent : "0", AmountKind::recent, recent);
  if (get("recent")) recent = to_amount(get("recent"), "recent", AmountKind::recent);
  o.recent.reset();
  o.recent_ratio.reset();
  if (recent.is_ratio)
    o.recent_ratio = recent.ratio;
  else
    o.recent = recent.tokens;
  o.sinks = get("sinks") ? to_size(get("sinks"), "sinks") : 4;
  o.tau_init = get("tau_init") ? static_cast<float>(to_double(get("tau_init"), "tau_init")) : 1.0f;
  o.tau_end = get("tau_end") ? static_cast<float>(to_double(get("tau_end"), "tau_end")) : 2.0f;
  o.gen_steps.reset();
  if (get("gen_steps")) o.gen_steps = to_size(get("gen_steps"), "gen_steps");
  const std::string noise = get("noise") ? get("noise").cast<std::string>() : std::string("auto");
  o.seed = get("seed") ? to_u64(get("seed"), "seed") : kvcli::defaults::kSeed;
  if (o.policy != "keyformer")  // an option the policy does not use is an error, as in kvevict-replay
    for (const char* key : {"tau_init", "tau_end", "gen_steps", "noise", "gumbel", "seed"})
      if (get(key))
        throw py::value_error(std::string(key) + " is used only by policy 'keyformer' (got policy '" + o.policy +
                              "')");
  o.shared_heads = get("shared_heads") ? to_bool(get("shared_heads"), "shared_heads") : false;

  std::string lines;
  try {
    o.noise = replay::parse_noise(noise);
    std::ostringstream out;
    {
      py::gil_scoped_release nogil;
      replay::replay(trace, o, out);
    }
    lines = out.str();
  } catch (const replay::InputError& e) {
    // The replay names its command-line flags (--budget-ratio, ...): name the Python arguments.
    std::string m = e.what();
    const std::pair<const char*, const char*> names[] = {
        {"--budget-ratio", "budget"}, {"--budget", "budget"},     {"--recent-ratio", "recent"},
        {"--recent", "recent"},       {"--prompt-len", "prompt_len"}, {"--q-heads-per-kv", "q_heads_per_kv"},
        {"--tau-init", "tau_init"},   {"--tau-end", "tau_end"},   {"--gen-steps", "gen_steps"},
        {"--policy", "policy"},       {"--noise", "noise"},       {"--sinks", "sinks"},
        {"--seed", "seed"},           {"prompt_len", "prompt_len"}, {"q_heads_per_kv", "q_heads_per_kv"}};
    for (const auto& [flag, arg] : names)
      if (m.rfind(flag, 0) == 0) {
        m = std::string(arg) + m.substr(std::string(flag).size());
        break;
      }
    throw py::value_error(m);
  }
  const py::object loads = py::module_::import("json").attr("loads");
  py::list records;
  std::size_t start = 0;
  while (start < lines.size()) {
    const std::size_t end = lines.find('\n', start);
    records.append(loads(py::str(lines.substr(start, end - start))));
    start = end + 1;
  }
  return records;
}

// ---- docstrings ----------------------------------------------------------------------------

constexpr const char* kModuleDoc = R"doc(kvevict: KV-cache eviction (Keyformer, H2O, StreamingLLM, window, TOVA) for your own
decode loop. One cache per transformer layer; K/V live in NumPy arrays (float32 or float16)
that the cache owns or wraps, usable from PyTorch with torch.from_numpy without copying.

Protocol per sequence: append the prompt's K/V (cache.append), cache.prefill(logits[H_q, P, P]),
then per generated token cache.append(...) and cache.decode_step(logits[H_q, n]) with the
logits over slots [0, n) in slot order (kvevict.attention_logits computes them).

Errors: ValueError (bad argument; the C++ std::invalid_argument message), IndexError (KV head
out of range), OverflowError (a full KV head on append, or an int too large for 64 bits),
TypeError (an argument of the wrong kind).

Threads: prefill, decode_step, attention_logits and replay release the GIL, so caches of
different layers or sequences can run in parallel threads; calls on one cache are serialised
by its own lock. The K/V arrays themselves are not locked: do not write them from another
thread while that cache's prefill or decode_step moves rows.)doc";

constexpr const char* kCacheDoc = R"doc(One transformer layer's evicting KV cache (kvevict::make_cache over a KVView).

Cache(policy, *, n_q_heads, budget='50%', recent='30%', n_kv_heads=None, capacity=None, head_dim=None,
      dtype='float32', k=None, v=None, sinks=None, tau_init=None, tau_end=None, horizon=None,
      noise=None, seed=42, shared_heads=False, snap_window=None, snap_kernel=None,
      snap_pooling=None, snap_decode=None)

policy      'keyformer', 'h2o', 'streaming', 'window', 'tova' or 'snapkv' (or use the subclasses
            kvevict.Keyformer, H2O, StreamingLLM, Window, TOVA).
n_q_heads   query heads of the layer, a positive multiple g * n_kv_heads (GQA: query head h
            reads KV head h // g).
budget      k, tokens kept per KV head: an int (tokens), a float r (k = floor(r * P) at
            prefill) or a percentage string ('50%').
recent      w, the recent window always kept: an int (tokens), a float q (w = floor(q * k)) or
            '30%'. Must resolve to <= k; must be 0 for 'tova', 'streaming' and 'window'
            (the last two keep the most recent k - sinks tokens).
Storage     owned: n_kv_heads, capacity (slots per KV head; at least max(P, k + 1)), head_dim
            and dtype ('float32' or 'float16'), zero-initialised; or wrapped: k and v, writeable
            C-contiguous arrays [n_kv_heads, capacity, head_dim] of one dtype (no copy; the
            cache keeps them alive; do not pass n_kv_heads/capacity/head_dim then).
sinks       'streaming' only: attention sinks (default 4).
tau_init, tau_end, horizon, noise
            'keyformer' only: temperature rises linearly from tau_init (default 1) to tau_end
            (default 2) over horizon T decode steps (required, >= 1); noise=False drops the
            Gumbel noise (deterministic variant; default True).
snap_window, snap_kernel, snap_pooling, snap_decode
            'snapkv' only (SnapKV, Li et al. 2024): the last snap_window = L prompt rows score the
            prompt (default 32, must be <= k), pooled with an odd kernel (default 7) by 'max'
            (default) or 'avg'; decoding continues by 'h2o' (default) or 'window'. prefill only
            (no prefill_chunk).
seed        seed of the Gumbel noise generator (same seed, same result).
shared_heads
            True: one selection per layer from scores summed over KV heads.

An option that the policy does not use raises ValueError (it would be ignored otherwise).
Raises ValueError / TypeError / OverflowError for bad arguments, with the library's message.)doc";

template <class Class>
void bind_cache_methods(Class& c) {
  c.def("append", &PyCache::append, py::arg("position"), py::arg("k"), py::arg("v"),
        R"doc(Appends one token to every KV head: k and v are C-contiguous arrays [n_kv_heads, head_dim]
of the cache's dtype, written into slot lengths[h] of each head with position ID `position`
(int64; apply RoPE before). O(n_kv_heads * head_dim). All-or-nothing: OverflowError if a KV
head is full (capacity reached), ValueError for a wrong array.)doc")
      .def("prefill", &PyCache::prefill, py::arg("logits") = py::none(), py::arg("gumbel") = py::none(),
           R"doc(Scores the prompt and evicts every KV head to min(k, P) tokens (Keyformer Algorithm 1,
prompt phase). Every KV head must hold the P prompt tokens (positions strictly ascending).
logits: float32 [n_q_heads, P, P], x[h, r, c] = logit of query r against slot c (only c <= r
is read; -inf = masked); may be None for 'streaming' and 'window' (no score; ignored by them).
gumbel: optional pre-drawn noise, same shape ('keyformer' with noise=True only).
The GIL is released while it runs. O(n_q_heads * P^2). ValueError (the library's message) on a
second prefill, a budget resolving to 0, w > k, NaN / +inf logits, ...; the cache is then unchanged.)doc")
      .def("decode_step", &PyCache::decode_step, py::arg("logits") = py::none(), py::arg("gumbel") = py::none(),
           R"doc(One decode step after appending the new token (every head holds n = previous length + 1
slots): logits float32 [n_q_heads, n] by slot (as kvevict.attention_logits returns them;
None allowed for 'streaming' / 'window'); gumbel optional, same shape. Scores the step at tau_t
and, if n > k, evicts one slot per KV head by moving slot n - 1 into it (slot order is then
not position order). No allocation in C++; the GIL is released. O(n_q_heads * n).
ValueError (the library's message) if called before prefill, on a wrong n, NaN / +inf logits, ...;
the cache is then unchanged.)doc")
      .def("positions", &PyCache::positions, py::arg("h"),
           "Position IDs of KV head h by slot, int64 [lengths[h]] (a copy). IndexError if h is out of range.")
      .def("scores", &PyCache::scores, py::arg("h"),
           "Scores of KV head h by slot, float32 [lengths[h]] (a copy), aligned with positions(h). IndexError if h is "
           "out of range.")
      .def("retained_positions", &PyCache::retained_positions, py::arg("h"),
           "Retained position IDs of KV head h, ascending, as a list of ints. O(n log n). IndexError if h is out of "
           "range.")
      .def("restore_position_order", &PyCache::restore_position_order,
           "Sorts every KV head's slots into ascending position order (K, V, positions and scores together). "
           "O(n log n + n * head_dim) per head.")
      .def("reset", &PyCache::reset, py::arg("seed") = py::none(),
           "Starts a new sequence: lengths 0, scores 0, step 0, and re-seeds the noise generator with `seed` (default: "
           "the latest seed). K/V bytes are left as they are.")
      .def_property_readonly("k", [](PyCache& self) { return self.storage(true); },
                             "Keys, [n_kv_heads, capacity, head_dim] of dtype, no copy (slots [0, lengths[h]) of head h "
                             "are live). Owned storage stays alive as long as this array does, even after the cache "
                             "is deleted.")
      .def_property_readonly("v", [](PyCache& self) { return self.storage(false); },
                             "Values, same layout and lifetime as k.")
      .def_property_readonly("lengths", &PyCache::lengths, "Live slots per KV head, a list of n_kv_heads ints.")
      .def_property_readonly("budget", &PyCache::budget,
                             "Resolved budget k; 0 until the first prefill resolves it (see budget_resolved).")
      .def_property_readonly("budget_resolved", &PyCache::budget_resolved,
                             "Whether the budget is resolved (after prefill): before, budget reads 0, which does not "
                             "mean 'keep nothing'.")
      .def_property_readonly("recent_window", &PyCache::recent_window,
                             "Resolved recent window w (0 before the first prefill).")
      .def_property_readonly("step", &PyCache::step, "Decode steps done since prefill.")
      .def_property_readonly("temperature", &PyCache::temperature,
                             "Temperature tau used by the latest prefill or decode step (1 for policies without one).")
      .def_property_readonly("policy", &PyCache::policy, "Canonical policy name.")
      .def_property_readonly("n_kv_heads", &PyCache::n_kv_heads, "KV heads.")
      .def_property_readonly("n_q_heads", &PyCache::n_q_heads, "Query heads.")
      .def_property_readonly("capacity", &PyCache::capacity, "Slots per KV head.")
      .def_property_readonly("head_dim", &PyCache::head_dim, "Elements per K or V row.")
      .def_property_readonly("dtype", &PyCache::dtype, "numpy dtype of K and V (float32 or float16).")
      .def_property_readonly("owns_storage", &PyCache::owns_storage,
                             "True if the cache allocated k and v, False if it wraps caller arrays.")
      .def("__repr__", &PyCache::describe);
}

}  // namespace

void bind_gguf(py::module_& m);  // gguf_binding.cpp

PYBIND11_MODULE(kvevict, m) {
  m.doc() = kModuleDoc;
  m.attr("__version__") = KVEVICT_VERSION;
  bind_gguf(m);

  // std::length_error (a full KV head) -> OverflowError; std::invalid_argument -> ValueError and
  // std::out_of_range -> IndexError are pybind11's own translations.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::length_error& e) {
      PyErr_SetString(PyExc_OverflowError, e.what());
    }
  });

  m.def("select_keep", &select_keep, py::arg("scores"), py::arg("k"), py::arg("w"),
        R"doc(The recent-window + top-k selection rule (Keyformer §3.3, H2O §4): of n candidates in
position order keep min(k, n): the last w (recent window) plus the k - w highest scores among
the others (ties keep the older). scores: a sequence of numbers or a 1-D float32 array
(as float32). Returns the kept indices, ascending.
select_keep([0.40, 0.20, 0.10, 0.05, 0.25], 3, 1) == [0, 1, 4]. Average O(n).
ValueError if k < 1, w > k or a score is NaN.)doc");

  auto cache = py::class_<PyCache>(m, "Cache", kCacheDoc);
  cache.def(py::init([](const std::string& policy, const py::kwargs& kw) { return new PyCache(policy, kw); }),
            py::arg("policy"));
  bind_cache_methods(cache);
  py::class_<KeyformerCache, PyCache>(m, "Keyformer", "Cache('keyformer', ...): Gumbel-logit score, tau_init -> tau_end over horizon steps.")
      .def(py::init([](const py::kwargs& kw) { return new KeyformerCache("keyformer", kw); }));
  py::class_<H2OCache, PyCache>(m, "H2O", "Cache('h2o', ...): accumulated attention (heavy hitters) + recent window.")
      .def(py::init([](const py::kwargs& kw) { return new H2OCache("h2o", kw); }));
  py::class_<StreamingCache, PyCache>(m, "StreamingLLM", "Cache('streaming', ...): `sinks` attention sinks + the most recent tokens.")
      .def(py::init([](const py::kwargs& kw) { return new StreamingCache("streaming", kw); }));
  py::class_<WindowCache, PyCache>(m, "Window", "Cache('window', ...): the most recent k tokens.")
      .def(py::init([](const py::kwargs& kw) { return new WindowCache("window", kw); }));
  py::class_<TOVACache, PyCache>(m, "TOVA", "Cache('tova', ...): the top-k of the current step's attention (recent must be 0).")
      .def(py::init([](const py::kwargs& kw) { return new TOVACache("tova", kw); }));
  m.def("make_cache", [](const std::string& policy, const py::kwargs& kw) { return new PyCache(policy, kw); },
        py::arg("policy"), "make_cache(policy, **options): the same as Cache(policy, **options).");

  m.def("attention_logits",
        [](PyCache& cache, py::handle q, py::handle scale, py::handle bias, py::handle out) {
          return cache.attention_logits(q, scale, bias, out);
        },
        py::arg("cache"), py::arg("q"), py::arg("scale") = py::none(), py::arg("bias") = py::none(),
        py::arg("out") = py::none(),
        R"doc(Decode-step logits over the cache's live slots (kvevict::attention_logits):
x[h, s] = scale * (q[h] . K[h // g, s]) (+ bias[h, s]), by slot, as decode_step expects.
q: float32 [n_q_heads, head_dim] (RoPE applied); scale: default 1 / sqrt(head_dim);
bias: optional float32 [n_q_heads, n]; out: optional writeable float32 [n_q_heads, n] to
fill (else a new array). n = lengths[0] (every head must hold n slots). Returns out.
O(n_q_heads * n * head_dim); the GIL is released.)doc");

  m.def("replay", &run_replay, py::arg("logits"), py::arg("prompt_len"),
        R"doc(Replays a policy over one layer's attention-logit trace, exactly as kvevict-replay does
(examples/replay: the library itself runs it), and returns its JSON Lines records as dicts:
[{"t": t, "tau": tau, "kept": [[positions of KV head 0, ascending], ...],
  "scores": [[matching scores], ...]}, ...], one after prefill (t = P - 1) and one per decode
position t = P .. N - 1.

replay(logits, prompt_len, *, policy='keyformer', q_heads_per_kv=1, budget=0.5, recent=0,
       sinks=4, tau_init=1.0, tau_end=2.0, gen_steps=None, noise='auto', gumbel=None, seed=0,
       shared_heads=False)

logits: float32 [H_q, N, N] (row t = query at position t; only j <= t is read), copied.
budget / recent: as in Cache (int tokens, float fraction, or '50%'); kvevict-replay's
--budget / --budget-ratio and --recent / --recent-ratio. gen_steps: Keyformer horizon T
(default N - P). noise: 'auto', 'none', 'gumbel' (seeded generator) or 'trace' (the gumbel
array, float32 [H_q, N, N]). The GIL is released. ValueError naming the argument on bad input.)doc");
}
