// python/cache.hpp — PyCache, the object behind kvevict.Cache: one layer's evicting cache over K/V
// storage it owns or wraps (caller NumPy arrays), with the checks and the locking of the bindings.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <kvevict/kvevict.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "conversions.hpp"
#include "executor_pool.hpp"
#include "locking.hpp"
#include "options.hpp"

namespace kvpy {

struct AttentionArgs;  // cache_calls.hpp

/// Owned K/V storage, shared (std::shared_ptr) by the cache and every NumPy array over it.
struct StorageBase {
  virtual ~StorageBase() = default;
};

/// One layer's evicting KV cache (`kvevict::make_cache` over a `KVView`), owning or wrapping
/// its K/V storage `[n_kv_heads, capacity, head_dim]`. Thread safety: every call takes the
/// cache's mutex (prefill and decode_step after releasing the GIL), so concurrent calls on one
/// cache are serialised; locking.hpp says how it is taken and what may not run under it.
/// Errors: see docstrings.hpp (kCacheDoc and the method docs).
class PyCache {
 public:
  /// Builds the cache from the options of `cache_binding.cpp`'s table (kCacheDoc lists them).
  PyCache(const std::string& policy, const Options& o);
  PyCache(const PyCache&) = delete;
  PyCache& operator=(const PyCache&) = delete;
  virtual ~PyCache() = default;

  /// The KV view over this cache's storage (default layout [kv_head][slot][head_dim]).
  template <class T>
  kvevict::KVView<T> view() {
    return kvevict::KVView<T>::contiguous(static_cast<T*>(k_ptr_), static_cast<T*>(v_ptr_), positions_.data(),
                                          lengths_.data(), n_kv_heads_, capacity_, head_dim_);
  }

  void append(py::handle position, py::handle k, py::handle v);
  void extend(py::handle positions, py::handle k, py::handle v);
  void prefill(py::handle logits, py::handle gumbel);
  void prefill_qk(py::handle q, py::handle scale);
  void prefill_chunk(py::handle chunk_len, py::handle logits, py::handle gumbel);
  void finish_prefill();
  void prefill_from_attention(py::handle sums);
  void decode_step(py::handle logits, py::handle gumbel);
  py::array attention_logits(py::handle q, py::handle scale, py::handle bias, py::handle out);
  /// `Cache.k` / `Cache.v`: the whole storage `[n_kv_heads, capacity, head_dim]`, no copy.
  py::array storage(bool keys);
  py::list lengths();
  py::array_t<std::int64_t> positions(py::handle h);
  py::array_t<float> scores(py::handle h);
  py::list retained_positions(py::handle h);
  void restore_position_order();
  void reset(py::handle seed);
  /// `Cache.copy_from(other)`: this cache becomes a twin of `other` over its own storage
  /// (`kvevict::Cache::copy_state_from`), under both caches' mutexes (docstrings.hpp: kCopyFrom).
  void copy_from(PyCache& other);
  /// `Cache.set_executor(pool)`: later prefills and decode steps score on `pool`'s workers (a kvevict.ThreadPool,
  /// kept alive by this cache), or serially for None; bit-identical either way (kvevict::Cache::set_executor).
  void set_executor(py::handle pool);
  /// The pool set by set_executor, or None.
  py::object executor() const { return executor_obj_; }
  std::size_t budget();
  bool budget_resolved();
  std::size_t recent_window();
  std::size_t step();
  float temperature();
  /// What prefill_from_attention takes (kvevict::Cache::prompt_sums), under the lock; ValueError for a τ₀ the
  /// library refuses.
  kvevict::PromptSums prompt_sums();

  /// The longest KV head's length, under the cache's mutex (taken here, the GIL released while waiting).
  std::size_t longest_length();
  /// Calls `f(view, longest())` under the cache's mutex (the caller has released the GIL): `view` is the
  /// `KVView<float>` or `KVView<Eigen::half>` of the storage.
  template <class F>
  void with_locked_view(F&& f) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (dtype_ == DType::float32)
      f(view<float>(), longest());
    else
      f(view<Eigen::half>(), longest());
  }
  const std::string& policy() const { return setup_.name; }
  std::size_t n_kv_heads() const { return n_kv_heads_; }
  std::size_t n_q_heads() const { return setup_.config.n_q_heads; }
  std::size_t capacity() const { return capacity_; }
  std::size_t head_dim() const { return head_dim_; }
  py::dtype dtype() const { return py::dtype(dtype_name(dtype_)); }
  bool owns_storage() const { return static_cast<bool>(owned_); }
  std::string describe();

 private:
  void wrap_storage(py::object k, py::object v, const Options& o);
  void own_storage(const Options& o);
  /// The longest KV head's length (all equal unless head_budgets is adaptive). Under the mutex.
  std::size_t longest() const;
  /// attention_logits' kernel into `a.out` `[n_q_heads][n]`, `n = longest()`: each query head over its KV
  /// head's own length, the rest of its row -inf (head-adaptive budgets). Under the mutex.
  template <class T>
  void uneven_logits(const kvevict::KVView<T>& kv, const AttentionArgs& a, std::size_t n);
  /// KV head index `h` in [0, n_kv_heads), else IndexError (the library's message for h too large).
  std::size_t head(py::handle h, const char* who) const;

  PolicySetup setup_;
  DType dtype_ = DType::float32;
  std::size_t n_kv_heads_ = 0, capacity_ = 0, head_dim_ = 0;
  std::shared_ptr<StorageBase> owned_;  // null when wrapping caller arrays
  py::array k_obj_, v_obj_;             // the caller's arrays when wrapping
  void* k_ptr_ = nullptr;
  void* v_ptr_ = nullptr;
  std::vector<std::int64_t> positions_;  // [kv_head][capacity]
  std::vector<std::size_t> lengths_;     // [kv_head]
  py::object executor_obj_ = py::none();  // the kvevict.ThreadPool the cache scores on (kept alive), or None
  std::unique_ptr<kvevict::CacheInterface> cache_;  // declared after the storage and the pool: destroyed first
  std::mutex mutex_;
};

}  // namespace kvpy
