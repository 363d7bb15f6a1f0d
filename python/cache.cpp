// python/cache.cpp — PyCache (cache.hpp): storage, checks and locking around kvevict::make_cache (the cache's
// mutex, taken as locking.hpp says: the accessors copy under it and build their Python results after it).
// SPDX-License-Identifier: Apache-2.0
#include "cache.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "cache_calls.hpp"

namespace kvpy {

namespace {

template <class T>
struct OwnedKV final : StorageBase {
  explicit OwnedKV(std::size_t elements) : k(elements), v(elements) {}
  std::vector<T> k, v;
};

}  // namespace

PyCache::PyCache(const std::string& policy, const Options& o) : setup_(policy_of(policy, o)) {
  // ---- storage: owned (n_kv_heads, capacity, head_dim[, dtype]) or wrapped (k, v) ----
  const py::object k = o.get("k"), v = o.get("v");
  if (k || v)
    wrap_storage(k, v, o);
  else
    own_storage(o);
  positions_.assign(n_kv_heads_ * capacity_, 0);
  lengths_.assign(n_kv_heads_, 0);

  configure(setup_, o, /*has_shared_heads=*/true);
  if (o.has("head_budgets")) setup_.config.head_budgets = to_head_budgets(o.get("head_budgets"));
  try {
    if (dtype_ == DType::float32)
      cache_ = kvevict::make_cache(setup_.policy, setup_.config, view<float>(), setup_.params);
    else
      cache_ = kvevict::make_cache(setup_.policy, setup_.config, view<Eigen::half>(), setup_.params);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(setup_.name_snap_window(e.what()));
  }
}

void PyCache::wrap_storage(py::object k, py::object v, const Options& o) {
  if (!k || !v)
    throw py::value_error("give both k and v to wrap caller storage (got only " + std::string(k ? "k" : "v") + ")");
  for (const char* key : {"n_kv_heads", "capacity", "head_dim"})
    if (o.has(key))
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
  if (o.has("dtype") && to_dtype(o.get("dtype")) != dtype_)
    throw py::value_error(std::string("dtype = ") + dtype_name(to_dtype(o.get("dtype"))) + " but k is " +
                          dtype_name(dtype_));
  n_kv_heads_ = static_cast<std::size_t>(ka.shape(0));
  capacity_ = static_cast<std::size_t>(ka.shape(1));
  head_dim_ = static_cast<std::size_t>(ka.shape(2));
  const std::vector<py::ssize_t> shape{ka.shape(0), ka.shape(1), ka.shape(2)};
  const std::string what = "[n_kv_heads, capacity, head_dim]";
  k_obj_ = checked_array(k, "k", elem_of(dtype_), shape, what, true);
  v_obj_ = checked_array(v, "v", elem_of(dtype_), shape, what + " (the shape of k)", true);
  // Zero dimensions first: two zero-size arrays can share an address without sharing an element.
  if (n_kv_heads_ == 0 || capacity_ == 0 || head_dim_ == 0)
    throw py::value_error("k must have no zero dimension, got shape " + array_shape(k_obj_));
  require_disjoint(k_obj_, v_obj_);
  k_ptr_ = k_obj_.mutable_data();
  v_ptr_ = v_obj_.mutable_data();
}

void PyCache::own_storage(const Options& o) {
  for (const char* key : {"n_kv_heads", "capacity", "head_dim"})
    if (!o.has(key))
      throw py::value_error(std::string("give n_kv_heads, capacity and head_dim (owned storage) or k and v "
                                        "(wrapped storage); ") + key + " is missing");
  n_kv_heads_ = to_size(o.get("n_kv_heads"), "n_kv_heads");
  capacity_ = to_size(o.get("capacity"), "capacity");
  head_dim_ = to_size(o.get("head_dim"), "head_dim");
  dtype_ = o.has("dtype") ? to_dtype(o.get("dtype")) : DType::float32;
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

void PyCache::append(py::handle position, py::handle k, py::handle v) {
  const std::int64_t pos = to_i64(position, "position");
  const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(n_kv_heads_), static_cast<py::ssize_t>(head_dim_)};
  const py::array ka = checked_array(k, "k", elem_of(dtype_), shape, "[n_kv_heads, head_dim]");
  const py::array va = checked_array(v, "v", elem_of(dtype_), shape, "[n_kv_heads, head_dim]");
  GilFreeLock lock(mutex_);
  if (dtype_ == DType::float32)
    view<float>().append(pos, static_cast<const float*>(ka.data()), static_cast<const float*>(va.data()));
  else
    view<Eigen::half>().append(pos, static_cast<const Eigen::half*>(ka.data()),
                               static_cast<const Eigen::half*>(va.data()));
}

void PyCache::extend(py::handle positions, py::handle k, py::handle v) {
  const py::array pa = as_array(positions, "positions", "a 1-D int64 array");
  if (pa.ndim() != 1)
    throw py::value_error("positions must be a 1-D int64 array [n], got " + std::to_string(pa.ndim()) + " dimensions");
  const py::ssize_t n = pa.shape(0);
  const py::array pos = checked_array(positions, "positions", Elem::int64, {n}, "[n]");
  const std::vector<py::ssize_t> shape{n, static_cast<py::ssize_t>(n_kv_heads_), static_cast<py::ssize_t>(head_dim_)};
  const py::array ka = checked_array(k, "k", elem_of(dtype_), shape, "[n, n_kv_heads, head_dim]");
  const py::array va = checked_array(v, "v", elem_of(dtype_), shape, "[n, n_kv_heads, head_dim]");
  const std::size_t row = n_kv_heads_ * head_dim_ * (dtype_ == DType::float32 ? 4 : 2);
  const auto* kb = static_cast<const char*>(ka.data());
  const auto* vb = static_cast<const char*>(va.data());
  const std::size_t bytes = static_cast<std::size_t>(n) * row, storage = capacity_ * row;
  auto overlaps = [&](const char* a, const void* base) {
    const auto* b = static_cast<const char*>(base);
    return bytes != 0 && a < b + storage && b < a + bytes;
  };
  if (overlaps(kb, k_ptr_) || overlaps(kb, v_ptr_) || overlaps(vb, k_ptr_) || overlaps(vb, v_ptr_))
    throw py::value_error("extend: k and v must not overlap the cache's own K/V storage (copy the rows first)");
  GilFreeLock lock(mutex_);
  for (std::size_t h = 0; h < n_kv_heads_; ++h)
    if (lengths_[h] + static_cast<std::size_t>(n) > capacity_)  // all or nothing (OverflowError, as append)
      throw std::length_error("extend: KV head " + std::to_string(h) + " holds " + std::to_string(lengths_[h]) +
                              " tokens; " + std::to_string(n) + " more exceed its capacity " + std::to_string(capacity_));
  const auto* pp = static_cast<const std::int64_t*>(pos.data());
  for (py::ssize_t i = 0; i < n; ++i) {
    if (dtype_ == DType::float32)
      view<float>().append(pp[i], reinterpret_cast<const float*>(kb + i * row), reinterpret_cast<const float*>(vb + i * row));
    else
      view<Eigen::half>().append(pp[i], reinterpret_cast<const Eigen::half*>(kb + i * row),
                                 reinterpret_cast<const Eigen::half*>(vb + i * row));
  }
}

void PyCache::prefill(py::handle logits, py::handle gumbel) {
  std::size_t P = 0;
  {
    GilFreeLock lock(mutex_);
    P = lengths_[0];
  }
  const auto H = static_cast<py::ssize_t>(setup_.config.n_q_heads), p = static_cast<py::ssize_t>(P);
  if (setup_.policy == kvevict::Policy::tova && py::isinstance<py::array>(logits) &&
      py::reinterpret_borrow<py::array>(logits).ndim() == 2) {
    // TOVA scores the prompt from its last row only: [n_q_heads, P] is that row (Expected Attention's logits).
    const ScoreArgs a = checked_scores(logits, gumbel, setup_, {H, p}, "[n_q_heads, P] (the prompt's last row)");
    std::string message;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> lock(mutex_);
      try {
        kvevict::SingleRowLogits last(a.lp, setup_.config.n_q_heads, P, P == 0 ? 0 : P - 1);
        cache_->prefill_chunk(last, P, P);
        cache_->finish_prefill();
      } catch (const std::invalid_argument& e) {
        message = e.what();
      }
    }
    if (!message.empty()) throw py::value_error(message);
    return;
  }
  const ScoreArgs a = checked_scores(logits, gumbel, setup_, {H, p, p}, "[n_q_heads, P, P]");
  locked_prefill(*cache_, mutex_, a, P, setup_);
}

