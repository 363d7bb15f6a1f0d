// python/paged.hpp — PyPagePool and PyPagedCache, the objects behind kvevict.PagePool (a layer's K/V page
// pools in NumPy arrays plus kvevict::PagePool) and kvevict.PagedCache (one sequence over that pool).
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
#include "locking.hpp"
#include "options.hpp"

namespace kvpy {

/// One layer's K and V page pools, NumPy arrays of `layout` (NHD `[num_pages, page_size, n_kv_heads,
/// head_dim]`, HND `[num_pages, n_kv_heads, page_size, head_dim]`), wrapped without a copy (the pool
/// holds a reference to each array) or allocated by the pool, and the page bookkeeping
/// (`kvevict::PagePool`). Every sequence (`PyPagedCache`) of the pool takes the pool's mutex
/// for each call, since they share the free list (locking.hpp: how, and what may not run under it).
class PyPagePool {
 public:
  /// Wraps `k` and `v` (both not None), or allocates zeroed pools of the sizes in `o` (both None);
  /// the options of paged_binding.cpp's table (doc::kPagePool lists them).
  PyPagePool(py::object k, py::object v, const Options& o);
  PyPagePool(const PyPagePool&) = delete;
  PyPagePool& operator=(const PyPagePool&) = delete;

  /// The pool's view of one sequence: `table`, `length` and `positions` belong to the sequence.
  /// Touches no Python object (the data pointers were taken when the arrays were checked), so it is
  /// called without the GIL; flags the caller changes later (writeable) do not reach it.
  template <class T>
  kvevict::PagedKVView<T> view(std::int32_t* table, std::size_t max_pages, std::size_t* length,
                               std::int64_t* positions) const {
    return kvevict::PagedKVView<T>{static_cast<T*>(k_ptr_), static_cast<T*>(v_ptr_), num_pages_, page_size_,
                                   n_kv_heads_, head_dim_, layout_, table, max_pages, length, positions};
  }

  kvevict::PagePool& pool() { return *pool_; }
  std::mutex& mutex() { return mutex_; }
  const py::array& k() const { return k_; }
  const py::array& v() const { return v_; }
  std::size_t num_pages() const { return num_pages_; }
  std::size_t page_size() const { return page_size_; }
  std::size_t n_kv_heads() const { return n_kv_heads_; }
  std::size_t head_dim() const { return head_dim_; }
  kvevict::PageLayout layout() const { return layout_; }
  DType dtype() const { return dtype_; }
  std::size_t used_pages();
  std::size_t free_pages();
  std::size_t pages_released();
  bool in_use(py::handle page);
  std::string describe();

 private:
  void wrap(py::object k, py::object v, const Options& o);
  void allocate(const Options& o);
  /// The layout's shape text, "[num_pages, page_size, n_kv_heads, head_dim]" for NHD.
  const char* shape_text() const;

  kvevict::PageLayout layout_ = kvevict::PageLayout::NHD;
  DType dtype_ = DType::float32;
  std::size_t num_pages_ = 0, page_size_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
  py::array k_, v_;  // the pools (caller arrays or the pool's own)
  void* k_ptr_ = nullptr;  // their data, taken once when they were checked writeable
  void* v_ptr_ = nullptr;
  std::unique_ptr<kvevict::PagePool> pool_;
  std::mutex mutex_;
};

/// One sequence of one layer over a `PyPagePool` (`kvevict::make_paged_cache`): its page table,
/// length and position IDs, and the evicting cache. Holds a reference to the pool object, so the
/// pool (and its arrays) live as long as the cache; deleting the cache returns its pages to the pool.
class PyPagedCache {
 public:
  /// From the policy, the pool (a kvevict.PagePool) and the options of paged_binding.cpp's table.
  PyPagedCache(const std::string& policy, PyPagePool& pool, const Options& o);
  PyPagedCache(const PyPagedCache&) = delete;
  PyPagedCache& operator=(const PyPagedCache&) = delete;
  ~PyPagedCache();

  void append(py::handle position, py::handle k, py::handle v);
  void prefill(py::handle logits, py::handle gumbel);
  void decode_step(py::handle logits, py::handle gumbel);
  py::array attention_logits(py::handle q, py::handle scale, py::handle bias, py::handle out);
  py::array_t<std::int64_t> positions(py::handle h);
  py::array_t<float> scores(py::handle h);
  py::list retained_positions(py::handle h);
  /// K (`keys`) or V rows of KV head `h` by logical slot, `[length, head_dim]` (a copy gathered by the table).
  py::array rows(py::handle h, bool keys);
  void restore_position_order();
  void reset(py::handle seed);
  py::array_t<std::int32_t> page_table();
  std::size_t length();
  py::list lengths();
  std::size_t pages_in_use();
  std::size_t pages_freed();
  std::string evict_unit();
  std::size_t budget();
  bool budget_resolved();
  std::size_t recent_window();
  std::size_t step();
  float temperature();

  const std::string& policy() const { return setup_.name; }
  std::size_t n_q_heads() const { return setup_.config.n_q_heads; }
  std::size_t max_pages() const { return max_pages_; }
  const py::object& pool_object() const { return pool_obj_; }
  PyPagePool& pool() const { return *pool_; }
  std::string describe();

 private:
  template <class T>
  kvevict::PagedKVView<T> view() {
    return pool_->view<T>(table_.data(), max_pages_, &length_, positions_.data());
  }
  /// KV head index `h` in [0, n_kv_heads), else IndexError.
  std::size_t head(py::handle h, const char* who) const;

  PolicySetup setup_;
  py::object pool_obj_;  // keeps the pool and its arrays alive
  PyPagePool* pool_;
  std::size_t max_pages_ = 0;
  std::vector<std::int32_t> table_;      // [max_pages], kNoPage when unused
  std::vector<std::int64_t> positions_;  // [max_pages * page_size]
  std::size_t length_ = 0;
  std::unique_ptr<kvevict::PagedCacheInterface> cache_;  // declared last: destroyed first
};

}  // namespace kvpy
