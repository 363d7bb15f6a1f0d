// python/paged.cpp — PyPagedCache (paged.hpp): one sequence's page table over a PyPagePool, its checks, and
// the locking around kvevict::make_paged_cache (the pool's mutex, taken as locking.hpp says: the accessors copy
// under it and build their Python results after it).
// SPDX-License-Identifier: Apache-2.0
#include "paged.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "cache_calls.hpp"

namespace kvpy {

namespace {

kvevict::PageScore to_page_score(py::handle o) {
  const std::string s = to_text(o, "page_score");
  if (s == "sum") return kvevict::PageScore::sum;
  if (s == "mean") return kvevict::PageScore::mean;
  throw py::value_error("page_score must be 'sum' or 'mean' (got '" + s + "')");
}

}  // namespace

PyPagedCache::PyPagedCache(const std::string& policy, PyPagePool& pool, const Options& o)
    : setup_(policy_of(policy, o)),
      pool_obj_(py::cast(&pool, py::return_value_policy::reference)),  // the existing Python object
      pool_(&pool) {
  const std::size_t ps = pool.page_size();
  max_pages_ = o.has("max_pages") ? to_size(o.get("max_pages"), "max_pages") : pool.num_pages();
  if (max_pages_ == 0) throw py::value_error("max_pages must be >= 1 (got 0)");
  if (max_pages_ > std::vector<std::int64_t>().max_size() / ps)
    throw py::value_error("max_pages = " + std::to_string(max_pages_) + " is too large: max_pages * page_size = " +
                          std::to_string(max_pages_) + " * " + std::to_string(ps) + " slots exceed the largest array");
  table_.assign(max_pages_, kvevict::kNoPage);
  positions_.assign(max_pages_ * ps, 0);

  configure(setup_, o, /*has_shared_heads=*/false);
  kvevict::PagedEvictionConfig paged;
  try {
    paged.unit = kvevict::parse_evict_unit(to_text(o.get("unit"), "unit"));
  } catch (const std::invalid_argument& e) {
    throw py::value_error(std::string("unit: ") + e.what());
  }
  paged.start_pages = to_size(o.get("start_pages"), "start_pages");
  paged.page_score = to_page_score(o.get("page_score"));
  GilFreeLock lock(pool.mutex());
  try {
    if (pool.dtype() == DType::float32)
      cache_ = kvevict::make_paged_cache(setup_.policy, setup_.config, paged, view<float>(), pool.pool(),
                                         setup_.params);
    else
      cache_ = kvevict::make_paged_cache(setup_.policy, setup_.config, paged, view<Eigen::half>(), pool.pool(),
                                         setup_.params);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(setup_.name_snap_window(e.what()));
  }
}

PyPagedCache::~PyPagedCache() {
  // The sequence's pages go back to the pool (reset releases every page of the table). Python deletes the
  // object with the GIL held, possibly from a garbage collection that an allocation started; GilFreeLock
  // waits without the GIL, and no binding allocates while it holds the pool's mutex, so the lock is never
  // held by this thread here.
  if (!cache_) return;
  GilFreeLock lock(pool_->mutex());
  try {
    cache_->reset(setup_.seed);
  } catch (const std::exception&) {  // a table the engine broke: its pages stay taken, nothing else to do
  }
}

void PyPagedCache::append(py::handle position, py::handle k, py::handle v) {
  const std::int64_t pos = to_i64(position, "position");
  const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(pool_->n_kv_heads()),
                                       static_cast<py::ssize_t>(pool_->head_dim())};
  const py::array ka = checked_array(k, "k", elem_of(pool_->dtype()), shape, "[n_kv_heads, head_dim]");
  const py::array va = checked_array(v, "v", elem_of(pool_->dtype()), shape, "[n_kv_heads, head_dim]");
  GilFreeLock lock(pool_->mutex());
  if (pool_->dtype() == DType::float32)
    pool_->pool().append(view<float>(), pos, static_cast<const float*>(ka.data()),
                         static_cast<const float*>(va.data()));
  else
    pool_->pool().append(view<Eigen::half>(), pos, static_cast<const Eigen::half*>(ka.data()),
                         static_cast<const Eigen::half*>(va.data()));
}

void PyPagedCache::prefill(py::handle logits, py::handle gumbel) {
  const std::size_t P = length();
  const auto H = static_cast<py::ssize_t>(setup_.config.n_q_heads), p = static_cast<py::ssize_t>(P);
  const ScoreArgs a = checked_scores(logits, gumbel, setup_, {H, p, p}, "[n_q_heads, P, P]");
  locked_prefill(*cache_, pool_->mutex(), a, P, setup_);
}

void PyPagedCache::decode_step(py::handle logits, py::handle gumbel) {
  // n is checked again by the library, under the lock (a sequence that grew in between is refused).
  const std::size_t n = length();
  const auto H = static_cast<py::ssize_t>(setup_.config.n_q_heads), nn = static_cast<py::ssize_t>(n);
  const ScoreArgs a = checked_scores(logits, gumbel, setup_, {H, nn}, "[n_q_heads, n]");
  locked_decode_step(*cache_, pool_->mutex(), a, n);
}