void PyCache::prefill_qk(py::handle q, py::handle scale) {
  std::size_t P = 0;
  {
    GilFreeLock lock(mutex_);
    P = lengths_[0];
  }
  const auto H = static_cast<py::ssize_t>(setup_.config.n_q_heads);
  const py::array qa = checked_array(q, "q", Elem::float32, {static_cast<py::ssize_t>(P), H,
                                                             static_cast<py::ssize_t>(head_dim_)},
                                     "[P, n_q_heads, head_dim] (the prompt's queries, RoPE applied)");
  const float s = scale.is_none() ? 1.0f / std::sqrt(static_cast<float>(head_dim_))
                                  : static_cast<float>(to_double(scale, "scale"));
  if (!std::isfinite(s)) throw py::value_error("scale must be finite (got " + text(scale) + ")");
  if (P == 0) throw py::value_error("prefill_qk: the cache holds no prompt token (append the prompt first)");
  std::string message;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      kvevict::QKChunkScratch scratch(P, head_dim_);
      const auto* qp = static_cast<const float*>(qa.data());
      if (dtype_ == DType::float32)
        kvevict::prefill_chunk_qk(*cache_, view<float>(), qp, P, setup_.config.n_q_heads, s, scratch);
      else
        kvevict::prefill_chunk_qk(*cache_, view<Eigen::half>(), qp, P, setup_.config.n_q_heads, s, scratch);
      cache_->finish_prefill();
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
  }
  if (!message.empty()) throw py::value_error(message);
}

void PyCache::prefill_chunk(py::handle chunk_len, py::handle logits, py::handle gumbel) {
  const std::size_t C = to_size(chunk_len, "chunk_len");
  std::size_t n = 0;  // checked again by the library, under the lock (every head must hold n = held + C)
  {
    GilFreeLock lock(mutex_);
    n = longest();
  }
  const auto H = static_cast<py::ssize_t>(setup_.config.n_q_heads);
  const ScoreArgs a = checked_scores(logits, gumbel, setup_, {H, static_cast<py::ssize_t>(C), static_cast<py::ssize_t>(n)},
                                     "[n_q_heads, chunk_len, n] (the chunk's rows over every held slot)");
  std::string message;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      cache_->prefill_chunk(a.lp, C, n, a.gp);
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
  }
  if (!message.empty()) throw py::value_error(setup_.name_snap_window(message));
}

void PyCache::finish_prefill() {
  std::string message;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      cache_->finish_prefill();
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
  }
  if (!message.empty()) throw py::value_error(message);
}

void PyCache::prefill_from_attention(py::handle sums) {
  std::size_t P = 0;
  {
    GilFreeLock lock(mutex_);
    P = lengths_[0];
  }
  const auto H = static_cast<py::ssize_t>(setup_.config.n_q_heads);
  const py::array a = checked_array(sums, "sums", Elem::float32, {H, static_cast<py::ssize_t>(P)},
                                    "[n_q_heads, P] (each query head's attention probabilities summed over the prompt's rows)");
  std::string message;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      cache_->prefill_from_attention(static_cast<const float*>(a.data()), P);
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
  }
  if (!message.empty()) throw py::value_error(message);
}

void PyCache::decode_step(py::handle logits, py::handle gumbel) {
  std::size_t n = 0;  // checked again by the library, under the lock (a cache that grew in between is refused)
  {
    GilFreeLock lock(mutex_);
    n = longest();
  }
  const auto H = static_cast<py::ssize_t>(setup_.config.n_q_heads), nn = static_cast<py::ssize_t>(n);
  const ScoreArgs a = checked_scores(logits, gumbel, setup_, {H, nn}, "[n_q_heads, n]");
  locked_decode_step(*cache_, mutex_, a, n);
}

std::size_t PyCache::longest_length() {
  GilFreeLock lock(mutex_);
  return longest();
}

std::size_t PyCache::longest() const {
  return lengths_.empty() ? 0 : *std::max_element(lengths_.begin(), lengths_.end());
}