py::array PyPagedCache::attention_logits(py::handle q, py::handle scale, py::handle bias, py::handle out) {
  // out and bias are sized [H, n] by the length read here; the kernel writes [H, live length]. Converting the
  // arguments can run Python code (__array__, __float__) that appends to this sequence, so the kernel's block
  // checks that the length is still n and writes nothing otherwise.
  const std::size_t n = length();
  const AttentionArgs a = checked_attention(q, scale, bias, out, setup_.config.n_q_heads, n, pool_->head_dim());
  std::size_t now = n;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(pool_->mutex());
    now = length_;
    if (now == n) {
      if (pool_->dtype() == DType::float32)
        kvevict::paged_attention_logits(view<float>(), a.qp, setup_.config.n_q_heads, a.op, a.scale, a.bp);
      else
        kvevict::paged_attention_logits(view<Eigen::half>(), a.qp, setup_.config.n_q_heads, a.op, a.scale, a.bp);
    }
  }
  if (now != n) throw py::value_error(length_changed(n, now));
  return a.out;
}

py::array_t<std::int64_t> PyPagedCache::positions(py::handle h) {
  const std::size_t j = head(h, "positions");
  return to_numpy(
      locked_copy<std::int64_t>(pool_->mutex(), [&] { return cache_->positions(j); }, [&] { return length_; }));
}

py::array_t<float> PyPagedCache::scores(py::handle h) {
  const std::size_t j = head(h, "scores");
  return to_numpy(locked_copy<float>(pool_->mutex(), [&] { return cache_->scores(j); }, [&] { return length_; }));
}

py::list PyPagedCache::retained_positions(py::handle h) {
  const std::size_t j = head(h, "retained_positions");
  return to_list(locked_retained_positions(*cache_, pool_->mutex(), j));
}

py::array PyPagedCache::rows(py::handle h, bool keys) {
  const std::size_t j = head(h, keys ? "k_rows" : "v_rows");
  if (j >= pool_->n_kv_heads())
    throw py::index_error(std::string("kvevict.PagedCache.") + (keys ? "k_rows" : "v_rows") + ": KV head " +
                          std::to_string(j) + " out of range (n_kv_heads = " + std::to_string(pool_->n_kv_heads()) +
                          ")");
  const std::size_t d = pool_->head_dim(), item = pool_->dtype() == DType::float32 ? 4 : 2;
  std::vector<unsigned char> copy;  // the [length, head_dim] rows as bytes, gathered under the lock
  std::size_t n = 0;
  {
    GilFreeLock lock(pool_->mutex());
    n = length_;
    copy.resize(n * d * item);
    const kvevict::PagedKVView<unsigned char> bytes = view<unsigned char>();
    for (std::size_t s = 0; s < n; ++s) {
      const std::size_t page = static_cast<std::size_t>(table_[s / bytes.page_size]);
      const std::size_t at = bytes.offset(page, j, s % bytes.page_size) * item;  // element offset -> bytes
      std::memcpy(copy.data() + s * d * item, (keys ? bytes.k : bytes.v) + at, d * item);
    }
  }
  py::array out(py::dtype(dtype_name(pool_->dtype())),
                std::vector<py::ssize_t>{static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(d)});
  if (!copy.empty()) std::memcpy(out.mutable_data(), copy.data(), copy.size());
  return out;
}

void PyPagedCache::restore_position_order() {
  GilFreeLock lock(pool_->mutex());
  cache_->restore_position_order();
}

void PyPagedCache::reset(py::handle seed) { locked_reset(*cache_, pool_->mutex(), setup_, seed); }

py::array_t<std::int32_t> PyPagedCache::page_table() {
  std::vector<std::int32_t> copy;
  {
    GilFreeLock lock(pool_->mutex());
    copy = table_;
  }
  return to_numpy(copy);
}

// (The values are C++ values: pybind11 converts them to Python after the lock is released.)
#define KVPY_LOCKED(type, name, expr)  \
  type PyPagedCache::name() {          \
    GilFreeLock lock(pool_->mutex());  \
    return expr;                       \
  }
KVPY_LOCKED(std::size_t, length, length_)
KVPY_LOCKED(std::size_t, pages_in_use, cache_->pages_in_use())
KVPY_LOCKED(std::size_t, pages_freed, cache_->pages_freed())
KVPY_LOCKED(std::string, evict_unit, kvevict::evict_unit_name(cache_->evict_unit()))
KVPY_LOCKED(std::size_t, budget, cache_->budget())
KVPY_LOCKED(bool, budget_resolved, cache_->budget_resolved())
KVPY_LOCKED(std::size_t, recent_window, cache_->recent_window())
KVPY_LOCKED(std::size_t, step, cache_->step())
KVPY_LOCKED(float, temperature, cache_->temperature())
#undef KVPY_LOCKED

py::list PyPagedCache::lengths() {
  const std::size_t n = length();
  py::list out;
  for (std::size_t h = 0; h < pool_->n_kv_heads(); ++h) out.append(n);
  return out;
}

std::string PyPagedCache::describe() {
  std::ostringstream os;
  os << "kvevict.PagedCache(policy='" << setup_.name << "', n_q_heads=" << setup_.config.n_q_heads
     << ", n_kv_heads=" << pool_->n_kv_heads() << ", page_size=" << pool_->page_size() << ", max_pages=" << max_pages_
     << ", unit='" << evict_unit() << "', budget="
     << (budget_resolved() ? std::to_string(budget()) : setup_.unresolved_budget())
     << ", recent_window=" << recent_window() << ", length=" << length() << ", pages_in_use=" << pages_in_use() << ")";
  return os.str();
}

std::size_t PyPagedCache::head(py::handle h, const char* who) const {
  const std::int64_t j = to_i64(h, "h");
  if (j < 0)
    throw py::index_error(std::string("kvevict.PagedCache.") + who + ": KV head " + std::to_string(j) +
                          " out of range (n_kv_heads = " + std::to_string(pool_->n_kv_heads()) + ")");
  return static_cast<std::size_t>(j);
}

}  // namespace kvpy