template <class T>
void PyCache::uneven_logits(const kvevict::KVView<T>& kv, const AttentionArgs& a, std::size_t n) {
  const std::size_t H = setup_.config.n_q_heads;
  if (std::all_of(lengths_.begin(), lengths_.end(), [n](std::size_t len) { return len == n; })) {
    kvevict::attention_logits(kv, a.qp, H, a.op, a.scale, a.bp);
    return;
  }
  // Head-adaptive budgets: query head h reads its KV head's own length; the rest of its row is masked.
  const std::size_t g = H / n_kv_heads_;
  for (std::size_t h = 0; h < H; ++h) {
    const std::size_t len = lengths_[h / g];
    float* row = a.op + h * n;
    kvevict::attention_logits_row(kv.read_only(), h / g, a.qp + h * head_dim_, row, a.scale);
    if (a.bp != nullptr)
      for (std::size_t s = 0; s < len; ++s) row[s] += a.bp[h * n + s];
    std::fill(row + len, row + n, -std::numeric_limits<float>::infinity());
  }
}

py::array PyCache::attention_logits(py::handle q, py::handle scale, py::handle bias, py::handle out) {
  // out and bias are sized [H, n] by the length read here; the kernel writes [H, live length]. Converting the
  // arguments can run Python code (__array__, __float__) that appends to this cache, so the kernel's block
  // checks that the length is still n and writes nothing otherwise.
  std::size_t n = 0;
  {
    GilFreeLock lock(mutex_);
    n = longest();
  }
  const AttentionArgs a = checked_attention(q, scale, bias, out, setup_.config.n_q_heads, n, head_dim_);
  std::size_t now = n;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mutex_);
    now = longest();
    if (now == n) {
      if (dtype_ == DType::float32)
        uneven_logits(view<float>(), a, n);
      else
        uneven_logits(view<Eigen::half>(), a, n);
    }
  }
  if (now != n) throw py::value_error(length_changed(n, now));
  return a.out;
}

py::array PyCache::storage(bool keys) {
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

py::list PyCache::lengths() {
  std::vector<std::size_t> copy;
  {
    GilFreeLock lock(mutex_);
    copy = lengths_;
  }
  return to_list(copy);
}

py::array_t<std::int64_t> PyCache::positions(py::handle h) {
  const std::size_t j = head(h, "positions");
  return to_numpy(locked_copy<std::int64_t>(  // IndexError for j too large
      mutex_, [&] { return cache_->positions(j); }, [&] { return lengths_[j]; }));
}

py::array_t<float> PyCache::scores(py::handle h) {
  const std::size_t j = head(h, "scores");
  return to_numpy(locked_copy<float>(mutex_, [&] { return cache_->scores(j); }, [&] { return lengths_[j]; }));
}

py::list PyCache::retained_positions(py::handle h) {
  const std::size_t j = head(h, "retained_positions");
  return to_list(locked_retained_positions(*cache_, mutex_, j));
}

void PyCache::restore_position_order() {
  GilFreeLock lock(mutex_);
  cache_->restore_position_order();
}

void PyCache::reset(py::handle seed) { locked_reset(*cache_, mutex_, setup_, seed); }

namespace {

/// The first parameter of policy `p` (not in CacheConfig) that differs between `a` (other) and `b` (this cache), as
/// "name = a's, this cache has b's", or "" if none does (parameters `p` does not use are not compared).
std::string params_differ(kvevict::Policy p, const kvevict::PolicyParams& a, const kvevict::PolicyParams& b) {
  auto text = [](const auto& x) {
    std::ostringstream o;
    o << std::boolalpha << x;
    return o.str();
  };
  auto field = [&](const char* name, const auto& x, const auto& y) -> std::string {
    return x == y ? "" : std::string(name) + " = " + text(x) + ", this cache has " + text(y);
  };
  using P = kvevict::Policy;
  std::vector<std::string> diffs;
  if (p == P::snapkv)
    diffs = {field("snap_window", a.snap_window, b.snap_window), field("snap_kernel", a.snap_kernel, b.snap_kernel),
             field("snap_pooling", static_cast<int>(a.snap_pooling), static_cast<int>(b.snap_pooling)),
             field("snap_decode", static_cast<int>(a.snap_decode), static_cast<int>(b.snap_decode))};
  if (p == P::keyformer || (p == P::snapkv && a.snap_decode == kvevict::SnapDecode::keyformer))
    for (const std::string& d :
         {field("tau_init", a.tau_init, b.tau_init), field("tau_end", a.tau_end, b.tau_end),
          field("horizon", a.horizon, b.horizon), field("noise", a.gumbel_noise, b.gumbel_noise),
          field("noise_scale", a.noise_scale, b.noise_scale)})
      diffs.push_back(d);
  if (p == P::streaming_llm) diffs.push_back(field("sinks", a.sinks, b.sinks));
  if (p == P::h2o || p == P::keyformer) diffs.push_back(field("mean_attention", a.mean_attention, b.mean_attention));
  for (const std::string& d : diffs)
    if (!d.empty()) return d;
  return "";
}

}  // namespace

void PyCache::copy_from(PyCache& other) {
  if (&other == this) return;
  const std::string who = "Cache.copy_from: ";
  if (other.setup_.name != setup_.name)
    throw py::value_error(who + "other is a '" + other.setup_.name + "' cache, this cache is '" + setup_.name + "'");
  if (other.dtype_ != dtype_)
    throw py::value_error(who + "other has dtype " + dtype_name(other.dtype_) + ", this cache has " +
                          dtype_name(dtype_));
  const std::string params = params_differ(setup_.policy, other.setup_.params, setup_.params);
  if (!params.empty()) throw py::value_error(who + "other has " + params);
  std::string message;
  {
    py::gil_scoped_release nogil;  // locking.hpp rule 2; scoped_lock: no deadlock with other.copy_from(self)
    std::scoped_lock lock(mutex_, other.mutex_);
    try {
      cache_->copy_state_from(*other.cache_);
      setup_.seed = other.setup_.seed;
      setup_.config.seed = other.setup_.config.seed;
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
  }
  if (!message.empty()) throw py::value_error(message);
}

void PyCache::set_executor(py::handle pool) {
  PyThreadPool* p = nullptr;
  if (!pool.is_none()) {
    if (!py::isinstance<PyThreadPool>(pool))
      throw py::type_error("Cache.set_executor: pool must be a kvevict.ThreadPool or None (got " +
                           std::string(py::repr(pool)) + ", a " +
                           std::string(py::str(py::type::of(pool).attr("__name__"))) + ")");
    p = &pool.cast<PyThreadPool&>();
  }
  std::string message;
  {
    GilFreeLock lock(mutex_);
    try {
      if (p != nullptr)
        cache_->set_executor(kvevict::ExecutorRef(*p));
      else
        cache_->set_executor(kvevict::ExecutorRef());
    } catch (const std::logic_error& e) {
      message = e.what();
    }
  }
  if (!message.empty()) throw py::value_error("Cache.set_executor: " + message);
  executor_obj_ = py::reinterpret_borrow<py::object>(pool);
}

std::size_t PyCache::budget() {
  GilFreeLock lock(mutex_);
  return cache_->budget();
}
bool PyCache::budget_resolved() {
  GilFreeLock lock(mutex_);
  return cache_->budget_resolved();
}
std::size_t PyCache::recent_window() {
  GilFreeLock lock(mutex_);
  return cache_->recent_window();
}
std::size_t PyCache::step() {
  GilFreeLock lock(mutex_);
  return cache_->step();
}
float PyCache::temperature() {
  GilFreeLock lock(mutex_);
  return cache_->temperature();
}
kvevict::PromptSums PyCache::prompt_sums() {
  std::string message;
  kvevict::PromptSums spec;
  {
    GilFreeLock lock(mutex_);
    try {
      spec = cache_->prompt_sums();
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
  }
  if (!message.empty()) throw py::value_error(message);
  return spec;
}

std::string PyCache::describe() {
  std::ostringstream os;
  os << "kvevict.Cache(policy='" << setup_.name << "', n_kv_heads=" << n_kv_heads_ << ", n_q_heads="
     << setup_.config.n_q_heads << ", capacity=" << capacity_ << ", head_dim=" << head_dim_
     << ", dtype=" << dtype_name(dtype_)
     << ", budget=" << (budget_resolved() ? std::to_string(budget()) : setup_.unresolved_budget())
     << ", recent_window=" << recent_window() << ", lengths=" << py::repr(lengths()).cast<std::string>()
     << (owned_ ? "" : ", wrapping caller arrays") << ")";
  return os.str();
}

std::size_t PyCache::head(py::handle h, const char* who) const {
  const std::int64_t j = to_i64(h, "h");
  if (j < 0)
    throw py::index_error(std::string("kvevict.Cache.") + who + ": KV head " + std::to_string(j) +
                          " out of range (n_kv_heads = " + std::to_string(n_kv_heads_) + ")");
  return static_cast<std::size_t>(j);
}

}  // namespace kvpy
